"""Sharded evaluation: N synthetic nodes on M real Prometheus shards, against one Prometheus
with the whole fleet measured in the same run.

Each shard is a real Prometheus scraping its own share of the fleet (a synthetic fleet process
per shard serving nodes ``node-<first>..``, every node the ``typical`` profile of
tests/rulegen/fleet.py) and evaluating the generated rules: what the Prometheus Operator's
``shards`` (a hashmod share of the exporter targets per shard) or vmagent sharding to
single-node VictoriaMetrics + vmalert give. All shards run on this machine at once, so they
share its cores, as they would not in a cluster: the per-shard times here are an upper bound.

Measured per layout (M shards of N/M nodes, M = 1 is the baseline):
- per-shard rule evaluation (``prometheus_rule_group_last_duration_seconds`` of ``mco.rules``,
  read once a second after a warm-up; the median per shard, then the slowest shard) and missed
  evaluations;
- the reporter's cycle (the real ``Reporter.cycle`` with one PromQL client per shard, queried
  concurrently and merged, written to a file as ``mco-reporter --output`` does): median wall
  and CPU over several cycles, how many nodes are live and how old their newest samples are;
- the real ``mco-reporter --once --prometheus-url URL...`` process, one per shard: its wall
  time (interpreter start included) and that it exits 0 with every node in its file.
Printed as ratios against M = 1. The model (docs/benchmarks.md): evaluation per shard ~ the
per-node cost x N/M; the reporter's cycle ~ a fixed part + a per-node part x N (the shards
answer concurrently, the merge and the write are over all N nodes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.cpu import cpu_seconds
from bench.rules import GROUP, _self_metrics
from mco.flags import duration
from reporter.engine import Reporter, settle_memory
from reporter.entries import Epsilon
from reporter.filesink import FileSink
from reporter.layout import LayoutChooser
from reporter.metrics import ReporterMetrics
from reporter.promql import AnswerBudget, PromQLClient, SourceConfig
from reporter.query import Plan
from reporter.ruleconfig import RuleConfigSource
from rulegen.durations import format_duration
from rulegen.model import DetectionRuleConfig, from_spec
from rulegen.render import render_rules
from rulegen.series import INTERFERENCE_LEVEL
from scripts.procs import Managed, Prometheus, ScrapeTarget, free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
REPORTER_CYCLES = 10


@dataclass(frozen=True)
class Layout:
    nodes: int
    shards: int
    eval_medians: list[float]  # per shard, seconds
    missed: float  # evaluations missed, all shards
    prom_cores: list[float]  # CPU seconds per second, per shard
    cycle_wall: float  # median, seconds
    cycle_cpu: float
    answer_bytes: float  # per cycle, all shards
    reported: int  # nodes in the report
    live: int  # of which live (a sample within live_within: the engine keeps up)
    once_wall: float  # seconds of `mco-reporter --once` with one --prometheus-url per shard
    age_median: float  # seconds from a node's newest sample to the last cycle
    age_max: float
    load: tuple[float, float]

    @property
    def slowest(self) -> float:
        return max(self.eval_medians)


def serve_share(argv: Sequence[str]) -> int:
    """``python -m bench.shards serve --first F --nodes N --port P``: one shard's fleet."""
    from tests.rulegen.fleet import Fleet, assign, serve

    p = argparse.ArgumentParser(prog="bench.shards serve")
    p.add_argument("--first", type=int, required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    names = [f"node-{i:05d}" for i in range(args.first, args.first + args.nodes)]
    serve(Fleet(assign(names, ["typical"])), "127.0.0.1", args.port)
    return 0


def _config(interval: int) -> DetectionRuleConfig:
    return from_spec({"evaluationInterval": format_duration(interval)})


async def _reporter_cycles(
    urls: list[str], out: Path, cycles: int
) -> tuple[Reporter, list[tuple[float, float, float]]]:
    budget = AnswerBudget(SourceConfig(urls[0]).max_answer_bytes)
    clients = [PromQLClient(SourceConfig(url, timeout=30), budget) for url in urls]
    for c in clients:
        await c.__aenter__()
    try:
        reporter = Reporter(
            source=clients,
            rules=RuleConfigSource(),
            plan=Plan(compact=False),
            epsilon=Epsilon(),
            metrics=ReporterMetrics(),
            sink=FileSink(str(out), LayoutChooser("cluster")),
        )
        times = []
        for i in range(cycles + 1):
            a0 = reporter.metrics.answer_bytes._value.get()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            outcome = await reporter.cycle()
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            if not outcome.ok:
                raise RuntimeError(f"reporter cycle failed: {outcome.message}")
            if i == 0:
                settle_memory()  # as mco-reporter does after its first cycle
                continue
            times.append((wall, cpu, reporter.metrics.answer_bytes._value.get() - a0))
            await asyncio.sleep(0.5)
        return reporter, times
    finally:
        for c in clients:
            await c.__aexit__(None, None, None)


def _once(urls: list[str], out: Path, nodes: int) -> float:
    """Wall seconds of the real ``mco-reporter --once`` with one ``--prometheus-url`` per shard
    (process start included); it must exit 0 with every node in its file."""
    argv = [sys.executable, "-m", "reporter", "--once", f"--output={out}", "--log.level=warn"]
    argv += [f"--prometheus-url={url}" for url in urls]
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"mco-reporter --once exited {done.returncode}: {done.stderr[-500:]}")
    written = json.loads(out.read_text())["status"]["nodes"]
    if len(written) != nodes:
        raise RuntimeError(f"mco-reporter --once wrote {len(written)} of {nodes} nodes")
    return wall


def _wait_levels(prom: Prometheus, count: int) -> None:
    wait_until(
        lambda: prom.value(f"count({INTERFERENCE_LEVEL})") == count,
        timeout=240,
        interval=1,
        what=f"levels for {count} nodes",
    )


def measure(nodes: int, shards: int, seconds: int, interval: int, workdir: Path) -> Layout:
    config = _config(interval)
    rules = workdir / "rules.yaml"
    rules.write_text(render_rules(config))
    share = -(-nodes // shards)
    fleets: list[Managed] = []
    proms: list[Prometheus] = []
    counts: list[int] = []
    ports: list[int] = []
    for i in range(shards):
        first, count = i * share, min(share, nodes - i * share)
        port = free_port()
        fleets.append(
            Managed(
                [
                    sys.executable,
                    "-m",
                    "bench.shards",
                    "serve",
                    f"--first={first}",
                    f"--nodes={count}",
                    f"--port={port}",
                ],
                name=f"fleet-{i}",
                log_path=workdir / f"fleet-{i}.log",
                cwd=ROOT,
            )
        )
        every = format_duration(interval)
        proms.append(
            Prometheus(
                workdir / f"prom-{i}",
                targets=[ScrapeTarget("mco-fleet", f"127.0.0.1:{port}", {"shard": str(i)})],
                rule_files=[rules],
                scrape_interval=every,
                evaluation_interval=every,
            )
        )
        counts.append(count)
        ports.append(port)
    load_before = os.getloadavg()[0]
    started: list[Managed] = []
    try:
        for fleet in fleets:
            fleet.start()
            started.append(fleet)
        for fleet, port in zip(fleets, ports, strict=True):
            fleet.wait_http(f"http://127.0.0.1:{port}/metrics", timeout=60)
        for prom in proms:
            prom.start()
            started.append(prom)
        for prom, count in zip(proms, counts, strict=True):
            _wait_levels(prom, count)
        time.sleep(config.window)  # full windows everywhere
        missed0 = [
            _self_metrics(p, "prometheus_rule_group_iterations_missed_total").get(GROUP, 0.0)
            for p in proms
        ]
        cpu0 = [cpu_seconds(p.pid) for p in proms]
        t0 = time.monotonic()
        samples: list[list[float]] = [[] for _ in proms]
        for _ in range(seconds):
            time.sleep(1)
            for i, prom in enumerate(proms):
                value = _self_metrics(prom, "prometheus_rule_group_last_duration_seconds").get(
                    GROUP
                )
                if value is not None:
                    samples[i].append(value)
        elapsed = time.monotonic() - t0
        cores = [(cpu_seconds(p.pid) - c) / elapsed for p, c in zip(proms, cpu0, strict=True)]
        missed = sum(
            _self_metrics(p, "prometheus_rule_group_iterations_missed_total").get(GROUP, 0.0) - m
            for p, m in zip(proms, missed0, strict=True)
        )
        reporter, cycles = asyncio.run(
            _reporter_cycles([p.url for p in proms], workdir / "report.json", REPORTER_CYCLES)
        )
        once_wall = _once([p.url for p in proms], workdir / "once.json", nodes)
        entries = reporter.tracker.entries
        live = sum(1 for e in entries.values() if e.live)
        at = reporter.tracker.view().at
        ages = sorted(at - t for t in reporter.tracker.last_seen.values()) or [float("nan")]
    finally:
        for server in reversed(started):
            server.stop()
    return Layout(
        nodes=nodes,
        shards=shards,
        eval_medians=[statistics.median(s) for s in samples],
        missed=missed,
        prom_cores=cores,
        cycle_wall=statistics.median(c[0] for c in cycles),
        cycle_cpu=statistics.median(c[1] for c in cycles),
        answer_bytes=statistics.median(c[2] for c in cycles),
        reported=len(entries),
        live=live,
        once_wall=once_wall,
        age_median=statistics.median(ages),
        age_max=ages[-1],
        load=(load_before, os.getloadavg()[0]),
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        return serve_share(argv[1:])
    parser = argparse.ArgumentParser(prog="bench.shards", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100 nodes, 1 and 2 shards, 8 s")
    parser.add_argument("--nodes", type=int, default=1000, help="fleet size (all shards)")
    parser.add_argument("--shards", default="1,2,4", help="layouts to measure; 1 = baseline")
    parser.add_argument("--seconds", type=duration, default=30.0, help="sampling per layout")
    parser.add_argument(
        "--interval", type=duration, default=1.0, help="scrape and evaluation interval"
    )
    args = parser.parse_args(argv)
    interval = max(1, round(args.interval))  # the rules' interval is whole seconds
    nodes, layouts, seconds = args.nodes, [int(m) for m in args.shards.split(",")], args.seconds
    if args.quick:
        nodes, layouts, seconds = 100, [1, 2], 8
    if layouts[0] != 1:
        layouts.insert(0, 1)  # the baseline, measured in the same run
    print(
        f"{nodes} nodes at a {interval}s scrape and evaluation interval, on "
        f"{os.cpu_count()} CPUs (every shard on this machine); load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    results = []
    for m in layouts:
        with tempfile.TemporaryDirectory(prefix=f"bench-shards-{m}-") as tmp:
            print(f"measuring {m} shard(s) of {-(-nodes // m)} nodes for {seconds:g}s ...")
            results.append(measure(nodes, m, int(seconds), interval, Path(tmp)))
    base = results[0]
    print(
        f"\n{'shards':>6} {'nodes/shard':>11} {'eval ms (slowest)':>17} {'x base':>7} "
        f"{'per shard ms':>24} {'missed':>6} {'prom cores':>18} {'cycle ms':>9} "
        f"{'x base':>7} {'cycle CPU ms':>12} {'answer KiB':>10} {'live':>9} {'data age s':>10} "
        f"{'--once s':>8} {'load 1m':>11}"
    )
    for r in results:
        per = "/".join(f"{m * 1e3:.0f}" for m in r.eval_medians)
        cores = "/".join(f"{c:.2f}" for c in r.prom_cores)
        print(
            f"{r.shards:>6} {-(-r.nodes // r.shards):>11} {r.slowest * 1e3:>17.1f} "
            f"{r.slowest / base.slowest:>7.2f} {per:>24} {r.missed:>6.0f} {cores:>18} "
            f"{r.cycle_wall * 1e3:>9.1f} {r.cycle_wall / base.cycle_wall:>7.2f} "
            f"{r.cycle_cpu * 1e3:>12.1f} {r.answer_bytes / 1024:>10.0f} "
            f"{f'{r.live}/{r.reported}':>9} {f'{r.age_median:.1f}/{r.age_max:.1f}':>10} "
            f"{r.once_wall:>8.2f} {r.load[0]:>5.2f}/{r.load[1]:<5.2f}"
        )
    per_node = base.slowest / base.nodes
    print(
        f"\nmodel: evaluation per shard ~ {per_node * 1e6:.0f} us x N/M at this load "
        f"(baseline {base.slowest * 1e3:.0f} ms / {base.nodes} nodes); the reporter's cycle, "
        f"over all N nodes whatever M: {base.cycle_wall * 1e3:.0f} ms at M = 1"
    )
    for r in results[1:]:
        ideal = base.slowest / r.shards
        print(
            f"  {r.shards} shards: slowest shard {r.slowest * 1e3:.0f} ms against "
            f"{ideal * 1e3:.0f} ms for a perfect 1/{r.shards}: x{r.slowest / ideal:.2f} (all "
            f"shards share this machine's {os.cpu_count()} cores)"
        )
    ok = all(r.reported == r.nodes for r in results)
    print(
        "\nlive: nodes whose newest sample was within the reporter's live window (5 s) at its "
        "last cycle, i.e. the engine kept up; data age: median/max seconds from a node's "
        f"newest sample to that cycle\nevery node reported in every layout: {'yes' if ok else 'NO'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
