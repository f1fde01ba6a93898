"""Per-pod stall, memory-limit and I/O signals from the kubelet's pod cgroups.

Node PSI counts a stall in any cgroup, including a pod reclaiming inside its own memory limit
or throttled by its own I/O limit; the per-pod series let the rules tell such a pod (it hit its
own limit) from a victim of its neighbours. One set of series per pod cgroup: the pod-level
files already hold its containers (hierarchical), except v1's local-only limit-hit counters,
which are summed over the pod's subtree here.

Layouts: cgroup v2 (``<cgroupfs>/cgroup.controllers`` exists), or v1 controllers under
``<cgroupfs>/{memory,blkio,cpu}`` with PSI from a v2 hierarchy at ``<cgroupfs>/unified`` when
there is one (hybrid). Pod cgroups are found under ``kubepods.slice`` (systemd driver) or
``kubepods`` (cgroupfs driver), below the kubelet's ``--cgroup-root``.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

from exporter.errors import NoDataError, ParseError
from exporter.parsers.cgroup import (
    IO_OPERATIONS,
    QOS_CLASSES,
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
from exporter.paths import read_listed, read_text
from exporter.registry import CollectorConfig, FileCollector, Option, register

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

PSI_RESOURCES = ("cpu", "io", "memory")
_PSI_FILES = tuple((r, f"{r}.pressure") for r in PSI_RESOURCES)
MEMORY_EVENTS = ("max", "high", "oom_kill")
SKIP_REASONS = ("vanished", "unreadable", "malformed", "max_pods")
DEFAULT_MAX_PODS = 250  # Kubernetes allows 110 pods per node by default
# Cgroup levels read below a pod: the kubelet makes one (its containers); a container that
# nests its own (systemd inside) gets a few more. Bounds a scrape on a hostile tree.
MAX_DEPTH = 4
# Cgroups listed below a pod per walk (each ~10 µs): a pod has its containers and a few
# nested ones; 80,000 made a scrape take 0.75 s. Past it the walk stops (counted in
# mco_cgroup_pod_walks_truncated_total): sums cover the cgroups listed, and limits that need
# every child are not claimed. Worst case per scrape: max-pods x 3 walks x this.
MAX_CHILD_CGROUPS = 64
V1_ENUMERATE = ("memory", "blkio", "cpu")  # v1 controllers pods are listed from, in order
# A file that is not there: its controller or PSI is off for this cgroup, not a failure.
_ABSENT = (errno.ENOENT, errno.EOPNOTSUPP, errno.ENOTSUP)
_PGSTEAL = frozenset({"pgsteal"})
_BLKIO_LIMITS = (
    ("bytes", "read", "blkio.throttle.read_bps_device"),
    ("bytes", "write", "blkio.throttle.write_bps_device"),
    ("operations", "read", "blkio.throttle.read_iops_device"),
    ("operations", "write", "blkio.throttle.write_iops_device"),
)


@dataclass(frozen=True, slots=True)
class PodCgroup:
    uid: str
    qos: str
    rel: str  # the pod cgroup's path below a hierarchy's root; the same in every hierarchy


@dataclass(frozen=True, slots=True)
class Layout:
    """Where one scrape reads: v2 (one hierarchy) or v1 controllers (+ hybrid PSI)."""

    version: int
    listed_from: str  # the hierarchy root pods are listed from
    unified: str | None  # PSI (and on v2, everything)
    memory: str | None = None  # v1 controllers
    blkio: str | None = None


@dataclass(slots=True)
class PodSamples:
    """One pod's values, kept apart until the whole pod has been read (or skipped)."""

    stalled: list[tuple[str, str, float]] = field(default_factory=list)  # resource, kind, s
    events: dict[str, int] = field(default_factory=dict)
    usage: int | None = None
    limit: int | None = None
    reclaimed: int | None = None
    io: dict[str, dict[str, int]] = field(default_factory=dict)  # bytes|operations -> op -> n
    io_limits: dict[str, dict[str, int]] = field(default_factory=dict)
    truncated: bool = False  # a walk below the pod stopped at MAX_CHILD_CGROUPS


class _Budget:
    """The child cgroups one walk below a pod may still list (``MAX_CHILD_CGROUPS``)."""

    __slots__ = ("cut", "left")

    def __init__(self, left: int = MAX_CHILD_CGROUPS) -> None:
        self.left = left
        self.cut = False

    def children(self, cgroup: Listing) -> list[str]:
        """``cgroup``'s children to walk: all of them, or the first ones while budget is left."""
        kids = cgroup.children
        if len(kids) > self.left:
            self.cut = True
            kids = kids[: self.left]
        self.left -= len(kids)
        return kids


class Listing:
    """One cgroup directory, listed once per scrape: its entries by name and its child cgroups.

    A pod's files are then read without a stat each (the listing's ``d_type`` says what is a
    regular file) and a file the cgroup does not have (controller or PSI off) costs nothing.
    """

    __slots__ = ("children", "entries", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            with os.scandir(path) as listing:
                self.entries = {entry.name: entry for entry in listing}
        except (FileNotFoundError, NotADirectoryError):
            self.entries = {}  # gone (or never a cgroup): every file absent
        self.children = sorted(
            e.path for e in self.entries.values() if e.is_dir(follow_symlinks=False)
        )

    def read(self, name: str) -> str | None:
        """The file's text, or None when the cgroup does not have it."""
        entry = self.entries.get(name)
        if entry is None:
            return None
        if not entry.is_file():  # a symlink, FIFO, directory …: the checked path decides
            return _read(entry.path)
        try:
            return read_listed(entry.path)
        except OSError as exc:
            if exc.errno in _ABSENT:  # removed since the listing
                return None
            raise


class Unlisted:
    """A cgroup directory whose few files are read by path (a stat each), not listed."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self, name: str) -> str | None:
        return _read(f"{self.path}/{name}")


def _read(path: str) -> str | None:
    """The file's text, or None when the cgroup does not have it (controller or PSI off)."""
    try:
        return read_text(path)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return None
        raise


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def _cgroup_root(text: str) -> str:
    if not text.startswith("/") or ".." in text.split("/"):
        raise ValueError("must be an absolute cgroup path without '..'")
    return text


def find_layout(cgroupfs: str, cgroup_root: str) -> Layout | None:
    """The hierarchies of this host, or None when none holds a kubepods cgroup."""
    below = cgroup_root.strip("/")
    if os.path.isfile(os.path.join(cgroupfs, "cgroup.controllers")):
        return Layout(2, cgroupfs, cgroupfs) if _kubepods(cgroupfs, below) else None
    unified = os.path.join(cgroupfs, "unified")
    has_unified = os.path.isfile(os.path.join(unified, "cgroup.controllers"))
    controllers = {c: os.path.join(cgroupfs, c) for c in V1_ENUMERATE}
    listed_from = next((p for p in controllers.values() if _kubepods(p, below)), None)
    if listed_from is None:
        return None
    return Layout(
        1,
        listed_from,
        unified if has_unified else None,
        memory=controllers["memory"] if os.path.isdir(controllers["memory"]) else None,
        blkio=controllers["blkio"] if os.path.isdir(controllers["blkio"]) else None,
    )


def _kubepods(hierarchy: str, below: str) -> str | None:
    """The kubepods cgroup's path below the hierarchy root (systemd driver first)."""
    for name in ("kubepods.slice", "kubepods"):
        rel = os.path.join(below, name) if below else name
        if os.path.isdir(os.path.join(hierarchy, rel)):
            return rel
    return None


# The same few hundred directory names every scrape: parsed once (bounded: pods come and go).
_pod_dir = functools.lru_cache(maxsize=1024)(parse_pod_dir)


def qos_parents(hierarchy: str, below: str) -> list[tuple[str, str]]:
    """The cgroups pods sit in, with their QoS class: kubepods itself (guaranteed) and its
    burstable and besteffort children; none without kubepods."""
    top = _kubepods(hierarchy, below)
    if top is None:
        return []
    systemd = top.endswith(".slice")
    parents = [(top, "guaranteed")]
    for qos in QOS_CLASSES[1:]:
        parents.append((os.path.join(top, f"kubepods-{qos}.slice" if systemd else qos), qos))
    return parents


def list_pods(hierarchy: str, below: str) -> list[PodCgroup]:
    """Every pod cgroup under kubepods, in path order; guaranteed pods sit in kubepods itself."""
    pods: list[PodCgroup] = []
    for parent, qos in qos_parents(hierarchy, below):
        for entry in _sorted_entries(os.path.join(hierarchy, parent)):
            pod = _pod_dir(entry.name, qos)
            if pod is not None and entry.is_dir():  # follows a symlink, as isdir does
                pods.append(PodCgroup(uid=pod[1], qos=pod[0], rel=f"{parent}/{entry.name}"))
    return pods


def _sorted_entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as listing:
            return sorted(listing, key=_name)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _name(entry: os.DirEntry[str]) -> str:
    return entry.name


def _subtree(top: Listing, budget: _Budget) -> list[Listing]:
    """The cgroup and the cgroups below it, at most ``MAX_DEPTH`` levels down and as many as
    ``budget`` allows, breadth first (one removed during the walk is left out)."""
    found = [top]
    level = [top]
    for _ in range(MAX_DEPTH):
        level = [Listing(child) for parent in level for child in budget.children(parent)]
        found += level
    return found


def read_pod(layout: Layout, pod: PodCgroup) -> PodSamples:
    """Every value of one pod. Raises OSError (unreadable) or ParseError (malformed)."""
    out = PodSamples()
    v2 = Listing(f"{layout.listed_from}/{pod.rel}") if layout.version == 2 else None
    if layout.unified is not None:
        # v1 + unified: three files of a directory of some 30, read by path, not listed
        psi: Listing | Unlisted = v2 or Unlisted(f"{layout.unified}/{pod.rel}")
        for resource, filename in _PSI_FILES:
            text = psi.read(filename)
            if text is not None:
                for kind, total_us in parse_pressure(text).total_us.items():
                    out.stalled.append((resource, kind, total_us / 1e6))
    if v2 is not None:
        _read_v2(v2, out)
    else:
        if layout.memory is not None:
            _read_v1_memory(Listing(f"{layout.memory}/{pod.rel}"), out)
        if layout.blkio is not None:
            _read_v1_blkio(Listing(f"{layout.blkio}/{pod.rel}"), out)
    return out


def _read_v2(pod: Listing, out: PodSamples) -> None:
    if (text := pod.read("memory.current")) is not None:
        out.usage = parse_value(text, "memory.current")
    if (text := pod.read("memory.max")) is not None:
        out.limit = parse_value(text, "memory.max")
    if (text := pod.read("memory.events")) is not None:
        events = parse_flat_keyed(text, "memory.events")  # hierarchical (not .local)
        out.events = {e: events[e] for e in MEMORY_EVENTS if e in events}
    if (text := pod.read("memory.stat")) is not None:
        out.reclaimed = parse_flat_keyed(text, "memory.stat", _PGSTEAL).get("pgsteal")
    if (text := pod.read("io.stat")) is not None:
        stat = parse_io_stat(text)
        out.io = {"bytes": stat.bytes, "operations": stat.operations}
    budget = _Budget()
    out.io_limits = _nested(_effective_limits(pod, _io_max, budget, hierarchical=True))
    out.truncated |= budget.cut


Limits = dict[tuple[str, str], int]  # (bytes|operations, read|write) -> per second


def _io_max(cgroup: Listing) -> Limits:
    text = cgroup.read("io.max")
    if text is None:
        return {}
    parsed = parse_io_max(text)
    return {("bytes", op): v for op, v in parsed.bytes.items()} | {
        ("operations", op): v for op, v in parsed.operations.items()
    }


def _blkio_limits(cgroup: Listing) -> Limits:
    limits: Limits = {}
    for what, op, filename in _BLKIO_LIMITS:
        text = cgroup.read(filename)
        limit = None if text is None else parse_blkio_limits(text)
        if limit is not None:
            limits[what, op] = limit
    return limits


def _effective_limits(
    cgroup: Listing,
    own: Callable[[Listing], Limits],
    budget: _Budget,
    *,
    hierarchical: bool,
    depth: int = 0,
) -> Limits:
    """The I/O limits the processes of a cgroup subtree are held to, summed over devices.

    The containers are child cgroups: the subtree is limited by their limits together when
    every one has one. A v2 limit (``io.max``) applies to the whole subtree below it, so the
    tighter of that and the children's; a v1 one (blk-throttle outside the default hierarchy)
    only to the cgroup's own processes, so a pod cgroup's own limit binds nothing once it has
    containers.
    """
    every = cgroup.children if depth < MAX_DEPTH else []
    children = budget.children(cgroup) if every else []
    mine = own(cgroup) if hierarchical or not every else {}
    if not every:
        return mine
    if len(children) < len(every):
        # Children not listed may have no limit: their sum is unknown, only this one's binds.
        return mine
    below = [
        _effective_limits(Listing(child), own, budget, hierarchical=hierarchical, depth=depth + 1)
        for child in children
    ]
    if budget.cut:  # a walk below stopped short: the sum of the children is unknown
        return mine
    summed = {k: sum(b[k] for b in below) for k in below[0] if all(k in b for b in below)}
    return {k: min(v for v in (mine.get(k), summed.get(k)) if v is not None) for k in mine | summed}


def _nested(limits: Limits) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (what, op), value in limits.items():
        out.setdefault(what, {})[op] = value
    return out


def _read_v1_memory(pod: Listing, out: PodSamples) -> None:
    if (text := pod.read("memory.usage_in_bytes")) is None:
        return  # no memory cgroup for this pod
    out.usage = parse_value(text, "memory.usage_in_bytes")
    if (text := pod.read("memory.limit_in_bytes")) is not None:
        out.limit = parse_v1_limit(text)

    # v1 counts a limit hit (failcnt) and an OOM kill only in the cgroup where it happened:
    # a container's own limit is a cgroup below the pod's, so the pod's subtree is summed.
    out.events = {"max": 0, "oom_kill": 0}
    budget = _Budget()
    for cgroup in _subtree(pod, budget):
        if (text := cgroup.read("memory.failcnt")) is not None:
            out.events["max"] += uint(text.strip(), "memory.failcnt")
        if (text := cgroup.read("memory.oom_control")) is not None:
            oom_control = parse_flat_keyed(text, "memory.oom_control")
            out.events["oom_kill"] += oom_control.get("oom_kill", 0)  # 4.13+
    out.truncated |= budget.cut


def _read_v1_blkio(pod: Listing, out: PodSamples) -> None:
    subtree: list[Listing] | None = None
    walk = _Budget()
    for what, name in (("bytes", "io_service_bytes"), ("operations", "io_serviced")):
        text = pod.read(f"blkio.throttle.{name}_recursive")  # 4.16+
        if text is not None:
            out.io[what] = parse_blkio_stat(text)
            continue
        # Older kernels: only each cgroup's own I/O, and the processes are in the containers.
        totals = dict.fromkeys(IO_OPERATIONS, 0)
        found = False
        subtree = _subtree(pod, walk) if subtree is None else subtree
        for cgroup in subtree:
            if (text := cgroup.read(f"blkio.throttle.{name}")) is not None:
                found = True
                for op, count in parse_blkio_stat(text).items():
                    totals[op] += count
        if found:
            out.io[what] = totals
    limits = _Budget()
    out.io_limits = _nested(_effective_limits(pod, _blkio_limits, limits, hierarchical=False))
    out.truncated |= walk.cut or limits.cut


@register(
    "cgroup",
    default_enabled=True,
    help="per-pod PSI, memory-limit events, memory and I/O from the kubelet's pod cgroups",
    options=(
        Option(
            "max-pods",
            str(DEFAULT_MAX_PODS),
            "pods reported at most per scrape (the rest are counted as skipped, max_pods)",
            check=_positive_int,
        ),
        Option(
            "cgroup-root",
            "/",
            "the kubelet's --cgroup-root: the cgroup kubepods[.slice] is in",
            check=_cgroup_root,
        ),
    ),
)
class CgroupCollector(FileCollector):
    def __init__(self, config: CollectorConfig) -> None:
        self._cgroupfs = config.paths.cgroupfs
        self._max_pods = _positive_int(config.option("max-pods"))
        self._below = _cgroup_root(config.option("cgroup-root")).strip("/")
        # Counters across scrapes: the one thing kept between them.
        self._skipped = dict.fromkeys(SKIP_REASONS, 0)
        self._truncated = 0

    def update(self) -> list[Metric]:
        pods_gauge = GaugeMetricFamily(
            "mco_cgroup_pods", "Pod cgroups whose series this scrape reported."
        )
        layout = find_layout(self._cgroupfs, "/" + self._below)
        if layout is None:
            pods_gauge.add_metric([], 0.0)
            raise NoDataError(
                f"no kubepods cgroup under {self._cgroupfs} (not a Kubernetes node, or "
                "--collector.cgroup.cgroup-root differs from the kubelet's --cgroup-root)",
                metrics=[pods_gauge, self._skipped_family()],
            )
        pods = list_pods(layout.listed_from, self._below)
        self._skipped["max_pods"] += max(0, len(pods) - self._max_pods)
        families = _Families()
        reported = 0
        for pod in pods[: self._max_pods]:
            reason = None
            try:
                samples = read_pod(layout, pod)
            except OSError:
                reason = "unreadable"
            except ParseError:
                reason = "malformed"
            # A pod deleted while it was read: its files went first, then its directory.
            if not os.path.isdir(os.path.join(layout.listed_from, pod.rel)):
                reason = "vanished"
            if reason is not None:
                self._skipped[reason] += 1
                continue
            families.add(pod, samples)
            reported += 1
            self._truncated += samples.truncated
        pods_gauge.add_metric([], float(reported))
        return [*families, pods_gauge, self._skipped_family(), self._truncated_family()]

    def _truncated_family(self) -> CounterMetricFamily:
        truncated = CounterMetricFamily(
            "mco_cgroup_pod_walks_truncated",
            f"Pods reported with a walk below their cgroup stopped at {MAX_CHILD_CGROUPS} child "
            "cgroups (sums cover those listed; I/O limits that need every child not claimed).",
        )
        truncated.add_metric([], float(self._truncated))
        return truncated

    def _skipped_family(self) -> CounterMetricFamily:
        skipped = CounterMetricFamily(
            "mco_cgroup_pods_skipped",
            "Pod cgroups left out of a scrape: vanished (deleted while read), unreadable, "
            "malformed (a file of unexpected shape), max_pods (over --collector.cgroup.max-pods).",
            labels=["reason"],
        )
        for reason, count in self._skipped.items():
            skipped.add_metric([reason], float(count))
        return skipped


class _Families:
    """The per-pod metric families of one scrape."""

    def __init__(self) -> None:
        pod = ["pod_uid", "qos"]
        self.stalled = CounterMetricFamily(
            "mco_pod_pressure_stalled_seconds",
            "Seconds some (or all, kind=full) of the pod's non-idle tasks were stalled on the "
            "resource (the pod cgroup's PSI).",
            labels=[*pod, "resource", "kind"],
        )
        self.events = CounterMetricFamily(
            "mco_pod_memory_events",
            "Times the pod (or a container in it) hit its memory limit (max; v1 memory.failcnt), "
            "went over memory.high (high), or had a process OOM-killed (oom_kill).",
            labels=[*pod, "event"],
        )
        self.usage = GaugeMetricFamily(
            "mco_pod_memory_usage_bytes",
            "Memory charged to the pod cgroup, in bytes (page cache included).",
            labels=pod,
        )
        self.limit = GaugeMetricFamily(
            "mco_pod_memory_limit_bytes",
            "The pod cgroup's memory limit in bytes; absent when unlimited.",
            labels=pod,
        )
        self.reclaimed = CounterMetricFamily(
            "mco_pod_memory_reclaimed_pages",
            "Pages reclaimed from the pod cgroup, by any reclaimer (v2 memory.stat pgsteal; "
            "absent on cgroup v1).",
            labels=pod,
        )
        self.io = {
            "bytes": CounterMetricFamily(
                "mco_pod_io_bytes",
                "Bytes the pod's block I/O transferred, summed over devices.",
                labels=[*pod, "operation"],
            ),
            "operations": CounterMetricFamily(
                "mco_pod_io_operations",
                "Block I/O operations the pod completed, summed over devices.",
                labels=[*pod, "operation"],
            ),
        }
        self.io_limits = {
            "bytes": GaugeMetricFamily(
                "mco_pod_io_limit_bytes_per_second",
                "The pod cgroup's own I/O limit in bytes per second, summed over the devices "
                "that have one (io.max, v1 blkio.throttle); absent when none has.",
                labels=[*pod, "operation"],
            ),
            "operations": GaugeMetricFamily(
                "mco_pod_io_limit_operations_per_second",
                "The pod cgroup's own I/O limit in operations per second, summed over the "
                "devices that have one; absent when none has.",
                labels=[*pod, "operation"],
            ),
        }

    def add(self, pod: PodCgroup, s: PodSamples) -> None:
        labels = [pod.uid, pod.qos]
        for resource, kind, seconds in s.stalled:
            self.stalled.add_metric([*labels, resource, kind], seconds)
        for event, count in s.events.items():
            self.events.add_metric([*labels, event], float(count))
        if s.usage is not None:
            self.usage.add_metric(labels, float(s.usage))
        if s.limit is not None:
            self.limit.add_metric(labels, float(s.limit))
        if s.reclaimed is not None:
            self.reclaimed.add_metric(labels, float(s.reclaimed))
        for what, by_op in s.io.items():
            for op, value in by_op.items():
                self.io[what].add_metric([*labels, op], float(value))
        for what, by_op in s.io_limits.items():
            for op, value in by_op.items():
                self.io_limits[what].add_metric([*labels, op], float(value))

    def __iter__(self) -> Iterator[Metric]:
        yield from (self.stalled, self.events, self.usage, self.limit, self.reclaimed)
        yield from self.io.values()
        yield from self.io_limits.values()
