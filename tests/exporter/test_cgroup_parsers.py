"""Pod cgroup parsers, fuzzed as the others (tests/exporter/test_parsers.py): on any input a
result that keeps the invariants of the file, or ParseError; rendered files round-trip."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.errors import ParseError
from exporter.parsers.cgroup import (
    IO_OPERATIONS,
    QOS_CLASSES,
    V1_UNLIMITED,
    parse_blkio_limits,
    parse_blkio_stat,
    parse_flat_keyed,
    parse_io_max,
    parse_io_stat,
    parse_pod_dir,
    parse_v1_limit,
    parse_value,
)

MAX_FIELD = 10**20 - 1
U64 = 2**64 - 1


def _lines(text: str) -> int:
    return max(1, len(text.splitlines()))


def _sums(values: dict[str, int], text: str) -> bool:
    """Non-negative sums of at most one 20-digit field per line."""
    return all(type(v) is int and 0 <= v <= MAX_FIELD * _lines(text) for v in values.values())


def _flat_keyed(text: str, result: Any) -> None:
    for key, value in result.items():
        assert type(value) is int and 0 <= value <= MAX_FIELD
        assert re.search(rf"^\s*{re.escape(key)}\s", text, re.MULTILINE), key


WANTED = frozenset({"pgsteal", "max"})


def _wanted(text: str, result: Any) -> None:
    assert set(result) <= WANTED
    _flat_keyed(text, result)


def _io_stat(text: str, result: Any) -> None:
    assert set(result.bytes) == set(result.operations) == set(IO_OPERATIONS)
    assert _sums(result.bytes, text) and _sums(result.operations, text)
    if not any(k in text for k in ("rbytes=", "wbytes=")):
        assert set(result.bytes.values()) == {0}


def _io_max(text: str, result: Any) -> None:
    assert set(result.bytes) <= set(IO_OPERATIONS) and set(result.operations) <= set(IO_OPERATIONS)
    assert _sums(result.bytes, text) and _sums(result.operations, text)
    if "rbps=" not in text:
        assert "read" not in result.bytes


def _blkio_stat(text: str, result: Any) -> None:
    assert set(result) == set(IO_OPERATIONS) and _sums(result, text)
    if " Write " not in f"{text} ":
        assert result["write"] == 0


def _blkio_limits(text: str, result: Any) -> None:
    assert (result is None) == (not text.split())
    assert result is None or 0 <= result <= MAX_FIELD * _lines(text)


def _value(text: str, result: Any) -> None:
    assert (result is None) == (text.strip() == "max")
    assert result is None or (0 <= result <= MAX_FIELD and str(result) in text)


def _v1_limit(text: str, result: Any) -> None:
    assert result is None or 0 <= result < V1_UNLIMITED


def _pod_dir(qos: str) -> Callable[[str, Any], None]:
    def holds(text: str, result: Any) -> None:
        if result is None:
            return
        got_qos, uid = result
        assert got_qos == qos
        assert 1 <= len(uid) <= 64 and re.fullmatch(r"[0-9a-fA-F-]+", uid)
        assert uid in text.replace("_", "-")

    return holds


def _pod_dir_parser(qos: str) -> Callable[[str], Any]:
    return lambda text: parse_pod_dir(text, qos)


PARSERS: dict[str, tuple[Callable[[str], Any], Callable[[str, Any], None]]] = {
    "flat_keyed": (lambda t: parse_flat_keyed(t, "memory.events"), _flat_keyed),
    "flat_keyed_wanted": (lambda t: parse_flat_keyed(t, "memory.stat", WANTED), _wanted),
    "io_stat": (parse_io_stat, _io_stat),
    "io_max": (parse_io_max, _io_max),
    "blkio_stat": (parse_blkio_stat, _blkio_stat),
    "blkio_limits": (parse_blkio_limits, _blkio_limits),
    "value": (lambda t: parse_value(t, "memory.current"), _value),
    "v1_limit": (parse_v1_limit, _v1_limit),
    **{f"pod_dir_{q}": (_pod_dir_parser(q), _pod_dir(q)) for q in QOS_CLASSES},
}

# Text that looks like cgroup files: devices, key=value fields, names, the odd hostile character.
TOKENS = [
    *"0123456789 \n=:-_.abcdefikmoprstuwxyzRWTlhb\t+²٣",
    *("rbytes=", "wbytes=", "rios=", "wios=", "rbps=", "wbps=", "riops=", "max", "8:0 "),
    *("Read ", "Write ", "Total ", "kubepods-", "pod", ".slice", "burstable", "high "),
]
cgroupish = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)


@pytest.mark.parametrize("name", PARSERS)
@settings(max_examples=400, deadline=None)
@given(text=st.one_of(cgroupish, st.text(max_size=200)))
def test_any_input_parses_to_a_valid_result_or_raises_parse_error(name: str, text: str) -> None:
    parse, holds = PARSERS[name]
    try:
        result = parse(text)
    except ParseError:
        return
    holds(text, result)


devices = st.lists(
    st.tuples(st.integers(0, 4095), st.integers(0, 2**20 - 1)), unique=True, max_size=4
)
counts = st.integers(0, U64)


@settings(max_examples=200, deadline=None)
@given(devs=devices, data=st.data())
def test_io_stat_round_trip(devs: list[tuple[int, int]], data: st.DataObject) -> None:
    rows = [data.draw(st.tuples(counts, counts, counts, counts)) for _ in devs]
    text = "".join(
        f"{maj}:{mn} rbytes={rb} wbytes={wb} rios={ri} wios={wi} dbytes=0 dios=0\n"
        for (maj, mn), (rb, wb, ri, wi) in zip(devs, rows, strict=True)
    )
    got = parse_io_stat(text)
    assert got.bytes == {"read": sum(r[0] for r in rows), "write": sum(r[1] for r in rows)}
    assert got.operations == {"read": sum(r[2] for r in rows), "write": sum(r[3] for r in rows)}


limit = st.one_of(st.just(None), st.integers(0, U64))


@settings(max_examples=200, deadline=None)
@given(devs=devices, data=st.data())
def test_io_max_round_trip(devs: list[tuple[int, int]], data: st.DataObject) -> None:
    rows = [data.draw(st.tuples(limit, limit, limit, limit)) for _ in devs]

    def show(v: int | None) -> str:
        return "max" if v is None else str(v)

    text = "".join(
        f"{maj}:{mn} rbps={show(a)} wbps={show(b)} riops={show(c)} wiops={show(d)}\n"
        for (maj, mn), (a, b, c, d) in zip(devs, rows, strict=True)
    )

    def total(i: int) -> int | None:
        values = [v for r in rows if (v := r[i]) is not None]
        return sum(values) if values else None

    got = parse_io_max(text)
    want_bytes = {"read": total(0), "write": total(1)}
    want_ops = {"read": total(2), "write": total(3)}
    assert got.bytes == {k: v for k, v in want_bytes.items() if v is not None}
    assert got.operations == {k: v for k, v in want_ops.items() if v is not None}


@settings(max_examples=200, deadline=None)
@given(devs=devices, data=st.data())
def test_blkio_round_trip(devs: list[tuple[int, int]], data: st.DataObject) -> None:
    rows = [data.draw(st.tuples(counts, counts)) for _ in devs]
    text = "".join(
        f"{maj}:{mn} Read {r}\n{maj}:{mn} Write {w}\n{maj}:{mn} Sync {r}\n{maj}:{mn} Async {w}\n"
        f"{maj}:{mn} Discard 0\n{maj}:{mn} Total {r + w}\n"
        for (maj, mn), (r, w) in zip(devs, rows, strict=True)
        if r + w <= U64
    )
    kept = [row for row in rows if sum(row) <= U64]
    text += f"Total {sum(r + w for r, w in kept) % U64}\n"
    assert parse_blkio_stat(text) == {
        "read": sum(r for r, _ in kept),
        "write": sum(w for _, w in kept),
    }
    limits = "".join(f"{maj}:{mn} {r}\n" for (maj, mn), (r, _) in zip(devs, rows, strict=True))
    assert parse_blkio_limits(limits) == (sum(r for r, _ in rows) if rows else None)


@settings(max_examples=200, deadline=None)
@given(uid=st.uuids().map(str), qos=st.sampled_from(QOS_CLASSES))
def test_pod_dir_names_of_both_drivers(uid: str, qos: str) -> None:
    prefix = "kubepods" if qos == "guaranteed" else f"kubepods-{qos}"
    systemd = f"{prefix}-pod{uid.replace('-', '_')}.slice"
    assert parse_pod_dir(systemd, qos) == (qos, uid)
    assert parse_pod_dir(f"pod{uid}", qos) == (qos, uid)
    others = [q for q in QOS_CLASSES if q != qos]
    assert all(parse_pod_dir(systemd, other) is None for other in others)
    assert parse_pod_dir(f"kubepods-{qos}.slice", qos) is None
