"""Parsers: exact results on known input, and only ParseError (never a crash) on any input."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.collectors.perf_syscalls import decode_group_read
from exporter.errors import ParseError
from exporter.parsers.cpulist import parse_cpulist
from exporter.parsers.diskstats import parse_diskstats
from exporter.parsers.meminfo import parse_meminfo
from exporter.parsers.pressure import parse_pressure
from exporter.parsers.procstat import parse_stat
from exporter.parsers.resctrl import parse_domain_id, parse_resctrl_value
from exporter.parsers.schedstat import parse_schedstat
from exporter.parsers.vmstat import page_scans, parse_vmstat

PARSERS: list[Callable[[str], Any]] = [
    parse_pressure,
    parse_meminfo,
    parse_vmstat,
    lambda t: page_scans(parse_vmstat(t)),
    parse_diskstats,
    parse_stat,
    parse_schedstat,
    parse_cpulist,
    parse_resctrl_value,
    parse_domain_id,
]

# Text that looks like kernel files: digits, names, separators, and the odd hostile character.
kernelish = st.text(
    alphabet=st.sampled_from(list("0123456789 \n=:-,_.abcdefgkmnoprstuvwxyzAFLMTU\t+²٣")),
    max_size=300,
)


@pytest.mark.parametrize("parse", PARSERS)
@settings(max_examples=400, deadline=None)
@given(text=st.one_of(kernelish, st.text(max_size=200)))
def test_any_input_parses_or_raises_parse_error(parse: Callable[[str], Any], text: str) -> None:
    with contextlib.suppress(ParseError):
        parse(text)


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
    assert parse_stat("cpu 1 2 3 4 5 6 7 8 0 0\ncpu0 1\ncpu7 1\n").cpus == 2


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
