"""Rule-evaluation time of the generated rules in a real Prometheus, at fleet scale.

A synthetic fleet (testkit/fleet.py, every node the ``typical`` profile: PSI, LLC, an
eBPF histogram of one device, its reads and writes summed as the exporter serves it by default,
diskstats, meminfo, vmstat, steal, run queue) is scraped
every second; Prometheus evaluates the default rules every second. The histogram has the
buckets the exporter exports by default (``--latency-buckets all``: every one, as before
issue 17).

Measured, per fleet size:
- wall clock: ``prometheus_rule_group_last_duration_seconds`` of ``mco.rules``, read once a
  second after a warm-up (the issue's measure), and per rule ``evaluationTime`` from
  ``/api/v1/rules`` (where the time goes). The warm-up (``--warmup``, default 5m30s) covers
  Prometheus' 5-minute lookback and one window: an instant read walks the whole lookback, so
  a Prometheus that started a minute ago evaluates faster than one that runs for good;
- CPU: Prometheus' CPU seconds (``/proc/PID/stat``) per second with the rules loaded, then
  again after a reload without them (scraping and ingestion alone); the difference per
  evaluation is what the rules cost, whatever else runs on the machine. The fleet's and the
  rest of the machine's CPU are printed too, so a noisy run shows itself.
In the same Prometheus a baseline group of one ``rate()`` rule per node gives the cost of the
cheapest per-node rule; the ratio says what the detection model costs on top.

Target (issue 17): median evaluation <= 0.6 s at 1,000 nodes, and no missed evaluations.
(Issue 3's 50 ms is out of reach of any rules over these series on the 2-vCPU VM: the floor
alone is several times that; docs/benchmarks.md.)
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.cpu import cpu_seconds
from exporter.collectors.biolatency import DEFAULT_BUCKETS
from mco.flags import duration
from rulegen.durations import format_duration
from rulegen.model import DetectionRuleConfig
from rulegen.render import render_rules
from rulegen.series import INTERFERENCE_LEVEL
from scripts.procs import Managed, Prometheus, ScrapeTarget, free_port, running, wait_until

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 0.6
GROUP = "mco.rules"
BASELINE_GROUP = "bench.baseline"
BASELINE = {
    "groups": [
        {
            "name": BASELINE_GROUP,
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
FLOOR_GROUP = "bench.floor"
# A raw exporter metric in a rule expression (recorded names have a colon before ``mco_``).
RAW_NAME = re.compile(r"(?<![\w:])mco_[a-z0-9_]+")
RULES_POLL_SECONDS = 5  # /api/v1/rules is heavier than /metrics: poll it less often
# Prometheus' instant-selector lookback (its --query.lookback-delta default) plus one window
# (10s) and some slack: from then on every read walks as much history as it ever will.
LOOKBACK_SECONDS = 300
DEFAULT_WARMUP_SECONDS = LOOKBACK_SECONDS + 30


def raw_selector(rules_text: str) -> str:
    """A selector of every raw exporter series the measured group reads."""
    groups = yaml.safe_load(rules_text)["groups"]
    exprs = [r["expr"] for g in groups if g["name"] == GROUP for r in g["rules"]]
    names = sorted({name for expr in exprs for name in RAW_NAME.findall(expr)})
    return '{__name__=~"' + "|".join(names) + '"}'


def floor_rules(selector: str, window: str) -> dict[str, object]:
    """One rule reading, once, every raw series that the measured group reads (with ``rate``
    over the window) and writing one series per node: what any rules computing this model
    from these series must at least spend, whatever their PromQL."""
    return {
        "groups": [
            {
                "name": FLOOR_GROUP,
                "interval": "1s",
                "rules": [
                    {
                        "record": "node:bench_floor:count",
                        "expr": f"count by (node) (rate({selector}[{window}]))",
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


def _rule_times(prom: Prometheus) -> dict[str, float]:
    """Last ``evaluationTime`` of every rule of the measured group, keyed by name{labels}."""
    body = requests.get(f"{prom.url}/api/v1/rules", timeout=10).json()
    out: dict[str, float] = {}
    for group in body["data"]["groups"]:
        if group["name"] != GROUP:
            continue
        for rule in group["rules"]:
            labels = ",".join(f"{k}={v}" for k, v in sorted(rule.get("labels", {}).items()))
            key = rule["name"] + (f"{{{labels}}}" if labels else "")
            if key in out:  # same name and labels twice: keep both apart
                key += f" #{sum(k.startswith(key) for k in out) + 1}"
            out[key] = float(rule["evaluationTime"])
    return out


def _machine_busy_seconds() -> float:
    """CPU seconds all cores spent on anything but idle and iowait since boot."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _evaluations(prom: Prometheus, group: str) -> float:
    """Evaluations of ``group`` so far: iterations_total counts missed ones too."""
    scheduled = _self_metrics(prom, "prometheus_rule_group_iterations_total").get(group, 0.0)
    missed = _self_metrics(prom, "prometheus_rule_group_iterations_missed_total").get(group, 0.0)
    return scheduled - missed


@dataclass
class Phase:
    """CPU use over one stretch of wall-clock time."""

    seconds: float = 0.0
    prometheus: float = 0.0  # CPU seconds
    fleet: float = 0.0
    machine: float = 0.0
    evaluations: float = 0.0  # of the group it is about (scheduled minus missed)
    samples: dict[str, list[float]] = field(default_factory=dict)
    rules: dict[str, list[float]] = field(default_factory=dict)

    def cores(self, cpu: float) -> float:
        return cpu / self.seconds

    @property
    def other(self) -> float:
        """Cores busy with anything but this Prometheus and this fleet (other users' load)."""
        return self.cores(self.machine - self.prometheus - self.fleet)


def _sample(prom: Prometheus, fleet: Managed, seconds: int, groups: Sequence[str]) -> Phase:
    """Durations of ``groups`` (the first is the one this phase is about) and CPU use."""
    rules = groups[0] == GROUP
    phase = Phase(samples={g: [] for g in groups})
    evaluations = _evaluations(prom, groups[0])
    start = (time.monotonic(), cpu_seconds(prom.pid), cpu_seconds(fleet.pid))
    machine = _machine_busy_seconds()
    for tick in range(1, seconds + 1):
        time.sleep(1)
        for group, value in _self_metrics(
            prom, "prometheus_rule_group_last_duration_seconds"
        ).items():
            if group in phase.samples:
                phase.samples[group].append(value)
        if rules and tick % RULES_POLL_SECONDS == 0:
            for key, value in _rule_times(prom).items():
                phase.rules.setdefault(key, []).append(value)
    phase.seconds = time.monotonic() - start[0]
    phase.prometheus = cpu_seconds(prom.pid) - start[1]
    phase.fleet = cpu_seconds(fleet.pid) - start[2]
    phase.machine = _machine_busy_seconds() - machine
    phase.evaluations = _evaluations(prom, groups[0]) - evaluations
    return phase


@dataclass(frozen=True)
class Result:
    nodes: int
    median: float
    p95: float
    max: float
    baseline_median: float
    missed: float
    head_series: float
    raw_series_read: float  # raw series the measured group selects, all nodes
    scrape_seconds: float
    with_rules: Phase
    floor: Phase
    without_rules: Phase
    load_before: float
    load_after: float

    def _cpu_per_evaluation(self, phase: Phase) -> float:
        """Prometheus CPU seconds a group adds per evaluation (with it minus without it)."""
        extra = phase.cores(phase.prometheus) - self.without_rules.cores(
            self.without_rules.prometheus
        )
        return extra / (phase.evaluations / phase.seconds)

    @property
    def cpu_per_evaluation(self) -> float:
        return self._cpu_per_evaluation(self.with_rules)

    @property
    def floor_median(self) -> float:
        return statistics.median(self.floor.samples[FLOOR_GROUP])

    @property
    def floor_cpu_per_evaluation(self) -> float:
        return self._cpu_per_evaluation(self.floor)

    @property
    def rule_medians(self) -> dict[str, float]:
        return {k: statistics.median(v) for k, v in self.with_rules.rules.items()}


def _count(prom: Prometheus, selector: str) -> float:
    """How many series ``selector`` matches (a heavy query on a loaded machine: wait for it)."""
    response = requests.get(
        f"{prom.url}/api/v1/query", params={"query": f"count({selector})"}, timeout=120
    )
    result = response.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def measure(
    nodes: int,
    seconds: int,
    workdir: Path,
    rules_text: str,
    latency_buckets: str = DEFAULT_BUCKETS,
    warmup: float = DEFAULT_WARMUP_SECONDS,
    by_operation: bool = False,
) -> Result:
    """Measure at ``nodes`` nodes, sampling ``seconds`` once Prometheus has scraped the fleet
    for ``warmup`` seconds (at least one window)."""
    config = DetectionRuleConfig.default()
    rules = workdir / "rules.yaml"
    rules.write_text(rules_text)
    baseline = workdir / "baseline.yaml"
    baseline.write_text(yaml.safe_dump(BASELINE))
    floor = workdir / "floor.yaml"
    selector = raw_selector(rules_text)
    floor.write_text(yaml.safe_dump(floor_rules(selector, format_duration(config.window))))
    port = free_port()
    fleet = Managed(
        [
            sys.executable,
            "-m",
            "testkit.fleet",
            f"--port={port}",
            f"--nodes={nodes}",
            "--profiles=typical",
            f"--latency-buckets={latency_buckets}",
            *(["--latency-by-operation"] if by_operation else []),
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
    load_before = os.getloadavg()[0]
    with running(fleet):
        fleet.wait_http(f"http://127.0.0.1:{port}/metrics", timeout=60)
        with running(prom):
            started = time.monotonic()
            wait_until(
                lambda: prom.value(f"count({INTERFERENCE_LEVEL})") == nodes,
                timeout=180,
                interval=1,
                what=f"levels for {nodes} nodes",
            )
            time.sleep(config.window)  # full windows everywhere
            time.sleep(max(0.0, started + warmup - time.monotonic()))  # the steady state
            missed_before = _self_metrics(prom, "prometheus_rule_group_iterations_missed_total")
            scrape = prom.value('scrape_duration_seconds{job="mco-fleet"}')
            with_rules = _sample(prom, fleet, seconds, [GROUP, BASELINE_GROUP])
            missed_after = _self_metrics(prom, "prometheus_rule_group_iterations_missed_total")
            series = sum(_self_metrics(prom, "prometheus_tsdb_head_series").values())
            raw = _count(prom, selector)
            # The same Prometheus scraping the same fleet: the floor group instead of the
            # measured one, then neither (scraping and ingestion alone).
            others = max(15, seconds // 2)
            prom.rule_files = [floor, baseline]
            prom.reload()
            time.sleep(config.window)  # the floor's rate() needs a full window after its start
            floor_phase = _sample(prom, fleet, others, [FLOOR_GROUP, BASELINE_GROUP])
            prom.rule_files = [baseline]
            prom.reload()
            time.sleep(5)
            without_rules = _sample(prom, fleet, others, [BASELINE_GROUP])
    mco, base = with_rules.samples[GROUP], with_rules.samples[BASELINE_GROUP]
    return Result(
        nodes=nodes,
        median=statistics.median(mco),
        p95=sorted(mco)[int(0.95 * (len(mco) - 1))],
        max=max(mco),
        baseline_median=statistics.median(base),
        missed=missed_after.get(GROUP, 0) - missed_before.get(GROUP, 0),
        head_series=series,
        raw_series_read=raw,
        scrape_seconds=scrape if scrape is not None else float("nan"),
        with_rules=with_rules,
        floor=floor_phase,
        without_rules=without_rules,
        load_before=load_before,
        load_after=os.getloadavg()[0],
    )


def _print_breakdown(result: Result, top: int) -> None:
    medians = result.rule_medians
    total = sum(medians.values())
    print(
        f"\nper rule at {result.nodes} nodes (median evaluationTime; sum {total * 1e3:.1f} ms, "
        f"group median {result.median * 1e3:.1f} ms):"
    )
    for key, value in sorted(medians.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {value * 1e3:8.2f} ms {value / total:6.1%}  {key}")
    rest = sorted(medians.values(), reverse=True)[top:]
    if rest:
        print(f"  {sum(rest) * 1e3:8.2f} ms {sum(rest) / total:6.1%}  ({len(rest)} other rules)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.rules", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="shorter sampling (smoke run)")
    parser.add_argument("--nodes", default="100,1000", help="fleet sizes, comma-separated")
    parser.add_argument(
        "--seconds", type=duration, default=60.0, help="sampling per size (60, 90s, 2m)"
    )
    parser.add_argument(
        "--rules",
        type=Path,
        help="measure this rule file (it must hold a group named mco.rules) instead of the "
        "default render, e.g. an older version for an A/B comparison",
    )
    parser.add_argument(
        "--warmup",
        type=duration,
        help="sample once Prometheus has scraped the fleet this long (default 5m30s: the "
        "5-minute lookback of instant reads plus a window, the steady state; with --quick, "
        "one window)",
    )
    parser.add_argument("--top", type=int, default=15, help="rules shown in the breakdown")
    parser.add_argument(
        "--latency-buckets",
        default=DEFAULT_BUCKETS,
        help="the latency buckets the fleet serves, as the exporter's "
        "--collector.biolatency.buckets (default: its default; 'all': all 21, as before issue 17)",
    )
    parser.add_argument(
        "--latency-by-operation",
        action="store_true",
        help="the fleet serves a histogram per operation, as the exporter does with "
        "--collector.biolatency.by-operation (and did by default before issue 17): for an A/B "
        "with --rules of an older version",
    )
    args = parser.parse_args(argv)
    seconds = 15 if args.quick else max(1, round(args.seconds))
    if args.warmup is not None:
        warmup = args.warmup
    else:
        warmup = 0.0 if args.quick else DEFAULT_WARMUP_SECONDS
    sizes = [int(n) for n in args.nodes.split(",")]
    rules_text = (
        args.rules.read_text() if args.rules else render_rules(DetectionRuleConfig.default())
    )
    results = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"bench-rules-{n}-") as tmp:
            print(f"measuring {n} nodes for {seconds}s after {warmup:g}s ...", flush=True)
            result = measure(
                n,
                seconds,
                Path(tmp),
                rules_text,
                args.latency_buckets,
                warmup,
                args.latency_by_operation,
            )
            results.append(result)
    print(
        f"\nwall clock (prometheus_rule_group_last_duration_seconds):\n"
        f"{'nodes':>6} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} {'baseline ms':>12} "
        f"{'x baseline':>10} {'missed':>7} {'head series':>12} {'scrape ms':>10}"
    )
    for r in results:
        print(
            f"{r.nodes:>6} {r.median * 1e3:>10.2f} {r.p95 * 1e3:>8.2f} {r.max * 1e3:>8.2f} "
            f"{r.baseline_median * 1e3:>12.3f} {r.median / r.baseline_median:>10.1f} "
            f"{r.missed:>7.0f} {r.head_series:>12.0f} {r.scrape_seconds * 1e3:>10.1f}"
        )
    print(
        "\nCPU (cores = CPU seconds per second; 'rules' = Prometheus with the rules minus "
        "without, per evaluation):\n"
        f"{'nodes':>6} {'prom w/ rules':>13} {'prom w/o':>9} {'rules CPU ms':>12} "
        f"{'CPU/wall':>8} {'fleet':>6} {'other':>6} {'load 1m':>11}"
    )
    for r in results:
        print(
            f"{r.nodes:>6} {r.with_rules.cores(r.with_rules.prometheus):>13.2f} "
            f"{r.without_rules.cores(r.without_rules.prometheus):>9.2f} "
            f"{r.cpu_per_evaluation * 1e3:>12.1f} {r.cpu_per_evaluation / r.median:>8.2f} "
            f"{r.with_rules.cores(r.with_rules.fleet):>6.2f} {r.with_rules.other:>6.2f} "
            f"{r.load_before:>5.2f}/{r.load_after:<5.2f}"
        )
    print(
        "\nfloor: one rule reading every raw series the rules read, once (rate over the "
        "window), in the same Prometheus:\n"
        f"{'nodes':>6} {'raw/node':>8} {'floor ms':>9} {'floor CPU ms':>12} "
        f"{'rules/floor wall':>16} {'rules/floor CPU':>15} {'us per raw series':>17}"
    )
    for r in results:
        print(
            f"{r.nodes:>6} {r.raw_series_read / r.nodes:>8.0f} {r.floor_median * 1e3:>9.1f} "
            f"{r.floor_cpu_per_evaluation * 1e3:>12.1f} {r.median / r.floor_median:>16.1f} "
            f"{r.cpu_per_evaluation / r.floor_cpu_per_evaluation:>15.1f} "
            f"{r.floor_median / r.raw_series_read * 1e6:>17.1f}"
        )
    if len(results) > 1:
        first, last = results[0], results[-1]
        print(
            f"\n{last.nodes} vs {first.nodes} nodes: {last.median / first.median:.1f}x the "
            f"evaluation time, {last.cpu_per_evaluation / first.cpu_per_evaluation:.1f}x the "
            f"CPU, for {last.nodes / first.nodes:.0f}x the nodes"
        )
    largest = max(results, key=lambda r: r.nodes)
    if args.top > 0:
        _print_breakdown(largest, args.top)
    ok = largest.median <= TARGET_SECONDS and largest.missed == 0
    print(
        f"\ntarget: median <= {TARGET_SECONDS * 1e3:.0f} ms and no missed evaluations at "
        f"{largest.nodes} nodes: {'meets' if ok else 'MISSES'} "
        f"(median {largest.median * 1e3:.0f} ms, rules CPU "
        f"{largest.cpu_per_evaluation * 1e3:.0f} ms per evaluation)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
