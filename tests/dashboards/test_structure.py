"""The generated dashboards: Grafana's structure, variables, and numbers from the model."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest

from rulegen import dashboards as generator
from rulegen import series
from rulegen.dashboards import node_detail
from rulegen.model import SIGNALS, DetectionRuleConfig, Threshold
from tests.dashboards.boards import (
    ROOT,
    dashboards,
    data_query,
    data_targets,
    live_lines,
    panels,
    targets,
)

RECORDED = (
    {
        value
        for value in vars(series).values()
        if isinstance(value, str) and value.startswith(("node:", "mco:"))
    }
    | set(series.SIGNAL_SERIES.values())
    | set(series.CONTEXT_SERIES.values())
)


def test_three_dashboards_in_both_places() -> None:
    assert set(dashboards()) == {"mco-cluster-overview", "mco-node-detail", "mco-pipeline-health"}
    for name in dashboards():
        chart_copy = ROOT / "charts" / "mco" / "dashboards" / f"{name}.json"
        assert chart_copy.read_text() == (ROOT / "dashboards" / f"{name}.json").read_text()


@pytest.mark.parametrize("name", sorted(dashboards()))
def test_grafana_structure(name: str) -> None:
    board = dashboards()[name]
    assert board["uid"] == name and len(board["uid"]) <= 40
    assert board["title"].startswith("MCO / ")
    assert "mco" in board["tags"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    node = variables["node"]
    assert node["type"] == "query"
    assert node["query"] == f"label_values({series.NODE_INFO}, node)"
    assert node["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    occupied: set[tuple[int, int]] = set()
    for panel in panels(board):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for t in panel["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
            assert t["expr"].strip()


@pytest.mark.parametrize("name", sorted(dashboards()))
def test_the_dashboards_link_renders_above_the_panels_in_every_grafana(name: str) -> None:
    """Grafana 12 draws a `dashboards` link placed `inControlsMenu` nowhere (grafana#115084)
    and Grafana 11 has no controls menu: the link carries no `placement`, which every version
    from 11 to 13 draws above the panels, as a dropdown of the dashboards tagged `mco`."""
    (link,) = dashboards()[name]["links"]
    assert "placement" not in link
    assert link["type"] == "dashboards" and link["asDropdown"] is True
    assert link["title"] == "MCO dashboards"
    assert all(link["tags"][0] in board["tags"] for board in dashboards().values())
    assert link["includeVars"] and link["keepTime"]


def test_every_recorded_series_name_comes_from_series_py() -> None:
    used = set()
    for target in targets():
        used |= set(re.findall(r"\b(?:node|mco):[a-z0-9_]+(?::[a-z0-9_]+)?", target.expr))
    assert used, "no recorded series used"
    assert used <= RECORDED, sorted(used - RECORDED)
    # Everything the reporter and the scheduler read is on the dashboards too.
    for name in (
        series.INTERFERENCE_LEVEL,
        series.SCHEDULE_SCORE,
        series.DETECTION_INDEX,
        series.DETECTION_TRIGGERED,
        series.HARD_CONSTRAINT_VIOLATED,
        series.MEMORY_PRESSURE_FALLBACK,
        series.RULE_CONFIG_INFO,
        *series.SIGNAL_SERIES.values(),
    ):
        assert name in used, name


def _signal_panels(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for spec in SIGNALS:
        found = [
            p
            for p in panels(board)
            if any(t["expr"].startswith(spec.series + "{") for t in p["targets"])
        ]
        assert len(found) == 1, spec.key
        out[spec.key] = found[0]
    return out


def _steps(panel: dict[str, Any]) -> list[tuple[float | str | None, str]]:
    """The panel's threshold steps as Grafana draws them: the static ones by value, the live
    ones (a "Config from query results" transformation) by the PromQL that gives their value."""
    steps: list[tuple[float | str | None, str]] = [
        (s["value"], s["color"]) for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    ]
    return steps + [(expr, colour) for expr, colour, _ in live_lines(panel)]


def _threshold(selector: str) -> str:
    return f"{series.THRESHOLD}{{{selector}}}"


def test_each_signal_panel_draws_the_warn_and_critical_in_force() -> None:
    signal_panels = _signal_panels(dashboards()["mco-node-detail"])
    for spec in SIGNALS:
        panel = signal_panels[spec.key]
        colours = {value: colour for value, colour in _steps(panel)}
        warn = _threshold(f'signal="{spec.label}", bound="warn"')
        critical = _threshold(f'signal="{spec.label}", bound="critical"')
        # Colours change at the thresholds: orange from warn and red from critical, or for a
        # lower-is-worse signal red below critical, orange up to warn, green above.
        if spec.lower_is_worse:
            assert (colours[None], colours[critical], colours[warn]) == ("red", "orange", "green")
        else:
            assert (colours[None], colours[warn], colours[critical]) == ("green", "orange", "red")
        # No literal line beside the live ones: the only static step is the base colour.
        static = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert [step["value"] for step in static] == [None], spec.key
        assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "dashed"
        assert "warn (orange) and critical (red) in force" in panel["description"]


def test_no_panel_draws_a_config_value_as_a_literal() -> None:
    """Every line at a configured value is live: the dashboards are the same whatever the
    DetectionRuleConfig they were generated from, so tuning the CR moves them."""
    default = DetectionRuleConfig.default()

    # Not 0.5: a signal whose critical is twice its warn would move its critical onto the old
    # warn; no default pair is 1 : 0.3 apart.
    def scale(t: Threshold) -> Threshold:
        return Threshold(t.warn * 0.3, t.critical * 0.3)

    detections = {}
    for key, d in default.detections.items():
        detections[key] = dataclasses.replace(
            d,
            signals={k: scale(t) for k, t in d.signals.items()},
            fallback={k: scale(t) for k, t in d.fallback.items()},
        )
    moved = dataclasses.replace(default, detections=detections)

    def lines(text: str) -> list[Any]:
        board = json.loads(text)
        return [
            (p["title"], p["fieldConfig"]["defaults"].get("thresholds"), p.get("transformations"))
            for p in panels(board)
            if "fieldConfig" in p
        ]

    assert lines(node_detail.build(moved)) == lines(node_detail.build(default))
    # and the live lines are there at all
    assert sum(len(live_lines(p)) for p in panels(dashboards()["mco-node-detail"])) >= 2 * len(
        SIGNALS
    )


def test_generator_output_is_what_is_checked_in() -> None:
    for path, text in generator.generated_files().items():
        assert (ROOT / path).read_text() == text, path


# What the issue asks each dashboard to show: panel title, the panel types that can show it,
# and the metrics its queries must read. Recorded series come from series.py; component
# metrics are spelled as the exporter, reporter and extender export them.
@dataclasses.dataclass(frozen=True)
class Required:
    title: str
    types: frozenset[str]
    metrics: frozenset[str]
    node_filter: bool = True


def _req(title: str, types: str, *metrics: str, node_filter: bool = True) -> Required:
    return Required(title, frozenset(types.split()), frozenset(metrics), node_filter)


GRAPH = "timeseries"
NUMBER = "stat"
LIST = "bargauge table"

REQUIRED: dict[str, list[Required]] = {
    "mco-cluster-overview": [
        _req("Interference level per node", GRAPH, series.INTERFERENCE_LEVEL),
        _req("Top interfered nodes", LIST, series.INTERFERENCE_LEVEL),
        _req("Interfered nodes", NUMBER, series.INTERFERENCE_LEVEL),
        _req("Nodes with each detection triggered", GRAPH, series.DETECTION_TRIGGERED),
        _req("Blocked nodes", NUMBER, series.HARD_CONSTRAINT_VIOLATED),
        _req("Nodes blocked by a hard constraint", GRAPH, series.HARD_CONSTRAINT_VIOLATED),
        _req("Nodes on PSI fallback", NUMBER, series.MEMORY_PRESSURE_FALLBACK),
        _req("Nodes on the PSI fallback", GRAPH, series.MEMORY_PRESSURE_FALLBACK),
    ],
    "mco-node-detail": [
        _req("Interference level", NUMBER, series.INTERFERENCE_LEVEL),
        _req("Schedule score", NUMBER, series.SCHEDULE_SCORE),
        _req(
            "Interference level and detection indices",
            GRAPH,
            series.INTERFERENCE_LEVEL,
            series.DETECTION_INDEX,
        ),
        _req("Signal indices", GRAPH, series.SIGNAL_INDEX),
        _req("Detections triggered", GRAPH, series.DETECTION_TRIGGERED),
        _req(
            "Hard constraints violated",
            GRAPH,
            series.HARD_CONSTRAINT_VIOLATED,
            series.HARD_CONSTRAINT_EXCEEDED,
        ),
        _req("Collectors off or failing", NUMBER, "mco_exporter_collector_success"),
    ],
    "mco-pipeline-health": [
        _req("Exporters up", NUMBER, "up"),
        _req("Exporters down", NUMBER, "up"),
        _req("Exporter scrape duration", GRAPH, "scrape_duration_seconds"),
        _req("Collectors off or failing", GRAPH, "mco_exporter_collector_success"),
        _req("Collector duration (slowest node)", GRAPH, "mco_exporter_collector_duration_seconds"),
        _req("Collector status per node", "table", "mco_exporter_collector_success"),
        _req(
            "Reporter cycle duration",
            GRAPH,
            "mco_reporter_cycle_duration_seconds_bucket",
            node_filter=False,
        ),
        _req("Report staleness", GRAPH, series.REPORTER_LAST_SYNC, node_filter=False),
        _req("Report age", NUMBER, series.REPORTER_LAST_SYNC, node_filter=False),
        _req(
            "Extender latency p99 by route",
            GRAPH,
            "mco_extender_request_duration_seconds_bucket",
            node_filter=False,
        ),
        _req(
            "Extender verdicts by reason", GRAPH, "mco_extender_verdicts_total", node_filter=False
        ),
    ],
}

_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _identifiers(expr: str) -> set[str]:
    """Every name in a query (metrics, functions, labels): a metric is in it or it is not."""
    without_strings = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    return set(_IDENTIFIER.findall(without_strings))


def _by_title(board: dict[str, Any], title: str) -> dict[str, Any]:
    found = [p for p in panels(board) if p["title"] == title]
    assert len(found) == 1, f"{len(found)} panels titled {title!r}"
    return found[0]


def test_every_dashboard_has_requirements() -> None:
    assert set(REQUIRED) == set(dashboards())


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_the_issues_panels_are_there_and_read_their_metrics(name: str) -> None:
    board = dashboards()[name]
    node_matcher = 'node="$node"' if name == "mco-node-detail" else 'node=~"$node"'
    for required in REQUIRED[name]:
        panel = _by_title(board, required.title)
        assert panel["type"] in required.types, (required.title, panel["type"])
        read: set[str] = set()
        for t in panel["targets"]:
            read |= _identifiers(t["expr"])
            if required.node_filter and t in data_targets(panel):
                assert node_matcher in t["expr"], (required.title, t["expr"])
        missing = required.metrics - read
        assert not missing, f"{required.title} reads none of {sorted(missing)}"


def test_overview_shows_each_node_over_time_and_ranks_the_worst() -> None:
    board = dashboards()["mco-cluster-overview"]
    per_node = _by_title(board, "Interference level per node")
    assert [t["legendFormat"] for t in data_targets(per_node)] == ["{{node}}"]
    assert not any(t.get("instant") for t in data_targets(per_node))
    top = _by_title(board, "Top interfered nodes")
    (target,) = data_targets(top)
    assert target["instant"] and re.match(r"topk\(\s*\d+\s*,", target["expr"]), target["expr"]
    triggered = _by_title(board, "Nodes with each detection triggered")
    assert "by (detection)" in triggered["targets"][0]["expr"]


def test_node_detail_graphs_every_smoothed_signal_for_the_chosen_node() -> None:
    board = dashboards()["mco-node-detail"]
    for key, panel in _signal_panels(board).items():
        assert panel["type"] == "timeseries", key
        for t in data_targets(panel):
            assert 'node="$node"' in t["expr"], (key, t["expr"])
    graphed = {
        name for t in targets() if t.dashboard == "mco-node-detail" for name in _identifiers(t.expr)
    }
    assert set(series.SIGNAL_SERIES.values()) <= graphed


def test_pipeline_reads_the_exporter_job_and_the_components_histograms() -> None:
    board = dashboards()["mco-pipeline-health"]
    scrape = _by_title(board, "Exporter scrape duration")["targets"][0]["expr"]
    assert 'job=~".*mco-exporter.*"' in scrape
    for title in ("Reporter cycle duration", "Extender latency p99 by route"):
        for t in _by_title(board, title)["targets"]:
            assert t["expr"].startswith("histogram_quantile("), t["expr"]
            assert "by (le)" in t["expr"] or re.search(r"by \([a-z_, ]*\ble\)", t["expr"])


def test_node_variable_suits_each_dashboards_matcher() -> None:
    """Multi-node boards match ``=~`` (All is ``.*``); node detail shows one node, ``=``."""
    for name, board in dashboards().items():
        node = {v["name"]: v for v in board["templating"]["list"]}["node"]
        assert node["definition"] == f"label_values({series.NODE_INFO}, node)"
        assert node["refresh"] in (1, 2), "the node list must load, not stay empty"
        exprs = [t["expr"] for p in panels(board) for t in p["targets"]]
        if name == "mco-node-detail":
            assert not node["multi"] and not node["includeAll"]
            assert not any('node=~"$node"' in e for e in exprs)
        else:
            assert node["multi"] and node["includeAll"] and node["allValue"] == ".*"
            assert not any('node="$node"' in e for e in exprs)


# The stats that show 0 rather than "No data": tests/dashboards/test_promql.py checks what they
# stand on through data_query.
ZERO_FALLBACK_PANELS = {
    ("mco-cluster-overview", "Interfered nodes"): (
        f'count({series.INTERFERENCE_LEVEL}{{node=~"$node"}})'
    ),
    ("mco-cluster-overview", "Blocked nodes"): (
        f'count(max by (node) ({series.HARD_CONSTRAINT_VIOLATED}{{node=~"$node"}}))'
    ),
    ("mco-cluster-overview", "Nodes on PSI fallback"): (
        f'sum({series.MEMORY_PRESSURE_FALLBACK}{{node=~"$node"}})'
    ),
    ("mco-cluster-overview", "Kata-ready nodes"): f'sum({series.KATA_READY}{{node=~"$node"}})',
    ("mco-node-detail", "Collectors off or failing"): (
        'count(mco_exporter_collector_success{node="$node"})'
    ),
    ("mco-pipeline-health", "Exporters down"): (
        'count(up{job=~".*mco-exporter.*", node=~"$node"})'
    ),
}


def test_zero_fallbacks_are_stripped_to_the_series_they_stand_on() -> None:
    stripped = {
        (t.dashboard, t.panel): data_query(t.expr)
        for t in targets()
        if data_query(t.expr) != t.expr
    }
    assert stripped == ZERO_FALLBACK_PANELS
    for t in targets():
        if (t.dashboard, t.panel) in ZERO_FALLBACK_PANELS:
            assert t.expr.endswith(" or vector(0)"), t.expr


def test_data_query_keeps_bool_comparisons_and_plain_queries() -> None:
    assert data_query("x > bool 0.5 or vector(0)") == "x > bool 0.5"
    assert data_query("count(x >= 1e-3) or vector(0)") == "count(x)"
    assert data_query("count(x > 0.5)") == "count(x > 0.5)"  # no fallback: sent as is
    assert data_query('count(x >= scalar(t{a="b"})) or vector(0)') == "count(x)"
    assert data_query("sum(x) or vector(0) > 1") == "sum(x) or vector(0) > 1"
