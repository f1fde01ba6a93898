"""The cgroup collector's listing and reading as they were before issue 14 made them cheaper:
the reference the fast ones must match series for series (tests/exporter/
test_cgroup_equivalence.py), and the "before" of bench/cgroup_pods.py.

Only what issue 14 changed is kept here (listing pods, walking a pod's subtree, reading its
files); what it left alone (the layout, the series families, the collector's scrape loop) is
today's, imported from ``exporter.collectors.cgroup``. Equal expositions on the recorded trees
are also pinned by each tree's ``expected.prom`` (tests/exporter/test_cgroup.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import FunctionType
from typing import Any

from exporter.collectors import cgroup
from exporter.collectors.cgroup import (
    _BLKIO_LIMITS,
    _PGSTEAL,
    MAX_DEPTH,
    MEMORY_EVENTS,
    PSI_RESOURCES,
    CgroupCollector,
    Layout,
    Limits,
    PodCgroup,
    PodSamples,
    _nested,
    _read,
    qos_parents,
)
from exporter.parsers.cgroup import (
    IO_OPERATIONS,
    parse_blkio_limits,
    parse_blkio_stat,
    parse_flat_keyed,
    parse_io_max,
    parse_io_stat,
    parse_pod_dir,
    parse_v1_limit,
    parse_value,
)
from exporter.parsers.fields import uint
from exporter.parsers.pressure import parse_pressure


def _entries(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []


def list_pods(hierarchy: str, below: str) -> list[PodCgroup]:
    """Today's ``list_pods`` before issue 14: paths, no listing."""
    pods: list[PodCgroup] = []
    for parent, qos in qos_parents(hierarchy, below):
        for name in _entries(os.path.join(hierarchy, parent)):
            pod = parse_pod_dir(name, qos)
            if pod is not None and os.path.isdir(os.path.join(hierarchy, parent, name)):
                pods.append(PodCgroup(uid=pod[1], qos=pod[0], rel=os.path.join(parent, name)))
    return pods


def _subtree(directory: str) -> list[str]:
    """Today's ``_subtree`` before issue 14: paths, no listing."""
    found = [directory]
    level = [directory]
    for _ in range(MAX_DEPTH):
        level = [child for parent in level for child in _subdirectories(parent)]
        found += level
    return found


def read_pod(layout: Layout, pod: PodCgroup) -> PodSamples:
    """Today's ``read_pod`` before issue 14: paths, no listing."""
    out = PodSamples()
    if layout.unified is not None:
        base = os.path.join(layout.unified, pod.rel)
        for resource in PSI_RESOURCES:
            text = _read(os.path.join(base, f"{resource}.pressure"))
            if text is not None:
                for kind, total_us in parse_pressure(text).total_us.items():
                    out.stalled.append((resource, kind, total_us / 1e6))
    if layout.version == 2:
        _read_v2(os.path.join(layout.listed_from, pod.rel), out)
    else:
        if layout.memory is not None:
            _read_v1_memory(os.path.join(layout.memory, pod.rel), out)
        if layout.blkio is not None:
            _read_v1_blkio(os.path.join(layout.blkio, pod.rel), out)
    return out


def _read_v2(base: str, out: PodSamples) -> None:
    if (text := _read(os.path.join(base, "memory.current"))) is not None:
        out.usage = parse_value(text, "memory.current")
    if (text := _read(os.path.join(base, "memory.max"))) is not None:
        out.limit = parse_value(text, "memory.max")
    if (text := _read(os.path.join(base, "memory.events"))) is not None:
        events = parse_flat_keyed(text, "memory.events")  # hierarchical (not .local)
        out.events = {e: events[e] for e in MEMORY_EVENTS if e in events}
    if (text := _read(os.path.join(base, "memory.stat"))) is not None:
        out.reclaimed = parse_flat_keyed(text, "memory.stat", _PGSTEAL).get("pgsteal")
    if (text := _read(os.path.join(base, "io.stat"))) is not None:
        stat = parse_io_stat(text)
        out.io = {"bytes": stat.bytes, "operations": stat.operations}
    out.io_limits = _nested(_effective_limits(base, _io_max, hierarchical=True))


def _io_max(directory: str) -> Limits:
    text = _read(os.path.join(directory, "io.max"))
    if text is None:
        return {}
    parsed = parse_io_max(text)
    return {("bytes", op): v for op, v in parsed.bytes.items()} | {
        ("operations", op): v for op, v in parsed.operations.items()
    }


def _blkio_limits(directory: str) -> Limits:
    limits: Limits = {}
    for what, op, filename in _BLKIO_LIMITS:
        text = _read(os.path.join(directory, filename))
        limit = None if text is None else parse_blkio_limits(text)
        if limit is not None:
            limits[what, op] = limit
    return limits


def _effective_limits(
    directory: str, own: Callable[[str], Limits], *, hierarchical: bool, depth: int = 0
) -> Limits:
    """Today's ``_effective_limits`` before issue 14: paths, no listing."""
    children = _subdirectories(directory) if depth < MAX_DEPTH else []
    mine = own(directory) if hierarchical or not children else {}
    if not children:
        return mine
    below = [
        _effective_limits(child, own, hierarchical=hierarchical, depth=depth + 1)
        for child in children
    ]
    summed = {k: sum(b[k] for b in below) for k in below[0] if all(k in b for b in below)}
    return {k: min(v for v in (mine.get(k), summed.get(k)) if v is not None) for k in mine | summed}


def _subdirectories(directory: str) -> list[str]:
    try:
        with os.scandir(directory) as entries:
            return sorted(e.path for e in entries if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _read_v1_memory(base: str, out: PodSamples) -> None:
    if (text := _read(os.path.join(base, "memory.usage_in_bytes"))) is None:
        return  # no memory cgroup for this pod
    out.usage = parse_value(text, "memory.usage_in_bytes")
    if (text := _read(os.path.join(base, "memory.limit_in_bytes"))) is not None:
        out.limit = parse_v1_limit(text)

    # v1 counts a limit hit (failcnt) and an OOM kill only in the cgroup where it happened:
    # a container's own limit is a cgroup below the pod's, so the pod's subtree is summed.
    out.events = {"max": 0, "oom_kill": 0}
    for directory in _subtree(base):
        if (text := _read(os.path.join(directory, "memory.failcnt"))) is not None:
            out.events["max"] += uint(text.strip(), "memory.failcnt")
        if (text := _read(os.path.join(directory, "memory.oom_control"))) is not None:
            oom_control = parse_flat_keyed(text, "memory.oom_control")
            out.events["oom_kill"] += oom_control.get("oom_kill", 0)


def _read_v1_blkio(base: str, out: PodSamples) -> None:
    for what, name in (("bytes", "io_service_bytes"), ("operations", "io_serviced")):
        text = _read(os.path.join(base, f"blkio.throttle.{name}_recursive"))  # 4.16+
        if text is not None:
            out.io[what] = parse_blkio_stat(text)
            continue
        # Older kernels: only each cgroup's own I/O, and the processes are in the containers.
        totals = dict.fromkeys(IO_OPERATIONS, 0)
        found = False
        for directory in _subtree(base):
            if (text := _read(os.path.join(directory, f"blkio.throttle.{name}"))) is not None:
                found = True
                for op, count in parse_blkio_stat(text).items():
                    totals[op] += count
        if found:
            out.io[what] = totals
    out.io_limits = _nested(_effective_limits(base, _blkio_limits, hierarchical=False))


def _with_old_reading(update: Any) -> Any:
    """Today's ``update`` calling this module's ``list_pods`` and ``read_pod``."""
    names = vars(cgroup) | {"list_pods": list_pods, "read_pod": read_pod}
    return FunctionType(update.__code__, names, update.__name__)


class ReferenceCollector(CgroupCollector):
    """The collector as it was before issue 14's speed-up (its options are read the same way)."""

    update = _with_old_reading(CgroupCollector.update)
