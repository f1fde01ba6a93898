"""perf_llc through an injected syscall layer: grouping, multiplexing scaling, every errno path.

This VM has no PMU, so the real syscall is exercised only for its ENOENT path (last test).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import struct
from pathlib import Path

import pytest

from exporter.collectors.perf_llc import PerfLLCCollector
from exporter.collectors.perf_syscalls import (
    PERF_COUNT_HW_CACHE_MISSES,
    PERF_COUNT_HW_CACHE_REFERENCES,
    PERF_FLAG_FD_CLOEXEC,
    PERF_TYPE_HARDWARE,
    PERF_TYPE_HW_CACHE,
    READ_FORMAT,
    decode_group_read,
)
from exporter.errors import UnavailableError
from exporter.paths import Paths
from exporter.registry import CollectorConfig, specs
from exporter.scrape import NodeCollector
from tests.exporter.conftest import samples_of, scrape


class FakePerf:
    """Records opens; serves scripted group reads per CPU; fails with a chosen errno."""

    def __init__(self, fail_at: int | None = None, err: int = 0) -> None:
        self.opened: list[tuple[int, int, int, int, int]] = []  # type, config, cpu, group, flags
        self.readings: dict[int, list[tuple[int, int, int, int]]] = {}  # leader fd -> script
        self.closed: list[int] = []
        self.fail_at = fail_at
        self.err = err
        self._next = 100
        self.leader_cpu: dict[int, int] = {}

    def open(self, attr: bytes, pid: int, cpu: int, group_fd: int, flags: int) -> int:
        if self.fail_at is not None and len(self.opened) == self.fail_at:
            raise OSError(self.err, "injected")
        ev_type, size, config, _, _, read_format = struct.unpack_from("=IIQQQQ", attr)
        assert size == len(attr) == 64
        assert read_format == READ_FORMAT
        assert pid == -1  # system-wide
        self.opened.append((ev_type, config, cpu, group_fd, flags))
        fd = self._next
        self._next += 1
        if group_fd == -1:
            self.leader_cpu[fd] = cpu
        return fd

    def script(self, cpu: int, *readings: tuple[int, int, int, int]) -> None:
        fd = next(fd for fd, c in self.leader_cpu.items() if c == cpu)
        self.readings[fd] = list(readings)

    def read(self, fd: int, size: int) -> bytes:
        enabled, running, refs, misses = self.readings[fd].pop(0)
        data = struct.pack("=QQQQQ", 2, enabled, running, refs, misses)
        assert len(data) == size
        return data

    def close(self, fd: int) -> None:
        self.closed.append(fd)


def make(tmp_path: Path, cpus: str, fake: FakePerf, events: str = "generic") -> PerfLLCCollector:
    online = tmp_path / "sys/devices/system/cpu/online"
    online.parent.mkdir(parents=True, exist_ok=True)
    online.write_text(cpus + "\n")
    config = CollectorConfig(Paths(sysfs=str(tmp_path / "sys")), {"events": events})
    return PerfLLCCollector(config, syscalls=fake)


def values(collector: PerfLLCCollector) -> tuple[float, float]:
    refs, misses = collector.update()
    return refs.samples[0].value, misses.samples[0].value


def test_one_group_per_online_cpu(tmp_path: Path) -> None:
    fake = FakePerf()
    make(tmp_path, "0-1,4", fake)
    assert [(o[2], o[3] == -1) for o in fake.opened] == [
        (0, True),
        (0, False),
        (1, True),
        (1, False),
        (4, True),
        (4, False),
    ]
    leaders = [fd for fd, _ in fake.leader_cpu.items()]
    # members name their CPU's leader; both are the generic cache events; fds close on exec
    assert [o[3] for o in fake.opened[1::2]] == leaders
    assert {(o[0], o[1]) for o in fake.opened[0::2]} == {
        (PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES)
    }
    assert {(o[0], o[1]) for o in fake.opened[1::2]} == {
        (PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES)
    }
    assert all(o[4] == PERF_FLAG_FD_CLOEXEC for o in fake.opened)


def test_ll_read_event_set(tmp_path: Path) -> None:
    fake = FakePerf()
    make(tmp_path, "0", fake, events="ll-read")
    assert [(o[0], o[1]) for o in fake.opened] == [
        (PERF_TYPE_HW_CACHE, 2 | (0 << 8) | (0 << 16)),
        (PERF_TYPE_HW_CACHE, 2 | (0 << 8) | (1 << 16)),
    ]


def test_sums_cpus_and_scales_each_interval_for_multiplexing(tmp_path: Path) -> None:
    fake = FakePerf()
    collector = make(tmp_path, "0-1", fake)
    # cpu0 always counting; cpu1 counted half of the first interval, a quarter of the second.
    fake.script(0, (1000, 1000, 100, 10), (2000, 2000, 300, 30))
    fake.script(1, (1000, 500, 50, 5), (2000, 750, 100, 15))
    assert values(collector) == (100 + 50 * 2, 10 + 5 * 2)
    # second interval: cpu0 +200/+20 unscaled; cpu1 +50/+10 over 250 of 1000 ns -> x4
    assert values(collector) == (200 + 200 + 50 * 4, 20 + 20 + 10 * 4)


def test_interval_without_running_time_adds_nothing(tmp_path: Path) -> None:
    fake = FakePerf()
    collector = make(tmp_path, "0", fake)
    fake.script(0, (1000, 1000, 100, 10), (2000, 1000, 100, 10), (4000, 2000, 400, 40))
    assert values(collector) == (100, 10)
    assert values(collector) == (100, 10)  # multiplexed out for the whole interval
    assert values(collector) == (100 + 300 * 2, 10 + 30 * 2)


def test_totals_never_decrease_when_the_share_changes(tmp_path: Path) -> None:
    fake = FakePerf()
    collector = make(tmp_path, "0", fake)
    # A naive value * enabled / running estimate would go 400 -> 240 here.
    fake.script(0, (1000, 250, 100, 1), (2000, 1250, 150, 2))
    first = values(collector)
    second = values(collector)
    assert list(first) == [400, 4]
    assert list(second) == [450, 5]


@pytest.mark.parametrize(
    ("err", "reason"),
    [
        (errno.ENOENT, "no hardware PMU"),
        (errno.EOPNOTSUPP, "no hardware PMU"),
        (errno.ENODEV, "no hardware PMU"),
        (errno.EACCES, "CAP_PERFMON"),
        (errno.EPERM, "CAP_PERFMON"),
        (errno.EINVAL, "EINVAL"),
        (errno.EMFILE, "file descriptors"),
        (errno.ENOSYS, "not implemented"),
        (errno.EBUSY, "EBUSY"),
    ],
)
@pytest.mark.parametrize("fail_at", [0, 1, 3])  # first leader, first member, a later CPU
def test_open_errors_turn_the_collector_off_and_close_everything(
    tmp_path: Path, err: int, reason: str, fail_at: int
) -> None:
    fake = FakePerf(fail_at=fail_at, err=err)
    with pytest.raises(UnavailableError, match=reason):
        make(tmp_path, "0-3", fake)
    assert sorted(fake.closed) == sorted(100 + i for i in range(fail_at))


def test_unknown_event_set(tmp_path: Path) -> None:
    with pytest.raises(UnavailableError, match="unknown perf_llc event set"):
        make(tmp_path, "0", FakePerf(), events="l2")


def test_close_releases_every_fd(tmp_path: Path) -> None:
    fake = FakePerf()
    collector = make(tmp_path, "0-2", fake)
    collector.close()
    assert sorted(fake.closed) == list(range(100, 106))


def test_group_read_decoding() -> None:
    reading = decode_group_read(struct.pack("=QQQQQ", 2, 10, 5, 7, 3))
    assert (reading.time_enabled, reading.time_running, reading.values) == (10, 5, (7, 3))
    with pytest.raises(ValueError, match="short"):
        decode_group_read(b"\0" * 8)
    with pytest.raises(ValueError, match="for 3 values"):
        decode_group_read(struct.pack("=QQQQQ", 3, 10, 5, 7, 3))


class FailingReads(FakePerf):
    """Opens fine; every read fails the same way (a CPU's counters gone bad)."""

    def read(self, fd: int, size: int) -> bytes:
        raise OSError(errno.EIO, "injected read failure")


DISABLED = "collector disabled for this run"


@pytest.mark.parametrize(
    ("fake", "message", "reason"),
    [
        (FakePerf(fail_at=0, err=errno.ENOENT), DISABLED, "no hardware PMU"),
        (FakePerf(fail_at=1, err=errno.EACCES), DISABLED, "CAP_PERFMON"),
        (FailingReads(), "collector failed", "injected read failure"),
    ],
    ids=["no-pmu", "no-permission", "read-fails"],
)
def test_reason_is_logged_once_over_many_scrapes(
    tmp_path: Path, caplog, fake: FakePerf, message: str, reason: str
) -> None:
    online = tmp_path / "sys/devices/system/cpu/online"
    online.parent.mkdir(parents=True)
    online.write_text("0-1\n")
    spec = dataclasses.replace(
        specs()["perf_llc"], factory=lambda config: PerfLLCCollector(config, syscalls=fake)
    )
    with caplog.at_level(logging.DEBUG, logger="mco.exporter"):
        node = NodeCollector(
            [spec], CollectorConfig(Paths(sysfs=str(tmp_path / "sys"))), node_name="n", kernel="k"
        )
        texts = [scrape(node) for _ in range(5)]
    key = ("mco_exporter_collector_success", frozenset({("collector", "perf_llc")}))
    assert [samples_of(t)[key] for t in texts] == [0] * 5
    assert all("mco_llc_references_total" not in t for t in texts)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [(r.getMessage(), getattr(r, "collector", None)) for r in warnings] == [
        (message, "perf_llc")
    ]
    assert reason in getattr(warnings[0], "reason", "")


def test_real_syscall_on_this_host_reports_why() -> None:
    """No PMU here: the real perf_event_open fails and the reason names the missing PMU."""
    if Path("/sys/bus/event_source/devices/cpu").exists():
        pytest.skip("this host has a CPU PMU; the no-PMU path cannot be observed")
    config = CollectorConfig(Paths(), {"events": "generic"})
    with pytest.raises(UnavailableError, match="no hardware PMU"):
        PerfLLCCollector(config)
