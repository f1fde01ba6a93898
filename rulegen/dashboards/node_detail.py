"""Node detail: every smoothed signal of one node against its warn and critical thresholds.

The threshold lines read the thresholds in force (``mco:threshold``, recorded by the same rules),
so they move when the DetectionRuleConfig changes; the generated defaults only shape the panels.
"""

from __future__ import annotations

from typing import Final

from mco import selfmetrics
from rulegen import series
from rulegen.catalog import CATALOG, Catalog, Context, Signal
from rulegen.dashboards.panels import (
    NODE_VAR,
    UNITS,
    PanelBuilder,
    Query,
    Step,
    new_dashboard,
    render,
    setting_step,
    setting_threshold,
    stat_panel,
    timeseries,
    warn_critical_steps,
    with_hard_limit,
)
from rulegen.durations import format_duration
from rulegen.model import DetectionRuleConfig

UID: Final = "mco-node-detail"
ONE_NODE: Final = f'node="${NODE_VAR}"'
YES_NO: Final = ((0, "no", "green"), (1, "yes", "red"))


def _signal_panel(spec: Signal, config: DetectionRuleConfig, catalog: Catalog) -> PanelBuilder:
    t = config.threshold(spec.key)
    detection = catalog.detection(spec.detection).label
    weight = config.weight(spec.detection)
    steps = warn_critical_steps(spec.label, t.warn, t.critical, lower_is_worse=spec.lower_is_worse)
    constraints = catalog.constraints_on(spec.key)
    for c in constraints:
        limit = config.hard_constraints[c.key]
        steps = with_hard_limit(steps, c.label, limit, lower_is_worse=c.lower_is_worse)
    where = " Counts only where the node has no PSI (the fallback)." if spec.fallback else ""
    hard = "".join(f" Dark red: the hard limit ({c.label})." for c in constraints)
    return timeseries(
        f"{detection} · {spec.label}",
        [
            Query(f"{spec.series}{{{ONE_NODE}}}", spec.label),
        ],
        unit=UNITS[spec.unit],
        description=f"{spec.help} Detection {detection} (default weight {weight:g}). Lines: "
        f"warn (orange) and critical (red) in force (defaults {t.warn:g}, {t.critical:g})."
        f"{where}{hard}",
        steps=steps,
        minimum=0,
        maximum=spec.maximum if spec.maximum is not None and spec.maximum < 1 else None,
        width=8,
    )


def _context_panel(row: Context, config: DetectionRuleConfig, catalog: Catalog) -> PanelBuilder:
    """A context series: no thresholds, only the hard limits on it (dark red)."""
    constraints = catalog.constraints_on(row.key)
    steps: list[Step] = [Step(None, "green")] if constraints else []
    hard = ""
    for c in constraints:
        limit = config.hard_constraints[c.key]
        steps = with_hard_limit(steps, c.label, limit, lower_is_worse=c.lower_is_worse)
        hard += (
            f" {c.relation.capitalize()} the limit in force (default {limit:g}) the node is "
            f"blocked ({c.label})."
        )
    return timeseries(
        row.title + (" (hard constraint)" if constraints else ""),
        [Query(f"{row.series}{{{ONE_NODE}}}", row.title)],
        unit=UNITS[row.unit],
        description=f"{row.help}{hard}" if constraints else f"{row.help} Context: not thresholded.",
        steps=steps,
        minimum=0,
        maximum=row.maximum if row.maximum is not None and row.maximum < 1 else None,
        width=8,
    )


def _named(expr: str) -> str:
    """The pods of ``expr`` with their namespace and name from kube_pod_info; UID only where
    kube-state-metrics has none."""
    return (
        f"({expr}) * on (pod_uid) group_left (namespace, pod) {series.POD_NAMES}"
        f" or on (pod_uid, resource) ({expr})"
    )


_POD_LEGEND: Final = "{{namespace}}/{{pod}} {{pod_uid}} · {{resource}}"


def _pod_panels(config: DetectionRuleConfig) -> list[PanelBuilder]:
    """The node's victims and aggressors over time (docs/dashboards.md): one row of a stat and
    the victims, one of three graphs."""
    w = format_duration(config.window)
    self_limited = f"({series.POD_MEMORY_SELF_LIMITED} == 1 or {series.POD_IO_SELF_LIMITED} == 1)"
    stall = f'{series.POD_PRESSURE}{{{ONE_NODE},kind="some"}}'
    pod = "node, pod_uid, qos"
    return [
        stat_panel(
            "Per-pod pressure",
            Query(f"1 - {series.POD_PRESSURE_FALLBACK}{{{ONE_NODE}}}"),
            mappings=((0, "no: node PSI", "orange"), (1, "yes", "green")),
            steps=[Step(None, "orange"), Step(1, "green")],
            description="Yes: memory and I/O are judged by the victims' stall. No: the node has "
            "no per-pod series, so node PSI (which counts a pod stalling in its own limit "
            "too) stands in.",
        ),
        timeseries(
            "Victims: pods stalling without hitting their own limit",
            [Query(_named(f"{stall} > 0 unless on (node, pod_uid) {self_limited}"), _POD_LEGEND)],
            unit="percentunit",
            description="PSI some of each pod that hit neither its memory nor its I/O limit in "
            "the window: the worst of them is the memory/io signal above. The report lists "
            "those at or above warn.",
            minimum=0,
            width=20,
        ),
        timeseries(
            "Self-limited pods' stall (not counted)",
            [Query(_named(f"{stall} > 0 and on (node, pod_uid) {self_limited}"), _POD_LEGEND)],
            unit="percentunit",
            description="PSI some of pods at their own memory or I/O limit in the window: "
            "their own doing, so it neither triggers a detection nor filters the node.",
            minimum=0,
            width=8,
        ),
        timeseries(
            "Aggressors: memory usage",
            [
                Query(
                    _named(
                        f"label_replace(topk(5, max by ({pod}) ({series.POD_MEMORY_USAGE}"
                        f'{{{ONE_NODE}}})), "resource", "memory", "", "")'
                    ),
                    _POD_LEGEND,
                )
            ],
            unit="bytes",
            description="The five pods holding the most memory on the node: where a pod is a "
            "memory victim, the report names the top three as aggressors.",
            minimum=0,
            width=8,
        ),
        timeseries(
            "Aggressors: I/O bytes per second",
            [
                Query(
                    _named(
                        f"label_replace(topk(5, sum by ({pod}) (max by ({pod}, operation) "
                        f"(rate({series.POD_IO_BYTES}{{{ONE_NODE}}}[{w}]))) > 0), "
                        '"resource", "io", "", "")'
                    ),
                    _POD_LEGEND,
                )
            ],
            unit="Bps",
            description="The five pods reading and writing the most bytes per second: where a "
            "pod is an io victim, the report names the top three as aggressors.",
            minimum=0,
            width=8,
        ),
        timeseries(
            "Aggressors: LLC occupancy",
            [
                Query(
                    _named(
                        f"label_replace(topk(5, sum by (node, pod_uid) (label_replace(max by "
                        f"(node, group, domain) ({series.LLC_OCCUPANCY}{{{ONE_NODE},"
                        f'group=~"{series.POD_LLC_GROUP}"}}), "pod_uid", "$1", "group", '
                        f'"{series.POD_LLC_GROUP}"))), "resource", "llc", "", "")'
                    ),
                    _POD_LEGEND,
                )
            ],
            unit="bytes",
            description="Last-level cache held by each pod's resctrl monitoring group (groups "
            "named pod<uid>; none without resctrl or such groups): where cache_pollution is "
            "triggered, the report names the top three as aggressors.",
            minimum=0,
            width=24,
        ),
    ]


def build(config: DetectionRuleConfig, catalog: Catalog = CATALOG) -> str:
    interfered = config.alerts.node_interfered_level
    hold_for, clear_after = (
        format_duration(s) for s in config.hysteresis.ranges(config.evaluation_interval)
    )
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
            steps=[Step(None, "green"), setting_step("nodeInterferedLevel", interfered, "red")],
        ),
        stat_panel(
            "Schedule score",
            Query(f"{series.SCHEDULE_SCORE}{{{ONE_NODE}}}"),
            steps=[
                Step(None, "red"),
                Step(
                    100 * (1 - interfered),
                    "green",
                    f"100 * (1 - {setting_threshold('nodeInterferedLevel')})",
                ),
            ],
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
            steps=[Step(None, "green"), setting_step("nodeInterferedLevel", interfered, "red")],
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
            [
                Query(f"{series.HARD_CONSTRAINT_VIOLATED}{{{ONE_NODE}}}", "{{constraint}}"),
                Query(
                    f"{series.HARD_CONSTRAINT_EXCEEDED}{{{ONE_NODE}}}", "{{constraint}} exceeded"
                ),
            ],
            description="Exceeded: 1 while the smoothed signal is beyond the limit. Violated "
            f"(what the extender filters on): 1 once exceeded has held for {hold_for}, 0 again "
            f"once it has been 0 for {clear_after}.",
            minimum=0,
            maximum=1,
        ),
    ]
    panels += _pod_panels(config)
    panels += [_signal_panel(spec, config, catalog) for spec in catalog.signals]
    panels += [_context_panel(row, config, catalog) for row in catalog.context]
    for panel in panels:
        board = board.with_panel(panel)
    return render(board)
