"""Pod cgroup files (v2 ``memory.*``, ``io.*``; v1 ``memory.*``, ``blkio.throttle.*``) and the
kubelet's pod cgroup directory names. PSI files (``*.pressure``) use ``parsers.pressure``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.errors import ParseError
from exporter.parsers.fields import uint

QOS_CLASSES = ("guaranteed", "burstable", "besteffort")
# v1 memory.limit_in_bytes reads PAGE_COUNTER_MAX * PAGE_SIZE (9223372036854771712 on x86_64)
# when unlimited; no kubelet sets a limit anywhere near 4 EiB.
V1_UNLIMITED = 1 << 62
IO_OPERATIONS = ("read", "write")
# io.stat / io.max keys -> (what, operation)
_IO_STAT_KEYS = {
    "rbytes": ("bytes", "read"),
    "wbytes": ("bytes", "write"),
    "rios": ("operations", "read"),
    "wios": ("operations", "write"),
}
_IO_MAX_KEYS = {
    "rbps": ("bytes", "read"),
    "wbps": ("bytes", "write"),
    "riops": ("operations", "read"),
    "wiops": ("operations", "write"),
}
_BLKIO_OPS = {"Read": "read", "Write": "write"}
# kubelet pod cgroup names: systemd driver (UID with '_' for '-') and cgroupfs driver.
# UIDs are UUIDs, or a 32-hex config hash for static pods; anything else is not a pod.
_SYSTEMD_POD = re.compile(r"kubepods(?:-(burstable|besteffort))?-pod([0-9a-fA-F_]{1,64})\.slice")
_CGROUPFS_POD = re.compile(r"pod([0-9a-fA-F-]{1,64})")


@dataclass(frozen=True, slots=True)
class IOStat:
    """Bytes and operations completed, by operation, summed over devices."""

    bytes: dict[str, int]
    operations: dict[str, int]


def parse_value(text: str, what: str) -> int | None:
    """A one-number file (``memory.current``, ``memory.max``); None for ``max`` (no limit)."""
    value = text.strip()
    if value == "max":
        return None
    return uint(value, what)


def parse_v1_limit(text: str) -> int | None:
    """``memory.limit_in_bytes``: None when unlimited."""
    value = uint(text.strip(), "memory.limit_in_bytes")
    return None if value >= V1_UNLIMITED else value


def parse_flat_keyed(text: str, what: str, wanted: frozenset[str] | None = None) -> dict[str, int]:
    """``key value`` lines (``memory.events``, ``memory.stat``, ``memory.oom_control``): all of
    them, or only the ``wanted`` ones (the rest are not even validated: memory.stat has ~50
    lines and a scrape reads it for every pod)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        if wanted is not None and line.partition(" ")[0] not in wanted:
            continue
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ParseError(f"malformed {what} line {line[:64]!r}")
        key, value = parts
        if key in fields:
            raise ParseError(f"duplicate {what} key {key[:32]!r}")
        fields[key] = uint(value, f"{what} {key[:32]}")
    return fields


def _device(text: str, what: str) -> str:
    major, sep, minor = text.partition(":")
    if not sep:
        raise ParseError(f"{what}: not a MAJ:MIN device {text[:32]!r}")
    uint(major, f"{what} device major")
    uint(minor, f"{what} device minor")
    return text


def parse_io_stat(text: str) -> IOStat:
    """v2 ``io.stat``: ``8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0`` per device.

    Keys other than the four (discards, ``cost.*``, ``rlatency``) are skipped; an empty file
    (no I/O yet) is zero.
    """
    totals: dict[str, dict[str, int]] = {
        "bytes": dict.fromkeys(IO_OPERATIONS, 0),
        "operations": dict.fromkeys(IO_OPERATIONS, 0),
    }
    seen: set[str] = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        device, *fields = line.split()
        if _device(device, "io.stat") in seen:
            raise ParseError(f"io.stat: device {device!r} twice")
        seen.add(device)
        for field in fields:
            key, sep, value = field.partition("=")
            if not sep:
                raise ParseError(f"io.stat field without '=': {field[:32]!r}")
            if key in _IO_STAT_KEYS:
                what, op = _IO_STAT_KEYS[key]
                totals[what][op] += uint(value, f"io.stat {key}")
    return IOStat(bytes=totals["bytes"], operations=totals["operations"])


def parse_io_max(text: str) -> IOStat:
    """v2 ``io.max``: limits per second, summed over the devices that have one.

    ``8:16 rbps=2097152 wbps=max riops=max wiops=120``; ``max`` is no limit. An operation no
    device limits is absent from the result (an empty file: no limits at all).
    """
    totals: dict[str, dict[str, int]] = {"bytes": {}, "operations": {}}
    seen: set[str] = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        device, *fields = line.split()
        if _device(device, "io.max") in seen:
            raise ParseError(f"io.max: device {device!r} twice")
        seen.add(device)
        for field in fields:
            key, sep, value = field.partition("=")
            if not sep or key not in _IO_MAX_KEYS:
                raise ParseError(f"unknown io.max field {field[:32]!r}")
            if value == "max":
                continue
            what, op = _IO_MAX_KEYS[key]
            totals[what][op] = totals[what].get(op, 0) + uint(value, f"io.max {key}")
    return IOStat(bytes=totals["bytes"], operations=totals["operations"])


def parse_blkio_stat(text: str) -> dict[str, int]:
    """v1 ``blkio.throttle.io_service_bytes`` / ``io_serviced`` (and ``_recursive``): Read and
    Write summed over devices. Lines are ``8:0 Read 123``, ``8:0 Sync 4`` …, then ``Total N``."""
    totals = dict.fromkeys(IO_OPERATIONS, 0)
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "Total" and len(parts) == 2:
            uint(parts[1], "blkio Total")
            continue
        if len(parts) != 3:
            raise ParseError(f"malformed blkio line {line[:64]!r}")
        device, op, value = parts
        _device(device, "blkio")
        count = uint(value, f"blkio {op[:16]}")
        if op in _BLKIO_OPS:
            totals[_BLKIO_OPS[op]] += count
    return totals


def parse_blkio_limits(text: str) -> int | None:
    """v1 ``blkio.throttle.{read,write}_{bps,iops}_device``: ``8:0 1048576`` per limited
    device, summed; None when no device is limited (an empty file)."""
    total: int | None = None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise ParseError(f"malformed blkio limit line {line[:64]!r}")
        _device(parts[0], "blkio limit")
        total = (total or 0) + uint(parts[1], "blkio limit")
    return total


def parse_pod_dir(name: str, parent_qos: str) -> tuple[str, str] | None:
    """(qos, pod UID) for a kubelet pod cgroup directory name, None for anything else.

    ``parent_qos`` is the QoS class of the directory it is in (``guaranteed`` for
    ``kubepods[.slice]`` itself): guaranteed pods sit directly under kubepods.
    """
    systemd = _SYSTEMD_POD.fullmatch(name)
    if systemd is not None:
        qos = systemd.group(1) or "guaranteed"
        return (qos, systemd.group(2).replace("_", "-")) if qos == parent_qos else None
    cgroupfs = _CGROUPFS_POD.fullmatch(name)
    if cgroupfs is not None:
        return parent_qos, cgroupfs.group(1)
    return None
