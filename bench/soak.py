"""Stability over hours: the local stack plus a synthetic fleet, with real stress and outages.

``make soak DURATION=24h`` (a 20-minute run is part of ``make bench``): the processes of
``make run`` (mco-exporter on this host, a real Prometheus evaluating the generated rules,
mco-reporter, mco-extender), started with their public flags, with a synthetic fleet of
``--nodes`` more nodes in the same Prometheus. While it runs:

- a scheduler stand-in calls the extender as kube-scheduler (filter + prioritize over every
  node) and Volcano (predicate with a ~220 KB NodeInfo, prioritize) do, twice a second;
- every ``--stress-every``, real load for ``--stress-for`` (stress-ng on the disk, then a pod
  thrashing in its own memory limit, in turn);
- every ``--outage-every``, Prometheus is stopped for ``--outage-for`` and started again: the
  reporter's source is down, so once ``staleAfter`` has passed no node may be presented as fresh.

Every ``--sample`` it records RSS, CPU seconds, open files and threads of every MCO process and
of Prometheus, and the asyncio tasks of the reporter and the extender (their
``mco_*_asyncio_tasks`` gauges), to ``samples.jsonl``; events (stress, outages, failures) go to
``events.jsonl``. The run fails on: a process that exits or restarts; any 5xx from any MCO server;
any node fresh at the extender while its source has been down for longer than ``staleAfter``;
nodes not fresh again within ``RECOVERY`` after an outage; growth after warm-up beyond the
``BOUNDS`` below. ``python -m bench.soak analyse DIR`` judges a recorded run again.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import math
import os
import re
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import requests
import yaml

from bench.kubeapi import CONFIG_PATH
from mco import selfmetrics
from mco.flags import duration
from rulegen.durations import format_duration
from rulegen.model import DEFAULT_NAME, from_spec
from scripts.local_stack import LocalStack, Ports, StackSettings
from scripts.procs import Managed, ScrapeTarget, free_port, wait_until
from scripts.stress import StressUnavailableError
from testkit import bodies

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / ".cache" / "soak"
CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
PAGE: Final = os.sysconf("SC_PAGE_SIZE")
# The fleet's profiles (testkit/fleet.py): calm, busy and interfered nodes, pods.
FLEET_PROFILES: Final = "typical,idle,busy,hot,pods"
# After an outage ends the nodes must be fresh again within a window of samples and a margin.
RECOVERY: Final = 180.0
STRESS_KINDS: Final = ("io", "memory")
# Recorded, not judged: the API stand-in is test infrastructure, not part of MCO.
STANDIN: Final = "kube-api-standin"
TASK_GAUGES: Final = {
    "mco-reporter": selfmetrics.REPORTER_ASYNCIO_TASKS,
    "mco-extender": selfmetrics.EXTENDER_ASYNCIO_TASKS,
    "mco-rulegen": selfmetrics.RULEGEN_ASYNCIO_TASKS,
}
# With --api, each DetectionRuleConfig edit must be applied by the controller within this.
CONFIG_APPLY: Final = 120.0
# The edits alternate between these io limits (both valid, both above what idle nodes reach).
IO_LIMITS: Final = (0.5, 0.6)


@dataclass(frozen=True)
class Bound:
    """Allowed growth from the median of the first window after warm-up to the median of the
    last window: ``end <= start * (1 + ratio) + absolute``."""

    ratio: float
    absolute: float

    def limit(self, start: float) -> float:
        return start * (1 + self.ratio) + self.absolute

    def __str__(self) -> str:
        return f"x{1 + self.ratio:g} + {self.absolute:g}"


MIB: Final = 2**20
# Per figure. Memory is judged by anonymous resident memory (heap): total RSS also counts file
# pages, and Prometheus's RSS grows for hours with the head chunks it memory-maps from disk
# (reclaimable page cache, compacted every 2 h), which is not a leak. Prometheus gets a wider
# bound: its heap grows with the head block until the first compaction.
BOUNDS: Final[dict[str, Bound]] = {
    "anon": Bound(0.20, 16 * MIB),
    "fds": Bound(0.0, 8),
    "threads": Bound(0.0, 8),
    "tasks": Bound(0.0, 5),
    "cpu_rate": Bound(0.5, 0.02),  # cores, over the window
}
PROMETHEUS_ANON: Final = Bound(0.5, 64 * MIB)
MEMORY: Final = ("rss", "anon")


def _trend(g: Growth) -> str:
    if g.per_hour is None:
        return "-"
    return f"{g.per_hour / MIB:+.2f} MiB" if g.metric in MEMORY else f"{g.per_hour:+.2g}"


def _clock(seconds: float) -> str:
    h, rest = divmod(int(seconds), 3600)
    return f"{h}h{rest // 60:02d}m{rest % 60:02d}s"


# --- recording ----------------------------------------------------------------------------
def proc_stats(pid: int) -> dict[str, float]:
    """RSS and its anonymous part (bytes: resident minus file-backed and shared pages), CPU
    (user+system seconds), open files and threads of one process."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    threads = int(fields[17])
    statm = Path(f"/proc/{pid}/statm").read_text().split()
    rss, shared = int(statm[1]) * PAGE, int(statm[2]) * PAGE
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return {"pid": pid, "rss": rss, "anon": rss - shared, "cpu": cpu, "fds": fds,
            "threads": threads}  # fmt: skip


def gauge(text: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else None


@dataclass
class Recorder:
    """Appends samples and events as JSON lines, so a run can be judged (and read) while it
    goes and after it was cut short."""

    out: Path
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def _append(self, name: str, obj: dict[str, Any]) -> None:
        with self._lock, (self.out / name).open("a") as f:
            f.write(json.dumps(obj, sort_keys=True) + "\n")

    def event(self, kind: str, **detail: Any) -> None:
        now = time.time()
        self._append(
            "events.jsonl", {"t": now, "elapsed": now - self.started, "kind": kind, **detail}
        )
        print(f"[{_clock(now - self.started)}] {kind} {detail or ''}", flush=True)

    def sample(self, procs: dict[str, dict[str, float]]) -> None:
        now = time.time()
        self._append("samples.jsonl", {"t": now, "elapsed": now - self.started, "procs": procs})


class SchedulerLoad(threading.Thread):
    """Calls the extender as both schedulers do and counts the answers by status."""

    def __init__(self, base: str, nodes: list[str], recorder: Recorder, period: float) -> None:
        super().__init__(name="scheduler-load", daemon=True)
        self.stop = threading.Event()
        self.recorder = recorder
        self.period = period
        self.calls = {
            "/scheduler/filter": bodies.kube_args(nodes),
            "/scheduler/prioritize": bodies.kube_args(nodes),
            "/volcano/predicate": bodies.volcano_predicate(nodes[0], tasks=21),
            "/volcano/prioritize": bodies.volcano_prioritize(nodes[:50], tasks=3),
        }
        self.base = base
        self.statuses: dict[str, int] = {}
        self.errors = 0

    def run(self) -> None:
        with requests.Session() as session:
            while not self.stop.wait(self.period):
                for path, body in self.calls.items():
                    self._call(session, path, body)

    def _call(self, session: requests.Session, path: str, body: bytes) -> None:
        try:
            r = session.post(self.base + path, data=body, timeout=30)
        except requests.RequestException as exc:
            self.errors += 1
            self.recorder.event("request-error", path=path, error=type(exc).__name__)
            return
        key = str(r.status_code)
        self.statuses[key] = self.statuses.get(key, 0) + 1
        if r.status_code >= 500:
            self.recorder.event("5xx", path=path, status=r.status_code, body=r.text[:200])


@dataclass
class Settings:
    duration: float
    nodes: int
    sample: float
    warmup: float
    stress_every: float
    stress_for: float
    outage_every: float
    outage_for: float
    out: Path
    api: bool = False
    config_every: float = 900.0
    stale_after: float | None = None  # report.staleAfter; None: the shipped default


class ProcessGone(Exception):
    """A soaked process exited or was replaced: the run stops there and fails."""


class Soak:
    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.recorder = Recorder(settings.out)
        fleet_port = free_port()
        self.fleet = Managed(
            [
                sys.executable,
                "-m",
                "testkit.fleet",
                f"--port={fleet_port}",
                f"--nodes={settings.nodes}",
                f"--profiles={FLEET_PROFILES}",
            ],
            name="fleet",
            log_path=settings.out / "fleet.log",
        )
        rule_config = None
        if settings.stale_after is not None:
            # A shorter staleAfter lets a short run check freshness through an outage.
            rule_config = settings.out / "detectionruleconfig.yaml"
            config = from_spec(
                {"report": {"staleAfter": format_duration(round(settings.stale_after))}}
            )
            rule_config.write_text(yaml.safe_dump(config.to_object()))
        self.stack = LocalStack(
            StackSettings(
                workdir=settings.out / "stack",
                ports=Ports(0, 0, 0, 0),
                node="soak-node",
                rule_config=rule_config,
            )
        )
        prometheus = self.stack.prometheus
        self.fleet_address = f"127.0.0.1:{fleet_port}"
        prometheus.targets.append(ScrapeTarget("mco-fleet", self.fleet_address))
        # Prometheus's own metrics (rule group durations, queries by handler, head chunks, GC)
        # stay in the run's TSDB, to tell why its CPU moved if it did.
        prometheus.targets.append(ScrapeTarget("prometheus", f"127.0.0.1:{prometheus.port}"))
        self.metrics_urls = {
            "mco-reporter": f"http://127.0.0.1:{self.stack.ports.reporter}/metrics",
            "mco-extender": f"{self.stack.extender_url}/metrics",
        }
        self.kubeapi: Managed | None = None
        self.rulegen: Managed | None = None
        self.generation = 1  # of the DetectionRuleConfig the stand-in holds
        self.config_due: float | None = None  # when the last edit must be applied by
        if settings.api:
            self.kubeapi = self._through_the_api(self.kubeconfig)
            self.rulegen = self._rulegen_controller(self.kubeconfig)
        self.stale_after = float(self.stack.config.report.stale_after)
        self.pids: dict[str, int] = {}
        self.outage_since: float | None = None
        self.fresh_while_down = 0
        self.freshness_checks = 0  # per outage: proof the check ran, in the outage-end event
        self.unrecovered = 0

    def _through_the_api(self, kubeconfig: Path) -> Managed:
        """The reporter writes the report to the API stand-in (with its Lease and its watch of
        the DetectionRuleConfig) and the extender watches it there, as in a cluster, instead of
        the file of `make run`."""
        reporter, extender = self.stack.reporter, self.stack.extender
        # The stand-in's object is the config (a file would stop the reporter following it).
        config = self.stack.settings.rule_config
        reporter.argv = [
            a for a in reporter.argv if not a.startswith(("--output=", "--rule-config="))
        ]
        reporter.argv += [f"--kubeconfig={kubeconfig}", "--leader-elect-namespace=mco"]
        extender.argv = [a for a in extender.argv if not a.startswith("--report-file=")]
        extender.argv += [f"--kubeconfig={kubeconfig}"]
        return Managed(
            [
                sys.executable,
                "-m",
                "bench.kubeapi",
                f"--kubeconfig={kubeconfig}",
                *([f"--rule-config={config}"] if config else []),
            ],
            name="kube-api-standin",
            log_path=self.s.out / "kubeapi.log",
        )

    @property
    def kubeconfig(self) -> Path:
        return self.s.out / "kubeconfig.yaml"

    def _rulegen_controller(self, kubeconfig: Path) -> Managed:
        """mco-rulegen's controller following the stand-in's DetectionRuleConfig (and its guard
        reading the stack's Prometheus), applying the PrometheusRule there."""
        port = free_port()
        self.metrics_urls["mco-rulegen"] = f"http://127.0.0.1:{port}/metrics"
        return Managed(
            [sys.executable, "-m", "rulegen", "controller", f"--kubeconfig={kubeconfig}",
             f"--prometheus-url={self.stack.prometheus.url}",
             f"--web.listen-address=127.0.0.1:{port}", "--leader-elect-namespace=mco"],
            name="mco-rulegen", log_path=self.s.out / "stack" / "rulegen.log",
        )  # fmt: skip

    def _edit_config(self) -> None:
        """A user's edit of the DetectionRuleConfig: the controller, the reporter and the
        extender all follow it (new generation, another io limit)."""
        server = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        self.generation += 1
        limit = IO_LIMITS[self.generation % 2]
        r = requests.patch(
            f"{server}{CONFIG_PATH}/{DEFAULT_NAME}",
            json={"metadata": {"generation": self.generation},
                  "spec": {"hardConstraints": {"psiIOSomeMax": limit}}},
            headers={"Content-Type": "application/merge-patch+json"}, timeout=10,
        )  # fmt: skip
        r.raise_for_status()
        self.config_due = time.monotonic() + CONFIG_APPLY
        self.recorder.event("config-edit", generation=self.generation, psiIOSomeMax=limit)

    def _check_config(self, metrics: str) -> None:
        if self.config_due is None:
            return
        if gauge(metrics, selfmetrics.RULEGEN_APPLIED_GENERATION) == self.generation:
            waited = time.monotonic() - self.config_due + CONFIG_APPLY
            self.recorder.event(
                "config-applied", generation=self.generation, after=round(waited, 1)
            )
            self.config_due = None
        elif time.monotonic() > self.config_due:
            self.recorder.event("config-not-applied", generation=self.generation)
            self.config_due = None

    def processes(self) -> dict[str, Managed]:
        s = self.stack
        procs = {
            "mco-exporter": s.exporter,
            "mco-reporter": s.reporter,
            "mco-extender": s.extender,
            "prometheus": s.prometheus,
        }
        if self.rulegen is not None:
            procs["mco-rulegen"] = self.rulegen
        if self.kubeapi is not None:
            procs[STANDIN] = self.kubeapi
        return procs

    def run(self) -> int:
        rec, s = self.recorder, self.s
        rec.event(
            "start", settings={k: str(v) if isinstance(v, Path) else v for k, v in vars(s).items()}
        )
        self.fleet.start()
        self.fleet.wait_http(f"http://{self.fleet_address}/", timeout=60)
        load: SchedulerLoad | None = None
        try:
            if self.kubeapi is not None:
                self.kubeapi.start()
                wait_until(lambda: (s.out / "kubeconfig.yaml").exists(), timeout=60,
                           what="the API stand-in")  # fmt: skip
            self.stack.start()
            if self.rulegen is not None:
                self.rulegen.start()
                self.rulegen.wait_http(self.metrics_urls["mco-rulegen"], timeout=60)
            self.pids = {name: p.pid for name, p in self.processes().items()}
            nodes = ["soak-node"] + [f"node-{i:05d}" for i in range(s.nodes)]
            load = SchedulerLoad(self.stack.extender_url, nodes, rec, period=0.5)
            load.start()
            with contextlib.suppress(ProcessGone):  # recorded as a "restart" event
                self._loop()
        finally:
            if load is not None:
                load.stop.set()
                load.join(timeout=60)
                rec.event("scheduler-calls", statuses=load.statuses, errors=load.errors)
            if self.rulegen is not None:
                self.rulegen.stop()
            self.stack.stop()
            self.fleet.stop()
            if self.kubeapi is not None:
                self.kubeapi.stop()
            rec.event("end")
        verdict = judge(load_run(s.out), s.warmup)
        print(verdict.table())
        (s.out / "verdict.json").write_text(json.dumps(verdict.summary(), indent=2))
        return 0 if verdict.ok else 1

    def _loop(self) -> None:
        s, rec = self.s, self.recorder
        start = time.monotonic()
        next_sample = next_stress = start
        next_outage = start + s.outage_every
        next_config = start + s.config_every if self.rulegen is not None else math.inf
        stress_until = outage_until = None
        stress_turn = 0
        last_progress = start
        while (now := time.monotonic()) < start + s.duration:
            if stress_until is None and now >= next_stress and now > start + s.warmup / 2:
                kind = STRESS_KINDS[stress_turn % len(STRESS_KINDS)]
                stress_turn += 1
                try:
                    self.stack.start_load(kind)
                    rec.event("stress-start", load=kind)
                except (StressUnavailableError, OSError) as exc:
                    rec.event("stress-unavailable", load=kind, error=str(exc))
                stress_until = now + s.stress_for
                next_stress = now + s.stress_every
            if stress_until is not None and now >= stress_until:
                self.stack.stop_load()
                rec.event("stress-stop")
                stress_until = None
            if outage_until is None and now >= next_outage:
                self.stack.prometheus.stop()
                self.outage_since = time.time()
                outage_until = now + s.outage_for
                next_outage = now + s.outage_every
                rec.event("outage-start")
            if outage_until is not None and now >= outage_until:
                self.stack.prometheus.start()
                self.pids["prometheus"] = self.stack.prometheus.pid
                rec.event("outage-end", freshness_checks=self.freshness_checks)
                self.freshness_checks = 0
                self._await_recovery()
                self.outage_since = outage_until = None
            if now >= next_config and self.config_due is None:
                self._edit_config()
                next_config = now + s.config_every
            if now >= next_sample:
                self._sample()
                next_sample = now + s.sample
            if now - last_progress >= 300:
                last_progress = now
                rec.event("progress")
            time.sleep(0.5)
        if stress_until is not None:
            self.stack.stop_load()
        if outage_until is not None:
            self.stack.prometheus.start()
            self.pids["prometheus"] = self.stack.prometheus.pid

    def _sample(self) -> None:
        procs: dict[str, dict[str, float]] = {}
        for name, proc in self.processes().items():
            if name == "prometheus" and self.outage_since is not None:
                continue
            if not proc.alive or proc.pid != self.pids[name]:
                self.recorder.event("restart", process=name, log=proc.log_tail(10))
                raise ProcessGone(name)
            with contextlib.suppress(OSError):
                procs[name] = proc_stats(proc.pid)
        for name, url in self.metrics_urls.items():
            r = requests.get(url, timeout=10)
            if r.status_code >= 500:
                self.recorder.event("5xx", path=url, status=r.status_code)
            if (value := gauge(r.text, TASK_GAUGES[name])) is not None and name in procs:
                procs[name]["tasks"] = value
            if name == "mco-rulegen":
                self._check_config(r.text)
        self.recorder.sample(procs)
        self._check_freshness()

    def _check_freshness(self) -> None:
        """While the source is down past staleAfter (plus a reporter cycle and the extender's
        reload), no node may be fresh at the extender."""
        if self.outage_since is None:
            return
        down_for = time.time() - self.outage_since
        if down_for <= self.stale_after + 5:
            return
        nodes = self.stack.nodes()["nodes"]
        self.freshness_checks += 1
        fresh = [n["name"] for n in nodes if not n["stale"]]
        if fresh:
            self.fresh_while_down += 1
            self.recorder.event(
                "fresh-while-down", down_for=round(down_for, 1), nodes=fresh[:5], count=len(fresh)
            )

    def _await_recovery(self) -> None:
        deadline = time.monotonic() + RECOVERY
        began = time.monotonic()
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                nodes = self.stack.nodes()["nodes"]
                if len(nodes) > self.s.nodes and not any(n["stale"] for n in nodes):
                    self.recorder.event("recovered", after=round(time.monotonic() - began, 1))
                    return
            time.sleep(1)
        self.recorder.event("not-recovered", within=RECOVERY)


# --- judging ------------------------------------------------------------------------------
@dataclass
class Run:
    samples: list[dict[str, Any]]
    events: list[dict[str, Any]]


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line cut by a kill
                yield json.loads(line)


def load_run(out: Path) -> Run:
    return Run(list(_lines(out / "samples.jsonl")), list(_lines(out / "events.jsonl")))


@dataclass(frozen=True)
class Growth:
    process: str
    metric: str
    start: float
    end: float
    limit: float
    bound: Bound
    per_hour: float | None = None  # least-squares slope over the judged span (not for CPU)

    @property
    def ok(self) -> bool:
        return self.end <= self.limit


FAILING_EVENTS: Final = (
    "restart",
    "5xx",
    "fresh-while-down",
    "not-recovered",
    "config-not-applied",
)


@dataclass
class Verdict:
    span: float
    growth: list[Growth]
    failures: dict[str, int]
    notes: list[str]
    activity: str = ""  # what happened during the run, one line (events.jsonl counted)

    @property
    def ok(self) -> bool:
        return all(g.ok for g in self.growth) and not any(self.failures.values()) and not self.notes

    def table(self) -> str:
        def fmt(metric: str, v: float) -> str:
            return f"{v / MIB:.1f} MiB" if metric in MEMORY else f"{v:.3g}"

        lines = [
            f"{'process':<14}{'metric':<10}{'after warm-up':>15}{'end':>13}{'limit':>13}"
            f"{'trend/h':>13}  ok"
        ]
        for g in self.growth:
            lines.append(
                f"{g.process:<14}{g.metric:<10}{fmt(g.metric, g.start):>15}"
                f"{fmt(g.metric, g.end):>13}{fmt(g.metric, g.limit):>13}"
                f"{_trend(g):>13}  {'yes' if g.ok else 'NO'}"
            )
        lines += [f"note: {n}" for n in self.notes]
        if self.activity:
            lines.append(f"activity: {self.activity}")
        failures = ", ".join(f"{k} {v}" for k, v in self.failures.items())
        lines.append(
            f"soak: {_clock(self.span)} judged, {failures}, growth within "
            f"bounds: {'yes' if all(g.ok for g in self.growth) else 'no'}"
            f" -> {'PASS' if self.ok else 'FAIL'}"
        )
        return "\n".join(lines)

    def markdown(self) -> str:
        """The growth table for docs/benchmarks.md."""

        def fmt(metric: str, v: float) -> str:
            return f"{v / MIB:.1f} MiB" if metric in MEMORY else f"{v:.3g}"

        rows = [
            "| process | figure | after warm-up | end | limit | trend per hour | within |",
            "|---|---|---|---|---|---|---|",
        ]
        rows += [
            f"| {g.process} | {g.metric} | {fmt(g.metric, g.start)} | {fmt(g.metric, g.end)} "
            f"| {fmt(g.metric, g.limit)} | {_trend(g)} | {'yes' if g.ok else '**no**'} |"
            for g in self.growth
        ]
        return "\n".join(rows)

    def summary(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "span_seconds": self.span,
            "failures": self.failures,
            "notes": self.notes,
            "growth": [
                {
                    "process": g.process,
                    "metric": g.metric,
                    "start": g.start,
                    "end": g.end,
                    "limit": g.limit,
                    "ok": g.ok,
                }
                for g in self.growth
            ],
        }


Point = tuple[float, float, int]  # elapsed seconds, value, pid


def _series(samples: Sequence[dict[str, Any]], process: str, metric: str) -> list[Point]:
    return [
        (s["elapsed"], s["procs"][process][metric], int(s["procs"][process].get("pid", 0)))
        for s in samples
        if metric in s["procs"].get(process, {})
    ]


def _cpu_rate(points: Sequence[Point]) -> float | None:
    """Cores over a window of cumulative CPU seconds, from consecutive samples of the same
    process (Prometheus is restarted on purpose by the outages: its counter starts again)."""
    cpu = seconds = 0.0
    for (t0, v0, pid0), (t1, v1, pid1) in itertools.pairwise(points):
        if pid0 == pid1 and t1 > t0 and v1 >= v0:
            cpu, seconds = cpu + v1 - v0, seconds + t1 - t0
    return cpu / seconds if seconds > 0 else None


def judge(run: Run, warmup: float) -> Verdict:
    """Growth of each process's figures from the first to the last window after warm-up (each a
    tenth of the judged span, at least three samples; medians, so one GC or one stress period
    does not decide), and the failing events."""
    failures = {k: sum(1 for e in run.events if e["kind"] == k) for k in FAILING_EVENTS}
    judged = [s for s in run.samples if s["elapsed"] >= warmup]
    notes: list[str] = []
    if len(judged) < 6:
        return Verdict(0.0, [], failures, [f"only {len(judged)} samples after warm-up"])
    span = judged[-1]["elapsed"] - judged[0]["elapsed"]
    window = max(span / 10, 0.0)
    growth: list[Growth] = []
    processes = sorted({p for s in judged for p in s["procs"]} - {STANDIN})
    for process in processes:
        for metric in ("anon", "fds", "threads", "tasks", "cpu"):
            points = _series(judged, process, metric)
            if len(points) < 6:
                continue
            t0, t1 = points[0][0], points[-1][0]
            first = [p for p in points if p[0] <= t0 + window]
            last = [p for p in points if p[0] >= t1 - window]
            first, last = (
                (first if len(first) >= 3 else points[:3]),
                (last if len(last) >= 3 else points[-3:]),
            )
            if metric == "cpu":
                a, b = _cpu_rate(first), _cpu_rate(last)
                if a is None or b is None:
                    notes.append(f"{process}: no two samples of one process in a window")
                    continue
                bound, key = BOUNDS["cpu_rate"], "cpu_rate"
            else:
                a = statistics.median(p[1] for p in first)
                b = statistics.median(p[1] for p in last)
                bound = (
                    PROMETHEUS_ANON
                    if (process, metric) == ("prometheus", "anon")
                    else BOUNDS[metric]
                )
                key = metric
            growth.append(Growth(process, key, a, b, bound.limit(a), bound, _per_hour(points, key)))
    return Verdict(span, growth, failures, notes, activity(run.events))


def _per_hour(points: Sequence[Point], metric: str) -> float | None:
    if metric == "cpu_rate" or len({p[0] for p in points}) < 2:
        return None
    fit = statistics.linear_regression([p[0] for p in points], [p[1] for p in points])
    return fit.slope * 3600


def activity(events: Sequence[dict[str, Any]]) -> str:
    counts = collections.Counter(e["kind"] for e in events)
    parts = [
        f"{counts[k]} {k}" for k in ("stress-start", "outage-start", "config-edit") if counts[k]
    ]
    for kind in ("recovered", "config-applied"):
        waits = [e["after"] for e in events if e["kind"] == kind]
        if waits:
            parts.append(f"{len(waits)} {kind} (slowest after {max(waits):g} s)")
    checks = sum(e.get("freshness_checks", 0) for e in events if e["kind"] == "outage-end")
    if checks:
        parts.append(f"{checks} freshness checks while down")
    for e in events:
        if e["kind"] == "scheduler-calls":
            answered = ", ".join(f"{n} x {code}" for code, n in sorted(e["statuses"].items()))
            parts.append(f"scheduler calls answered {answered}, {e['errors']} errors")
    return "; ".join(parts)


# --- command line -------------------------------------------------------------------------
def _parse(argv: Sequence[str]) -> Settings:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=duration, default=duration("20m"))
    p.add_argument("--quick", action="store_true", help="a 4-minute run with compressed periods")
    p.add_argument(
        "--api",
        action="store_true",
        help="report through a Kubernetes API stand-in (writes, Lease, watches) instead of a file",
    )
    p.add_argument(
        "--config-every",
        type=duration,
        default=None,
        help="with --api: edit the DetectionRuleConfig this often (default 15m)",
    )
    p.add_argument(
        "--stale-after",
        type=duration,
        default=None,
        help="report.staleAfter of the DetectionRuleConfig (default: the shipped 30s)",
    )
    p.add_argument("--nodes", type=int, default=100, help="synthetic fleet nodes (default 100)")
    p.add_argument("--sample", type=duration, default=None, help="default 15s (5s with --quick)")
    p.add_argument(
        "--warmup",
        type=duration,
        default=None,
        help="not judged: default 10%% of the run, at least 3m (1m with --quick)",
    )
    p.add_argument("--stress-every", type=duration, default=None, help="default 10m")
    p.add_argument("--stress-for", type=duration, default=None, help="default 60s")
    p.add_argument("--outage-every", type=duration, default=None, help="default 30m")
    p.add_argument("--outage-for", type=duration, default=None, help="default 90s")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"where the run is recorded (default {DEFAULT_OUT}/<start time>)",
    )
    a = p.parse_args(argv)
    quick = a.quick
    total = duration("4m") if quick and a.duration == duration("20m") else a.duration

    def pick(value: float | None, normal: str, fast: str) -> float:
        return value if value is not None else duration(fast if quick else normal)

    warmup = (
        a.warmup if a.warmup is not None else max(total / 10, duration("1m" if quick else "3m"))
    )
    out = a.out or DEFAULT_OUT / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Settings(
        duration=total,
        nodes=20 if quick and a.nodes == 100 else a.nodes,
        sample=pick(a.sample, "15s", "5s"),
        warmup=warmup,
        stress_every=pick(a.stress_every, "10m", "90s"),
        stress_for=pick(a.stress_for, "60s", "20s"),
        outage_every=pick(a.outage_every, "30m", "2m"),
        outage_for=pick(a.outage_for, "90s", "75s"),
        config_every=pick(a.config_every, "15m", "60s"),
        out=out,
        api=a.api,
        stale_after=a.stale_after,
    )


def main(argv: Iterable[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["analyse"]:
        p = argparse.ArgumentParser(prog="python -m bench.soak analyse")
        p.add_argument("out", type=Path, help="a recorded run's folder")
        p.add_argument("--warmup", type=duration, default=None, help="default: as recorded")
        p.add_argument("--markdown", action="store_true", help="also the table as Markdown")
        a = p.parse_args(args[1:])
        warmup = a.warmup if a.warmup is not None else _recorded_warmup(a.out)
        verdict = judge(load_run(a.out), warmup)
        print(verdict.table())
        if a.markdown:
            print(verdict.markdown())
        return 0 if verdict.ok else 1
    # SIGTERM (a CI timeout, `kill`) stops the stack like Ctrl-C does: nothing is left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return Soak(_parse(args)).run()


def _recorded_warmup(out: Path) -> float:
    for event in _lines(out / "events.jsonl"):
        if event["kind"] == "start":
            return float(event["settings"]["warmup"])
    raise SystemExit(f"{out}: no start event recorded")


if __name__ == "__main__":
    sys.exit(main())
