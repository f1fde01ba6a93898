"""The Prometheus render's windowed reads: the same rules as the VictoriaMetrics render but for
the reads of series recorded earlier in the group (``rulegen.render.fresh_reads``: exact in
promtool where a window of one interval would not be) and of raw gauges
(``rulegen.render.windowed_raw_reads``: the newest sample within the rules' window). The
promtool suites of test_promtool.py, test_hysteresis.py and test_latency_buckets.py run the
Prometheus render."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from rulegen import series as S
from rulegen.model import DetectionRuleConfig, from_spec, load_config
from rulegen.render import (
    EXPLAIN_GROUP,
    MODEL_GROUP,
    fresh_reads,
    render_prometheusrule,
    render_rules,
    windowed_raw_reads,
)
from tests.promtool import assert_promtool_passes

SUITES = Path(__file__).with_name("promtool")
FRESH = re.compile(r"last_over_time\(([^()\[\]]+)\[(\d+)ms\]\)")
RAW = re.compile(r"last_over_time\((mco_[^()\[\]]+)\[10s\]\)")
# The explanation group's reads of the model's series: over two intervals (1s each here).
EXPLAINED = re.compile(r"last_over_time\(([^()\[\]]+)\[2s\]\)")
# A raw exporter series read at an instant (not over a range).
RAW_INSTANT = re.compile(r"(?<![\w:])mco_[a-z0-9_]+(\{[^{}]*\})?(?![\w:{]|\s*\[)")


def at(seconds: int, name: str, value: float | None) -> dict[str, object]:
    """A promtool expectation: ``name`` at ``seconds`` is ``value`` (None: no sample)."""
    samples = [] if value is None else [{"labels": name, "value": value}]
    return {"expr": name, "eval_time": f"{seconds}s", "exp_samples": samples}


def groups(text: str) -> dict[str, list[dict[str, object]]]:
    return {g["name"]: g["rules"] for g in yaml.safe_load(text)["groups"]}


def test_prometheus_render_is_the_victoriametrics_one_with_fresh_reads_of_earlier_rules():
    for config in (DetectionRuleConfig.default(), load_config(SUITES / "config.yaml")):
        prom = render_rules(config, generation=3)
        vm = render_rules(config, generation=3, engine="victoriametrics")
        assert "[500ms]" not in vm
        # Unwrapping every windowed read gives back the plain render, byte for byte.
        assert RAW.sub(r"\1", FRESH.sub(r"\1", EXPLAINED.sub(r"\1", prom))) == vm
        model = groups(prom)[MODEL_GROUP]
        explain = groups(prom)[EXPLAIN_GROUP]
        recorded = {str(rule["record"]) for rule in [*model, *explain]}
        for rule in explain:
            # Every read of a recorded series is over two intervals; none left at an instant.
            rest = EXPLAINED.sub("", str(rule["expr"]))
            assert not [n for n in recorded if re.search(rf"{re.escape(n)}(?![\w:])", rest)], rule
        seen: set[str] = set()
        reads = 0
        for rule in model:
            for selector, window in FRESH.findall(str(rule["expr"])):
                reads += 1
                assert window == "500"
                # Only series whose rules all ran before this one, at the same timestamp.
                assert selector.split("{")[0] in seen, (rule, selector)
            seen.add(str(rule["record"]))
        assert reads >= 40
        # Every read of a raw series is over a range: the raw gauges over the window.
        raw = [m for r in model for m in RAW.findall(str(r["expr"]))]
        assert {name.split("{")[0] for name in raw} >= {
            "mco_node_info",
            "mco_cpu_online",
            "mco_pressure_available",
            "mco_block_io_latency_seconds_count",
            "mco_pod_memory_limit_bytes",
        }
        assert not [r for r in model if RAW_INSTANT.search(RAW.sub("", str(r["expr"])))]
        assert not RAW.search(vm)
        # Reads of earlier evaluations keep their range; the other groups are untouched.
        violated = next(r for r in model if r["record"] == S.HARD_CONSTRAINT_VIOLATED)
        assert f"last_over_time({S.HARD_CONSTRAINT_VIOLATED}[30s])" in str(violated["expr"])
        assert f"max_over_time({S.HARD_CONSTRAINT_EXCEEDED}[30s])" in str(violated["expr"])
        for name in ("mco.thresholds", "mco.alerts"):
            assert groups(prom)[name] == groups(vm)[name]


def test_the_window_is_half_the_evaluation_interval_in_both_formats():
    config = from_spec({"evaluationInterval": "4s"})
    prom = render_rules(config)
    assert "[2000ms]" in prom and "[500ms]" not in prom
    rule = yaml.safe_load(render_prometheusrule(config, name="mco", namespace="monitoring"))
    assert rule["spec"]["groups"] == yaml.safe_load(prom)["groups"]
    vm = yaml.safe_load(
        render_prometheusrule(config, name="mco", namespace="monitoring", engine="victoriametrics")
    )
    assert "ms])" not in yaml.safe_dump(vm)


def test_a_read_of_its_own_or_a_later_rules_series_keeps_the_lookback():
    text = f"""groups:
  - name: {MODEL_GROUP}
    rules:
      - record: a
        expr: b + c
      - record: b
        expr: a * 2 + b
      - record: c
        expr: sum(a{{x="1"}}) + rate(b[10s]) + a_total
  - name: other
    rules:
      - record: d
        expr: a + b
"""
    out = groups(fresh_reads(text, 1))
    assert [r["expr"] for r in out[MODEL_GROUP]] == [
        "b + c",  # both recorded later: the previous evaluation's values
        "last_over_time(a[500ms]) * 2 + b",  # b is its own series
        # a with matchers; a range over b and another series' name left alone
        'sum(last_over_time(a{x="1"}[500ms])) + rate(b[10s]) + a_total',
    ]
    assert out["other"] == [{"record": "d", "expr": "a + b"}]


def test_a_window_under_one_interval_is_exact_where_one_interval_is_not(tmp_path):
    """A series a rule stops returning gets a stale marker at that evaluation; range selectors
    skip stale markers, so ``last_over_time(x[1s])`` at a 1s interval would still return the
    previous evaluation's value where the instant read returns nothing. Half an interval
    returns nothing, as the instant read does."""
    rules = fresh_reads(
        f"""groups:
  - name: {MODEL_GROUP}
    interval: 1s
    rules:
      - record: high
        expr: x > 5
      - record: fresh
        expr: high
      - record: one_interval
        expr: last_over_time(high[1s])
""",
        1,
    )
    assert "last_over_time(high[500ms])" in rules
    (tmp_path / "rules.yaml").write_text(rules)

    suite = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1s",
        "tests": [
            {
                "interval": "1s",
                "input_series": [{"series": "x", "values": "10 10 0 0 10"}],
                "promql_expr_test": [
                    at(1, "fresh", 10),
                    at(2, "high", None),
                    at(2, "fresh", None),  # the rule's series is gone: so is the read
                    at(2, "one_interval", 10),  # the stale marker skipped: last evaluation's
                    at(3, "fresh", None),
                    at(3, "one_interval", None),
                    at(4, "fresh", 10),
                ],
            }
        ],
    }
    assert_promtool_passes(tmp_path, suite)


def test_raw_instant_reads_of_the_model_group_only_are_windowed():
    text = f"""groups:
  - name: {MODEL_GROUP}
    rules:
      # mco_cpu_online in a comment stays
      - record: node:a
        expr: max by (node) (mco_cpu_online) + rate(mco_x_total[10s]) + node:mco_b:smoothed
      - record: node:c
        expr: mco_pressure_available{{kind="a"}} * max_over_time(mco_y[10s])
  - name: other
    rules:
      - record: d
        expr: mco_cpu_online
"""
    out = windowed_raw_reads(text, "10s")
    assert "# mco_cpu_online in a comment stays" in out
    assert [r["expr"] for r in groups(out)[MODEL_GROUP]] == [
        "max by (node) (last_over_time(mco_cpu_online[10s])) + rate(mco_x_total[10s])"
        " + node:mco_b:smoothed",
        'last_over_time(mco_pressure_available{kind="a"}[10s]) * max_over_time(mco_y[10s])',
    ]
    assert groups(out)["other"] == [{"record": "d", "expr": "mco_cpu_online"}]


def test_a_windowed_raw_read_is_the_newest_sample_and_ends_one_window_after_a_stale_marker(
    tmp_path,
):
    """While a gauge is scraped the windowed read is its newest sample (not the window's max),
    as the instant read; once the series stops (a stale marker at 4s) the instant read drops
    it at once and the windowed one keeps the last value until the window has passed, as a
    rate over the same window does."""
    rules = windowed_raw_reads(
        f"""groups:
  - name: {MODEL_GROUP}
    interval: 1s
    rules:
      - record: windowed
        expr: mco_g
      - record: rated
        expr: rate(mco_c_total[3s])
  - name: plain
    interval: 1s
    rules:
      - record: instant
        expr: mco_g
""",
        "3s",
    )
    (tmp_path / "rules.yaml").write_text(rules)

    suite = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1s",
        "tests": [
            {
                "interval": "1s",
                "input_series": [
                    {"series": "mco_g", "values": "5 9 2 2 stale"},
                    {"series": "mco_c_total", "values": "0 1 2 3 stale"},
                ],
                "promql_expr_test": [
                    at(1, "windowed", 9),
                    at(2, "windowed", 2),  # the newest, not the window's max (9)
                    at(2, "instant", 2),
                    at(4, "instant", None),  # the stale marker: gone at once
                    at(4, "windowed", 2),  # kept within the window (3s) ...
                    at(4, "rated", 1),  # ... as the rate over it is
                    at(6, "windowed", 2),
                    at(7, "windowed", None),  # the last sample (3s) left the window
                    at(7, "rated", None),
                ],
            }
        ],
    }
    assert_promtool_passes(tmp_path, suite)
