"""Parsers: exact results on known input; on any input a result that keeps the invariants of
the file, or ParseError (never a crash); rendered values round-trip, in the units promised."""

from __future__ import annotations

import math
import re
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.collectors.cpu import USER_HZ
from exporter.collectors.perf_syscalls import decode_group_read
from exporter.errors import ParseError
from exporter.parsers.cpulist import MAX_CPUS, parse_cpulist
from exporter.parsers.diskstats import parse_diskstats
from exporter.parsers.meminfo import parse_meminfo
from exporter.parsers.pressure import KINDS, parse_pressure
from exporter.parsers.procstat import TIME_FIELDS, CPUTicks, busiest_irq_share, parse_stat
from exporter.parsers.resctrl import NO_VALUE, parse_domain_id, parse_resctrl_value
from exporter.parsers.schedstat import SUPPORTED_VERSIONS, parse_schedstat
from exporter.parsers.softirqs import parse_softirqs
from exporter.parsers.vmstat import RECLAIMERS, SCAN_TYPES, page_scans, parse_vmstat
from tests.exporter.conftest import node_collector, samples_of, scrape, tree_paths

U64 = 2**64 - 1
MAX_FIELD = 10**20 - 1  # fields.uint: up to 20 ASCII digits


def _count(value: object) -> bool:
    """A kernel counter: a non-negative integer that fits the 20 digits a parser reads."""
    return type(value) is int and 0 <= value <= MAX_FIELD


def _words(text: str) -> set[str]:
    return set(text.split())


# Invariants of a successful parse of ``text``, whatever the text was.
def _pressure(text: str, result: Any) -> None:
    assert result.total_us and set(result.total_us) <= set(KINDS)
    assert all(_count(v) for v in result.total_us.values())
    for kind in result.total_us:
        assert sum(line.split(" ", 1)[0] == kind for line in text.splitlines()) == 1


def _meminfo(text: str, result: Any) -> None:
    for name, value in result.items():
        assert type(value) is int and 0 <= value <= MAX_FIELD * 1024  # kB -> bytes at most
        assert re.search(rf"^{re.escape(name)}:", text, re.MULTILINE), name


def _vmstat(text: str, result: Any) -> None:
    for name, value in result.items():
        assert type(value) is int and abs(value) <= MAX_FIELD
        assert re.search(rf"^{re.escape(name)}[ \t]", text, re.MULTILINE), name


def _page_scans(text: str, result: Any) -> None:
    assert set(result.by_reclaimer) <= set(RECLAIMERS)
    assert set(result.by_type) <= set(SCAN_TYPES)


def _diskstats(text: str, result: Any) -> None:
    assert len(result) <= len(text.splitlines())
    for disk in result:
        assert _count(disk.completed // 4) and _count(disk.time_ms // 4)  # sums of <= 4 fields
        assert disk.device in _words(text)


def _stat(text: str, result: Any) -> None:
    assert _count(result.steal_ticks) and _count(result.irq_ticks)
    assert _count(result.softirq_ticks)
    assert 1 <= result.cpus <= sum(line.startswith("cpu") for line in text.splitlines())
    for cpu, ticks in result.per_cpu.items():
        assert f"cpu{cpu}" in _words(text)
        assert 0 <= ticks.irq <= ticks.total <= MAX_FIELD * TIME_FIELDS


def _softirqs(text: str, result: Any) -> None:
    columns = len(next(line for line in text.splitlines() if line.strip()).split())
    assert result and all(type(v) is int and 0 <= v <= MAX_FIELD * columns for v in result.values())
    for name in result:
        assert re.search(rf"^ *{name}:", text, re.MULTILINE), name


def _schedstat(text: str, result: Any) -> None:
    cpus = sum(line.startswith("cpu") for line in text.splitlines())
    assert type(result) is int and 0 <= result <= MAX_FIELD * cpus


def _cpulist(text: str, result: Any) -> None:
    assert result == sorted(set(result))
    assert all(0 <= cpu < MAX_CPUS for cpu in result)
    assert bool(result) == bool(text.strip())


def _resctrl_value(text: str, result: Any) -> None:
    assert (result is None) == (text.strip() in NO_VALUE)
    assert result is None or _count(result)


def _domain_id(text: str, result: Any) -> None:
    assert text.startswith("mon_L3_")
    assert result == str(int(result)) and int(result) == int(text.removeprefix("mon_L3_"))


PARSERS: dict[str, tuple[Callable[[str], Any], Callable[[str, Any], None]]] = {
    "pressure": (parse_pressure, _pressure),
    "meminfo": (parse_meminfo, _meminfo),
    "vmstat": (parse_vmstat, _vmstat),
    "page_scans": (lambda t: page_scans(parse_vmstat(t)), _page_scans),
    "diskstats": (parse_diskstats, _diskstats),
    "stat": (parse_stat, _stat),
    "schedstat": (parse_schedstat, _schedstat),
    "softirqs": (parse_softirqs, _softirqs),
    "cpulist": (parse_cpulist, _cpulist),
    "resctrl_value": (parse_resctrl_value, _resctrl_value),
    "domain_id": (parse_domain_id, _domain_id),
}

# Text that looks like kernel files: digits, names, separators, and the odd hostile character.
kernelish = st.text(
    alphabet=st.sampled_from(list("0123456789 \n=:-,_.abcdefgkmnoprstuvwxyzAFLMTU\t+²٣")),
    max_size=300,
)


@pytest.mark.parametrize("name", PARSERS)
@settings(max_examples=400, deadline=None)
@given(text=st.one_of(kernelish, st.text(max_size=200)))
def test_any_input_parses_to_a_valid_result_or_raises_parse_error(name: str, text: str) -> None:
    parse, holds = PARSERS[name]
    try:
        result = parse(text)
    except ParseError:
        return
    holds(text, result)


# A perf group read: a plausible header (nr, times) and a tail that may or may not match nr.
perf_group_reads = st.builds(
    lambda nr, enabled, running, tail: struct.pack("=QQQ", nr, enabled, running) + tail,
    st.one_of(st.integers(0, 4), st.integers(0, 2**64 - 1)),
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.one_of(
        st.binary(max_size=48),
        st.lists(st.integers(0, 2**64 - 1), max_size=4).map(
            lambda vs: struct.pack(f"={len(vs)}Q", *vs)
        ),
    ),
)


@settings(max_examples=500, deadline=None)
@given(data=st.one_of(st.binary(max_size=200), perf_group_reads))
def test_perf_group_read_decodes_or_raises_value_error(data: bytes) -> None:
    """Bytes from the kernel's read(2) of a perf group: decoded exactly, or a ValueError."""
    try:
        reading = decode_group_read(data)
    except ValueError:
        nr = struct.unpack_from("=Q", data)[0] if len(data) >= 8 else None
        assert nr is None or len(data) != 24 + 8 * nr
        return
    nr, enabled, running = struct.unpack_from("=QQQ", data)
    assert len(data) == 24 + 8 * nr
    assert (reading.time_enabled, reading.time_running) == (enabled, running)
    assert reading.values == struct.unpack_from(f"={nr}Q", data, 24)


@settings(max_examples=200, deadline=None)
@given(
    some=st.integers(0, 2**64 - 1),
    full=st.integers(0, 2**64 - 1),
    avg=st.floats(0, 100, allow_nan=False).map(lambda f: f"{f:.2f}"),
)
def test_pressure_round_trip(some: int, full: int, avg: str) -> None:
    text = (
        f"some avg10={avg} avg60={avg} avg300={avg} total={some}\n"
        f"full avg10={avg} avg60={avg} avg300={avg} total={full}\n"
    )
    assert parse_pressure(text).total_us == {"some": some, "full": full}


@settings(max_examples=200, deadline=None)
@given(
    fields=st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9_()]{0,15}", fullmatch=True),
        st.tuples(st.integers(0, U64), st.sampled_from(["kB", ""])),
        max_size=8,
    )
)
def test_meminfo_round_trip_in_bytes(fields: dict[str, tuple[int, str]]) -> None:
    text = "".join(f"{name}:{' ' * 6}{value} {unit}\n" for name, (value, unit) in fields.items())
    want = {name: value * (1024 if unit == "kB" else 1) for name, (value, unit) in fields.items()}
    assert parse_meminfo(text) == want
    wanted = frozenset(list(fields)[:1])
    assert parse_meminfo(text, wanted) == {n: v for n, v in want.items() if n in wanted}


@settings(max_examples=200, deadline=None)
@given(
    fields=st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True),
        st.integers(-(2**63), U64),
        max_size=10,
    )
)
def test_vmstat_round_trip(fields: dict[str, int]) -> None:
    text = "".join(f"{name} {value}\n" for name, value in fields.items())
    assert parse_vmstat(text) == fields
    assert parse_vmstat(text, "pgscan") == {
        n: v for n, v in fields.items() if n.startswith("pgscan")
    }


# /proc/diskstats fields after major, minor and name (Documentation/admin-guide/iostats.rst).
DISKSTATS_FIELDS = (
    "reads", "reads_merged", "sectors_read", "ms_reading",
    "writes", "writes_merged", "sectors_written", "ms_writing",
    "in_flight", "ms_doing_io", "weighted_ms",
    "discards", "discards_merged", "sectors_discarded", "ms_discarding",  # 4.18+
    "flushes", "ms_flushing",  # 5.5+
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    disks=st.lists(
        st.tuples(
            st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True),
            st.sampled_from([14, 18, 20]),
            st.lists(st.integers(0, U64), min_size=17, max_size=17),
        ),
        max_size=5,
    )
)
def test_diskstats_round_trip(disks: list[tuple[str, int, list[int]]]) -> None:
    lines, want = [], []
    for name, width, values in disks:
        f = dict(zip(DISKSTATS_FIELDS, values[: width - 3], strict=False))
        lines.append(" ".join(["259", "0", name, *(str(f[k]) for k in f)]))
        ops = ("reads", "writes", "discards", "flushes")
        ms = ("ms_reading", "ms_writing", "ms_discarding", "ms_flushing")
        want.append((name, sum(f.get(k, 0) for k in ops), sum(f.get(k, 0) for k in ms)))
    got = parse_diskstats("\n".join(lines))
    assert [(d.device, d.completed, d.time_ms) for d in got] == want


@settings(max_examples=200, deadline=None)
@given(
    steal=st.integers(0, U64),
    cpus=st.integers(1, 64),
    others=st.lists(st.integers(0, U64), min_size=9, max_size=9),
)
def test_stat_round_trip(steal: int, cpus: int, others: list[int]) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    aggregate = " ".join(map(str, [*others[:7], steal, *others[7:]]))
    per_cpu = "".join(f"cpu{i} 1 2 3 4 5 6 7 8 9 10\n" for i in range(cpus))
    stat = parse_stat(f"cpu  {aggregate}\n{per_cpu}intr 7 1 2\nctxt 99\nbtime 1\n")
    assert (stat.steal_ticks, stat.cpus) == (steal, cpus)
    assert (stat.irq_ticks, stat.softirq_ticks) == (others[5], others[6])
    assert set(stat.per_cpu.values()) == {CPUTicks(irq=6 + 7, total=sum(range(1, 9)))}


@settings(max_examples=200, deadline=None)
@given(
    counts=st.dictionaries(
        st.sampled_from(["HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "SCHED", "RCU"]),
        st.lists(st.integers(0, 2**40), min_size=3, max_size=3),
        min_size=1,
    ),
    width=st.integers(1, 12),
)
def test_softirqs_round_trip(counts: dict[str, list[int]], width: int) -> None:
    header = " " * 20 + "".join(f"CPU{i:<8d}" for i in range(3)) + "\n"
    rows = "".join(
        f"{k:>{width}}:" + "".join(f" {v:>10}" for v in vs) + "\n" for k, vs in counts.items()
    )
    assert parse_softirqs(header + rows) == {k: sum(vs) for k, vs in counts.items()}


cpu_ticks = st.dictionaries(
    st.integers(0, 255),
    st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)).map(
        lambda t: CPUTicks(irq=min(t), total=max(t))
    ),
    max_size=16,
)


@settings(max_examples=300, deadline=None)
@given(before=cpu_ticks, after=cpu_ticks)
def test_busiest_irq_share_is_a_share_of_some_cpu(
    before: dict[int, CPUTicks], after: dict[int, CPUTicks]
) -> None:
    share = busiest_irq_share(before, after)
    moved = {
        cpu: (
            now.irq - before.get(cpu, CPUTicks(0, 0)).irq,
            now.total - before.get(cpu, CPUTicks(0, 0)).total,
        )
        for cpu, now in after.items()
    }
    valid = {cpu: min(i / t, 1.0) for cpu, (i, t) in moved.items() if t > 0 and i >= 0}
    if not valid:
        assert share is None
    else:
        assert share is not None and 0 <= share <= 1
        assert share == max(valid.values())
    # From boot (nothing before), a CPU's share is its irq over its total: never above 1.
    first = busiest_irq_share({}, after)
    assert first is None or 0 <= first <= 1


@settings(max_examples=200, deadline=None)
@given(
    version=st.sampled_from(SUPPORTED_VERSIONS),
    waits=st.lists(st.integers(0, U64), min_size=1, max_size=16),
)
def test_schedstat_round_trip(version: int, waits: list[int]) -> None:
    # cpuN: 6 legacy fields, then run time, wait time (ns) and timeslices; domain lines between.
    cpus = "".join(
        f"cpu{i} 0 0 0 0 0 0 12345 {wait} 7\ndomain0 00000003 1 2 3 4\n"
        for i, wait in enumerate(waits)
    )
    assert parse_schedstat(f"version {version}\ntimestamp 4295\n{cpus}") == sum(waits)


@settings(max_examples=200, deadline=None)
@given(cpus=st.sets(st.integers(0, MAX_CPUS - 1), max_size=40), data=st.data())
def test_cpulist_round_trip(cpus: set[int], data: st.DataObject) -> None:
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and ranges[-1][1] == cpu - 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    parts = [f"{lo}-{hi}" if lo != hi else str(lo) for lo, hi in ranges]
    assert parse_cpulist(",".join(parts) + "\n") == sorted(cpus)  # as the kernel writes it
    if parts:  # in any order, with repeats (a hand-written cpuset): still sorted and unique
        shuffled = data.draw(st.permutations(parts)) + data.draw(st.lists(st.sampled_from(parts)))
        assert parse_cpulist(",".join(shuffled)) == sorted(cpus)


@settings(max_examples=100, deadline=None)
@given(value=st.integers(0, U64), domain=st.integers(0, 255))
def test_resctrl_round_trip(value: int, domain: int) -> None:
    assert parse_resctrl_value(f"{value}\n") == value
    assert parse_domain_id(f"mon_L3_{domain:02d}") == str(domain)


@settings(max_examples=50, deadline=None)
@given(
    psi_us=st.integers(0, 2**53),
    disk=st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)),
    wait_ns=st.integers(0, 2**53),
    steal_ticks=st.integers(0, 2**40),
    irq_ticks=st.integers(0, 2**40),
    memory_kb=st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)),
)
def test_collectors_export_seconds_and_bytes(
    psi_us: int,
    disk: tuple[int, int],
    wait_ns: int,
    steal_ticks: int,
    irq_ticks: int,
    memory_kb: tuple[int, int],
) -> None:
    """Kernel units (us, ms, ns, USER_HZ ticks, kB) reach /metrics as seconds and bytes."""
    completed, ms = disk
    files = {
        "pressure/io": f"some avg10=0.00 avg60=0.00 avg300=0.00 total={psi_us}\n",
        "pressure/cpu": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        "pressure/memory": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        "diskstats": f"8 0 sda {completed} 0 0 {ms} 0 0 0 0 0 0 0\n",
        "schedstat": f"version 15\ntimestamp 1\ncpu0 0 0 0 0 0 0 0 {wait_ns} 0\n",
        "stat": f"cpu 0 0 0 0 0 {irq_ticks} 0 {steal_ticks} 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n",
        "meminfo": f"MemTotal: {memory_kb[0]} kB\nMemAvailable: {memory_kb[1]} kB\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            (Path(tmp) / "proc" / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / "proc" / name).write_text(text)
        names = ("pressure", "diskstats", "schedstat", "cpu", "meminfo")
        got = samples_of(scrape(node_collector(tree_paths(Path(tmp)), names=names)))

    def value(name: str, **labels: str) -> float:
        return got[(name, frozenset(labels.items()))]

    def close(a: float, b: float) -> bool:
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)

    stalled = value("mco_pressure_stalled_seconds_total", resource="io", kind="some")
    assert close(stalled * 1e6, psi_us)
    assert close(value("mco_block_io_time_seconds_total", device="sda") * 1e3, ms)
    assert value("mco_block_io_completed_total", device="sda") == completed
    assert close(value("mco_runqueue_wait_seconds_total") * 1e9, wait_ns)
    assert close(value("mco_cpu_steal_seconds_total") * USER_HZ, steal_ticks)
    assert close(value("mco_cpu_irq_seconds_total", kind="hard") * USER_HZ, irq_ticks)
    assert value("mco_memory_total_bytes") == memory_kb[0] * 1024
    assert value("mco_memory_available_bytes") == memory_kb[1] * 1024
    assert all(v >= 0 for (name, _), v in got.items() if name.endswith("_total"))


@settings(max_examples=200, deadline=None)
@given(
    zones=st.dictionaries(
        st.sampled_from(["dma", "dma32", "normal", "movable"]), st.integers(0, 2**40)
    )
)
def test_per_zone_vmstat_sums(zones: dict[str, int]) -> None:
    lines = [f"pgscan_kswapd_{z} {v}" for z, v in zones.items()] + ["pgscan_direct_throttle 5"]
    scans = page_scans(parse_vmstat("\n".join(lines)))
    if zones:
        assert scans.by_reclaimer == {"kswapd": sum(zones.values())}
    else:
        assert scans.by_reclaimer == {}
    assert scans.by_type == {}


def test_per_node_fields_win_over_per_zone() -> None:
    scans = page_scans(parse_vmstat("pgscan_kswapd 10\npgscan_kswapd_normal 99\npgscan_anon 4\n"))
    assert scans.by_reclaimer == {"kswapd": 10}
    assert scans.by_type == {"anon": 4}


def test_throttle_is_never_a_reclaimer() -> None:
    scans = page_scans(parse_vmstat("pgscan_direct 3\npgscan_direct_throttle 1000\n"))
    assert scans.by_reclaimer == {"direct": 3}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("some avg10=0.00 total=1\nsome avg10=0.00 total=2\n", "duplicate"),
        ("half avg10=0.00 total=1\n", "unknown PSI line kind"),
        ("some avg10=0.00 avg60=0.00\n", "no total"),
        ("some total=-1\n", "non-negative"),
        ("some total=1_000\n", "non-negative"),
        ("", "empty"),
    ],
)
def test_pressure_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_pressure(text)


def test_psi_irq_has_only_full() -> None:
    assert parse_pressure("full avg10=0.00 avg60=0.00 avg300=0.00 total=42\n").total_us == {
        "full": 42
    }


def test_meminfo_units_and_errors() -> None:
    assert parse_meminfo("MemTotal: 2 kB\nHugePages_Total: 3\n") == {
        "MemTotal": 2048,
        "HugePages_Total": 3,
    }
    with pytest.raises(ParseError, match="unknown meminfo unit"):
        parse_meminfo("MemTotal: 2 MB\n")
    with pytest.raises(ParseError):
        parse_meminfo("MemTotal 2 kB\n")


def test_diskstats_versions() -> None:
    v14 = "8 0 sda 1 0 0 10 2 0 0 20 0 0 0"
    v18 = "8 0 sda 1 0 0 10 2 0 0 20 0 0 0 3 0 0 30"
    v20 = "8 0 sda 1 0 0 10 2 0 0 20 0 0 0 3 0 0 30 4 40"
    assert [(d.completed, d.time_ms) for d in parse_diskstats(v14)] == [(3, 30)]
    assert [(d.completed, d.time_ms) for d in parse_diskstats(v18)] == [(6, 60)]
    assert [(d.completed, d.time_ms) for d in parse_diskstats(v20)] == [(10, 100)]
    with pytest.raises(ParseError, match="6 fields"):
        parse_diskstats("8 0 sda 1 2 3")


def test_stat_needs_steal_column() -> None:
    with pytest.raises(ParseError, match="steal"):
        parse_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\n")
    with pytest.raises(ParseError, match="cpu7 line has no steal"):  # a per-CPU line cut short
        parse_stat("cpu 1 2 3 4 5 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8\ncpu7 1 2\n")
    with pytest.raises(ParseError, match="duplicate"):
        parse_stat("cpu 1 2 3 4 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\n")
    stat = parse_stat("cpu 1 2 3 4 5 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8\ncpu7 0 0 0 9 0 1 2 0 5 5\n")
    assert stat.cpus == 2
    # Guest time is already in user and nice: a CPU's total stops at steal.
    assert stat.per_cpu[7] == CPUTicks(irq=3, total=12)


def test_busiest_irq_share_between_reads() -> None:
    before = {0: CPUTicks(irq=10, total=1000), 1: CPUTicks(irq=500, total=1000)}
    after = {0: CPUTicks(irq=60, total=1100), 1: CPUTicks(irq=510, total=1100), 2: CPUTicks(1, 4)}
    # cpu1 has the larger share since boot, cpu0 since the last read: the delta decides.
    assert busiest_irq_share(before, after) == 0.5
    assert busiest_irq_share(after, after) is None  # no tick between two reads
    assert busiest_irq_share(after, before) is None  # counters went back: no share, not < 0


SOFTIRQS = """\
                    CPU0       CPU1       CPU2
          HI:          1          0          2
       TIMER:        100        200        300
      NET_RX:       9000         10          0
"""


def test_softirqs_sums_over_cpus() -> None:
    assert parse_softirqs(SOFTIRQS) == {"HI": 3, "TIMER": 600, "NET_RX": 9010}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SOFTIRQS.replace("        300\n", "\n"), "2 counts for 3 CPU columns"),  # short row
        (SOFTIRQS.replace("CPU2", ""), "3 counts for 2 CPU columns"),  # a CPU went offline
        (SOFTIRQS.replace("CPU2", "CPU1"), "duplicate CPU column"),
        (SOFTIRQS + "      NET_RX:  1 2 3\n", "duplicate softirq type"),
        (SOFTIRQS.splitlines()[0] + "\n", "no softirq rows"),
        (SOFTIRQS.replace("TIMER:", "TIMER"), "bad softirqs row"),
        (SOFTIRQS.replace("200", "-200"), "non-negative"),
        ("\n\n", "empty"),
        ("HI: 1 2\n", "header"),
    ],
)
def test_softirqs_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_softirqs(text)


def test_schedstat_versions() -> None:
    with pytest.raises(ParseError, match="unsupported schedstat version"):
        parse_schedstat("version 14\ncpu0 1 2 3 4 5 6 7 8 9\n")
    assert parse_schedstat("version 17\ncpu0 0 0 0 0 0 0 0 5 0\ncpu1 0 0 0 0 0 0 0 6 0\n") == 11


def test_cpulist() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("\n") == []
    with pytest.raises(ParseError):
        parse_cpulist("3-1")


def test_resctrl_values() -> None:
    assert parse_resctrl_value("123\n") == 123
    assert parse_resctrl_value("Unavailable\n") is None
    assert parse_resctrl_value("Error\n") is None
    assert parse_domain_id("mon_L3_01") == "1"
    with pytest.raises(ParseError):
        parse_domain_id("mon_MB_00")
