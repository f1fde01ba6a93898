"""Volcano's call volume: bytes and extender CPU per scheduling session, and ``--workers`` scaling.

Volcano calls the predicate once per (task, node) with one full NodeInfo (100-300 KB), 16 calls
at a time, then prioritize once per task with every NodeInfo that passed, then allocate. This
benchmark starts the real ``mco-extender`` (``--report-file`` with a synthetic report of N nodes,
a tenth of them unschedulable; ``--workers W``) and replays such sessions over loopback the way
Volcano's allocate action drives them (shared/reference/scheduler-extender-protocols.md §1.5):

- the predicate scan starts at a rotating node index and stops once ``nodes_to_find(N)`` nodes
  passed (calls already in flight complete), 16 workers, a new connection per call beyond the
  2 idle ones Go's default transport keeps;
- a node the extender rejected is not asked again for the same job's later tasks (Volcano's
  predicate error cache, per job and task role);
- prioritize with every passing NodeInfo (when at least 2 passed), allocate on the best.

Per session it records request and response bytes, the extender's CPU seconds (utime + stime
of every process in its group, all workers, from /proc), wall time and p50/p99/max call
latency against the chart's Volcano timeout. For comparison the kube-scheduler path the chart
configures (``nodeCacheCapable: true``: one filter and one prioritize per pod, node names only).
The baseline, measured in the same run: a null aiohttp server that reads each body and answers
a constant (``python -m bench.volcano --serve-null PORT``), driven by the same sessions.

``--tls`` adds an HTTPS extender: Volcano's client keeps no TLS sessions, so each new connection
is a full handshake. Run: ``make bench BENCH_ARGS=volcano`` (not in a plain ``make bench``: tens
of minutes on 2 cores; ``--quick``: N=100 only, the smoke run; ``--nodes``, ``--tasks``,
``--workers`` pick a part of the grid).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import requests
import trustme
from aiohttp import web

from bench.volcano_replay import (
    KUBE_TIMEOUT,
    PODS_PER_NODE,
    VOLCANO_TIMEOUT,
    Calls,
    Client,
    Fleet,
    KubeScheduler,
    Meter,
    Task,
    VolcanoScheduler,
    nodes_to_find,
    write_report,
)
from extender import volcano
from scripts.procs import Managed, free_port

TARGET_CPU_RATIO = 2.0  # extender CPU per predicate call / the null handler's
FULL_GRID = {"nodes": (100, 1000, 5000), "tasks": (1, 10, 100), "workers": (1, 2)}
QUICK_GRID = {"nodes": (100,), "tasks": (1, 10), "workers": (1, 2)}
MIN_CALLS = {"full": 4000, "quick": 300}  # predicate calls per cell: sessions repeat up to it


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def summarise(calls: dict[str, Calls], sessions: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, c in sorted(calls.items()):
        out[path.rsplit("/", 1)[1] if path.startswith("/volcano") else path] = {
            "calls_per_session": round(c.count / sessions, 1),
            "request_bytes_per_session": round(c.request_bytes / sessions),
            "response_bytes_per_session": round(c.response_bytes / sessions),
            "request_bytes_per_call": round(c.request_bytes / c.count),
            "latency_ms": {
                "p50": round(quantile(c.latencies, 0.5) * 1e3, 2),
                "p99": round(quantile(c.latencies, 0.99) * 1e3, 2),
                "max": round(max(c.latencies) * 1e3, 2),
            },
            "statuses": {str(k): v for k, v in sorted(c.statuses.items())},
        }
    return out


async def measure(scheduler: VolcanoScheduler | KubeScheduler, min_calls: int) -> dict[str, Any]:
    """One unmeasured task (verdict tables, connections), then sessions up to ``min_calls``."""
    client, meter = scheduler.client, scheduler.meter
    await scheduler.session(limit=1)
    client.calls.clear()
    meter.by_verb.clear()
    if isinstance(scheduler, VolcanoScheduler):
        scheduler.rejections = scheduler.prioritized_nodes = 0
    sessions, cpu0, client0, wall0 = 0, meter.read(), time.process_time(), time.time()
    while True:
        await scheduler.session()
        sessions += 1
        if sum(c.count for c in client.calls.values()) >= min_calls or sessions >= 50:
            break
    wall, cpu = time.time() - wall0, meter.read() - cpu0
    await client.close()
    calls = summarise(client.calls, sessions)
    for path, seconds in meter.by_verb.items():
        verb = calls[path.rsplit("/", 1)[1] if path.startswith("/volcano") else path]
        verb["server_cpu_us_per_call"] = round(seconds / client.calls_to(path) * 1e6, 1)
    return {
        "sessions": sessions,
        "wall_s_per_session": round(wall / sessions, 4),
        "server_cpu_s_per_session": round(cpu / sessions, 4),
        "client_cpu_s_per_session": round((time.process_time() - client0) / sessions, 4),
        "load_average": round(os.getloadavg()[0], 1),  # other work on the machine, if any
        "calls": calls,
    }


# -- the run ---------------------------------------------------------------------------------


def serve_null(port: int) -> None:
    """The baseline: aiohttp reading each body and answering a constant of the route's shape."""
    answers = {
        "/volcano/predicate": b'{"status":"","code":0}',
        "/volcano/prioritize": b'{"nodeScore":{},"errorMessage":""}',
        "/volcano/allocate": b'{"errorMessage":""}',
    }

    def route(answer: bytes) -> Any:
        async def handle(request: web.Request) -> web.Response:
            await request.read()
            return web.Response(body=answer, content_type="application/json")

        return handle

    app = web.Application(client_max_size=1 << 30)
    for path, answer in answers.items():
        app.router.add_post(path, route(answer))
    app.router.add_get("/healthz", lambda _r: web.Response(text="ok"))  # type: ignore[arg-type,return-value]
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


@dataclass
class Server:
    """A server under test: the null handler or mco-extender (``workers``; HTTPS with ``ca``)."""

    name: str
    process: Managed
    port: int
    workers: int = 1
    ca: str | None = None  # the CA file of an HTTPS server

    @property
    def url(self) -> str:
        return f"{'https' if self.ca else 'http'}://127.0.0.1:{self.port}"

    def client_tls(self) -> ssl.SSLContext | None:
        """Like Go's default client: verifies the server, keeps no TLS sessions to resume, so
        every new connection makes a full handshake."""
        return ssl.create_default_context(cafile=self.ca) if self.ca else None

    def warm(self) -> None:
        """Ready, and (with several workers) every worker loaded: the kernel spreads
        connections, so a probe answered 200 many times in a row on new connections has
        reached each of them."""
        probe = f"{self.url}/{'healthz' if self.name == 'null' else 'readyz'}"
        verify: str | bool = self.ca or True
        self.process.wait_http(probe, timeout=60, verify=verify)
        deadline = time.monotonic() + 60
        hits = 0
        while hits < 20 * self.workers and time.monotonic() < deadline:
            answer = requests.get(probe, timeout=5, verify=verify, headers={"Connection": "close"})
            hits = hits + 1 if answer.status_code == 200 else 0
            time.sleep(0.02)


def null_server(workdir: Path) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "bench.volcano", "--serve-null", str(port)]
    return Server("null", Managed(argv, name="null-aiohttp", log_path=workdir / "null.log"), port)


def extender(workdir: Path, report: Path, workers: int, *, tls: bool = False) -> Server:
    """mco-extender with public flags only. Volcano's prioritize carries every passing
    NodeInfo: nodes_to_find(N) x ~200 KB passes the default 64 MiB for N of about 800 to
    5,500 (docs/benchmarks.md), so the bench raises the bounds to measure the cost, not a 413."""
    port, name = free_port(), f"workers={workers}{' tls' if tls else ''}"
    argv = [sys.executable, "-m", "extender", f"--web.listen-address=127.0.0.1:{port}",
            f"--report-file={report}", "--stale-after=24h", f"--workers={workers}",
            "--log.level=warn", "--max-body-size=256MiB", "--max-body-memory=2GiB"]  # fmt: skip
    ca = None
    if tls:
        authority = trustme.CA()
        leaf = authority.issue_cert("127.0.0.1")
        leaf.cert_chain_pems[0].write_to_path(str(workdir / "server.crt"))
        leaf.private_key_pem.write_to_path(str(workdir / "server.key"))
        authority.cert_pem.write_to_path(ca := str(workdir / "ca.crt"))
        config = workdir / "web.yml"
        config.write_text(
            json.dumps({"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"}})
        )
        argv.append(f"--web.config.file={config}")
    log = workdir / f"extender-{name.replace(' ', '-').replace('=', '')}.log"
    return Server(name, Managed(argv, name=f"mco-extender {name}", log_path=log), port, workers, ca)


def decode_costs(fleet: Fleet) -> dict[str, dict[str, float]]:
    """In-process: the predicate's fast path (the body up to the node's ``State``) against a
    full decode of the same body with the same structs (the fallback), medians in us."""
    full = msgspec.json.Decoder(volcano.PredicateArgs)
    task = Task.make(0).info
    out = {}
    for pods in (PODS_PER_NODE[0], PODS_PER_NODE[-1]):
        info = b"bench-node".join(fleet.templates[pods - PODS_PER_NODE[0]])
        body = b'{"task":' + task + b',"node":' + info + b"}"
        assert volcano.decode_predicate(body) == full.decode(body)
        out[f"{pods} pods, {len(body) // 1000} KB"] = {
            "fast_path": _median_us(volcano.decode_predicate, body, 300),
            "full_decode": _median_us(full.decode, body, 100),
        }
    return out


def _median_us(call: Callable[[bytes], object], body: bytes, times: int) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        call(body)
        samples.append(time.perf_counter() - started)
    return round(statistics.median(samples) * 1e6, 1)


def run_cells(
    server: Server, fleet: Fleet, tasks: tuple[int, ...], min_calls: int, *, kube: bool
) -> dict[str, Any]:
    """Volcano sessions of each T tasks against ``server`` (with ``kube``: only the
    kube-scheduler path, for max(T) pods)."""
    cells: dict[str, Any] = {}
    meter = Meter(server.process.pid)
    port, tls = server.port, server.client_tls()
    n = len(fleet.names)
    for t in () if kube else tasks:
        client = Client("127.0.0.1", port, tls=tls)
        replay = VolcanoScheduler(client, meter, fleet, [Task.make(k) for k in range(t)])
        result = asyncio.run(measure(replay, min_calls))
        sessions = result["sessions"]
        result["rejections_per_session"] = round(replay.rejections / sessions, 1)
        result["prioritized_nodes_per_session"] = round(replay.prioritized_nodes / sessions, 1)
        cells[f"T={t}"] = result
        print(f"  N={n} T={t}: {_brief(result)}", flush=True)
    if kube:
        pods = max(tasks)
        sched = KubeScheduler(Client("127.0.0.1", port, tls=tls), meter, fleet, pods)
        result = asyncio.run(measure(sched, min_calls // 4))
        cells[f"kube pods={pods}"] = result
        print(f"  N={n} kube-scheduler, {pods} pods: {_brief(result)}", flush=True)
    return cells


def _brief(result: dict[str, Any]) -> str:
    per_call = {verb: c.get("server_cpu_us_per_call") for verb, c in result["calls"].items()}
    return (
        f"wall {result['wall_s_per_session']} s/session, extender CPU "
        f"{result['server_cpu_s_per_session']} s/session, us per call {per_call}"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench volcano")
    parser.add_argument("--quick", action="store_true", help="N=100 only (the smoke run)")
    parser.add_argument("--nodes", type=int, nargs="+", help="node counts (default 100 1000 5000)")
    parser.add_argument("--tasks", type=int, nargs="+", help="tasks per session (1 10 100)")
    parser.add_argument("--workers", type=int, nargs="+", help="--workers values (1 2)")
    parser.add_argument(
        "--tls", action="store_true", help="also an HTTPS extender (one handshake per connection)"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--serve-null", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_null:
        serve_null(args.serve_null)
        return 0
    grid = dict(QUICK_GRID if args.quick else FULL_GRID)
    if args.nodes:
        grid["nodes"] = tuple(args.nodes)
    if args.tasks:
        grid["tasks"] = tuple(args.tasks)
    if args.workers:
        grid["workers"] = tuple(args.workers)
    min_calls = MIN_CALLS["quick" if args.quick else "full"]
    workdir = Path(tempfile.mkdtemp(prefix="mco-bench-volcano-"))
    try:
        results = _bench(workdir, grid, min_calls, tls=args.tls)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return _check(results)


def _bench(
    workdir: Path, grid: dict[str, tuple[int, ...]], min_calls: int, *, tls: bool
) -> dict[str, Any]:
    results: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "grid": grid,
        "nodes_to_find": {str(n): nodes_to_find(n) for n in grid["nodes"]},
        "volcano_timeout_ms": VOLCANO_TIMEOUT * 1e3,
        "kube_timeout_ms": KUBE_TIMEOUT * 1e3,
        "runs": {},
    }
    for n in grid["nodes"]:
        fleet = Fleet(n)
        if "decode_us" not in results:
            results["decode_us"] = decode_costs(fleet)
        report = workdir / f"report-{n}.json"
        write_report(report, fleet)
        servers = [null_server(workdir)]
        servers += [extender(workdir, report, w) for w in grid["workers"]]
        if tls:
            servers.append(extender(workdir, report, 1, tls=True))
        with contextlib.ExitStack() as stack:
            for server in servers:
                stack.enter_context(server.process)
            for server in servers:
                server.warm()
            runs: dict[str, Any] = {server.name: {} for server in servers}
            # Each T in turn on every server, the order flipped each time: noise from other
            # work on the machine hits all alike.
            for k, t in enumerate(grid["tasks"]):
                for server in servers[:: 1 if k % 2 == 0 else -1]:
                    print(f"{server.name}, N={n}:", flush=True)
                    runs[server.name].update(run_cells(server, fleet, (t,), min_calls, kube=False))
            first = servers[1]
            print(f"{first.name}, N={n}:", flush=True)
            runs[first.name].update(
                run_cells(first, fleet, (max(grid["tasks"]),), min_calls, kube=True)
            )
        results["runs"][str(n)] = runs
    results["summary"] = summary(results)
    results["model"] = model(results["summary"])
    return results


def _cells(results: dict[str, Any], run: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for n, runs in results["runs"].items():
        for name, cell in runs.get(run, {}).items():
            if name.startswith("T="):
                yield f"N={n} {name}", cell


def _per_call(results: dict[str, Any], run: str, verb: str) -> float | None:
    """CPU us per call of ``verb`` over all of ``run``'s Volcano cells (weighted by calls)."""
    cpu = calls = 0.0
    for _, cell in _cells(results, run):
        c = cell["calls"].get(verb)
        if c is not None and c.get("server_cpu_us_per_call") is not None:
            count = c["calls_per_session"] * cell["sessions"]
            cpu += c["server_cpu_us_per_call"] * count
            calls += count
    return round(cpu / calls, 1) if calls else None


def _runs(results: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(name for runs in results["runs"].values() for name in runs))


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """Per-call figures the sizing model uses (over all cells, weighted by calls), the ratio
    to the null handler, and what a second worker did to the wall time of a session."""
    out: dict[str, Any] = {}
    for run in _runs(results):
        for verb in ("predicate", "prioritize", "allocate"):
            if (value := _per_call(results, run, verb)) is not None:
                out[f"{run} {verb} cpu_us_per_call"] = value
        cpu = nodes = 0.0
        for _, c in _cells(results, run):
            if "prioritize" in c["calls"] and c["prioritized_nodes_per_session"]:
                prio = c["calls"]["prioritize"]
                cpu += prio["server_cpu_us_per_call"] * prio["calls_per_session"] * c["sessions"]
                nodes += c["prioritized_nodes_per_session"] * c["sessions"]
        if nodes:
            out[f"{run} prioritize cpu_us_per_node_info"] = round(cpu / nodes, 1)
    ext = out.get("workers=1 predicate cpu_us_per_call")
    null = out.get("null predicate cpu_us_per_call")
    if ext and null:
        out["predicate_cpu_ratio_extender_over_null"] = round(ext / null, 3)
    for n, runs in results["runs"].items():
        for name, cell in runs.get("workers=1", {}).items():
            if name.startswith("kube"):
                pods = int(name.split("=")[1])
                cpu_ms = cell["server_cpu_s_per_session"] / pods * 1e3
                out[f"N={n} kube cpu_ms_per_pod"] = round(cpu_ms, 3)
                out[f"N={n} kube request_bytes_per_pod"] = round(
                    sum(c["request_bytes_per_session"] for c in cell["calls"].values()) / pods
                )
    speedups = {}
    for key, cell in _cells(results, "workers=2"):
        n, t = key.split()
        one = results["runs"][n[2:]]["workers=1"][t]
        speedups[key] = round(one["wall_s_per_session"] / cell["wall_s_per_session"], 2)
    out["wall_speedup_workers2_over_1"] = speedups
    return out


PASS_RATE = 0.9  # the share of asked nodes the extender passes, as in the bench's report
MODEL_NODES = (100, 300, 500, 1000, 2000, 3000, 5000, 10000)
NODE_INFO_BYTES = 200_000  # the bench's mean NodeInfo
MODEL_RATES = (1, 5, 20)  # tasks per second reaching the extender


def model(summary_: dict[str, Any], run: str = "workers=1") -> dict[str, Any]:
    """Volcano's cost per task at N nodes from the measured per-call CPU: C(N) predicate calls
    (nodes_to_find(N) / PASS_RATE, at most N), one prioritize with the nodes that passed, one
    allocate; and the tasks per second one worker process serves at 60 % of a core."""
    pred = summary_.get(f"{run} predicate cpu_us_per_call")
    node = summary_.get(f"{run} prioritize cpu_us_per_node_info")
    alloc = summary_.get(f"{run} allocate cpu_us_per_call") or 0.0
    if pred is None or node is None:
        return {}
    rows = {}
    for n in MODEL_NODES:
        need = min(nodes_to_find(n), int(n * PASS_RATE))  # the nodes that pass
        calls = min(n, round(need / PASS_RATE))
        cpu_ms = (calls * pred + need * node + alloc) / 1e3
        rows[str(n)] = {
            "predicate_calls_per_task": calls,
            "prioritize_node_infos": need,
            "mb_per_task": round((calls + need) * NODE_INFO_BYTES / 1e6),
            "prioritize_body_mb": round(need * NODE_INFO_BYTES / 1e6),
            "cpu_ms_per_task": round(cpu_ms),
            "tasks_per_s_per_worker_at_60pct": round(600 / cpu_ms, 1),
            "processes_for_tasks_per_s": {
                str(rate): math.ceil(rate * cpu_ms / 600) for rate in MODEL_RATES
            },
        }
    return rows


def _check(results: dict[str, Any]) -> int:
    missed = 0
    bad = [
        f"{n} {run} {cell_name} {verb}: {calls['statuses']}"
        for n, runs in results["runs"].items()
        for run, cells in runs.items()
        for cell_name, cell in cells.items()
        for verb, calls in cell["calls"].items()
        if set(calls["statuses"]) != {"200"}
    ]
    for line in bad:
        print(f"MISS non-200 answers: {line}")
    missed += bool(bad)
    slow = [
        f"N={n} {run} {cell_name}: predicate p99 {p99} ms"
        for n, runs in results["runs"].items()
        for run, cells in runs.items()
        if run != "null"
        for cell_name, cell in cells.items()
        if "predicate" in cell["calls"]
        and (p99 := cell["calls"]["predicate"]["latency_ms"]["p99"]) > VOLCANO_TIMEOUT * 1e3
    ]
    for line in slow:
        print(f"MISS over Volcano's {VOLCANO_TIMEOUT * 1e3:.0f} ms timeout: {line}")
    missed += bool(slow)
    ratio = results["summary"].get("predicate_cpu_ratio_extender_over_null")
    if ratio is not None:
        ok = ratio <= TARGET_CPU_RATIO
        missed += not ok
        print(
            f"{'ok  ' if ok else 'MISS'} extender CPU per predicate call / null handler's: "
            f"{ratio:.3g} (target <= {TARGET_CPU_RATIO})"
        )
    for n, runs in results["runs"].items():  # informational: one call, tens of MB
        for run, cells in runs.items():
            p99 = [c["calls"]["prioritize"]["latency_ms"]["p99"]
                   for c in cells.values() if "prioritize" in c["calls"]]  # fmt: skip
            if p99 and max(p99) > VOLCANO_TIMEOUT * 1e3:
                print(f"note N={n} {run}: prioritize p99 up to {max(p99):.0f} ms, over the timeout")
    if not bad and not slow:
        print(f"ok   every call answered 200, predicate p99 under {VOLCANO_TIMEOUT * 1e3:.0f} ms")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
