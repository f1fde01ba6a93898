"""biolatency: slot-to-bucket conversion, and the real eBPF program on this kernel."""

from __future__ import annotations

import ctypes
import fcntl
import itertools
import os
import re
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from exporter.cli import parse_settings
from exporter.collectors.biolatency import (
    BUCKET_BOUNDS,
    DEFAULT_BUCKETS,
    KERNEL_SOURCE_ENV,
    BiolatencyCollector,
    histogram_from_slots,
    kernel_source,
    latency_family,
    load_bcc,
    tracefs_dir,
)
from exporter.errors import UnavailableError
from exporter.paths import Paths
from exporter.registry import CollectorConfig, specs
from mco.latency_buckets import MAX_SLOT, MIN_SLOT, parse_bounds


def test_buckets_are_powers_of_two_microseconds() -> None:
    assert BUCKET_BOUNDS[0] == 2**MIN_SLOT / 1e6
    assert BUCKET_BOUNDS[-1] == 2**MAX_SLOT / 1e6
    assert all(b / a == 2 for a, b in itertools.pairwise(BUCKET_BOUNDS))


def test_slots_become_cumulative_buckets() -> None:
    # slot s counts latencies in [2^(s-1), 2^s) us: slot 1 -> <=1us, slot 4 -> [8,16) us,
    # slot 30 -> beyond the last finite bucket (only in +Inf).
    buckets, total = histogram_from_slots({1: 2, 4: 3, 10: 5, 30: 1})
    by_bound = dict(buckets)
    assert by_bound[repr(8e-06)] == 2  # le 8us: slot 1 only
    assert by_bound[repr(1.6e-05)] == 5  # le 16us: + slot 4
    assert by_bound[repr(2**10 / 1e6)] == 10  # le 1.024ms: + slot 10
    assert by_bound[repr(2**MAX_SLOT / 1e6)] == 10
    assert by_bound["+Inf"] == 11
    counts = [c for _, c in buckets]
    assert counts == sorted(counts)  # cumulative
    assert total == pytest.approx((2 * 1 + 3 * 12 + 5 * 768 + 1 * 1.5 * 2**29) / 1e6)


def test_only_the_chosen_bounds_are_exported_with_the_same_counts() -> None:
    slots = {1: 2, 4: 3, 10: 5, 14: 7, 16: 4, 30: 1}
    full = dict(histogram_from_slots(slots)[0])
    chosen = parse_bounds("0.016384,0.065536")
    buckets, total = histogram_from_slots(slots, chosen)
    assert [le for le, _ in buckets] == ["0.016384", "0.065536", "+Inf"]
    assert all(count == full[le] for le, count in buckets)  # each kept bucket as before
    assert dict(buckets)["0.016384"] == 17 and dict(buckets)["+Inf"] == 22
    assert total == histogram_from_slots(slots)[1]  # the sum still covers every slot


# (device, operation) -> bcc slot counts: two devices, sda with three operations in
# different slots (fast reads, slow writes, flushes beyond the last bound).
SLOTS_BY_OPERATION = {
    ("sda", "read"): {4: 30, 14: 5, 15: 2},
    ("sda", "write"): {14: 7, 16: 4, 18: 1},
    ("sda", "flush"): {15: 3, 30: 1},
    ("nvme0n1", "read"): {6: 100, 15: 1},
}


def _series(family) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value for s in family.samples}


@pytest.mark.parametrize("buckets", [DEFAULT_BUCKETS, "all"])
def test_by_default_one_histogram_per_device_sums_the_operations_exactly(buckets: str) -> None:
    bounds = parse_bounds(buckets)
    split = _series(latency_family(SLOTS_BY_OPERATION, bounds, by_operation=True))
    summed = _series(latency_family(SLOTS_BY_OPERATION, bounds))
    # Each per-device series is the sum of the per-operation ones: buckets, count and sum.
    totals: dict[tuple[str, frozenset[tuple[str, str]]], float] = defaultdict(float)
    for (name, labels), value in split.items():
        without = frozenset((k, v) for k, v in labels if k != "operation")
        totals[(name, without)] += value
    assert summed.keys() == totals.keys()
    for key, value in summed.items():
        assert value == pytest.approx(totals[key], rel=1e-12), key
    assert {k for _, labels in summed for k, _ in labels} == {"device", "le"}
    # Per device: len(bounds) + 1 buckets, a count and a sum, whatever the operations.
    assert len(summed) == 2 * (len(bounds) + 3)
    assert summed[("mco_block_io_latency_seconds_count", frozenset({("device", "sda")}))] == (
        30 + 5 + 2 + 7 + 4 + 1 + 3 + 1
    )
    # The +Inf bucket and the sum count every slot, also those beyond the kept bounds.
    inf = frozenset({("device", "sda"), ("le", "+Inf")})
    assert summed[("mco_block_io_latency_seconds_bucket", inf)] == 53


def test_by_operation_keeps_one_histogram_per_device_and_operation() -> None:
    bounds = parse_bounds(DEFAULT_BUCKETS)
    split = _series(latency_family(SLOTS_BY_OPERATION, bounds, by_operation=True))
    assert {
        (dict(labels)["device"], dict(labels)["operation"])
        for name, labels in split
        if name == "mco_block_io_latency_seconds_count"
    } == set(SLOTS_BY_OPERATION)
    for (device, operation), slots in SLOTS_BY_OPERATION.items():
        buckets, total = histogram_from_slots(slots, bounds)
        labels = {("device", device), ("operation", operation)}
        for le, count in buckets:
            key = ("mco_block_io_latency_seconds_bucket", frozenset(labels | {("le", le)}))
            assert split[key] == count
        assert split[("mco_block_io_latency_seconds_sum", frozenset(labels))] == total


def test_the_by_operation_switch() -> None:
    def value(*argv: str) -> str:
        return parse_settings(list(argv)).options["biolatency.by-operation"]

    assert value() == "false"
    assert value("--collector.biolatency.by-operation") == "true"
    assert value("--collector.biolatency.by-operation=true") == "true"
    assert value("--collector.biolatency.by-operation=false") == "false"
    with pytest.raises(SystemExit) as exited:
        parse_settings(["--collector.biolatency.by-operation=yes"])
    assert exited.value.code == 2


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0.01", "not a bucket bound"),
        ("fast", "not a number"),
        (" , ", "no bucket bound"),
    ],
)
def test_a_bound_the_histogram_does_not_have_is_refused(text: str, problem: str) -> None:
    option = next(o for o in specs()["biolatency"].options if o.name == "buckets")
    assert option.check is not None
    with pytest.raises(ValueError, match=problem):
        option.check(text)


def test_bounds_parse_in_any_order_and_all_means_every_one() -> None:
    assert parse_bounds("0.262144, 1.6e-05,0.262144") == (1.6e-05, 0.262144)
    assert parse_bounds("all") == BUCKET_BOUNDS


def test_missing_bcc_module_is_a_clear_reason(tmp_path: Path, monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_bcc(name, *args, **kwargs):
        if name == "bcc":
            raise ImportError("no bcc")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_bcc)
    with pytest.raises(UnavailableError, match="install python3-bpfcc"):
        load_bcc(str(tmp_path))


ROOT = Path(__file__).resolve().parents[2]
LIBC = ctypes.CDLL(None)
LIBC.getenv.restype = ctypes.c_char_p


def _c_getenv(name: str) -> str | None:
    """The variable as libbcc sees it: the C library's environment, not os.environ."""
    value = LIBC.getenv(name.encode())
    return None if value is None else value.decode()


def _options(**override: str) -> dict[str, str]:
    return {o.name: o.default for o in specs()["biolatency"].options} | override


def test_tracefs_is_looked_up_under_the_sysfs_path(tmp_path: Path) -> None:
    paths = Paths(sysfs=str(tmp_path))
    assert tracefs_dir(paths) is None
    # The host's own /sys/kernel/tracing does not count: --path.sysfs names the sysfs to use.
    with pytest.raises(UnavailableError, match=re.escape(str(tmp_path / "kernel" / "tracing"))):
        BiolatencyCollector(CollectorConfig(paths, _options()))
    debug = tmp_path / "kernel" / "debug" / "tracing"
    (debug / "events" / "block").mkdir(parents=True)
    assert tracefs_dir(paths) == str(debug)  # older kernels: inside debugfs
    tracing = tmp_path / "kernel" / "tracing"
    (tracing / "events" / "block").mkdir(parents=True)
    assert tracefs_dir(paths) == str(tracing)  # its own mount wins
    (tracing / "events" / "block").rmdir()
    assert tracefs_dir(paths) == str(debug)  # mounted, but without the block tracepoints


@pytest.mark.parametrize("before", [None, "/usr/src/linux-headers-old"])
def test_kernel_source_is_set_for_bcc_only_while_it_compiles(
    before: str | None, monkeypatch
) -> None:
    if before is None:
        monkeypatch.delenv(KERNEL_SOURCE_ENV, raising=False)
    else:
        monkeypatch.setenv(KERNEL_SOURCE_ENV, before)
    with kernel_source("/headers"):
        assert os.environ[KERNEL_SOURCE_ENV] == "/headers"
        assert _c_getenv(KERNEL_SOURCE_ENV) == "/headers"  # where libbcc reads it
    assert os.environ.get(KERNEL_SOURCE_ENV) == before
    assert _c_getenv(KERNEL_SOURCE_ENV) == before
    with pytest.raises(RuntimeError), kernel_source("/headers"):
        raise RuntimeError("the compiler failed")
    assert os.environ.get(KERNEL_SOURCE_ENV) == before
    with kernel_source(""):  # no option: bcc's own search, nothing set
        assert os.environ.get(KERNEL_SOURCE_ENV) == before


def test_a_kernel_source_without_headers_is_the_reason_and_leaves_no_trace(
    tmp_path: Path, monkeypatch
) -> None:
    """The option reaches bcc's compiler (it finds no headers there), and the exporter's
    environment is as it was afterwards."""
    monkeypatch.delenv(KERNEL_SOURCE_ENV, raising=False)
    try:
        load_bcc(_options()["bcc-path"])
    except UnavailableError as exc:
        pytest.skip(str(exc))
    if tracefs_dir(Paths()) is None:
        pytest.skip("no tracefs with block tracepoints on this host")
    empty = tmp_path / "no-headers"
    empty.mkdir()
    with pytest.raises(UnavailableError, match=r"kernel headers|kconfig\.h"):
        BiolatencyCollector(CollectorConfig(Paths(), _options(**{"kernel-source": str(empty)})))
    assert KERNEL_SOURCE_ENV not in os.environ
    assert _c_getenv(KERNEL_SOURCE_ENV) is None


@pytest.mark.slow
@pytest.mark.root
def test_the_kernel_source_option_loads_the_program_without_the_environment(monkeypatch) -> None:
    headers = ROOT / ".cache" / "kernel-headers"
    if os.geteuid() != 0 or not (headers / "include").is_dir():
        pytest.skip("needs root and the kernel headers `make system` fetches")
    monkeypatch.delenv(KERNEL_SOURCE_ENV, raising=False)
    options = _options(**{"kernel-source": str(headers)})
    collector = BiolatencyCollector(CollectorConfig(Paths(), options))
    try:
        assert KERNEL_SOURCE_ENV not in os.environ
        (family,) = collector.update()
        assert family.name == "mco_block_io_latency_seconds"
    finally:
        collector.close()


def _collector(*, by_operation: bool = False) -> BiolatencyCollector:
    options = _options(**{"by-operation": "true" if by_operation else "false"})
    try:
        return BiolatencyCollector(CollectorConfig(Paths(), options))
    except UnavailableError as exc:
        pytest.skip(f"biolatency cannot load on this host: {exc}")


def _count(collector: BiolatencyCollector, operation: str | None) -> tuple[float, set[str]]:
    """Requests counted for ``operation`` (None: the default shape, all operations)."""
    (family,) = collector.update()
    total = 0.0
    devices = set()
    for s in family.samples:
        if s.name.endswith("_count") and s.labels.get("operation") == operation:
            total += s.value
            devices.add(s.labels["device"])
    return total, devices


@pytest.mark.slow
@pytest.mark.root
def test_real_ebpf_counts_direct_writes(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("loading BPF programs needs root (CAP_BPF, CAP_PERFMON)")
    collector = _collector()
    split = _collector(by_operation=True)
    try:
        before, _ = _count(split, "write")
        all_before, _ = _count(collector, None)
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={tmp_path / 'blk'}", "bs=64k", "count=200", "oflag=direct"],
            check=True,
            capture_output=True,
        )
        deadline = time.monotonic() + 5
        after, devices = _count(split, "write")
        while after < before + 200 and time.monotonic() < deadline:
            time.sleep(0.1)
            after, devices = _count(split, "write")
        assert after >= before + 200, (before, after)
        assert devices and all(not d[0].isdigit() for d in devices)  # names, not major:minor
        # The default shape: the same requests, in one histogram per device, no operation label.
        all_after, all_devices = _count(collector, None)
        assert all_after >= all_before + 200, (all_before, all_after)
        assert devices <= all_devices
        (family,) = collector.update()
        assert {k for s in family.samples for k in s.labels} == {"device", "le"}
        buckets = [s for s in family.samples if s.name.endswith("_bucket")]
        # The default bounds only (the default thresholds' brackets), and +Inf.
        assert {s.labels["le"] for s in buckets} == {
            "+Inf",
            *(repr(b) for b in parse_bounds(DEFAULT_BUCKETS)),
        }
    finally:
        collector.close()
        split.close()


LOOP_CTL_ADD, LOOP_CTL_REMOVE = 0x4C80, 0x4C81


def _new_loop_device() -> int:
    """A loop device of its own (index from 200 up), so removing it disturbs nothing."""
    fd = os.open("/dev/loop-control", os.O_RDWR)
    try:
        for index in range(200, 256):
            try:
                return fcntl.ioctl(fd, LOOP_CTL_ADD, index)
            except FileExistsError:
                continue
    finally:
        os.close(fd)
    pytest.skip("no free loop device index")


def _remove_loop_device(index: int) -> None:
    fd = os.open("/dev/loop-control", os.O_RDWR)
    try:
        fcntl.ioctl(fd, LOOP_CTL_REMOVE, index)
    finally:
        os.close(fd)


@pytest.mark.slow
@pytest.mark.root
def test_a_device_that_goes_away_leaves_the_kernel_map(tmp_path: Path) -> None:
    """The histogram map is a fixed-size hash: keys of removed devices must not pile up in it
    (once full, the kernel drops new keys, e.g. the first request in a slower slot)."""
    if os.geteuid() != 0 or not os.path.exists("/dev/loop-control"):
        pytest.skip("needs root and the loop driver")
    index = _new_loop_device()
    loop, name = f"/dev/loop{index}", f"loop{index}"
    sysfs = f"/sys/dev/block/7:{index}"
    backing = tmp_path / "disk.img"
    backing.write_bytes(b"\0" * (8 << 20))
    collector = _collector()
    try:
        subprocess.run(["losetup", loop, str(backing)], check=True, capture_output=True)
        try:
            subprocess.run(
                ["dd", "if=/dev/zero", f"of={loop}", "bs=64k", "count=50", "oflag=direct"],
                check=True,
                capture_output=True,
            )
        finally:
            subprocess.run(["losetup", "--detach", loop], check=False, capture_output=True)
        deadline = time.monotonic() + 5
        while name not in _count(collector, None)[1] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert name in _count(collector, None)[1]
        dev = 7 << 20 | index
        assert any(key.dev == dev for key in collector._dist)
        for _ in range(50):  # the detach completes asynchronously: removal may be refused
            try:
                _remove_loop_device(index)
                break
            except OSError:
                time.sleep(0.1)
        assert not os.path.exists(sysfs)
        assert name not in _count(collector, None)[1]
        assert not any(key.dev == dev for key in collector._dist)
    finally:
        collector.close()
        if os.path.exists(sysfs):
            subprocess.run(["losetup", "--detach", loop], check=False, capture_output=True)
            _remove_loop_device(index)
