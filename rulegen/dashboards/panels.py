"""Small builders over grafana-foundation-sdk that every MCO dashboard shares.

One datasource variable, one ``node`` variable, and panels whose thresholds come from the
detection model: the helpers here take numbers and series names, never spell them.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

with warnings.catch_warnings():
    # The SDK warns at import time that the v2 dashboard schema exists; MCO targets the v1
    # schema every Grafana since 9 loads, including kube-prometheus-stack's.
    warnings.simplefilter("ignore", DeprecationWarning)
    from grafana_foundation_sdk.builders import bargauge, dashboard, prometheus, stat, table
    from grafana_foundation_sdk.builders import common as common_builders
    from grafana_foundation_sdk.builders import timeseries as timeseries_builders
    from grafana_foundation_sdk.cog import builder as cogbuilder
    from grafana_foundation_sdk.cog import variants
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common
    from grafana_foundation_sdk.models import dashboard as dashboard_models
    from grafana_foundation_sdk.models import prometheus as prometheus_models

from rulegen import series
from rulegen.dashboards import compat

DATASOURCE_VAR: Final = "datasource"
NODE_VAR: Final = "node"
DATASOURCE: Final = dashboard_models.DataSourceRef(
    type_val="prometheus", uid=f"${{{DATASOURCE_VAR}}}"
)
# Grafana derives this from the datasource's scrape interval: at least four samples per rate.
RATE_INTERVAL: Final = "$__rate_interval"
NODE_MATCH: Final = f'node=~"${NODE_VAR}"'
TAG: Final = "mco"

UNITS: Final[dict[str, str]] = {
    "ratio": "percentunit",
    "seconds": "s",
    "pages/s": "suffix: pages/s",
    "bytes": "bytes",
}


PanelBuilder = cogbuilder.Builder[dashboard_models.Panel]


@dataclass(frozen=True, slots=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


def datasource_variable() -> dashboard.DatasourceVariable:
    return dashboard.DatasourceVariable(DATASOURCE_VAR).label("Data source").type("prometheus")


def node_variable(*, multi: bool) -> dashboard.QueryVariable:
    """Every node whose exporter is up (``mco_node_info`` carries the scrape's ``node`` label)."""
    query = f"label_values({series.NODE_INFO}, node)"
    variable = (
        dashboard.QueryVariable(NODE_VAR)
        .label("Node")
        .datasource(DATASOURCE)
        .query(query)
        .definition(query)
        .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_models.VariableSort.ALPHABETICAL_CASE_INSENSITIVE_ASC)
    )
    if multi:
        variable = variable.multi(True).include_all(True).all_value(".*")
    return variable


def _targets(queries: Sequence[Query]) -> list[cogbuilder.Builder[variants.Dataquery]]:
    targets: list[cogbuilder.Builder[variants.Dataquery]] = []
    for i, q in enumerate(queries):
        target = (
            prometheus.Dataquery()
            .datasource(DATASOURCE)
            .ref_id(chr(ord("A") + i))
            .expr(q.expr)
            .legend_format(q.legend or "__auto")
        )
        if q.instant:
            target = target.instant().format(prometheus_models.PromQueryFormat.TABLE)
        else:
            target = target.range()
        targets.append(target)
    return targets


@dataclass(frozen=True, slots=True)
class Step:
    """A threshold step: ``color`` from ``value`` upwards (None: the base colour).

    With ``live`` (a PromQL selector of one ``mco:threshold`` series) the value is read from
    Prometheus when the panel loads, so the line follows the DetectionRuleConfig in force
    instead of the one the dashboard was generated from; ``value`` is then only the default.
    """

    value: float | None
    color: str
    live: str | None = None


def live_step(selector: str, default: float, color: str) -> Step:
    """A step whose value is the recorded threshold ``selector`` (see ``series.THRESHOLD``)."""
    return Step(default, color, f"{series.THRESHOLD}{{{selector}}}")


def thresholds(steps: Sequence[Step]) -> dashboard.ThresholdsConfig:
    """The static steps; live ones are added by ``_live_thresholds`` from the data."""
    return (
        dashboard.ThresholdsConfig()
        .mode(dashboard_models.ThresholdsMode.ABSOLUTE)
        .steps(
            [
                dashboard_models.Threshold(value=s.value, color=s.color)
                for s in steps
                if s.live is None
            ]
        )
    )


def _live_thresholds(
    queries: Sequence[Query], steps: Sequence[Step]
) -> tuple[list[Query], list[dashboard_models.DataTransformerConfig]]:
    """The panel's queries plus one instant query per live step, and the "Config from query
    results" transformations that turn each into a threshold step (in the Grafana 11 to 13
    the dashboards target).

    Each live step gets its own query and transformation: Grafana reads one config frame per
    transformation. The query is an instant table, whose number column is always ``Value``.
    """
    extra: list[Query] = []
    transformations: list[dashboard_models.DataTransformerConfig] = []
    for step in steps:
        if step.live is None:
            continue
        ref = chr(ord("A") + len(queries) + len(extra))
        extra.append(Query(step.live, instant=True))
        transformations.append(
            dashboard_models.DataTransformerConfig(
                id_val="configFromData",
                options={
                    "configRefId": ref,
                    "mappings": [
                        {
                            "fieldName": "Value",
                            "handlerKey": "threshold1",
                            "handlerArguments": {"threshold": {"color": step.color}},
                            "reducerId": "lastNotNull",
                        }
                    ],
                },
            )
        )
    return [*queries, *extra], transformations


def warn_critical_steps(
    signal: str, warn: float, critical: float, *, lower_is_worse: bool
) -> list[Step]:
    """Green below warn, orange from warn, red from critical (mirrored for lower-is-worse);
    the warn and critical lines read the thresholds in force for ``signal`` (its label)."""
    live_warn = live_step(
        f'signal="{signal}", bound="warn"', warn, "green" if lower_is_worse else "orange"
    )
    if lower_is_worse:
        return [
            Step(None, "red"),
            live_step(f'signal="{signal}", bound="critical"', critical, "orange"),
            live_warn,
        ]
    return [
        Step(None, "green"),
        live_warn,
        live_step(f'signal="{signal}", bound="critical"', critical, "red"),
    ]


def setting_threshold(setting: str) -> str:
    """The recorded value in force of a DetectionRuleConfig setting (``THRESHOLD_SETTINGS``)."""
    return f'{series.THRESHOLD}{{setting="{setting}", bound="limit"}}'


def setting_step(setting: str, default: float, color: str) -> Step:
    """A line at a DetectionRuleConfig setting in force."""
    return Step(default, color, setting_threshold(setting))


def with_hard_limit(
    steps: Sequence[Step], constraint: str, limit: float, *, lower_is_worse: bool
) -> list[Step]:
    """``steps`` (ascending) with the hard limit of ``constraint`` (its label) in force in dark
    red: from the limit upwards, or, for a limit that is violated below it, everything under
    it. The colour just above a lower limit is taken at the default ``limit``."""
    line = f'constraint="{constraint}", bound="limit"'
    if not lower_is_worse:
        return [*steps, live_step(line, limit, "dark-red")]
    above = [s for s in steps if s.value is not None and s.value > limit]
    at_limit = [s.color for s in steps if s.value is None or s.value <= limit][-1]
    return [Step(None, "dark-red"), live_step(line, limit, at_limit), *above]


def timeseries(
    title: str,
    queries: Sequence[Query],
    *,
    unit: str = "short",
    description: str = "",
    steps: Sequence[Step] = (),
    minimum: float | None = None,
    maximum: float | None = None,
    width: int = 12,
    height: int = 8,
) -> timeseries_builders.Panel:
    """A time series; with ``steps`` the thresholds are drawn as dashed lines."""
    panel = (
        timeseries_builders.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .line_width(1)
        .fill_opacity(10)
        .show_points(common.VisibilityMode.NEVER)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    queries, transformations = _live_thresholds(queries, steps)
    panel = panel.targets(_targets(queries)).transformations(transformations)
    if minimum is not None:
        panel = panel.min(minimum)
    if maximum is not None:
        panel = panel.max(maximum)
    if steps:
        panel = panel.thresholds(thresholds(steps)).thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(
                common.GraphThresholdsStyleMode.DASHED
            )
        )
    return panel


def stat_panel(
    title: str,
    query: Query,
    *,
    unit: str = "short",
    description: str = "",
    steps: Sequence[Step] = (Step(None, "green"),),
    width: int = 4,
    height: int = 4,
    mappings: Sequence[tuple[int, str, str]] = (),
) -> stat.Panel:
    """One number; ``mappings`` turn values into words: (value, text, colour)."""
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
        .thresholds(thresholds(steps))
    )
    queries, transformations = _live_thresholds([query], steps)
    panel = panel.targets(_targets(queries)).transformations(transformations)
    if mappings:
        panel = panel.mappings(_value_mappings(mappings))
    return panel


def _value_mappings(
    mappings: Sequence[tuple[int, str, str]],
) -> list[dashboard_models.ValueMapping]:
    return [
        dashboard_models.ValueMap(
            options={
                str(value): dashboard_models.ValueMappingResult(text=text, color=color, index=i)
                for i, (value, text, color) in enumerate(mappings)
            }
        )
    ]


def bar_gauge(
    title: str,
    query: Query,
    *,
    unit: str,
    steps: Sequence[Step],
    description: str = "",
    minimum: float = 0,
    maximum: float = 1,
    width: int = 12,
    height: int = 8,
) -> bargauge.Panel:
    panel = (
        bargauge.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .min(minimum)
        .max(maximum)
        .span(width)
        .height(height)
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
        .thresholds(thresholds(steps))
    )
    queries, transformations = _live_thresholds([query], steps)
    return panel.targets(_targets(queries)).transformations(transformations)


def table_panel(
    title: str,
    query: Query,
    *,
    description: str = "",
    mappings: Sequence[tuple[int, str, str]] = (),
    width: int = 12,
    height: int = 8,
) -> table.Panel:
    """An instant query as a table (one row per series, its labels as columns)."""
    panel = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .span(width)
        .height(height)
        .with_transformation(
            dashboard_models.DataTransformerConfig(
                id_val="organize",
                options={"excludeByName": {"Time": True, "__name__": True}},
            )
        )
        .targets(_targets([query]))
    )
    if mappings:
        panel = panel.mappings(_value_mappings(mappings))
    return panel


def new_dashboard(
    uid: str, title: str, description: str, *, multi_node: bool
) -> dashboard.Dashboard:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        board = dashboard.Dashboard(title)
    return (
        board.uid(uid)
        .description(description)
        .tags([TAG])
        .editable()
        .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
        .refresh("10s")
        .time("now-1h", "now")
        .timezone("browser")
        .link(
            dashboard.DashboardLink("MCO dashboards")
            .type(dashboard_models.DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
        .with_variable(datasource_variable())
        .with_variable(node_variable(multi=multi_node))
    )


def render(board: dashboard.Dashboard) -> str:
    """The dashboard as stable, sorted JSON that every targeted Grafana reads alike
    (:mod:`rulegen.dashboards.compat`), with panel ids assigned in reading order."""
    built = board.build()
    encoded: dict[str, Any] = json.loads(json.dumps(built, cls=JSONEncoder))
    compat.portable(encoded)
    for i, panel in enumerate(encoded.get("panels", []), start=1):
        panel["id"] = i
    return json.dumps(encoded, indent=2, sort_keys=True) + "\n"
