"""The calls the taint mode saves: Volcano-style predicate sessions against the real extender.

The reporter's taint mode (``--taint-nodes``, reporter/taints.py) puts
``mco.io/interference=hard-constraint:NoSchedule`` on nodes whose hard constraint is held.
Volcano's ``predicates`` plugin (TaintToleration) sits before ``extender`` in the tiers, and
kube-scheduler's TaintToleration filter runs before extenders, so a tainted node is dropped
without an HTTP call; a task that tolerates the taint still reaches the extender, which rejects
the node as before.

This benchmark is the scheduler side: one session of T pending tasks over N nodes, of which a
share has a held hard constraint (``schedulable: false`` in the report the real mco-extender
process reads). For each task it walks the nodes from a rotating start as Volcano's
``PredicateNodes`` does, stopping once ``numNodesToFind`` feasible nodes are found (all nodes up
to 100; ``max(100, N x max(5, 50 - N/125) %)`` above), and sends one ~220 KB predicate call per
(task, node) pair that reaches the extender: every pair without the taint mode, only untainted
nodes (and every node for a tolerating task) with it. Two cache models: ``independent`` (T
single-task jobs: Volcano's predicate error cache never helps) and ``one job`` (T tasks of one
role: a node that failed for one task is skipped for the rest, Volcano's default cache).
It counts calls, request bytes and the extender's CPU (``/proc/PID/stat``; summed over
``--rounds`` sessions per mode, the modes alternating, so machine noise hits both alike),
checks that both modes find exactly the same feasible nodes, and prints the ratios.

Run: ``make bench BENCH_ARGS=taint`` or ``.venv/bin/python -m bench taint [--nodes N --tasks T
--tainted SHARE --tolerating SHARE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from reporter.schema import (
    LAYOUT_LABEL,
    NodeEntry,
    NodeInterferenceReport,
    ObjectMeta,
    ReportStatus,
)
from reporter.schema import encode as encode_report
from scripts.procs import Managed, free_port
from testkit import bodies

PREDICATE_TASKS = 21  # running tasks in each NodeInfo: ~220 KB, as Volcano sends per pair
_TICK = os.sysconf("SC_CLK_TCK")


def nodes_to_find(n: int) -> int:
    """Volcano's scan budget with the default options (reference §1.5)."""
    if n <= 100:
        return n
    return min(n, max(100, n * max(5, 50 - n // 125) // 100))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


@dataclass
class Session:
    calls: int = 0
    bytes: int = 0
    cpu: float = 0.0
    seconds: float = 0.0
    feasible: list[frozenset[str]] = field(default_factory=list)  # per task


def write_report(path: Path, names: list[str], tainted: set[str]) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    nodes = {
        n: NodeEntry(
            stamp,
            n not in tainted,
            False,
            True,
            level=0.2,
            score=80.0,
            reasons=["violated:psi_memory_full"] if n in tainted else [],
        )
        for n in names
    }
    report = NodeInterferenceReport(
        ObjectMeta("cluster", labels={LAYOUT_LABEL: "cluster"}), status=ReportStatus(nodes=nodes)
    )
    path.write_bytes(encode_report(report))


def predicate_body(task: int) -> bytes:
    """One predicate body with ``__NODE__`` for the node's name (each task its own pod)."""
    return bodies.go_json(
        {
            "task": bodies.task_info(bodies.pod(f"train-{task}-worker-0", "team-a")),
            "node": bodies.node_info("__NODE__", tasks=PREDICATE_TASKS),
        }
    )


def session(
    url: str,
    pid: int,
    names: list[str],
    tainted: set[str],
    *,
    tasks: int,
    tolerating: int,
    honour_taint: bool,
    one_job: bool,
    http: requests.Session,
) -> Session:
    out = Session()
    budget = nodes_to_find(len(names))
    failed: set[str] = set()  # the predicate error cache of one job's role
    template = predicate_body(0)
    cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
    for t in range(tasks):
        tolerates = t < tolerating
        start = (t * 7919) % len(names)  # Volcano's rotating start index
        feasible: set[str] = set()
        for i in range(len(names)):
            if len(feasible) >= budget:
                break
            name = names[(start + i) % len(names)]
            if honour_taint and name in tainted and not tolerates:
                continue  # TaintToleration: filtered before the extender, no call
            if one_job and name in failed:
                continue  # the error cache: failed for an earlier task of this role
            body = template.replace(b"__NODE__", name.encode())
            answer = http.post(url, data=body, timeout=30)
            answer.raise_for_status()
            out.calls += 1
            out.bytes += len(body)
            if answer.json()["code"] == 0:
                feasible.add(name)
            else:
                failed.add(name)
        out.feasible.append(frozenset(feasible))
    out.seconds = time.perf_counter() - wall0
    out.cpu = cpu_seconds(pid) - cpu0
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench taint")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--nodes", type=int, default=None, help="default 200 (quick: 60)")
    parser.add_argument("--tasks", type=int, default=None, help="default 20 (quick: 4)")
    parser.add_argument("--tainted", type=float, default=0.1, help="share of nodes tainted")
    parser.add_argument(
        "--tolerating", type=float, default=0.0, help="share of tasks tolerating the taint"
    )
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (quick: 1)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    n = args.nodes or (60 if args.quick else 200)
    t = args.tasks or (4 if args.quick else 20)
    out, same = measure(n, t, args.tainted, round(args.tolerating * t), rounds)
    print(json.dumps(out, indent=2))
    print(
        f"{'ok  ' if same else 'MISS'} both modes find the same feasible nodes for every task, "
        "and the taint adds no call"
    )
    return 0 if same else 1


def add(total: Session, one: Session) -> None:
    total.calls += one.calls
    total.bytes += one.bytes
    total.cpu += one.cpu
    total.seconds += one.seconds
    if not total.feasible:
        total.feasible = one.feasible
    assert total.feasible == one.feasible  # the same session each round


def measure(
    n: int, t: int, share: float, tolerating: int, rounds: int
) -> tuple[dict[str, Any], bool]:
    """The figures (per session: the mean of ``rounds``), and the target: both modes found the
    same feasible nodes for every task, and the taint added no call."""
    workdir = Path(tempfile.mkdtemp(prefix="mco-bench-taint-"))
    try:
        return _measure(workdir, n, t, share, tolerating, rounds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _measure(
    workdir: Path, n: int, t: int, share: float, tolerating: int, rounds: int
) -> tuple[dict[str, Any], bool]:
    names = [f"bench-node-{i:04d}" for i in range(n)]
    every = max(1, round(1 / share)) if share > 0 else 0
    tainted = {name for i, name in enumerate(names) if every and i % every == 0}
    report = workdir / "report.json"
    write_report(report, names, tainted)
    port = free_port()
    extender = Managed(
        [sys.executable, "-m", "extender", f"--web.listen-address=127.0.0.1:{port}",
         f"--report-file={report}", "--stale-after=24h", "--workers=1", "--log.level=warn"],
        name="mco-extender", log_path=workdir / "extender.log",
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    results: dict[str, dict[str, Session]] = {}
    with extender, requests.Session() as http:
        extender.wait_http(f"{base}/readyz")
        url = f"{base}/volcano/predicate"
        session(url, extender.pid, names[:3], set(), tasks=1, tolerating=0,
                honour_taint=False, one_job=False, http=http)  # fmt: skip # warm-up
        flags = (("without_taint", False), ("with_taint", True))
        for model, one_job in (("independent", False), ("one_job", True)):
            results[model] = {mode: Session() for mode, _ in flags}
            for r in range(rounds):
                for mode, honour in flags if r % 2 == 0 else flags[::-1]:
                    one = session(url, extender.pid, names, tainted, tasks=t,
                                  tolerating=tolerating, honour_taint=honour, one_job=one_job,
                                  http=http)  # fmt: skip
                    add(results[model][mode], one)
    out: dict[str, Any] = {
        "nodes": n,
        "tasks": t,
        "tainted_nodes": len(tainted),
        "tolerating_tasks": tolerating,
        "nodes_to_find": nodes_to_find(n),
        "rounds": rounds,
        "predicate_body_bytes": len(predicate_body(0).replace(b"__NODE__", names[0].encode())),
    }
    same = True
    for model, modes in results.items():
        off, on = modes["without_taint"], modes["with_taint"]
        same &= off.feasible == on.feasible and on.calls <= off.calls
        out[model] = {
            **{
                mode: {
                    "calls": s.calls // rounds,
                    "MB": round(s.bytes / rounds / 1e6, 1),
                    "extender_cpu_s": round(s.cpu / rounds, 3),
                    "extender_cpu_us_per_call": round(s.cpu / s.calls * 1e6) if s.calls else 0,
                    "client_wall_s": round(s.seconds / rounds, 2),
                }
                for mode, s in modes.items()
            },
            "calls_saved": (off.calls - on.calls) // rounds,
            "calls_ratio": round(on.calls / off.calls, 3),
            "bytes_ratio": round(on.bytes / off.bytes, 3),
            "cpu_ratio": round(on.cpu / off.cpu, 3) if off.cpu else None,
        }
    return out, same


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
