"""Volcano and kube-scheduler driving an extender over HTTP, as their source code does.

The pieces of ``bench.volcano``: a fleet of NodeInfo bodies, pending tasks, an HTTP/1.1 client
that keeps connections the way Go's default transport does, the two schedulers' call
sequences (shared/reference/scheduler-extender-protocols.md §1.5, §2.4), and a meter that
charges the server's CPU to the verb whose phase spent it.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cpu import TICK
from extender.print_config import KUBE_SCHEDULER_HTTP_TIMEOUT, VOLCANO_HTTP_TIMEOUT
from reporter.schema import (
    LAYOUT_LABEL,
    NodeEntry,
    NodeInterferenceReport,
    ObjectMeta,
    ReportStatus,
)
from reporter.schema import encode as encode_report
from testkit import bodies

VOLCANO_CONCURRENCY = 16  # PredicateNodes' workqueue.ParallelizeUntil(ctx, 16, ...)
GO_IDLE_CONNECTIONS = 2  # Go's default transport keeps 2 idle connections per host
VOLCANO_TIMEOUT = VOLCANO_HTTP_TIMEOUT  # the chart's scheduler.volcano.httpTimeout
KUBE_TIMEOUT = KUBE_SCHEDULER_HTTP_TIMEOUT  # the chart's scheduler.kubeScheduler.httpTimeout
REJECT_EVERY = 10  # node i with i % 10 == 0 is unschedulable in the report
TASKS_PER_JOB = 10  # tasks of one job share a role, hence Volcano's predicate error cache
PODS_PER_NODE = range(10, 31)  # -> NodeInfos of 109-296 KB, the reference's 100-300 KB
PLACEHOLDER = b"__MCO_NODE__"


def nodes_to_find(n: int, minimum: int = 100, min_percentage: int = 5) -> int:
    """Feasible nodes a scan looks for (Volcano's CalculateNumOfFeasibleNodesToFind with its
    defaults; kube-scheduler's numFeasibleNodesToFind is the same formula)."""
    if n <= minimum:
        return n
    percentage = max(min_percentage, 50 - n // 125)
    return max(minimum, n * percentage // 100)


# -- request bodies --------------------------------------------------------------------------


class Fleet:
    """N node names and their NodeInfos (one template per pod count, the name spliced in)."""

    def __init__(self, n: int) -> None:
        self.names = [f"bench-node-{i:05d}" for i in range(n)]
        self.templates = [
            bodies.go_json(bodies.node_info(PLACEHOLDER.decode(), tasks=k)).split(PLACEHOLDER)
            for k in PODS_PER_NODE
        ]

    def node_info(self, i: int) -> bytes:
        parts = self.templates[i % len(self.templates)]
        return self.names[i].encode().join(parts)

    def rejected(self, i: int) -> bool:
        return i % REJECT_EVERY == 0


@dataclass
class Task:
    """One pending pod: its TaskInfo, and the allocate body once placed."""

    job: int
    name: str
    pod: dict[str, Any]
    info: bytes

    @classmethod
    def make(cls, index: int) -> Task:
        job, rank = divmod(index, TASKS_PER_JOB)
        pod = bodies.pod(f"bench-job{job}-worker-{rank}", "team-a")
        return cls(job, pod["metadata"]["name"], pod, bodies.go_json(bodies.task_info(pod)))

    def allocate(self, node: str) -> bytes:
        return bodies.go_json({"task": bodies.task_info(self.pod, status=2, node_name=node)})


def write_report(path: Path, fleet: Fleet) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    nodes = {
        name: NodeEntry(
            stamp,
            schedulable=not fleet.rejected(i),
            fallback=False,
            kata_ready=False,
            level=(i % 7) / 10,
            score=100 - (i % 7) * 10,
        )
        for i, name in enumerate(fleet.names)
    }
    report = NodeInterferenceReport(
        ObjectMeta("cluster", labels={LAYOUT_LABEL: "cluster"}), status=ReportStatus(nodes=nodes)
    )
    path.write_bytes(encode_report(report))


# -- an HTTP/1.1 client with Go's connection behaviour ---------------------------------------


@dataclass
class Calls:
    """What one verb's calls cost on the wire, and what they got back."""

    count: int = 0
    request_bytes: int = 0
    response_bytes: int = 0
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    def add(self, sent: int, status: int, received: int, latency: float) -> None:
        self.count += 1
        self.request_bytes += sent
        self.response_bytes += received
        self.latencies.append(latency)
        self.statuses[status] = self.statuses.get(status, 0) + 1


class Client:
    """POSTs over a pool that keeps at most ``idle`` connections, as Go's default transport does
    (with 16 calls in flight most of them open a new connection)."""

    def __init__(
        self, host: str, port: int, *, idle: int = GO_IDLE_CONNECTIONS, tls: ssl.SSLContext | None
    ) -> None:
        self.host, self.port, self.max_idle, self.tls = host, port, idle, tls
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.calls: dict[str, Calls] = {}

    async def post(self, path: str, body: bytes) -> bytes:
        started = time.perf_counter()
        if self.idle:
            reader, writer = self.idle.pop()
        else:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, limit=1 << 20, ssl=self.tls
            )
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "User-Agent: Go-http-client/1.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nAccept-Encoding: gzip\r\n\r\n"
        ).encode()
        writer.writelines((head, body))
        status_line = await reader.readline()
        received = len(status_line)
        length, close = 0, False
        while (line := await reader.readline()) not in (b"\r\n", b""):
            received += len(line)
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "connection" and value.strip().lower() == "close":
                close = True
        answer = await reader.readexactly(length)
        latency = time.perf_counter() - started
        if close or len(self.idle) >= self.max_idle:
            writer.close()
        else:
            self.idle.append((reader, writer))
        status = int(status_line.split()[1])
        calls = self.calls.setdefault(path, Calls())
        calls.add(len(head) + len(body), status, received + 2 + length, latency)
        return answer if status == 200 else b""

    def calls_to(self, path: str) -> int:
        return self.calls[path].count if path in self.calls else 0

    async def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


# -- the sessions ----------------------------------------------------------------------------


class VolcanoScheduler:
    """Volcano's allocate action against one extender: the scan, prioritize, allocate."""

    def __init__(self, client: Client, meter: Meter, fleet: Fleet, tasks: list[Task]) -> None:
        self.client, self.meter, self.fleet, self.tasks = client, meter, fleet, tasks
        self.next_index = 0  # Volcano's lastProcessedNodeIndex
        self.rejections = 0
        self.prioritized_nodes = 0

    async def session(self, limit: int | None = None) -> None:
        """One session over the pending tasks (the first ``limit`` of them: a warm-up)."""
        failed: dict[int, set[int]] = {}  # the predicate error cache, per job (one role)
        meter = self.meter
        for task in self.tasks[:limit]:
            cpu = meter.read()
            passed = await self._scan(task, failed.setdefault(task.job, set()))
            cpu = meter.charge("/volcano/predicate", cpu)
            chosen = passed[0] if passed else None
            if len(passed) >= 2:
                chosen = await self._prioritize(task, passed)
                cpu = meter.charge("/volcano/prioritize", cpu)
            if chosen is not None:
                await self.client.post("/volcano/allocate", task.allocate(self.fleet.names[chosen]))
                meter.charge("/volcano/allocate", cpu)

    def _order(self) -> Iterator[int]:
        n = len(self.fleet.names)
        return ((self.next_index + k) % n for k in range(n))

    async def _scan(self, task: Task, failed: set[int]) -> list[int]:
        need = nodes_to_find(len(self.fleet.names))
        order = self._order()
        passed: list[int] = []
        processed = 0

        async def worker() -> None:
            nonlocal processed
            for i in order:
                if len(passed) >= need:
                    return
                processed += 1
                if i in failed:
                    continue
                body = b'{"task":' + task.info + b',"node":' + self.fleet.node_info(i) + b"}"
                answer = await self.client.post("/volcano/predicate", body)
                if answer and json.loads(answer)["status"]:
                    failed.add(i)
                    self.rejections += 1
                else:
                    passed.append(i)

        await asyncio.gather(*(worker() for _ in range(VOLCANO_CONCURRENCY)))
        self.next_index = (self.next_index + processed) % len(self.fleet.names)
        return passed

    async def _prioritize(self, task: Task, passed: list[int]) -> int:
        self.prioritized_nodes += len(passed)
        nodes = b",".join(self.fleet.node_info(i) for i in passed)
        answer = await self.client.post(
            "/volcano/prioritize", b'{"task":' + task.info + b',"nodes":[' + nodes + b"]}"
        )
        scores: dict[str, float] = json.loads(answer).get("nodeScore") or {} if answer else {}
        index = {self.fleet.names[i]: i for i in passed}
        best = max(scores, key=lambda name: scores[name], default=None)
        return index.get(best, passed[0]) if best is not None else passed[0]


class KubeScheduler:
    """kube-scheduler with the chart's extender entry: per pod one filter with the feasible
    node names (nodeCacheCapable), one prioritize with the survivors; one pod at a time."""

    def __init__(self, client: Client, meter: Meter, fleet: Fleet, pods: int) -> None:
        self.client, self.meter, self.fleet = client, meter, fleet
        self.pods = [self._pod(k) for k in range(pods)]
        self.next_index = 0  # kube-scheduler's nextStartNodeIndex

    @staticmethod
    def _pod(k: int) -> bytes:
        pod = bodies.pod(f"web-{k}-x2x9q", "shop")
        pod["spec"]["schedulerName"] = "default-scheduler"
        return bodies.go_json(pod)

    async def session(self, limit: int | None = None) -> None:
        names = self.fleet.names
        need = nodes_to_find(len(names))
        for pod in self.pods[:limit]:
            cpu = self.meter.read()
            feasible = [names[(self.next_index + k) % len(names)] for k in range(need)]
            self.next_index = (self.next_index + need) % len(names)
            args = {"Nodes": None, "NodeNames": feasible}
            body = b'{"Pod":' + pod + b"," + bodies.go_json(args)[1:]
            answer = await self.client.post("/scheduler/filter", body)
            cpu = self.meter.charge("/scheduler/filter", cpu)
            survivors = (json.loads(answer).get("NodeNames") or []) if answer else feasible
            if len(survivors) >= 2:
                args = {"Nodes": None, "NodeNames": survivors}
                body = b'{"Pod":' + pod + b"," + bodies.go_json(args)[1:]
                await self.client.post("/scheduler/prioritize", body)
                self.meter.charge("/scheduler/prioritize", cpu)


# -- measuring -------------------------------------------------------------------------------


def group_pids(pgid: int) -> list[int]:
    """Every live process in process group ``pgid``: the extender and its workers."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[2]) == pgid:
                        pids.append(int(entry.name))
            except OSError:
                continue  # gone since the listing
    return pids


class Meter:
    """The CPU seconds of a server's processes, read between the phases of a session (the
    phases run one after another, so each verb's share is the CPU spent during its phase)."""

    def __init__(self, pgid: int) -> None:
        self.pids = group_pids(pgid)
        self.by_verb: dict[str, float] = {}

    def read(self) -> float:
        total = 0
        for pid in self.pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / TICK

    def charge(self, verb: str, since: float) -> float:
        now = self.read()
        self.by_verb[verb] = self.by_verb.get(verb, 0.0) + now - since
        return now
