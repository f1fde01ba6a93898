"""Sharded evaluation: N synthetic nodes on M real Prometheus (or VictoriaMetrics) shards,
against one engine with the whole fleet measured in the same run.

With ``--engine prometheus`` (the default) each shard is a real Prometheus scraping its own
share of the fleet (a synthetic fleet process per shard serving nodes ``node-<first>..``, every
node the ``typical`` profile of testkit/fleet.py) and evaluating the generated rules: what
the Prometheus Operator's ``shards`` (a hashmod share of the exporter targets per shard) gives.
With ``--engine victoriametrics`` each shard is a vmagent cluster member
(``-promscrape.cluster.membersCount=M``, ``memberNum=i``; every member is given every target,
each fleet process serving its nodes as 8 targets, and keeps the ones that hash to it) writing
to its own single-node VictoriaMetrics, where its vmalert evaluates the rules; the nodes per
shard are then vmagent's hash's choice. All shards run on this machine at once, so they share
its cores, as they would not in a cluster: the per-shard times here are an upper bound.

Measured per layout (M shards of N/M nodes, M = 1 is the baseline):
- per-shard rule evaluation (``prometheus_rule_group_last_duration_seconds`` of ``mco.rules``,
  or vmalert's median ``vmalert_iteration_duration_seconds``, read once a second after a
  warm-up; the median per shard, then the slowest shard), missed evaluations, and the engine's
  CPU per shard (Prometheus; or VictoriaMetrics + vmagent + vmalert);
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

import abc
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from bench.cpu import cpu_seconds
from bench.rules import GROUP, _self_metrics
from mco.flags import duration
from mco.promql import AnswerBudget, PromQLClient, SourceConfig
from reporter.engine import Reporter, settle_memory
from reporter.entries import Epsilon
from reporter.filesink import FileSink
from reporter.layout import LayoutChooser
from reporter.metrics import ReporterMetrics
from reporter.query import Plan
from reporter.ruleconfig import RuleConfigSource
from rulegen.durations import format_duration
from rulegen.model import DetectionRuleConfig, from_spec
from rulegen.render import render_rules
from rulegen.series import INTERFERENCE_LEVEL
from scripts.procs import (
    Managed,
    Prometheus,
    ScrapeTarget,
    VictoriaMetrics,
    VMAgent,
    VMAlert,
    free_port,
    wait_until,
)

ROOT = Path(__file__).resolve().parent.parent
REPORTER_CYCLES = 10
PROMETHEUS, VICTORIAMETRICS = "prometheus", "victoriametrics"
VM_TARGETS_PER_SHARD = 8


@dataclass(frozen=True)
class Layout:
    nodes: int
    shards: int
    shard_nodes: list[int]  # nodes each shard evaluated
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
    """``python -m bench.shards serve --first F --nodes N --port P [--port P2 ...]``: a share of
    the fleet, as one target per port."""
    from testkit.fleet import Fleet, assign, handler

    p = argparse.ArgumentParser(prog="bench.shards serve")
    p.add_argument("--first", type=int, required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--port", type=int, action="append", required=True, help="one target per port")
    args = p.parse_args(argv)
    names = [f"node-{i:05d}" for i in range(args.first, args.first + args.nodes)]
    # The nodes split evenly over the ports: each port is a scrape target of its own.
    parts = [names[i :: len(args.port)] for i in range(len(args.port))]
    servers = [
        ThreadingHTTPServer(("127.0.0.1", port), handler(Fleet(assign(part, ["typical"]))))
        for port, part in zip(args.port, parts, strict=True)
    ]
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    servers[0].serve_forever()
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


class _Shard(abc.ABC):
    """One shard's engine: the processes that scrape and evaluate its nodes, its PromQL URL,
    and its rule-evaluation figures."""

    def __init__(self, processes: list[Managed], url: str, query: Prometheus | VictoriaMetrics):
        self.processes = processes
        self.url = url
        self.query = query

    @abc.abstractmethod
    def eval_seconds(self) -> float | None:
        """The duration of the latest evaluation of the rules group."""

    @abc.abstractmethod
    def missed(self) -> float:
        """Evaluations missed so far."""

    def cpu(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.processes)


class _PromShard(_Shard):
    def __init__(self, prom: Prometheus):
        super().__init__([prom], prom.url, prom)
        self.prom = prom

    def eval_seconds(self) -> float | None:
        return _self_metrics(self.prom, "prometheus_rule_group_last_duration_seconds").get(GROUP)

    def missed(self) -> float:
        got = _self_metrics(self.prom, "prometheus_rule_group_iterations_missed_total")
        return got.get(GROUP, 0.0)


class _VMShard(_Shard):
    """A vmagent cluster member writing to its single-node VictoriaMetrics, and the vmalert
    evaluating the rules there."""

    def __init__(self, vm: VictoriaMetrics, agent: VMAgent, alert: VMAlert):
        super().__init__([vm, agent, alert], vm.url, vm)
        self.agent = agent
        self.alert = alert

    def _vmalert(self, name: str, **labels: str) -> float | None:
        text = requests.get(f"{self.alert.url}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if (
                    sample.name == name
                    and sample.labels.get("group") == GROUP
                    and labels.items() <= sample.labels.items()
                ):
                    return float(sample.value)
        return None

    def eval_seconds(self) -> float | None:
        # vmalert keeps a summary of its recent iterations, not the last one: its median.
        return self._vmalert("vmalert_iteration_duration_seconds", quantile="0.5")

    def missed(self) -> float:
        return self._vmalert("vmalert_iteration_missed_total") or 0.0


def _fleet(workdir: Path, i: int, first: int, count: int, ports: list[int]) -> Managed:
    return Managed(
        [
            sys.executable,
            "-m",
            "bench.shards",
            "serve",
            f"--first={first}",
            f"--nodes={count}",
            *(f"--port={port}" for port in ports),
        ],
        name=f"fleet-{i}",
        log_path=workdir / f"fleet-{i}.log",
        cwd=ROOT,
    )


def _prometheus_shards(
    ports: list[list[int]], rules: Path, every: str, workdir: Path
) -> list[_Shard]:
    """Shard i's Prometheus scrapes the targets of fleet i: a hashmod share, as the operator's."""
    return [
        _PromShard(
            Prometheus(
                workdir / f"prom-{i}",
                targets=[
                    ScrapeTarget("mco-fleet", f"127.0.0.1:{port}", {"shard": str(i)})
                    for port in own
                ],
                rule_files=[rules],
                scrape_interval=every,
                evaluation_interval=every,
            )
        )
        for i, own in enumerate(ports)
    ]


def _victoriametrics_shards(
    ports: list[list[int]], rules: Path, every: str, workdir: Path
) -> list[_Shard]:
    """Every vmagent gets every target and, as member i of the scraper cluster, keeps the share
    that hashes to it: the nodes per shard are vmagent's to choose."""
    targets = [ScrapeTarget("mco-fleet", f"127.0.0.1:{p}") for own in ports for p in own]
    shards: list[_Shard] = []
    for i in range(len(ports)):
        vm = VictoriaMetrics(workdir / f"vm-{i}")
        agent = VMAgent(
            workdir / f"vmagent-{i}",
            targets=targets,
            remote_write_urls=[vm.url],
            members=len(ports),
            member=i,
            scrape_interval=every,
        )
        alert = VMAlert(
            workdir / f"vmalert-{i}",
            rule_files=[rules],
            datasource_url=vm.url,
            remote_write_url=vm.url,
            evaluation_interval=every,
        )
        shards.append(_VMShard(vm, agent, alert))
    return shards


def _levels(shards: list[_Shard]) -> list[int]:
    """Nodes with a level on each shard; a shard process that exited (a port taken meanwhile,
    a bad flag) fails the wait at once with its log instead of being polled until the timeout."""
    for shard in shards:
        for proc in shard.processes:
            if not proc.alive:
                raise RuntimeError(f"{proc.name} exited:\n{proc.log_tail()}")
    return [int(s.query.value(f"count({INTERFERENCE_LEVEL})") or 0) for s in shards]


def measure(
    nodes: int,
    shards: int,
    seconds: int,
    interval: int,
    workdir: Path,
    engine: str = PROMETHEUS,
    *,
    settle: float | None = None,
    timed_cycles: int = REPORTER_CYCLES,
) -> Layout:
    """One layout; ``settle`` (default: the rules' window) is the warm-up after every node has
    a level and before sampling, so that every window is full."""
    config = _config(interval)
    rules = workdir / "rules.yaml"
    # vmalert reads its own results back through VictoriaMetrics: the plain reads.
    rules.write_text(
        render_rules(
            config, engine="victoriametrics" if engine == VICTORIAMETRICS else "prometheus"
        )
    )
    share = -(-nodes // shards)
    # vmagent shares out targets, not nodes: several per fleet so that every member gets some.
    per_fleet = 1 if engine == PROMETHEUS else min(VM_TARGETS_PER_SHARD, share)
    ports = [[free_port() for _ in range(per_fleet)] for _ in range(shards)]
    fleets = [
        _fleet(workdir, i, i * share, min(share, nodes - i * share), own)
        for i, own in enumerate(ports)
    ]
    every = format_duration(interval)
    build = _prometheus_shards if engine == PROMETHEUS else _victoriametrics_shards
    engines = build(ports, rules, every, workdir)
    load_before = os.getloadavg()[0]
    started: list[Managed] = []
    try:
        for fleet in fleets:
            fleet.start()
            started.append(fleet)
        for fleet, own in zip(fleets, ports, strict=True):
            for port in own:
                fleet.wait_http(f"http://127.0.0.1:{port}/metrics", timeout=60)
        for shard in engines:
            for proc in shard.processes:
                proc.start()
                started.append(proc)
        wait_until(
            lambda: sum(_levels(engines)) == nodes,
            timeout=240,
            interval=0.25,
            what=f"levels for {nodes} nodes",
        )
        counts = _levels(engines)
        time.sleep(config.window if settle is None else settle)  # full windows everywhere
        missed0 = [s.missed() for s in engines]
        cpu0 = [s.cpu() for s in engines]
        t0 = time.monotonic()
        samples: list[list[float]] = [[] for _ in engines]
        for _ in range(seconds):
            time.sleep(1)
            for i, shard in enumerate(engines):
                value = shard.eval_seconds()
                if value is not None:
                    samples[i].append(value)
        elapsed = time.monotonic() - t0
        cores = [(s.cpu() - c) / elapsed for s, c in zip(engines, cpu0, strict=True)]
        missed = sum(s.missed() - m for s, m in zip(engines, missed0, strict=True))
        urls = [s.url for s in engines]
        reporter, cycles = asyncio.run(
            _reporter_cycles(urls, workdir / "report.json", timed_cycles)
        )
        once_wall = _once(urls, workdir / "once.json", nodes)
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
        shard_nodes=counts,
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
    parser.add_argument(
        "--settle",
        type=duration,
        default=None,
        help="warm-up once every node has a level, before sampling (default: the rules' window)",
    )
    parser.add_argument(
        "--cycles", type=int, default=REPORTER_CYCLES, help="reporter cycles timed per layout"
    )
    parser.add_argument(
        "--engine",
        choices=(PROMETHEUS, VICTORIAMETRICS),
        default=PROMETHEUS,
        help="shards of Prometheus, or vmagent cluster members each writing to a single-node "
        "VictoriaMetrics evaluated by its vmalert",
    )
    args = parser.parse_args(argv)
    interval = max(1, round(args.interval))  # the rules' interval is whole seconds
    nodes, layouts, seconds = args.nodes, [int(m) for m in args.shards.split(",")], args.seconds
    if args.quick:
        nodes, layouts, seconds = 100, [1, 2], 8
    if layouts[0] != 1:
        layouts.insert(0, 1)  # the baseline, measured in the same run
    print(
        f"{args.engine}: {nodes} nodes at a {interval}s scrape and evaluation interval, on "
        f"{os.cpu_count()} CPUs (every shard on this machine); load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    results = []
    for m in layouts:
        with tempfile.TemporaryDirectory(prefix=f"bench-shards-{m}-") as tmp:
            print(f"measuring {m} shard(s) of ~{-(-nodes // m)} nodes for {seconds:g}s ...")
            layout = measure(
                nodes,
                m,
                int(seconds),
                interval,
                Path(tmp),
                args.engine,
                settle=args.settle,
                timed_cycles=args.cycles,
            )
            results.append(layout)
    base = results[0]
    print(
        f"\n{'shards':>6} {'nodes/shard':>11} {'eval ms (slowest)':>17} {'x base':>7} "
        f"{'per shard ms':>24} {'missed':>6} {'engine cores':>18} {'cycle ms':>9} "
        f"{'x base':>7} {'cycle CPU ms':>12} {'answer KiB':>10} {'live':>9} {'data age s':>10} "
        f"{'--once s':>8} {'load 1m':>11}"
    )
    for r in results:
        per = "/".join(f"{m * 1e3:.0f}" for m in r.eval_medians)
        cores = "/".join(f"{c:.2f}" for c in r.prom_cores)
        print(
            f"{r.shards:>6} {max(r.shard_nodes):>11} {r.slowest * 1e3:>17.1f} "
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
