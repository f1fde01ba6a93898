"""Cluster overview: which nodes are interfered with, by what, and which the scheduler avoids."""

from __future__ import annotations

from typing import Final

from rulegen import series
from rulegen.catalog import CATALOG, Catalog
from rulegen.dashboards.panels import (
    NODE_MATCH,
    Query,
    Step,
    bar_gauge,
    new_dashboard,
    render,
    setting_step,
    setting_threshold,
    stat_panel,
    table_panel,
    timeseries,
)
from rulegen.model import DetectionRuleConfig

UID: Final = "mco-cluster-overview"


def build(config: DetectionRuleConfig, catalog: Catalog = CATALOG) -> str:
    interfered = config.alerts.node_interfered_level
    level_steps = [Step(None, "green"), setting_step("nodeInterferedLevel", interfered, "red")]
    alert_level = f"scalar({setting_threshold('nodeInterferedLevel')})"
    level = f"{series.INTERFERENCE_LEVEL}{{{NODE_MATCH}}}"
    hard = f"{series.HARD_CONSTRAINT_VIOLATED}{{{NODE_MATCH}}}"
    fallback = f"{series.MEMORY_PRESSURE_FALLBACK}{{{NODE_MATCH}}}"
    limits = ", ".join(
        f"{c.title} {c.relation} its limit (default {config.hard_constraints[c.key]:g})"
        for c in catalog.constraints
    )
    board = new_dashboard(
        UID,
        "MCO / Cluster overview",
        "Interference level of every node, the detections behind it, and the nodes the "
        "scheduler extender filters out. Generated from the detection model.",
        multi_node=True,
    )
    for panel in (
        stat_panel("Nodes reporting", Query(f"count({series.NODE_INFO}{{{NODE_MATCH}}})")),
        stat_panel(
            "Interfered nodes",
            Query(f"count({level} >= {alert_level}) or vector(0)"),
            description="Nodes whose interference level is at least the MCONodeInterfered "
            f"alert level in force (default {interfered:g}).",
            steps=[Step(None, "green"), Step(1, "orange")],
        ),
        stat_panel(
            "Blocked nodes",
            Query(f"count(max by (node) ({hard}) == 1) or vector(0)"),
            description="Nodes violating a hard constraint: the extender filters them out.",
            steps=[Step(None, "green"), Step(1, "red")],
        ),
        stat_panel(
            "Nodes on PSI fallback",
            Query(f"sum({fallback}) or vector(0)"),
            description="Nodes without PSI: memory pressure is judged from MemAvailable and "
            "page scanning instead.",
            steps=[Step(None, "green"), Step(1, "orange")],
        ),
        stat_panel(
            "Kata-ready nodes",
            Query(f"sum({series.KATA_READY}{{{NODE_MATCH}}}) or vector(0)"),
            description="Nodes with the Kata shim installed and /dev/kvm present.",
            steps=[Step(None, "blue")],
            width=8,
        ),
        timeseries(
            "Interference level per node",
            [Query(level, "{{node}}")],
            unit="percentunit",
            description="Σ weight·index / Σ weight over the detections with data on the node; "
            f"the line is the alert level in force (default {interfered:g}).",
            steps=level_steps,
            minimum=0,
            maximum=1,
            width=16,
            height=9,
        ),
        bar_gauge(
            "Top interfered nodes",
            Query(f"topk(10, {level})", "{{node}}", instant=True),
            unit="percentunit",
            steps=level_steps,
            width=8,
            height=9,
        ),
        timeseries(
            "Nodes with each detection triggered",
            [
                Query(
                    f"sum by (detection) ({series.DETECTION_TRIGGERED}{{{NODE_MATCH}}})",
                    "{{detection}}",
                )
            ],
            description="A detection is triggered on a node when any of its signals reaches "
            "its warn threshold.",
            minimum=0,
        ),
        timeseries(
            "Nodes blocked by a hard constraint",
            [Query(f"sum by (constraint) ({hard})", "{{constraint}}")],
            description=f"Nodes the extender rejects, by the constraint they violate ({limits}).",
            minimum=0,
        ),
        timeseries(
            "Schedule score per node",
            [Query(f"{series.SCHEDULE_SCORE}{{{NODE_MATCH}}}", "{{node}}")],
            description="100 × (1 − level): what the extender gives Volcano (kube-scheduler "
            "gets it scaled to 0–10).",
            minimum=0,
            maximum=100,
        ),
        timeseries(
            "Nodes on the PSI fallback",
            [Query(f"sum({fallback})", "nodes")],
            minimum=0,
        ),
        table_panel(
            "Nodes now",
            Query(level, instant=True),
            description="Current interference level of every selected node.",
            width=24,
        ),
    ):
        board = board.with_panel(panel)
    return render(board)
