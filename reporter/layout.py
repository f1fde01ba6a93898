"""Which objects hold the report: one ``cluster`` object, or one object per node.

In both layouts the object named ``cluster`` carries the heartbeat (``lastSyncTime``), the
conditions, ``ruleConfigGeneration``, ``nodeCount`` and the summary of the whole report; in the
per-node layout it holds no node except one literally named ``cluster`` (that node's object would
have the same name), and each node object carries its own node's summary.
``auto`` switches to per-node when the cluster object would pass ``max_bytes`` (etcd refuses
objects near 1.5 MiB) and back below 3/4 of it, so a fleet at the edge does not flap. An explicit
``cluster`` layout that outgrows ``max_bytes`` is kept (the operator asked for it), but says so
once per crossing (a warning, and ``over_limit`` for the self-metrics): the API server would
answer 413 at every write and the reporter would back off forever without another word.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Final, Literal

import msgspec

from reporter.schema import (
    CLUSTER_REPORT_NAME,
    LAYOUT_LABEL,
    NodeEntry,
    NodeInterferenceReport,
    ObjectMeta,
    ReportStatus,
    summarize,
)
from reporter.tracker import ReportView

log = logging.getLogger("mco.reporter.layout")
LayoutMode = Literal["cluster", "per-node", "auto"]
CLUSTER: Final = "cluster"
PER_NODE: Final = "per-node"
DEFAULT_MAX_BYTES: Final = 1 << 20
_OBJECT_OVERHEAD: Final = 1024  # metadata, conditions and the top-level fields


@dataclass(slots=True)
class Desired:
    """One object as it should be written."""

    name: str
    layout: str
    nodes: dict[str, NodeEntry]
    heartbeat: bool  # the `cluster` object

    @property
    def labels(self) -> dict[str, str]:
        return {LAYOUT_LABEL: self.layout}


@dataclass(slots=True)
class LayoutChooser:
    mode: LayoutMode
    max_bytes: int = DEFAULT_MAX_BYTES
    current: str = CLUSTER
    over_limit: bool = False  # --layout cluster and that object is over max_bytes
    _sizes: dict[str, tuple[NodeEntry, int]] = field(default_factory=dict)
    _total: int = 0

    def __post_init__(self) -> None:
        if self.mode == PER_NODE:
            self.current = PER_NODE

    def cluster_bytes(self, entries: dict[str, NodeEntry]) -> int:
        """Estimated JSON size of the cluster object holding ``entries``, kept up to date
        incrementally (only entries that changed are encoded again)."""
        sizes = self._sizes
        total = self._total
        for node, entry in entries.items():
            known = sizes.get(node)
            if known is None or known[0] is not entry:
                size = len(msgspec.json.encode(entry)) + len(node) + 4
                total += size - (known[1] if known is not None else 0)
                sizes[node] = (entry, size)
        if len(sizes) != len(entries):
            for node in [n for n in sizes if n not in entries]:
                total -= sizes.pop(node)[1]
        self._total = total
        return total + _OBJECT_OVERHEAD

    def largest_object(self, entries: dict[str, NodeEntry]) -> int:
        """Estimated JSON size of the largest object the current layout writes."""
        cluster = self.cluster_bytes(entries)
        if self.current == CLUSTER:
            return cluster
        return max((size for _, size in self._sizes.values()), default=0) + _OBJECT_OVERHEAD

    def choose(self, entries: dict[str, NodeEntry]) -> str:
        if self.mode == PER_NODE:
            return self.current
        size = self.cluster_bytes(entries)
        if self.mode == CLUSTER:
            self._check_limit(size)
            return self.current
        if self.current == CLUSTER and size > self.max_bytes:
            self.current = PER_NODE
        elif self.current == PER_NODE and size < self.max_bytes * 3 // 4:
            self.current = CLUSTER
        return self.current

    def _check_limit(self, size: int) -> None:
        if not self.over_limit and size > self.max_bytes:
            self.over_limit = True
            log.warning(
                "--layout cluster: the report object exceeds --max-object-bytes; a Kubernetes "
                "API server refuses objects this large (413), so no node would be updated. Use "
                "--layout per-node or --layout auto",
                extra={"object_bytes": size, "max_object_bytes": self.max_bytes},
            )
        elif self.over_limit and size < self.max_bytes * 3 // 4:
            self.over_limit = False
            log.info(
                "--layout cluster: the report object fits again",
                extra={"object_bytes": size, "max_object_bytes": self.max_bytes},
            )


def desired_objects(entries: dict[str, NodeEntry], layout: str) -> dict[str, Desired]:
    """Every object of ``layout``, the ``cluster`` object first."""
    if layout == CLUSTER:
        return {CLUSTER_REPORT_NAME: Desired(CLUSTER_REPORT_NAME, CLUSTER, entries, True)}
    out = {CLUSTER_REPORT_NAME: Desired(CLUSTER_REPORT_NAME, PER_NODE, {}, True)}
    for node, entry in entries.items():
        if node == CLUSTER_REPORT_NAME:
            out[CLUSTER_REPORT_NAME].nodes[node] = entry
        else:
            out[node] = Desired(node, PER_NODE, {node: entry}, False)
    return out


def heartbeat_status(view: ReportView, nodes: dict[str, NodeEntry]) -> ReportStatus:
    return ReportStatus(
        nodes=nodes,
        last_sync_time=view.last_sync_time,
        rule_config_generation=view.rule_config_generation,
        config=view.config,
        conditions=list(view.conditions),
        profiles=view.profiles,
        node_count=len(view.entries),
        summary=view.summary,
    )


def whole_objects(
    view: ReportView, layout: str, entries: dict[str, NodeEntry] | None = None
) -> list[NodeInterferenceReport]:
    """Complete objects (what a file holds, what a reader lists)."""
    objects = []
    for d in desired_objects(view.entries if entries is None else entries, layout).values():
        if d.heartbeat:
            status = heartbeat_status(view, d.nodes)
        else:
            status = ReportStatus(
                nodes=d.nodes,
                last_sync_time=view.last_sync_time,
                summary=summarize(d.nodes.values()),
            )
        objects.append(
            NodeInterferenceReport(metadata=ObjectMeta(name=d.name, labels=d.labels), status=status)
        )
    return objects
