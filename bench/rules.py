"""Rule-evaluation time of the generated rules in a real Prometheus, at fleet scale.

A synthetic fleet (tests/rulegen/fleet.py, every node the ``typical`` profile: PSI, LLC, an
eBPF histogram with two operations, diskstats, meminfo, vmstat, steal, run queue) is scraped
every second; Prometheus evaluates the default rules every second. The measure is
``prometheus_rule_group_last_duration_seconds`` of ``mco.rules``, sampled once a second after
a warm-up. In the same Prometheus, a baseline group of one ``rate()`` rule per node gives the
cost of the cheapest per-node rule, so the ratio says what the detection model costs on top.

Target: median evaluation <= 50 ms at 1,000 nodes, and no missed evaluations.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from rulegen.model import DetectionRuleConfig
from rulegen.render import render_rules
from scripts.procs import Managed, Prometheus, ScrapeTarget, free_port, running, wait_until

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 0.050
BASELINE = {
    "groups": [
        {
            "name": "bench.baseline",
            "interval": "1s",
            "rules": [
                {
                    "record": "node:bench_one_rate:smoothed",
                    "expr": 'max by (node) (rate(mco_pressure_stalled_seconds_total{resource="io",'
                    'kind="some"}[10s]))',
                }
            ],
        }
    ]
}


def _self_metrics(prom: Prometheus, name: str) -> dict[str, float]:
    """One of Prometheus' own metrics by rule group, from its /metrics page (not in its TSDB)."""
    text = requests.get(f"{prom.url}/metrics", timeout=10).text
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[sample.labels.get("rule_group", "").rsplit(";", 1)[-1]] = sample.value
    return out


def _durations(prom: Prometheus) -> dict[str, float]:
    return _self_metrics(prom, "prometheus_rule_group_last_duration_seconds")


def _missed(prom: Prometheus) -> float:
    return _self_metrics(prom, "prometheus_rule_group_iterations_missed_total").get("mco.rules", 0)


@dataclass(frozen=True)
class Result:
    nodes: int
    median: float
    p95: float
    max: float
    baseline_median: float
    missed: float
    head_series: float
    scrape_seconds: float


def measure(nodes: int, seconds: int, workdir: Path) -> Result:
    config = DetectionRuleConfig.default()
    rules = workdir / "rules.yaml"
    rules.write_text(render_rules(config))
    baseline = workdir / "baseline.yaml"
    baseline.write_text(yaml.safe_dump(BASELINE))
    port = free_port()
    fleet = Managed(
        [
            sys.executable,
            "-m",
            "tests.rulegen.fleet",
            f"--port={port}",
            f"--nodes={nodes}",
            "--profiles=typical",
        ],
        name="fleet",
        log_path=workdir / "fleet.log",
        cwd=ROOT,
    )
    prom = Prometheus(
        workdir / "prom",
        targets=[ScrapeTarget("mco-fleet", f"127.0.0.1:{port}")],
        rule_files=[rules, baseline],
    )
    samples: dict[str, list[float]] = {"mco.rules": [], "bench.baseline": []}
    with running(fleet):
        fleet.wait_http(f"http://127.0.0.1:{port}/metrics", timeout=60)
        with running(prom):
            wait_until(
                lambda: len(prom.query("node:mco_interference_level:ratio")) == nodes,
                timeout=120,
                interval=1,
                what=f"levels for {nodes} nodes",
            )
            time.sleep(config.window)  # full windows everywhere
            missed_before = _missed(prom)
            scrape = [
                float(r["value"][1]) for r in prom.query('scrape_duration_seconds{job="mco-fleet"}')
            ]
            for _ in range(seconds):
                time.sleep(1)
                for group, value in _durations(prom).items():
                    if group in samples:
                        samples[group].append(value)
            missed = _missed(prom) - missed_before
            series = sum(_self_metrics(prom, "prometheus_tsdb_head_series").values())
    mco, base = samples["mco.rules"], samples["bench.baseline"]
    return Result(
        nodes=nodes,
        median=statistics.median(mco),
        p95=sorted(mco)[int(0.95 * (len(mco) - 1))],
        max=max(mco),
        baseline_median=statistics.median(base),
        missed=missed,
        head_series=series,
        scrape_seconds=scrape[0] if scrape else float("nan"),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.rules", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="shorter sampling (smoke run)")
    parser.add_argument("--nodes", default="100,1000", help="fleet sizes, comma-separated")
    parser.add_argument("--seconds", type=int, default=60, help="seconds of sampling per size")
    args = parser.parse_args(argv)
    seconds = 15 if args.quick else args.seconds
    sizes = [int(n) for n in args.nodes.split(",")]
    results = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"bench-rules-{n}-") as tmp:
            print(f"measuring {n} nodes for {seconds}s ...", flush=True)
            results.append(measure(n, seconds, Path(tmp)))
    print(
        f"\n{'nodes':>6} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} {'baseline ms':>12} "
        f"{'x baseline':>10} {'missed':>7} {'head series':>12} {'scrape ms':>10}"
    )
    for r in results:
        print(
            f"{r.nodes:>6} {r.median * 1e3:>10.2f} {r.p95 * 1e3:>8.2f} {r.max * 1e3:>8.2f} "
            f"{r.baseline_median * 1e3:>12.3f} {r.median / r.baseline_median:>10.1f} "
            f"{r.missed:>7.0f} {r.head_series:>12.0f} {r.scrape_seconds * 1e3:>10.1f}"
        )
    if len(results) > 1:
        first, last = results[0], results[-1]
        print(
            f"\n{last.nodes} vs {first.nodes} nodes: {last.median / first.median:.1f}x the "
            f"evaluation time for {last.nodes / first.nodes:.0f}x the nodes"
        )
    largest = max(results, key=lambda r: r.nodes)
    ok = largest.median <= TARGET_SECONDS and largest.missed == 0
    print(
        f"target: median <= {TARGET_SECONDS * 1e3:.0f} ms and no missed evaluations at "
        f"{largest.nodes} nodes: {'meets' if ok else 'MISSES'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
