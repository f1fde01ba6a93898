"""Node detail: every smoothed signal of one node against its warn and critical thresholds.

The threshold lines are the default DetectionRuleConfig's, so the picture matches the rules the
chart installs; after tuning the CR, regenerate (``make generate``) to move the lines too.
"""

from __future__ import annotations

from typing import Final

from mco import selfmetrics
from rulegen import series
from rulegen.catalog import CATALOG, Catalog, Signal
from rulegen.dashboards.panels import (
    NODE_VAR,
    UNITS,
    PanelBuilder,
    Query,
    Step,
    new_dashboard,
    render,
    stat_panel,
    timeseries,
    warn_critical_steps,
    with_hard_limit,
)
from rulegen.model import DetectionRuleConfig

UID: Final = "mco-node-detail"
ONE_NODE: Final = f'node="${NODE_VAR}"'
YES_NO: Final = ((0, "no", "green"), (1, "yes", "red"))


def _signal_panel(spec: Signal, config: DetectionRuleConfig, catalog: Catalog) -> PanelBuilder:
    t = config.threshold(spec.key)
    detection = catalog.detection(spec.detection).label
    weight = config.weight(spec.detection)
    steps = warn_critical_steps(t.warn, t.critical, lower_is_worse=spec.lower_is_worse)
    limits = []
    for c in catalog.constraints_on(spec.key):
        limits.append(limit := config.hard_constraints[c.key])
        steps = with_hard_limit(steps, limit, lower_is_worse=c.lower_is_worse)
    where = " Counts only where the node has no PSI (the fallback)." if spec.fallback else ""
    hard = "".join(f" Dark red: the hard limit {limit:g}." for limit in limits)
    return timeseries(
        f"{detection} · {spec.label}",
        [
            Query(f"{spec.series}{{{ONE_NODE}}}", spec.label),
        ],
        unit=UNITS[spec.unit],
        description=f"{spec.help} Detection {detection} (weight {weight:g}): warn "
        f"{t.warn:g}, critical {t.critical:g}.{where}{hard}",
        steps=steps,
        minimum=0,
        maximum=spec.maximum if spec.maximum is not None and spec.maximum < 1 else None,
        width=8,
    )


def build(config: DetectionRuleConfig, catalog: Catalog = CATALOG) -> str:
    interfered = config.alerts.node_interfered_level
    memory_full_max = config.hard_constraints["psiMemoryFullMax"]
    context = {c.key: c.series for c in catalog.context}
    board = new_dashboard(
        UID,
        "MCO / Node detail",
        "One node: each smoothed signal with its warn and critical thresholds, the detection "
        "indices, the interference level and the schedule score. Generated from the detection "
        "model.",
        multi_node=False,
    )
    panels: list[PanelBuilder] = [
        stat_panel(
            "Interference level",
            Query(f"{series.INTERFERENCE_LEVEL}{{{ONE_NODE}}}"),
            unit="percentunit",
            steps=[Step(None, "green"), Step(interfered, "red")],
        ),
        stat_panel(
            "Schedule score",
            Query(f"{series.SCHEDULE_SCORE}{{{ONE_NODE}}}"),
            steps=[Step(None, "red"), Step(100 * (1 - interfered), "green")],
        ),
        stat_panel(
            "Blocked (hard constraint)",
            Query(f"max({series.HARD_CONSTRAINT_VIOLATED}{{{ONE_NODE}}})"),
            mappings=YES_NO,
            steps=[Step(None, "green"), Step(1, "red")],
        ),
        stat_panel(
            "PSI fallback",
            Query(f"{series.MEMORY_PRESSURE_FALLBACK}{{{ONE_NODE}}}"),
            mappings=((0, "no", "green"), (1, "yes", "orange")),
            steps=[Step(None, "green"), Step(1, "orange")],
        ),
        stat_panel(
            "Kata ready",
            Query(f"{series.KATA_READY}{{{ONE_NODE}}}"),
            mappings=((0, "no", "text"), (1, "yes", "blue")),
            steps=[Step(None, "text")],
        ),
        stat_panel(
            "Collectors off or failing",
            Query(
                f"count({selfmetrics.EXPORTER_COLLECTOR_SUCCESS}{{{ONE_NODE}}} == 0) or vector(0)"
            ),
            description="Collectors whose source is missing on this node (no PMU, no "
            "resctrl, no eBPF …) or failed on the last scrape; see the pipeline dashboard.",
            steps=[Step(None, "green"), Step(1, "orange")],
        ),
        timeseries(
            "Interference level and detection indices",
            [
                Query(f"{series.INTERFERENCE_LEVEL}{{{ONE_NODE}}}", "level"),
                Query(f"{series.DETECTION_INDEX}{{{ONE_NODE}}}", "{{detection}}"),
            ],
            unit="percentunit",
            description="Each detection's index is the max of its signals' indices, "
            "clamp((value − warn) / (critical − warn), 0, 1); the level weighs them.",
            steps=[Step(None, "green"), Step(interfered, "red")],
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "Signal indices",
            [
                Query(
                    f"{series.SIGNAL_INDEX}{{{ONE_NODE}}}",
                    "{{detection}} · {{signal}}",
                )
            ],
            unit="percentunit",
            description="Which signal drives each detection.",
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "Detections triggered",
            [Query(f"{series.DETECTION_TRIGGERED}{{{ONE_NODE}}}", "{{detection}}")],
            description="1 while any of the detection's signals is at or above warn.",
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "Hard constraints violated",
            [Query(f"{series.HARD_CONSTRAINT_VIOLATED}{{{ONE_NODE}}}", "{{constraint}}")],
            description="1 while the node breaks a hard constraint; the extender then filters "
            "it out.",
            minimum=0,
            maximum=1,
        ),
    ]
    panels += [_signal_panel(spec, config, catalog) for spec in catalog.signals]
    panels += [
        timeseries(
            "PSI memory full (hard constraint)",
            [Query(f"{context['psiMemoryFull']}{{{ONE_NODE}}}", "memory full")],
            unit="percentunit",
            description="Share of time all non-idle tasks stalled on memory; above "
            f"{memory_full_max:g} the node is blocked.",
            steps=[Step(None, "green"), Step(memory_full_max, "dark-red")],
            minimum=0,
            width=8,
        ),
        timeseries(
            "PSI cpu some, io full",
            [
                Query(f"{context['psiCPUSome']}{{{ONE_NODE}}}", "cpu some"),
                Query(f"{context['psiIOFull']}{{{ONE_NODE}}}", "io full"),
            ],
            unit="percentunit",
            description="Context: recorded for reading, not thresholded.",
            minimum=0,
            width=8,
        ),
        timeseries(
            "LLC occupancy",
            [Query(f"{context['llcOccupancyBytes']}{{{ONE_NODE}}}", "occupancy")],
            unit=UNITS["bytes"],
            description="resctrl LLC occupancy summed over the node's control groups "
            "(needs resctrl with L3 monitoring).",
            minimum=0,
            width=8,
        ),
    ]
    for panel in panels:
        board = board.with_panel(panel)
    return render(board)
