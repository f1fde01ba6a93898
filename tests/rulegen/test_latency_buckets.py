"""The latency buckets the exporter exports by default give the verdicts all 21 would give.

The exporter keeps only the bounds around the P95/P99 thresholds (mco/latency_buckets.py). Here:
the set a configuration needs, the exporter's default being the default configuration's, and
the verdicts (signal indices, triggers, level) of the reduced histogram against the full one,
in the Python model over many random histograms and configurations, and in a real
Prometheus (promtool) on histograms whose quantiles cross the thresholds.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.collectors.biolatency import DEFAULT_BUCKETS
from mco.latency_buckets import BOUNDS, format_bounds, needed, parse_bounds
from rulegen import series as S
from rulegen.catalog import CATALOG
from rulegen.latency import HISTOGRAM_SIGNALS, buckets_flag, needed_bounds
from rulegen.model import DetectionRuleConfig, from_spec
from rulegen.render import render_rules
from scripts.local_stack import LocalStack, StackSettings
from testkit import rule_reference as R
from tests.rulegen.test_promtool import promtool

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "mco_block_io_latency_seconds_bucket"


def test_the_exporters_default_is_what_the_default_thresholds_need() -> None:
    assert buckets_flag(DetectionRuleConfig.default()) == DEFAULT_BUCKETS
    # P95 25-100 ms and P99 50-250 ms: 16.4 ms (below 25) up to 262 ms (at or above 250).
    assert parse_bounds(DEFAULT_BUCKETS) == (0.016384, 0.032768, 0.065536, 0.131072, 0.262144)


def test_the_histogram_signals_are_the_catalogs_quantiles() -> None:
    quantiles = {s.key for s in CATALOG.signals if "histogram_quantile" in CATALOG.expr(s, "10s")}
    assert quantiles == {key for _, key in HISTOGRAM_SIGNALS}
    for detection, key in HISTOGRAM_SIGNALS:
        assert CATALOG.signal(key).detection == detection


@pytest.mark.parametrize(
    ("warn", "critical", "low", "high"),
    [
        (0.025, 0.1, 0.016384, 0.131072),
        (0.016384, 0.032768, 0.008192, 0.032768),  # on a bound: strictly below warn, at critical
        (1e-6, 5e-6, 8e-06, 8e-06),  # below the first bound: from the first
        (5.0, 20.0, 4.194304, 8.388608),  # above the last: up to the last
    ],
)
def test_one_pair_needs_the_bounds_from_below_warn_to_critical(
    warn: float, critical: float, low: float, high: float
) -> None:
    assert needed([(warn, critical)]) == tuple(b for b in BOUNDS if low <= b <= high)


def test_the_flag_round_trips_and_all_bounds_read_all() -> None:
    bounds = needed([(0.001, 0.002), (0.5, 1.0)])
    assert parse_bounds(format_bounds(bounds)) == bounds
    assert format_bounds(BOUNDS) == "all"


def _config(p95: tuple[float, float], p99: tuple[float, float]) -> DetectionRuleConfig:
    signals = {
        "blockIOLatencyP95Seconds": {"warn": p95[0], "critical": p95[1]},
        "blockIOLatencyP99Seconds": {"warn": p99[0], "critical": p99[1]},
    }
    return from_spec({"detections": {"ioCongestion": {"signals": signals}}})


def _histogram(rng: random.Random) -> list[int]:
    """Requests per second in each bcc slot (3..24: 24 is beyond the last bound), clustered
    around a random latency so that the quantiles land anywhere from 8 us to beyond 8 s."""
    counts = [0] * 22
    centre = rng.uniform(0, 21)
    for _ in range(rng.randint(1, 400)):
        slot = round(rng.gauss(centre, rng.uniform(0.3, 3)))
        counts[min(max(slot, 0), 21)] += 1
    return counts


def _obs(counts: list[int], bounds: tuple[float, ...], device: str = "sda") -> list[R.Obs]:
    labels = {"device": device}  # the exporter's default shape: the operations summed
    out = [R.Obs("mco_block_io_latency_seconds_count", labels, rate=float(sum(counts)))]
    for i, bound in enumerate(BOUNDS):
        if bound in bounds:
            cumulative = float(sum(counts[: i + 1]))
            out.append(R.Obs(BUCKET, {**labels, "le": repr(bound)}, rate=cumulative))
    out.append(R.Obs(BUCKET, {**labels, "le": "+Inf"}, rate=float(sum(counts))))
    return out


def _verdicts(result: R.NodeResult) -> tuple[Any, ...]:
    return (result.signal_index, result.detection_index, result.triggered, result.level)


def test_the_model_gives_the_same_verdicts_with_the_needed_buckets() -> None:
    rng = random.Random(17)
    crossings = {"below": 0, "between": 0, "above": 0}
    for _ in range(300):
        warn95 = rng.choice(BOUNDS) * rng.choice([1.0, rng.uniform(0.5, 2)])
        warn99 = warn95 * rng.uniform(1, 4)
        config = _config(
            (warn95, warn95 * rng.uniform(1.01, 8)), (warn99, warn99 * rng.uniform(1.01, 8))
        )
        reduced_bounds = needed_bounds(config)
        for _ in range(10):
            counts = _histogram(rng)
            full = R.evaluate(config, _obs(counts, BOUNDS))
            reduced = R.evaluate(config, _obs(counts, reduced_bounds))
            assert _verdicts(reduced) == _verdicts(full), (config, counts)
            for index in full.signal_index.values():
                crossings["below" if index == 0 else "above" if index == 1 else "between"] += 1
    # Many quantiles on each side of the thresholds, and between them.
    assert min(crossings.values()) > 500, crossings


# Per-second requests per slot (3..24) for promtool: the quantiles below warn, between warn
# and critical, above critical, and on a bucket bound, for P95 (25-100 ms) and P99 (50-250 ms).
CASES: dict[str, list[int]] = {
    "fast": [0, 0, 0, 0, 5, 30, 40, 20, 4, 1],  # P95 1.0 ms, P99 2.0 ms: both under warn
    "both-between": [0] * 9 + [50, 20, 10, 8, 7, 5],  # P95 65.5 ms (index 0.54), P99 118 ms
    "p99-between": [0] * 9 + [60, 25, 10, 3, 1, 0, 1],  # P95 16.4 ms, P99 65.5 ms (0.08)
    "p95-just-over": [0] * 11 + [80, 20],  # P95 28.7 ms (0.05), P99 32 ms (under warn)
    "slow": [0] * 12 + [10, 20, 30, 25, 10, 5],  # P95 524 ms, P99 944 ms: over critical
    "tail": [0] * 8 + [900, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 100],  # both beyond 8.4 s
    "on-a-bound": [0] * 11 + [95, 0, 0, 0, 5],  # P95 exactly 16.384 ms, P99 236 ms (0.93)
}


def _promtool_suite(config: DetectionRuleConfig) -> dict[str, Any]:
    reduced = needed_bounds(config)
    series: list[dict[str, str]] = []
    tests: list[dict[str, Any]] = []
    for case, counts in CASES.items():
        counts = counts + [0] * (22 - len(counts))
        for kind, bounds in (("full", BOUNDS), ("reduced", reduced)):
            node = f"{kind}-{case}"
            base = f'job="mco-exporter",instance="{node}:9847",node="{node}"'
            series.append(
                {"series": f'mco_node_info{{{base},nodename="{node}"}}', "values": "1+0x30"}
            )
            for o in _obs(counts, bounds):
                labels = ",".join(f'{k}="{v}"' for k, v in o.labels.items())
                series.append(
                    {"series": f"{o.name}{{{base},{labels}}}", "values": f"0+{o.rate:g}x30"}
                )
        for name in (
            S.SIGNAL_INDEX,
            S.DETECTION_INDEX,
            S.DETECTION_TRIGGERED,
            S.INTERFERENCE_LEVEL,
        ):
            full, red = f'{name}{{node="full-{case}"}}', f'{name}{{node="reduced-{case}"}}'
            # Nothing differs, and every series of the full node has its reduced twin.
            tests.append({"expr": f"{full} != ignoring(node) {red}", "eval_time": "20s"})
            tests.append(
                {
                    "expr": f"count({full} == ignoring(node) {red}) == bool count({full})",
                    "eval_time": "20s",
                    "exp_samples": [{"labels": "{}", "value": 1}],
                }
            )
    for test in tests:
        test.setdefault("exp_samples", [])
    return {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1s",
        "tests": [
            {"interval": "1s", "input_series": series, "promql_expr_test": tests},
        ],
    }


def _expected_indices(config: DetectionRuleConfig) -> dict[tuple[str, str], float]:
    out = {}
    for case, counts in CASES.items():
        counts = counts + [0] * (22 - len(counts))
        result = R.evaluate(config, _obs(counts, BOUNDS))
        for (_, signal), index in result.signal_index.items():
            out[(case, signal)] = index
    return out


def test_prometheus_gives_the_same_verdicts_with_the_needed_buckets(tmp_path: Path) -> None:
    config = DetectionRuleConfig.default()
    # The cases cross the thresholds: each signal below warn, between, and above critical.
    indices = _expected_indices(config)
    for _, signal in HISTOGRAM_SIGNALS:
        label = CATALOG.signal(signal).label
        values = [v for (_, s), v in indices.items() if s == label]
        assert 0 in values and 1 in values and any(0 < v < 1 for v in values), (signal, values)
    (tmp_path / "rules.yaml").write_text(render_rules(config))
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(_promtool_suite(config), width=200))
    result = promtool("test", "rules", "suite.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rulegen_prints_the_flag_for_a_configuration(tmp_path: Path) -> None:
    spec = {
        "detections": {
            "ioCongestion": {
                "signals": {"blockIOLatencyP95Seconds": {"warn": 0.001, "critical": 0.004}}
            }
        }
    }
    path = tmp_path / "config.yaml"
    cr = {
        "apiVersion": "mco.io/v1alpha1",
        "kind": "DetectionRuleConfig",
        "metadata": {"name": "default"},
        "spec": spec,
    }
    path.write_text(yaml.safe_dump(cr))
    run = [sys.executable, "-m", "rulegen", "buckets"]
    printed = subprocess.run(
        [*run, "--config", str(path)], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert printed.stdout.strip() == buckets_flag(from_spec(spec))
    assert printed.stdout.strip().startswith("0.000512,0.001024,0.002048,0.004096,0.032768")
    default = subprocess.run(run, capture_output=True, text=True, check=True, cwd=ROOT)
    assert default.stdout.strip() == DEFAULT_BUCKETS
    path.write_text("spec: [")
    bad = subprocess.run([*run, "--config", str(path)], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1 and "mco-rulegen:" in bad.stderr


@pytest.mark.parametrize("dropped", needed_bounds(DetectionRuleConfig.default()))
def test_without_any_one_needed_bound_some_verdict_changes(dropped: float) -> None:
    """The set is not larger than it must be: each bound decides a case of CASES."""
    config = DetectionRuleConfig.default()
    fewer = tuple(b for b in needed_bounds(config) if b != dropped)
    changed = []
    for case, counts in CASES.items():
        counts = counts + [0] * (22 - len(counts))
        full = R.evaluate(config, _obs(counts, BOUNDS))
        if _verdicts(R.evaluate(config, _obs(counts, fewer))) != _verdicts(full):
            changed.append(case)
    assert changed, dropped


def test_the_local_stack_exports_the_buckets_of_its_config(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    signals = {"blockIOLatencyP99Seconds": {"warn": 0.5, "critical": 2}}
    cr = {
        "apiVersion": "mco.io/v1alpha1",
        "kind": "DetectionRuleConfig",
        "metadata": {"name": "default"},
        "spec": {"detections": {"ioCongestion": {"signals": signals}}},
    }
    path.write_text(yaml.safe_dump(cr))
    stack = LocalStack(StackSettings(workdir=tmp_path, rule_config=path))
    flags = [a for a in stack.exporter.argv if a.startswith("--collector.biolatency.buckets=")]
    assert flags == [f"--collector.biolatency.buckets={buckets_flag(stack.config)}"]
    assert flags[0].endswith(",0.262144,0.524288,1.048576,2.097152")
