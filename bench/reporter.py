"""mco-reporter at 1,000 / 5,000 / 10,000 nodes: a synthetic fleet in a real Prometheus.

For each fleet size the recorded series of every node (DESIGN §2, the names from
``rulegen.series``) are backfilled with ``promtool tsdb create-blocks-from openmetrics``: every
series at T0, then one step per second in which 1 % of the nodes change beyond the epsilon (and
every node's rule-evaluation time advances), then steps where nothing changes. A real
Prometheus serves the blocks; the reporter (the real ``Reporter.cycle``, the real PromQL client,
the real Kubernetes client) queries it at the fixed times T0+k and writes to an in-memory
Kubernetes API stand-in running in a child process (so its CPU is not counted).

Measured per cycle: wall and CPU time of the reporter process, PromQL queries, bytes of the
answer, bytes written to the API; and the JSON size of one object per layout. The PromQL client
runs as mco-reporter does by default, with gzip answers (``--no-compression``: plain JSON, as
``--no-prometheus-compression``).
With ``--history S`` every series also has one sample a second for S seconds before T0 (300:
Prometheus' whole lookback, as rules at a 1 s interval leave it), and Prometheus' own evaluation
time of the recorded query (``stats=all``) is measured in two forms: the plain selector (which
looks back 5 minutes and decodes every sample there) and the plan's read over ``staleAfter``.
Baselines from the same run: CPU against ``json.loads`` of the same answer, after gunzip when
compression is on (the floor any Python reader pays), bytes against rewriting the whole report
each cycle.
Targets (issue 4): <= 3 queries per cycle; <= 250 ms CPU per cycle at 5,000 nodes; bytes per
cycle proportional to the changed nodes (bytes per changed node within 1.5x across fleet sizes,
and a no-change cycle independent of fleet size); no object over 1 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import multiprocessing
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web
from kubernetes_asyncio import client

from mco.promql import PromQLClient, SourceConfig
from reporter.engine import Reporter, settle_memory
from reporter.entries import Epsilon
from reporter.kubeapi import ReportApi
from reporter.kubesink import KubeSink
from reporter.layout import LayoutChooser, whole_objects
from reporter.metrics import ReporterMetrics
from reporter.patch import apply_merge_patch
from reporter.query import Plan
from reporter.ruleconfig import RuleConfigSource
from rulegen import series
from rulegen.model import DetectionRuleConfig
from scripts.procs import Prometheus, free_port, wait_until

CHANGE_STEPS = 6  # cycles in which 1 % of the nodes change
QUIET_STEPS = 3  # cycles in which nothing changes
MIB = 1 << 20
CPU_TARGET = 0.250


# ---------------------------------------------------------------------------------------------
# The synthetic fleet


def _node(i: int) -> str:
    return f"node-{i:05d}"


def _values(rng: random.Random) -> dict[tuple[str, str, str], float]:
    """One node's recorded series: (metric, label name, label value) -> value."""
    out: dict[tuple[str, str, str], float] = {}
    for name in {**series.SIGNAL_SERIES, **series.CONTEXT_SERIES}.values():
        out[(name, "", "")] = round(rng.uniform(0, 0.3), 6)
    level = round(rng.uniform(0, 1), 6)
    out[(series.INTERFERENCE_LEVEL, "", "")] = level
    out[(series.SCHEDULE_SCORE, "", "")] = round(100 * (1 - level), 6)
    out[(series.MEMORY_PRESSURE_FALLBACK, "", "")] = 0.0
    out[(series.KATA_READY, "", "")] = 1.0
    for label in series.DETECTIONS.values():
        index = round(rng.uniform(0, 1), 6)
        out[(series.DETECTION_INDEX, "detection", label)] = index
        out[(series.DETECTION_TRIGGERED, "detection", label)] = float(index > 0)
    for label in series.HARD_CONSTRAINTS.values():
        out[(series.HARD_CONSTRAINT_VIOLATED, "constraint", label)] = 0.0
    return out


def _changed(values: dict[tuple[str, str, str], float]) -> dict[tuple[str, str, str], float]:
    """The same node after a change well beyond the epsilon."""
    out = dict(values)
    level = (values[(series.INTERFERENCE_LEVEL, "", "")] + 0.37) % 1.0
    out[(series.INTERFERENCE_LEVEL, "", "")] = round(level, 6)
    out[(series.SCHEDULE_SCORE, "", "")] = round(100 * (1 - level), 6)
    for key in values:
        if key[0] in series.SIGNAL_SERIES.values():
            out[key] = round(values[key] * 1.5 + 0.01, 6)
    return out


def write_fleet(path: Path, nodes: int, t0: int, seed: int = 7, history: int = 0) -> list[set[str]]:
    """The OpenMetrics backfill; returns, per step, the nodes that changed. ``history``: seconds
    of one-a-second samples of every series before T0 (as rules at a 1 s interval leave them),
    so an engine's lookback has something to read."""
    rng = random.Random(seed)
    state = {_node(i): _values(rng) for i in range(nodes)}
    steps = CHANGE_STEPS + QUIET_STEPS
    changed_per_step: list[set[str]] = [set(state)]
    samples: dict[tuple[str, str, str, str], list[tuple[int, float]]] = {}

    def put(node: str, key: tuple[str, str, str], t: int, v: float) -> None:
        samples.setdefault((key[0], key[1], key[2], node), []).append((t, v))

    for node, values in state.items():
        for key, v in values.items():
            put(node, key, t0, v)
    names = sorted(state)
    for step in range(1, steps + 1):
        t = t0 + step
        changed: set[str] = set()
        if step <= CHANGE_STEPS:
            changed = set(rng.sample(names, max(1, nodes // 100)))
        for node in names:
            if node in changed:
                state[node] = _changed(state[node])
                for key, v in state[node].items():
                    put(node, key, t, v)
            else:  # the rules are evaluated again: the node's sample time advances
                key = (series.MEMORY_PRESSURE_FALLBACK, "", "")
                put(node, key, t, state[node][key])
        changed_per_step.append(changed)
    by_metric: dict[str, list[tuple[str, list[tuple[int, float]]]]] = {}
    for (metric, lname, lvalue, node), points in samples.items():
        labels = f'node="{node}"' + (f',{lname}="{lvalue}"' if lname else "")
        by_metric.setdefault(metric, []).append((f"{metric}{{{labels}}}", points))
    config_hash = DetectionRuleConfig.default().config_hash()
    with path.open("w") as f:
        for metric, all_series in by_metric.items():
            f.write(f"# TYPE {metric} gauge\n")
            for name, points in all_series:
                if history:  # the value of T0, jittered (a constant compresses unlike data)
                    v0 = points[0][1]
                    f.write(
                        "".join(
                            f"{name} {round(v0 + rng.random() * 1e-3, 6)!r} {t}\n"
                            for t in range(t0 - history, t0)
                        )
                    )
                f.write("".join(f"{name} {v!r} {t}\n" for t, v in points))
        f.write(f"# TYPE {series.RULE_CONFIG_INFO} gauge\n")
        for step in range(steps + 1):
            f.write(
                f'{series.RULE_CONFIG_INFO}{{generation="0",hash="{config_hash}"}} 1 {t0 + step}\n'
            )
        f.write("# EOF\n")
    return changed_per_step


# ---------------------------------------------------------------------------------------------
# An in-memory Kubernetes API for NodeInterferenceReports (child process)


def _api_server(port: int, ready: Any) -> None:
    objects: dict[str, dict[str, Any]] = {}
    counter = [0]
    base = "/apis/mco.io/v1alpha1/nodeinterferencereports"

    def bump(obj: dict[str, Any]) -> None:
        counter[0] += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(counter[0])

    async def list_(request: web.Request) -> web.Response:
        return web.json_response({"items": list(objects.values()), "metadata": {}})

    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        name = body["metadata"]["name"]
        if name in objects:
            return web.json_response({"code": 409, "reason": "AlreadyExists"}, status=409)
        body.pop("status", None)
        bump(body)
        objects[name] = body
        return web.json_response(body, status=201)

    async def get(request: web.Request) -> web.Response:
        obj = objects.get(request.match_info["name"])
        if obj is None:
            return web.json_response({"code": 404, "reason": "NotFound"}, status=404)
        return web.json_response(obj)

    async def patch(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        obj = objects.get(name)
        if obj is None:
            return web.json_response({"code": 404, "reason": "NotFound"}, status=404)
        body = await request.json()
        want = body.get("metadata", {}).get("resourceVersion")
        if want is not None and want != obj["metadata"]["resourceVersion"]:
            return web.json_response({"code": 409, "reason": "Conflict"}, status=409)
        obj = objects[name] = apply_merge_patch(obj, body)
        bump(obj)
        return web.Response(body=json.dumps(obj), content_type="application/json")

    async def delete(request: web.Request) -> web.Response:
        objects.pop(request.match_info["name"], None)
        return web.json_response({"status": "Success"})

    app = web.Application(client_max_size=16 * MIB)
    app.router.add_get(base, list_)
    app.router.add_post(base, create)
    app.router.add_get(base + "/{name}", get)
    app.router.add_patch(base + "/{name}", patch)
    app.router.add_patch(base + "/{name}/status", patch)
    app.router.add_delete(base + "/{name}", delete)

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(serve())


# ---------------------------------------------------------------------------------------------
# Measuring


@dataclass
class Cycle:
    wall: float
    cpu: float
    queries: int
    answer_bytes: int
    api_bytes: int
    changed: int


@dataclass
class FleetResult:
    nodes: int
    cycles: list[Cycle]
    floor_cpu: float  # json.loads of one answer
    cluster_bytes: int
    cluster_compact_bytes: int
    per_node_bytes: int
    largest_written: int
    full_rewrite_bytes: int  # the whole report, what a naive writer sends every cycle
    history: int = 0  # seconds of 1 s samples before T0
    # Prometheus' own evaluation time of the recorded query (stats=all evalTotalTime, median):
    # the plain selector (the engine's 5-minute lookback) and the plan's windowed read.
    engine_plain: tuple[float, float] = (0.0, 0.0)  # (evaluation, whole answer) seconds
    engine_windowed: tuple[float, float] = (0.0, 0.0)


async def _run_cycles(
    prom_url: str, api_url: str, t0: int, steps: int, compression: bool
) -> tuple[list[Cycle], Reporter, int]:
    cfg = client.Configuration(host=api_url)
    async with (
        client.ApiClient(configuration=cfg) as api_client,
        PromQLClient(SourceConfig(prom_url, timeout=60, compression=compression)) as source,
    ):
        rules = RuleConfigSource()
        api = ReportApi(api_client, timeout=120)
        sink = KubeSink(api, LayoutChooser("auto"), concurrency=16)
        reporter = Reporter(
            source=source,
            rules=rules,
            plan=Plan(compact=False),
            epsilon=Epsilon(),
            metrics=ReporterMetrics(),
            sink=sink,
            live_within=5.0,
        )
        queries = 0
        original = source.query

        async def counting(*args: Any, **kwargs: Any) -> Any:
            nonlocal queries
            queries += 1
            return await original(*args, **kwargs)

        source.query = counting  # type: ignore[method-assign]
        cycles = []
        answer_total = 0.0
        largest = 0
        for step in range(steps + 1):
            q0 = queries
            a0 = reporter.metrics.answer_bytes._value.get()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            outcome = await reporter.cycle(at=float(t0 + step))
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            if step == 0:
                settle_memory()  # as mco-reporter does after its first cycle
            if not outcome.ok:
                raise RuntimeError(f"cycle {step} failed: {outcome.message}")
            answer = reporter.metrics.answer_bytes._value.get() - a0
            answer_total += answer
            assert outcome.result is not None and outcome.written is not None
            cycles.append(
                Cycle(
                    wall,
                    cpu,
                    queries - q0,
                    int(answer),
                    outcome.written.bytes,
                    outcome.result.changed,
                )
            )
            largest = outcome.written.object_bytes
        return cycles, reporter, largest


def _floor_cpu(prom: Prometheus, at: float, compression: bool) -> float:
    """CPU of json.loads on the same answer (gunzipped first when the reporter asks for gzip):
    what merely reading it costs in Python."""
    import requests

    body = requests.post(
        f"{prom.url}/api/v1/query",
        data={"query": Plan(compact=False).recorded_expr, "time": at},
        headers={"Accept-Encoding": "identity"},
        timeout=60,
    ).content
    packed = gzip.compress(body) if compression else b""
    best = float("inf")
    for _ in range(3):
        c0 = time.process_time()
        json.loads(gzip.decompress(packed) if compression else body)
        best = min(best, time.process_time() - c0)
    return best


def engine_seconds(prom: Prometheus, expr: str, at: float, rounds: int = 7) -> tuple[float, float]:
    """Prometheus' evaluation time of ``expr`` at ``at`` (``stats=all``: evalTotalTime, which
    leaves out the HTTP and the JSON) and the whole answer's wall time, medians of ``rounds``
    after one warm-up."""
    import requests

    evals, walls = [], []
    for _ in range(rounds + 1):
        w0 = time.perf_counter()
        body = requests.post(
            f"{prom.url}/api/v1/query",
            data={"query": expr, "time": at, "stats": "all"},
            timeout=60,
        ).json()
        walls.append(time.perf_counter() - w0)
        evals.append(float(body["data"]["stats"]["timings"]["evalTotalTime"]))
    return statistics.median(evals[1:]), statistics.median(walls[1:])


def backfill(nodes: int, workdir: Path, history: int = 0) -> tuple[Prometheus, int, list[set[str]]]:
    """A Prometheus (not started) holding the synthetic fleet; T0; the nodes changed per step."""
    t0 = (int(time.time()) // 3600 - 3) * 3600  # three hours ago, aligned
    om = workdir / "fleet.om"
    changed = write_fleet(om, nodes, t0, history=history)
    data = workdir / "prom" / "data"
    data.mkdir(parents=True)
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    om.unlink()
    prom = Prometheus(
        workdir / "prom",
        extra_args=["--storage.tsdb.retention.time=30d", "--query.max-samples=100000000"],
    )
    return prom, t0, changed


def run_fleet(nodes: int, workdir: Path, compression: bool = True, history: int = 0) -> FleetResult:
    prom, t0, _changed = backfill(nodes, workdir, history)
    steps = CHANGE_STEPS + QUIET_STEPS
    port = free_port()
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    api_proc = ctx.Process(target=_api_server, args=(port, ready), daemon=True)
    api_proc.start()
    try:
        ready.wait(30)
        prom.start()
        wait_until(
            lambda: prom.value(f"count({series.INTERFERENCE_LEVEL})", at=t0) == nodes,
            timeout=120,
            what="the backfilled fleet",
        )
        cycles, reporter, largest = asyncio.run(
            _run_cycles(prom.url, f"http://127.0.0.1:{port}", t0, steps, compression)
        )
        floor = _floor_cpu(prom, t0 + steps, compression)
        plan = reporter.plan
        plain = engine_seconds(prom, plan.recorded_selector, t0 + steps)
        windowed = engine_seconds(prom, plan.recorded_expr, t0 + steps)
    finally:
        prom.stop()
        api_proc.terminate()
        api_proc.join(10)
    view = reporter.tracker.view()
    enc = msgspec.json.encode
    cluster = whole_objects(view, "cluster")[0]
    compact_entries = {n: msgspec.structs.replace(e, signals=None) for n, e in view.entries.items()}
    compact = whole_objects(view, "cluster", compact_entries)[0]
    per_node = whole_objects(view, "per-node")
    return FleetResult(
        nodes=nodes,
        cycles=cycles,
        floor_cpu=floor,
        cluster_bytes=len(enc(cluster)),
        cluster_compact_bytes=len(enc(compact)),
        per_node_bytes=max(len(enc(o)) for o in per_node[1:]) if len(per_node) > 1 else 0,
        largest_written=largest,
        full_rewrite_bytes=len(enc(cluster)),
        history=history,
        engine_plain=plain,
        engine_windowed=windowed,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench reporter")
    parser.add_argument("--quick", action="store_true", help="200 and 1,000 nodes only")
    parser.add_argument("--nodes", type=int, nargs="*", default=None)
    parser.add_argument(
        "--compression",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="gzip PromQL answers, mco-reporter's default (--no-compression: plain JSON)",
    )
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        help="seconds of one-a-second samples of every series before T0 (300: Prometheus' "
        "whole lookback, as rules at a 1 s interval leave it; 0: none, the fastest backfill)",
    )
    args = parser.parse_args(argv)
    sizes = args.nodes or ([200, 1000] if args.quick else [1000, 5000, 10000])
    if shutil.which("promtool") is None or shutil.which("prometheus") is None:
        print("prometheus and promtool are needed (scripts/setup-system.sh installs them)")
        return 1
    results: list[FleetResult] = []
    print(f"PromQL answers: {'gzip (the default)' if args.compression else 'plain JSON'}")
    with tempfile.TemporaryDirectory(prefix="mco-bench-reporter-") as tmp:
        for n in sizes:
            workdir = Path(tmp) / str(n)
            workdir.mkdir()
            t = time.perf_counter()
            results.append(run_fleet(n, workdir, args.compression, args.history))
            print(f"  fleet of {n} nodes measured in {time.perf_counter() - t:.0f}s", flush=True)
    failures = report(results)
    for f in failures:
        print(f"MISSED: {f}")
    return 1 if failures else 0


def report(results: list[FleetResult]) -> list[str]:
    failures: list[str] = []
    print(
        "\n| nodes | queries/cycle | answer | cycle wall | cycle CPU | CPU / json.loads floor "
        "| bytes/cycle (1 % change) | bytes per changed node | bytes/cycle (no change) "
        "| vs full rewrite |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    per_changed: dict[int, float] = {}
    quiet: dict[int, float] = {}
    for r in results:
        steady = r.cycles[1:]
        change = r.cycles[1 : 1 + CHANGE_STEPS]
        still = r.cycles[1 + CHANGE_STEPS :]
        queries = max(c.queries for c in r.cycles)
        cpu = statistics.median(c.cpu for c in steady)
        wall = statistics.median(c.wall for c in steady)
        answer = statistics.median(c.answer_bytes for c in steady)
        change_bytes = statistics.mean(c.api_bytes for c in change)
        changed_nodes = statistics.mean(c.changed for c in change)
        per_changed[r.nodes] = change_bytes / max(changed_nodes, 1)
        quiet[r.nodes] = statistics.mean(c.api_bytes for c in still)
        print(
            f"| {r.nodes:,} | {queries} | {answer / MIB:.1f} MiB | {wall * 1000:.0f} ms "
            f"| {cpu * 1000:.0f} ms | {cpu / r.floor_cpu:.2f} | {change_bytes / 1024:.1f} KiB "
            f"| {per_changed[r.nodes]:.0f} B | {quiet[r.nodes]:.0f} B "
            f"| {change_bytes / r.full_rewrite_bytes:.4f} |"
        )
        if queries > 3:
            failures.append(f"{r.nodes} nodes: {queries} queries per cycle (target <= 3)")
        if r.nodes == 5000 and cpu > CPU_TARGET:
            failures.append(f"5,000 nodes: {cpu * 1000:.0f} ms CPU per cycle (target <= 250)")
        if r.largest_written > MIB:
            failures.append(f"{r.nodes} nodes: an object of {r.largest_written} bytes (> 1 MiB)")
        first = r.cycles[0]
        print(
            f"  first cycle (creates everything): {first.wall:.1f}s wall, {first.cpu:.2f}s CPU, "
            f"{first.api_bytes / MIB:.1f} MiB written",
            flush=True,
        )
    print(
        "\n| nodes | cluster object | cluster object, --compact | one per-node object "
        "| largest written (auto) |"
    )
    print("|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r.nodes:,} | {r.cluster_bytes / 1024:.0f} KiB "
            f"| {r.cluster_compact_bytes / 1024:.0f} KiB "
            f"| {r.per_node_bytes} B | {r.largest_written / 1024:.0f} KiB |"
        )
    print(
        "\n| nodes | history | recorded query, Prometheus evaluation: plain selector "
        "| windowed (staleAfter) | plain / windowed | whole answer: plain | windowed |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        (plain, plain_wall), (windowed, windowed_wall) = r.engine_plain, r.engine_windowed
        print(
            f"| {r.nodes:,} | {r.history} s | {plain * 1000:.1f} ms "
            f"| {windowed * 1000:.1f} ms | {plain / max(windowed, 1e-9):.2f} "
            f"| {plain_wall * 1000:.0f} ms | {windowed_wall * 1000:.0f} ms |"
        )
    sizes = sorted(per_changed)
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        ratio = per_changed[hi] / per_changed[lo]
        quiet_ratio = quiet[hi] / max(quiet[lo], 1)
        print(
            f"\nbytes per changed node, {hi:,} vs {lo:,} nodes: {ratio:.2f}x (target <= 1.5x); "
            f"no-change cycle: {quiet_ratio:.2f}x (target <= 1.5x)"
        )
        if ratio > 1.5:
            failures.append(f"bytes per changed node grow with the fleet ({ratio:.2f}x)")
        if quiet_ratio > 1.5:
            failures.append(f"a cycle without changes grows with the fleet ({quiet_ratio:.2f}x)")
    return failures


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
