"""A signal, a detection and a hard constraint added in one place (a copy of the catalog) reach
every part: promtool-valid rules that compute them, the CRD schema, the config model, the
reporter's query plan and entries, and the node dashboard.

The global catalog is never touched: every derivation takes the catalog as a parameter.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from mco.promql import PromQLClient, SourceConfig
from reporter.entries import EntryBuilder, Epsilon
from reporter.query import MISSING, Kind, LooseSample, Plan, TaggedSample, fetch, parse
from reporter.schema import Violation
from rulegen import series
from rulegen.catalog import CATALOG, Catalog, Context, Detection, HardConstraint, Signal
from rulegen.crd import crd
from rulegen.dashboards import node_detail, overview
from rulegen.model import ConfigError, DetectionRuleConfig, default_spec, from_spec
from rulegen.render import render_rules
from scripts.procs import free_port
from testkit.answers import T0, answers, decode, ok, slot_of
from tests.dashboards.boards import data_targets, drawn_steps, recorded_thresholds
from tests.rulegen.crd_validation import api_server_errors
from tests.rulegen.test_promtool import assert_clean_check, promtool

NUMA = Signal(
    key="memoryRemoteRatio",
    series="node:mco_memory_remote_ratio:smoothed",
    label="memory_remote_ratio",
    detection="numaTraffic",
    unit="ratio",
    help="Share of the node's memory traffic that crossed to another NUMA node.",
    maximum=1.0,
    warn=0.25,
    critical=0.75,
    comment="Remote traffic: all traffic less the local part, per node.",
    expr="""\
1 - (
    sum by (node) (rate(mco_memory_bandwidth_bytes_total{scope="local"}[$w]))
  / (sum by (node) (rate(mco_memory_bandwidth_bytes_total{scope="total"}[$w])) > 0)
)""",
)
REMOTE_MAX = HardConstraint(
    key="memoryRemoteMax",
    label="memory_remote",
    recorded="memoryRemoteRatio",
    default=0.375,
    title="remote memory traffic",
    help="Max share of memory traffic to remote NUMA nodes.",
)
EXTENDED = dataclasses.replace(
    CATALOG,
    recorded=(*CATALOG.recorded, NUMA),
    detections=(*CATALOG.detections, Detection(key="numaTraffic", label="numa_traffic", weight=2)),
    constraints=(*CATALOG.constraints, REMOTE_MAX),
)
CONFIG = DetectionRuleConfig.default(EXTENDED)


def test_the_global_catalog_is_untouched() -> None:
    assert NUMA not in CATALOG.recorded
    assert "memoryRemoteRatio" not in series.SIGNAL_SERIES
    assert "numaTraffic" not in default_spec()["detections"]


def test_the_model_takes_its_defaults_and_checks_from_the_table() -> None:
    assert CONFIG.threshold("memoryRemoteRatio").warn == 0.25
    assert CONFIG.weight("numaTraffic") == 2
    assert CONFIG.hard_constraints["memoryRemoteMax"] == 0.375
    spec = {"detections": {"numaTraffic": {"signals": {"memoryRemoteRatio": {"critical": 1.5}}}}}
    with pytest.raises(ConfigError, match=r"memoryRemoteRatio.critical: must be <= 1"):
        from_spec(spec, EXTENDED)
    with pytest.raises(ConfigError, match=r"spec.detections.numaTraffic: unknown field"):
        from_spec(spec)  # the default catalog knows no such detection


def test_rules_pass_promtool_check_without_findings(tmp_path: Path) -> None:
    rules = render_rules(CONFIG, generation=1, catalog=EXTENDED)
    (tmp_path / "rules.yaml").write_text(rules)
    assert_clean_check(tmp_path / "rules.yaml")
    assert "# Remote traffic: all traffic less the local part, per node." in rules
    # The default rules are the same but for the additions.
    assert render_rules(DetectionRuleConfig.default()) != rules


def _series(name: str, labels: str, values: str) -> dict[str, str]:
    return {"series": f'{name}{{job="mco-exporter",node="n1"{labels}}}', "values": values}


def test_rules_compute_the_new_signal_detection_and_constraint(tmp_path: Path) -> None:
    """Remote share 1 - 60/80 = 0.25 of the domains' totals (at warn), 1 - 20/80 = 0.75 later."""
    (tmp_path / "rules.yaml").write_text(render_rules(CONFIG, catalog=EXTENDED))
    bandwidth = "mco_memory_bandwidth_bytes_total"
    inputs = [
        _series("mco_node_info", ',nodename="n1",kernel="6.1"', "1+0x60"),
        _series("mco_pressure_available", "", "1+0x60"),
        _series(bandwidth, ',domain="0",scope="total"', "0+50x60"),
        _series(bandwidth, ',domain="1",scope="total"', "0+30x60"),
        # Local traffic slows down after 30 s: 40 + 20 of 80, then 10 + 10.
        _series(bandwidth, ',domain="0",scope="local"', "0+40x30 1210+10x29"),
        _series(bandwidth, ',domain="1",scope="local"', "0+20x30 610+10x29"),
    ]
    node = 'node="n1"'

    def expect(expr: str, at: str, labels: str, value: float) -> dict[str, Any]:
        return {
            "expr": expr,
            "eval_time": at,
            "exp_samples": [{"labels": labels, "value": value}],
        }

    index = f'{series.SIGNAL_INDEX}{{detection="numa_traffic",{node},signal="memory_remote_ratio"}}'
    violated = f'{series.HARD_CONSTRAINT_VIOLATED}{{constraint="memory_remote",{node}}}'
    triggered = f'{series.DETECTION_TRIGGERED}{{detection="numa_traffic",{node}}}'
    expected = [
        expect(NUMA.series, "20s", f"{NUMA.series}{{{node}}}", 0.25),
        expect(series.SIGNAL_INDEX, "20s", index, 0),
        expect(
            series.DETECTION_TRIGGERED + "{detection='numa_traffic'}",
            "20s",
            triggered,
            1,
        ),
        expect(
            series.HARD_CONSTRAINT_VIOLATED + "{constraint='memory_remote'}",
            "20s",
            violated,
            0,
        ),
        expect(NUMA.series, "55s", f"{NUMA.series}{{{node}}}", 0.75),
        # (0.75 - 0.25) / (0.75 - 0.25): the index reaches 1, above the 0.375 limit.
        expect(series.SIGNAL_INDEX, "55s", index, 1),
        expect(
            series.HARD_CONSTRAINT_VIOLATED + "{constraint='memory_remote'}",
            "55s",
            violated,
            1,
        ),
        # The only detection with data on the node: the level is its index.
        expect(
            series.INTERFERENCE_LEVEL,
            "55s",
            f"{series.INTERFERENCE_LEVEL}{{{node}}}",
            1,
        ),
    ]
    _assert_suite_passes(tmp_path, inputs, expected)


def _assert_suite_passes(
    tmp_path: Path, inputs: list[dict[str, str]], expected: list[dict[str, Any]]
) -> None:
    """``promtool test rules``: ``expected`` holds on ``inputs`` (one sample a second) with the
    rules in ``tmp_path / "rules.yaml"``."""
    test = {"interval": "1s", "input_series": inputs, "promql_expr_test": expected}
    suite = {"rule_files": ["rules.yaml"], "evaluation_interval": "1s", "tests": [test]}
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    result = promtool("test", "rules", "suite.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _numa_spec(warn: float, critical: float) -> dict[str, Any]:
    thresholds = {"memoryRemoteRatio": {"warn": warn, "critical": critical}}
    return {
        "apiVersion": "mco.io/v1alpha1",
        "kind": "DetectionRuleConfig",
        "metadata": {"name": "default"},
        "spec": {
            "detections": {"numaTraffic": {"weight": 1, "signals": thresholds}},
            "hardConstraints": {"memoryRemoteMax": 0.5},
        },
    }


def test_the_crd_schema_accepts_the_new_signal_and_checks_its_order() -> None:
    schema = crd(EXTENDED)
    assert api_server_errors(schema, _numa_spec(0.3, 0.6)) == []
    errors = api_server_errors(schema, _numa_spec(0.6, 0.3))
    assert any("warn must be below critical" in e for e in errors), errors
    assert any("maximum" in e for e in api_server_errors(schema, _numa_spec(0.3, 1.5)))
    # The shipped CRD does not know it.
    assert api_server_errors(crd(), _numa_spec(0.3, 0.6)) != []


def test_the_reporter_queries_and_reports_the_new_field() -> None:
    plan = Plan(compact=False, catalog=EXTENDED)
    assert NUMA.series in plan.recorded_expr
    assert NUMA.series not in Plan(compact=False).recorded_expr
    # A compact report still fetches what every hard constraint limits.
    assert set(Plan(compact=True, catalog=EXTENDED).signal_slots) == {
        "psiMemoryFull",
        "psiIOSome",
        "memoryRemoteRatio",
    }
    values = {
        (Kind.SIGNAL, "memoryRemoteRatio"): 0.5,
        (Kind.INDEX, "numa_traffic"): 0.5,
        (Kind.TRIGGERED, "numa_traffic"): 1.0,
        (Kind.VIOLATED, "memory_remote"): 1.0,
        (Kind.LEVEL, ""): 0.5,
    }
    recorded, extra, _ = answers(plan, {"n1": values}, {"n1": T0 - 1})
    # New names and label values do not fit the strict decoder; the loose one takes them.
    snap = parse(plan, decode(recorded, LooseSample), decode(extra, TaggedSample), [], T0)
    vector = snap.vectors["n1"]
    assert vector[slot_of(plan, Kind.SIGNAL, "memoryRemoteRatio")] == 0.5
    entry = EntryBuilder(plan, CONFIG, Epsilon()).build(vector, "t", live=True)
    assert entry.signals is not None and entry.signals["memoryRemoteRatio"] == 0.5
    assert entry.detections["numa_traffic"].index == 0.5
    assert entry.detections["numa_traffic"].triggered
    # The limit is the new constraint's own, not another constraint's.
    assert entry.violations == [Violation("memory_remote", 0.5, 0.375)]
    assert "violated:memory_remote" in entry.reasons and not entry.schedulable
    assert "signals.psiIOSome" in entry.missing and "violations.psi_io_some" in entry.missing

    vector[slot_of(plan, Kind.SIGNAL, "memoryRemoteRatio")] = MISSING
    vector[slot_of(plan, Kind.VIOLATED, "memory_remote")] = MISSING
    entry = EntryBuilder(plan, CONFIG, Epsilon()).build(vector, "t", live=True)
    assert {"signals.memoryRemoteRatio", "violations.memory_remote"} <= set(entry.missing)


async def test_the_reporter_fetches_the_new_field_over_http() -> None:
    """The real client and ``fetch``: new names and labels are decoded, not refused."""
    plan = Plan(compact=False, catalog=EXTENDED)
    values = {(Kind.SIGNAL, "memoryRemoteRatio"): 0.5, (Kind.INDEX, "numa_traffic"): 0.5}
    recorded, extra, info = answers(plan, {"n1": values}, {"n1": T0 - 1})
    by_query = {plan.recorded_expr: recorded, plan.extra_expr: extra, plan.info_expr: info}

    async def handle(request: web.Request) -> web.Response:
        return web.json_response(ok(by_query[str((await request.post())["query"])]))

    app = web.Application()
    app.router.add_post("/api/v1/query", handle)
    server = TestServer(app, host="127.0.0.1", port=free_port())
    await server.start_server()
    try:
        url = f"http://127.0.0.1:{server.port}"
        async with PromQLClient(SourceConfig(url)) as client:
            snap = await fetch(client, plan, T0)
    finally:
        await server.close()
    vector = snap.vectors["n1"]
    assert vector[slot_of(plan, Kind.SIGNAL, "memoryRemoteRatio")] == 0.5
    assert vector[slot_of(plan, Kind.INDEX, "numa_traffic")] == 0.5


def test_the_node_dashboard_graphs_the_new_signal_with_its_thresholds() -> None:
    board = json.loads(node_detail.build(CONFIG, EXTENDED))
    found = [
        p
        for p in board["panels"]
        if any(t["expr"].startswith(NUMA.series + "{") for t in p.get("targets", []))
    ]
    assert len(found) == 1
    panel = found[0]
    assert panel["title"] == "numa_traffic · memory_remote_ratio"
    # The lines read the thresholds in force, recorded by the extended rules with the values.
    by_ref = {t["refId"]: t["expr"] for t in panel["targets"]}
    lines = {
        by_ref[t["options"]["configRefId"]]: t["options"]["mappings"][0]["handlerArguments"][
            "threshold"
        ]["color"]
        for t in panel["transformations"]
    }
    assert lines == {
        f'{series.THRESHOLD}{{signal="memory_remote_ratio", bound="warn"}}': "orange",
        f'{series.THRESHOLD}{{signal="memory_remote_ratio", bound="critical"}}': "red",
        f'{series.THRESHOLD}{{constraint="memory_remote", bound="limit"}}': "dark-red",
    }
    rules = yaml.safe_load(render_rules(CONFIG, catalog=EXTENDED))
    recorded = {
        (tuple(sorted(r["labels"].items())), r["expr"])
        for g in rules["groups"]
        for r in g["rules"]
        if r.get("record") == series.THRESHOLD
    }
    assert ((("bound", "warn"), ("signal", "memory_remote_ratio")), "vector(0.25)") in recorded
    assert ((("bound", "critical"), ("signal", "memory_remote_ratio")), "vector(0.75)") in recorded
    assert ((("bound", "limit"), ("constraint", "memory_remote")), "vector(0.375)") in recorded
    assert NUMA.help in panel["description"]
    assert not any(
        NUMA.series in t["expr"]
        for p in json.loads(node_detail.build(DetectionRuleConfig.default()))["panels"]
        for t in p.get("targets", [])
    )
    assert "remote memory traffic above its limit (default 0.375)" in overview.build(
        CONFIG, EXTENDED
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"recorded": (NUMA, *CATALOG.recorded)}, "unknown detection numaTraffic"),
        (
            {
                "recorded": (
                    dataclasses.replace(NUMA, detection="ioCongestion", expr="$later"),
                    *CATALOG.recorded,
                )
            },
            "expr refers to 'later'",
        ),
        (
            {"constraints": (*CATALOG.constraints, dataclasses.replace(REMOTE_MAX, recorded="x"))},
            "limits x",
        ),
        (
            {
                "recorded": (
                    *CATALOG.recorded,
                    dataclasses.replace(NUMA, key="psiIOSome", detection="ioCongestion"),
                )
            },
            "duplicate recorded key: psiIOSome",
        ),
        (
            {
                "recorded": (
                    *CATALOG.recorded,
                    dataclasses.replace(NUMA, detection="ioCongestion", fallback=True),
                )
            },
            "detection ioCongestion has no fallback",
        ),
    ],
)
def test_an_inconsistent_table_is_refused(change: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        dataclasses.replace(CATALOG, **change)


def test_a_catalog_built_from_its_tables_is_the_default() -> None:
    assert Catalog() == CATALOG
    assert render_rules(DetectionRuleConfig.default(Catalog()), catalog=Catalog()) == render_rules(
        DetectionRuleConfig.default()
    )


def test_an_expression_that_is_no_plain_yaml_scalar_is_written_as_a_block() -> None:
    """A `` #`` in a label value would start a YAML comment in a plain scalar."""
    odd = 'max by (node) (avg_over_time(mco_widget{note="a: b #c"}[$w]))'
    row = dataclasses.replace(
        CATALOG.context[0], key="widget", series="node:mco_widget:x", expr=odd
    )
    catalog = dataclasses.replace(CATALOG, recorded=(*CATALOG.recorded, row))
    rules = yaml.safe_load(render_rules(DetectionRuleConfig.default(catalog), catalog=catalog))
    exprs = {r.get("record"): r["expr"] for g in rules["groups"] for r in g["rules"]}
    assert exprs["node:mco_widget:x"].strip() == odd.replace("$w", "10s")


def _fallback_reasons(catalog: Catalog) -> list[str]:
    plan = Plan(compact=False, catalog=catalog)
    vector = [MISSING] * len(plan.slots)
    vector[slot_of(plan, Kind.FALLBACK)] = 1.0
    config = DetectionRuleConfig.default(catalog)
    entry = EntryBuilder(plan, config, Epsilon()).build(vector, "t", live=True)
    assert entry.fallback
    return [r for r in entry.reasons if r.startswith("fallback:")]


def test_the_fallback_reason_names_the_detections_with_a_psi_fallback() -> None:
    assert _fallback_reasons(CATALOG) == ["fallback:memory_pressure"]
    renamed = dataclasses.replace(
        CATALOG,
        detections=tuple(
            dataclasses.replace(d, label="memory_squeeze") if d.psi_fallback else d
            for d in CATALOG.detections
        ),
    )
    assert _fallback_reasons(renamed) == ["fallback:memory_squeeze"]
    numa_fallback = Detection(key="numaTraffic", label="numa_traffic", weight=2, psi_fallback=True)
    both = dataclasses.replace(EXTENDED, detections=(*CATALOG.detections, numa_fallback))
    assert _fallback_reasons(both) == ["fallback:memory_pressure", "fallback:numa_traffic"]


# A hard constraint in either direction on the remote share, limit 0.5: the share is 0.25 at 20 s
# and 0.75 at 55 s (test_rules_compute_the_new_signal_detection_and_constraint's inputs).
@pytest.mark.parametrize(
    ("lower_is_worse", "violated_at_20s", "violated_at_80s"),
    [(False, 0, 1), (True, 1, 0)],
    ids=["above", "below"],
)
def test_a_hard_constraint_is_violated_in_its_direction(
    tmp_path: Path, lower_is_worse: bool, violated_at_20s: int, violated_at_80s: int
) -> None:
    bound = dataclasses.replace(
        REMOTE_MAX, key="memoryRemoteBound", default=0.5, lower_is_worse=lower_is_worse
    )
    catalog = dataclasses.replace(EXTENDED, constraints=(*CATALOG.constraints, bound))
    config = DetectionRuleConfig.default(catalog)
    rendered = render_rules(config, catalog=catalog)
    (tmp_path / "rules.yaml").write_text(rendered)
    assert_clean_check(tmp_path / "rules.yaml")
    # The alert's words fit every constraint it may fire for (the shipped ones: "above").
    wording = "beyond its limit" if lower_is_worse else "above its maximum"
    assert f"is {wording}." in rendered
    bandwidth = "mco_memory_bandwidth_bytes_total"
    inputs = [
        _series("mco_node_info", ',nodename="n1",kernel="6.1"', "1+0x90"),
        _series("mco_pressure_available", "", "1+0x90"),
        _series(bandwidth, ',domain="0",scope="total"', "0+80x90"),
        _series(bandwidth, ',domain="0",scope="local"', "0+60x30 1820+20x59"),
    ]
    # The remote share changes at 30 s; by 80 s both the raw comparison and the held one
    # (holdFor 5s, clearAfter 30s after the window let go of the old share) follow it.
    expected = [
        {
            "expr": name + "{constraint='memory_remote'}",
            "eval_time": at,
            "exp_samples": [
                {"labels": f'{name}{{constraint="memory_remote",node="n1"}}', "value": value}
            ],
        }
        for name in (series.HARD_CONSTRAINT_EXCEEDED, series.HARD_CONSTRAINT_VIOLATED)
        for at, value in (("20s", violated_at_20s), ("80s", violated_at_80s))
    ]
    _assert_suite_passes(tmp_path, inputs, expected)

    # The reporter names the violation with the value and the constraint's own limit.
    plan = Plan(compact=True, catalog=catalog)
    value = 0.25 if lower_is_worse else 0.75
    vector = [MISSING] * len(plan.slots)
    vector[slot_of(plan, Kind.SIGNAL, "memoryRemoteRatio")] = value
    vector[slot_of(plan, Kind.VIOLATED, "memory_remote")] = 1.0
    entry = EntryBuilder(plan, config, Epsilon()).build(vector, "t", live=True)
    assert entry.violations == [Violation("memory_remote", value, 0.5)]
    assert "violated:memory_remote" in entry.reasons and not entry.schedulable
    relation = "below" if lower_is_worse else "above"
    assert f"remote memory traffic {relation} its limit (default 0.5)" in overview.build(
        config, catalog
    )
    board = json.loads(node_detail.build(config, catalog))
    (panel,) = [p for p in board["panels"] if p["title"] == "numa_traffic · memory_remote_ratio"]
    steps = drawn_steps(panel, recorded_thresholds(render_rules(config, catalog=catalog)))
    # Dark red where the constraint is violated: from the limit up, or everything under it.
    if lower_is_worse:
        assert steps[:2] == [(None, "dark-red"), (0.5, "orange")], steps
    else:
        assert (0.5, "dark-red") in steps, steps


def _panels(config: DetectionRuleConfig, catalog: Catalog) -> dict[str, dict[str, Any]]:
    return {p["title"]: p for p in json.loads(node_detail.build(config, catalog))["panels"]}


def _drawn(config: DetectionRuleConfig, catalog: Catalog) -> Any:
    """The node dashboard's steps per panel title as drawn against ``config``'s rules."""
    thresholds = recorded_thresholds(render_rules(config, catalog=catalog))
    return lambda panel: drawn_steps(panel, thresholds)


def test_the_node_dashboard_has_a_panel_per_context_row_with_its_limits() -> None:
    swap = Context(
        key="swapUsedBytes",
        title="Swap in use",
        series="node:mco_swap_used_bytes:smoothed",
        unit="bytes",
        help="Swap space in use.",
        scale=1 << 20,
        expr="max by (node) (avg_over_time(mco_swap_used_bytes[$w]))",
    )
    backlog = dataclasses.replace(
        swap, key="swapBacklog", title="Swap backlog", series="node:mco_swap_backlog:smoothed"
    )
    swap_max = HardConstraint(
        key="swapUsedMax",
        label="swap_used",
        recorded="swapUsedBytes",
        default=1 << 30,
        maximum=None,
        title="swap in use",
        help="Max swap in use.",
    )
    catalog = dataclasses.replace(
        CATALOG,
        recorded=(*CATALOG.recorded, swap, backlog),
        constraints=(*CATALOG.constraints, swap_max),
    )
    panels = _panels(DetectionRuleConfig.default(catalog), catalog)
    _steps = _drawn(DetectionRuleConfig.default(catalog), catalog)
    limited = panels["Swap in use (hard constraint)"]
    assert limited["targets"][0]["expr"] == 'node:mco_swap_used_bytes:smoothed{node="$node"}'
    assert limited["fieldConfig"]["defaults"]["unit"] == "bytes"
    assert limited["description"].startswith("Swap space in use.")
    assert (
        f"Above the limit in force (default {1 << 30:g}) the node is blocked (swap_used)."
        in limited["description"]
    )
    assert _steps(limited) == [(None, "green"), (1 << 30, "dark-red")]
    plain = panels["Swap backlog"]
    assert _steps(plain) == [] and "not thresholded" in plain["description"]
    # The shipped board: one panel per context row, the hard limit where one is set.
    shipped = _panels(DetectionRuleConfig.default(), CATALOG)
    _steps = _drawn(DetectionRuleConfig.default(), CATALOG)
    for row in CATALOG.context:
        limited_row = bool(CATALOG.constraints_on(row.key))
        title = row.title + (" (hard constraint)" if limited_row else "")
        assert [t["expr"] for t in data_targets(shipped[title])] == [
            f'{row.series}{{node="$node"}}'
        ]
    memory_full = shipped["PSI memory full (hard constraint)"]
    assert _steps(memory_full) == [(None, "green"), (0.005, "dark-red")]
