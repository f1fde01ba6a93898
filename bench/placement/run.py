"""`make bench BENCH_ARGS="placement --scenario S"`: does MCO place online pods better than
what Kubernetes offers without it?

One seeded trace of online and batch pods is scheduled, in real time, onto several simulated
clusters at once, one per (policy set, protocol): the baselines (``default``,
``native-affinity``, ``node-pool``: kube-scheduler without MCO), ``tier-labels`` (MCO's zero-call
path: the tier label and a preferred node affinity, no extender), ``mco-labels-only`` (MCO with
its interference signal switched off) and ``mco-full``. Each cluster's node signals come from
the contention model (docs/placement-model.md) and are served as mco-exporter series to a real
Prometheus evaluating the generated rules; the real mco-reporter writes the report and the real
mco-extender answers the scheduler.

The yardstick is the model alone, never MCO's detection: an online pod-second is *harmed* when
the pod's modeled slowdown is over its class's tolerance (``--tolerance``) or it is pending.
Headline per scenario: harmed share, mco-full over the best baseline (the least harmed among
those whose batch wait is within 1.2x the default's), batch wait mco-full over default, and
online pods pending at the end. Exposure (online pod-seconds on nodes where MCO's detection is
triggered) is still printed, as MCO's own view. A run that was no valid measurement (the loop
fell behind the trace, the pipeline was not sampled, the default scheduler harmed no one)
exits 2 whatever its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench.placement import kubeapi
from bench.placement.causes import Causes
from bench.placement.cluster import Cluster, demands, node_kinds
from bench.placement.model import NODE_CPU, Signals, inflation, signals
from bench.placement.pipeline import (
    Extender,
    Pipeline,
    config_spec,
    extender_has_flag,
    hysteresis_available,
    with_intervals,
)
from bench.placement.scheduler import (
    DefaultScheduler,
    KubeExtender,
    Scheduler,
    VolcanoExtender,
    uid,
)
from bench.placement.target import LiveFleet, Resident, serving
from bench.placement.tiers import TierLabels
from bench.placement.trace import SCENARIOS, PodSpec, TraceShape, generate

# The headline's targets per scenario: harmed mco/best-baseline (the scenarios where labels
# cannot tell aggressors apart must show what measuring buys; with labels, never worse than
# them), batch wait mco/default, and no more online pods pending at the end than the default.
# ``churn`` is the labelled trace with online pods rolled: never worse than labels alone.
# ``mixed-nodes`` is the labelled trace too.
HARM_TARGET = {
    "labelled": 1.0,
    "unlabelled": 0.5,
    "phases": 0.5,
    "churn": 1.0,
    "mixed-nodes": 1.0,
}
WAIT_TARGET = 1.2
# A baseline whose batch wait is over this times the default's is no fair winner (it buys
# quiet by starving batch): printed, not chosen as the best.
FAIR_WAIT = 1.2
BASELINES = ("default", "native-affinity", "node-pool")
# The tolerance of an online pod (latency-sensitive): a 20 % stretch of its work, the usual
# slack of a tail-latency SLO over its solo latency (docs/placement-model.md, "Harm").
TOLERANCE = 1.2
DETECTION_OF = {"io": "io_congestion", "memory": "memory_pressure", "cache": "cache_pollution"}
TICK = 0.5
RETRY_AFTER = 5.0  # an unschedulable pod is tried again after this (kube's backoff: 1-10 s)
# Volcano has no per-pod backoff: every session (``--schedule-period``, 1 s by default) tries
# every pending task again (/work/shared/reference/scheduler-extender-protocols.md, "Session
# cadence"); before, the Volcano loop waited kube's 5 s, which made a task whose first round
# failed wait 5 times as long as Volcano would.
RETRY_AFTER_BY_PROTOCOL = {"volcano": 1.0}
# After the trace, the loop runs on (no new arrivals) until every pending pod was retried at
# least once, for at most this long: pending at the end are then pods that stay pending.
DRAIN_LIMIT = 3 * RETRY_AFTER
MIN_SAMPLED = 0.9  # sampled / expected online pod-seconds under this: the run is invalid
OBSERVER = "observer"  # the pipeline that observes the default cluster (mco-full's rules)
RESERVED = ("basic", "full", OBSERVER)  # pipelines' names a variant cannot take
IDLE_WINDOW = 10.0  # seconds of each extender's CPU measured before the trace, no decisions


@dataclass(frozen=True)
class PolicySet:
    """What the scheduler runs with. MCO's settings become a DetectionRuleConfig."""

    name: str
    extender: bool
    reservation: bool = False
    # Without an extender: kube-scheduler's native anti-affinity and spread (``native``), or
    # an online-only node pool (``pool``); see ``scheduler.DefaultScheduler``.
    baseline: str = ""
    hysteresis: bool = False
    # A variant of mco-full (``--variant``): these policy fields set, on its own pipeline.
    overrides: tuple[tuple[str, str, Any], ...] = ()

    @property
    def pipeline(self) -> str:
        # The default scheduler's nodes are observed by a pipeline of their own with mco-full's
        # rules: the numerator and denominator of R read by equal yardsticks, equally loaded.
        if not self.extender:
            return OBSERVER
        if not (self.reservation or self.hysteresis):
            return "basic"
        return self.name.removeprefix("mco-") if self.overrides else "full"

    @property
    def prefix(self) -> str:
        """Its clusters' node names start with this (unique across the run's pipelines)."""
        if self.overrides:
            return f"v-{self.pipeline}"[:14]
        return self.name.replace("mco-", "")[:4]


def variant(text: str) -> PolicySet:
    """``NAME:POLICY.FIELD=VALUE[,POLICY.FIELD=VALUE...]`` of ``--variant``."""
    name, sep, fields = text.partition(":")
    if not sep or not re.fullmatch(r"[a-z][a-z0-9]{0,11}", name) or name in RESERVED:
        raise argparse.ArgumentTypeError(
            f"expected NAME:POLICY.FIELD=VALUE[,...] with NAME of a-z0-9 (12 at most, not "
            f"{', '.join(RESERVED)}), got {text!r}"
        )
    overrides = tuple(override(f) for f in fields.split(",") if f)
    if not overrides:
        raise argparse.ArgumentTypeError(f"a variant sets at least one field: {text!r}")
    return PolicySet(f"mco-{name}", True, reservation=True, hysteresis=True, overrides=overrides)


# The ablation of the issue that asked for this yardstick: every use of the interference
# signal off (online maxLevel 1 and no hard constraints, every scoreWeight 0, batch
# triggeredLevel 0), only the label avoidance kept (avoidPolicies, avoidPerPod 0.1).
LABELS_ONLY = (
    ("latency-sensitive", "maxLevel", 1.0),
    ("latency-sensitive", "hardConstraints", "Ignore"),
    ("latency-sensitive", "scoreWeight", 0.0),
    ("batch", "scoreWeight", 0.0),
    ("batch", "triggeredLevel", 0.0),
    ("batch", "avoidPerPod", 0.1),
    ("best-effort", "hardConstraints", "Ignore"),
    ("best-effort", "scoreWeight", 0.0),
    ("best-effort", "avoidPerPod", 0.1),
    ("default", "hardConstraints", "Ignore"),
    ("default", "scoreWeight", 0.0),
)
POLICY_SETS = (
    PolicySet("default", extender=False),
    PolicySet("native-affinity", extender=False, baseline="native"),
    PolicySet("node-pool", extender=False, baseline="pool"),
    # MCO without an extender call: the tier label and the chart's preferred node affinity
    # (bench.placement.tiers), scored by kube-scheduler's NodeAffinity.
    PolicySet("tier-labels", extender=False, baseline="tiers"),
    PolicySet("mco-labels-only", True, reservation=True, hysteresis=True, overrides=LABELS_ONLY),
    PolicySet("mco-full", extender=True, reservation=True, hysteresis=True),
)


def residents(c: Cluster, node: str) -> list[Resident]:
    """The node's running pods as its exporter sees them: each with its phase's demand."""
    n = c.nodes[node]
    return [
        Resident(uid(c, pod), pod, d) for pod, d in zip(n.running.values(), demands(n), strict=True)
    ]


def learns(policy: PolicySet) -> bool:
    """Whether its extender uses learned workload profiles (its fleet serves per-pod series):
    every MCO policy set but the labels-only ablation."""
    return policy.extender and policy.overrides != LABELS_ONLY


@dataclass
class Run:
    policy: PolicySet
    protocol: str
    cluster: Cluster
    scheduler: Scheduler
    fleet: LiveFleet
    pipeline: Pipeline
    rng: random.Random
    arrivals: list[PodSpec]
    pods_api: kubeapi.PodStore | None = None  # where bindings are published (kube + watch)
    extender: Extender | None = None  # its own mco-extender process (None: no extender)
    retry_at: dict[str, float] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    online_seconds: float = 0.0  # running and pending online pod-seconds: exposure's denominator
    exposed_seconds: float = 0.0
    harmed_seconds: float = 0.0  # slowed past the tolerance, or pending (the model's verdict)
    pending_online_seconds: float = 0.0
    used_cpu_seconds: float = 0.0  # requested CPU on nodes in use, integrated over time
    used_capacity_seconds: float = 0.0  # those nodes' CPU, integrated over time
    bound_at: dict[str, float] = field(default_factory=dict)  # pod -> the loop tick it was bound
    down: frozenset[str] = frozenset()  # nodes whose exporter is down: never scraped
    sampled_online_seconds: float = 0.0  # every online pod that arrived, starting ones too
    observed_at: float = 0.0  # when the last observation was (seconds after t0)
    slowdowns: list[float] = field(default_factory=list)  # per online running pod-second
    slowdowns_of: dict[str, list[float]] = field(default_factory=dict)  # per online pod
    lags: list[float] = field(default_factory=list)  # how late each arrival was handled
    tries: dict[str, int] = field(default_factory=dict)
    flips: int = 0
    last_schedulable: dict[str, bool] = field(default_factory=dict)
    view: dict[str, dict[str, Any]] = field(default_factory=dict)  # the pipeline's last /v1/nodes
    causes: Causes = field(default_factory=Causes)

    @property
    def label(self) -> str:
        return f"{self.policy.name}/{self.protocol}"


def idle() -> Signals:
    return signals([])


async def step(run: Run, now: float, startup: float, tick: float | None = None) -> None:
    """One loop tick of one run at ``now``; ``tick`` is the time every run's step of this tick
    shares (a bind's wait is taken from it, so a run stepped later in the tick does not wait
    longer for it)."""
    c = run.cluster
    # Arrivals up to the shared tick: every run gets the same pods in the same tick, however
    # late in it the loop reaches the run.
    horizon = now if tick is None else tick
    while run.arrivals and run.arrivals[0].arrival <= horizon:
        pod = run.arrivals.pop(0)
        run.lags.append(now - pod.arrival)
        c.pending.append(pod)
    changed: set[str] = set()
    for p in list(c.placements.values()):
        name = p.pod.name
        if name not in run.started and p.starts_at <= now:
            run.started.add(name)
            c.start(p)
            changed.add(p.node)
        live = name in run.started and name not in run.finished
        if p.pod.period > 0 and live and c.phase(p, now):
            changed.add(p.node)
        if name not in run.finished and p.ends_at <= now:
            run.finished.add(name)
            c.finish(p)
            changed.add(p.node)
            if run.pods_api is not None:
                run.pods_api.delete(uid(c, p.pod))
    still: list[PodSpec] = []
    for pod in c.pending:
        if run.retry_at.get(pod.name, 0.0) > now:
            still.append(pod)
            continue
        c.attempts += 1
        run.tries[pod.name] = run.tries.get(pod.name, 0) + 1
        node = await run.scheduler.place(c, pod, run.rng)
        if node is None:
            c.unschedulable_attempts += 1
            run.retry_at[pod.name] = now + RETRY_AFTER_BY_PROTOCOL.get(run.protocol, RETRY_AFTER)
            still.append(pod)
        else:
            c.bind(pod, node, now, startup)
            run.bound_at[pod.name] = now if tick is None else tick
            run.causes.bound(pod, run.view.get(node))
            if run.pods_api is not None:
                run.pods_api.bind(pod, uid(c, pod), node, time.time())
    c.pending = still
    for node in changed - run.down:
        n = c.nodes[node]
        run.fleet.set(node, n.signals(), residents=residents(c, node), llc_mb=n.kind.llc_mb)


def observe(
    runs: list[Run],
    views: dict[str, dict[str, dict[str, Any]]],
    now: float,
    tolerance: float = TOLERANCE,
) -> None:
    """Harm, utilisation, exposure, slowdown and flips since the last observation (``now`` is
    seconds after t0: the time since the run's last one is what each state seen now counts
    for). Harm is the model's alone: a running online pod's slowdown over ``tolerance``. A
    pending online pod counts as harmed and exposed: it is not served."""
    for run in runs:
        dt, run.observed_at = now - run.observed_at, now
        view = run.view = views[run.policy.pipeline]
        in_use = [n for n in run.cluster.nodes.values() if n.placed]
        run.used_cpu_seconds += dt * sum(n.cpu for n in in_use)
        run.used_capacity_seconds += dt * NODE_CPU * len(in_use)
        for pod in run.cluster.pending:
            if pod.online:
                run.online_seconds += dt
                run.exposed_seconds += dt
                run.harmed_seconds += dt
                run.pending_online_seconds += dt
                run.sampled_online_seconds += dt
                run.causes.pending(dt)
        for name, node in run.cluster.nodes.items():
            entry = view.get(name)
            if entry is None:
                if name not in run.down:
                    continue  # not sampled: the run's ``sampled`` says so
                entry = {}  # no data for MCO; the model's harm counts all the same
            else:
                schedulable = bool(entry["schedulable"])
                last = run.last_schedulable.get(name)
                if last is not None and last != schedulable:
                    run.flips += 1
                run.last_schedulable[name] = schedulable
            run.sampled_online_seconds += dt * sum(
                p.online for n, p in node.placed.items() if n not in node.running
            )
            if not node.running:
                continue
            sig = node.signals()
            for pod in node.running.values():
                if not pod.online:
                    continue
                run.online_seconds += dt
                run.sampled_online_seconds += dt
                detection = DETECTION_OF[pod.sensitivity]
                state = (entry.get("detections") or {}).get(detection) or {}
                if state.get("triggered"):
                    run.exposed_seconds += dt
                    run.causes.exposed(pod, detection, list(node.running.values()), dt)
                slowdown = inflation(pod.sensitivity, sig)
                if slowdown > tolerance:
                    run.harmed_seconds += dt
                run.slowdowns.append(slowdown)
                run.slowdowns_of.setdefault(pod.name, []).append(slowdown)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


@contextlib.contextmanager
def workdir(path: Path | None) -> Iterator[Path]:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="mco-placement-") as tmp:
        yield Path(tmp)


def expected_online_seconds(run: Run) -> float:
    """Online pod-seconds the trace puts inside the observed time: every online pod (bound,
    pending or not yet handled) from its arrival on."""
    pods = [*(p.pod for p in run.cluster.placements.values()), *run.cluster.pending, *run.arrivals]
    end = run.observed_at
    return sum(max(0.0, min(end, p.arrival + p.lifetime) - p.arrival) for p in pods if p.online)


def qos_kept(run: Run, target: float) -> float:
    """The share of online pods whose own p99 modeled slowdown is at or under ``target``; an
    online pod still pending at the end that never ran counts as not kept."""
    never_ran = [p for p in run.cluster.pending if p.online and p.name not in run.slowdowns_of]
    kept = sum(percentile(s, 0.99) <= target for s in run.slowdowns_of.values())
    total = len(run.slowdowns_of) + len(never_ran)
    return kept / total if total else math.nan


def batch_waits(run: Run, startup: float) -> tuple[float, float]:
    """Batch pods' mean wait, arrival to bind (the loop tick of the bind), and mean completion
    time, arrival to end (wait + start-up + lifetime: the model does not slow batch pods). A
    batch pod still pending at the end counts with its wait so far (a lower bound): a policy
    that keeps batch pending does not look free. (nan, nan) when no batch pod arrived."""
    end = run.observed_at
    waits, completions = [], []
    pods = [*(p.pod for p in run.cluster.placements.values()), *run.cluster.pending]
    for pod in pods:
        if pod.workload_class != "batch":
            continue
        wait = max(0.0, run.bound_at.get(pod.name, end) - pod.arrival)
        waits.append(wait)
        completions.append(wait + startup + pod.lifetime)
    if not waits:
        return math.nan, math.nan
    return sum(waits) / len(waits), sum(completions) / len(completions)


def summary(
    runs: list[Run],
    shape: TraceShape,
    cpu: dict[str, float],
    qos_slowdown: float = TOLERANCE,
    startup: float = 5.0,
) -> list[dict[str, Any]]:
    """``cpu``: each run's extender CPU seconds spent on its decisions (``decision_cpu``)."""
    rows = []
    for run in runs:
        c = run.cluster
        placed = len(c.placements)
        cpu_per = (
            cpu[run.label] / run.scheduler.asked * 1e3
            if run.label in cpu and run.scheduler.asked
            else None
        )
        expected = expected_online_seconds(run)
        wait, completion = batch_waits(run, startup)
        rows.append(
            {
                "run": run.label,
                "harmed": run.harmed_seconds / run.online_seconds
                if run.online_seconds
                else math.nan,
                "batch_wait_s": wait,
                "batch_completion_s": completion,
                "utilisation": run.used_cpu_seconds / run.used_capacity_seconds
                if run.used_capacity_seconds
                else math.nan,
                "exposure": run.exposed_seconds / run.online_seconds
                if run.online_seconds
                else math.nan,
                "online_pod_seconds": round(run.online_seconds),
                "pending_online_share": run.pending_online_seconds / run.online_seconds
                if run.online_seconds
                else math.nan,
                "slowdown_p99": percentile(run.slowdowns, 0.99),
                "slowdown_mean": sum(run.slowdowns) / len(run.slowdowns)
                if run.slowdowns
                else math.nan,
                "qos_kept": qos_kept(run, qos_slowdown),
                "herding": c.herding(shape.burst_size),
                "flips": run.flips,
                "placed": placed,
                "pending": len(c.pending) + len(run.arrivals),
                "pending_online": sum(p.online for p in [*c.pending, *run.arrivals]),
                "unschedulable_attempts": c.unschedulable_attempts,
                "decision_ms": run.scheduler.seconds / max(run.scheduler.decisions, 1) * 1e3,
                "extender_cpu_ms": cpu_per,
                "extender_decisions": run.scheduler.asked,
                "lag_max_s": max(run.lags, default=math.nan),
                "lag_p95_s": percentile(run.lags, 0.95),
                "untried": len(run.arrivals),
                "sampled": run.sampled_online_seconds / expected if expected else math.nan,
                "exposed_by_cause": run.causes.shares(),
            }
        )
    return rows


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.3g}"
    return str(v)


def print_table(rows: list[dict[str, Any]]) -> None:
    cols = [c for c in rows[0] if not isinstance(rows[0][c], dict)]
    print(" | ".join(cols))
    for row in rows:
        print(" | ".join(_fmt(row[c]) for c in cols))
    print("exposed online pod-seconds by cause (bench/placement/causes.py):")
    for row in rows:
        shares = ", ".join(f"{k} {v:.2f}" for k, v in row["exposed_by_cause"].items())
        print(f"  {row['run']}: {shares}")
    if all("rule_evaluation" in row for row in rows):
        print_rule_evaluation(rows)


def print_rule_evaluation(rows: list[dict[str, Any]]) -> None:
    """Whether a pipeline's Prometheus kept up with its rules: a yardstick that falls behind
    triggers late, and biases the exposure it measures."""
    print("rule evaluation per pipeline (its Prometheus's /metrics, at the end):")
    seen: dict[str, list[str]] = {}
    for row in rows:
        seen.setdefault(row["pipeline"], []).append(row["run"])
    for name, labels in seen.items():
        e = next(r["rule_evaluation"] for r in rows if r["pipeline"] == name)
        print(
            f"  {name} ({', '.join(labels)}): busiest group {e['busiest_group']} "
            f"{e['last_duration_s'] * 1e3:.1f} ms of its {e['interval_s']:g} s interval, all "
            f"{e['groups']} groups {e['last_duration_sum_s'] * 1e3:.1f} ms; iterations missed "
            f"{e['iterations_missed']} of {e['iterations']}"
        )


def pipeline_spec(
    args: argparse.Namespace, policies: dict[str, PolicySet], name: str
) -> dict[str, Any]:
    """A pipeline's DetectionRuleConfig: mco-basic's without reservation or hysteresis, the
    others with them; the observer's is mco-full's, ``--set`` and all, so that both clusters
    of R are read by the same rules."""
    source = "full" if name == OBSERVER else name
    spec = config_spec(
        reservation=source != "basic",
        hysteresis=source != "basic",
        avoid_per_pod=args.avoid_per_pod,
        triggered_level=args.triggered_level,
        overrides=overrides_of(args, policies, source),
    )
    return with_intervals(spec, args.scrape_interval, args.evaluation_interval)


def idle_rates(pipelines: dict[str, Pipeline], seconds: float) -> dict[str, float]:
    """Each extender's CPU seconds per second with no decisions, while the views are read as
    during the run (and the report poll and pod watch run): what is not a decision's."""
    extenders = [e for p in pipelines.values() for e in p.extenders.values()]
    cpu0, t0 = [e.cpu_seconds() for e in extenders], time.monotonic()
    while time.monotonic() - t0 < seconds:
        views_of(pipelines)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t0) % 1.0))
    elapsed = time.monotonic() - t0
    return {e.name: (e.cpu_seconds() - c0) / elapsed for e, c0 in zip(extenders, cpu0, strict=True)}


def decision_cpu(spent: float, idle_rate: float, seconds: float) -> float:
    """The CPU seconds an extender spent on decisions: its CPU over the run, less what it
    spends at its idle rate over as long."""
    return spent - idle_rate * seconds


async def simulate(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    shape = TraceShape(args.duration, args.nodes, burst_every=args.burst_every)
    trace = generate(shape, args.seed, args.scenario)
    print(
        f"trace: {len(trace)} pods over {shape.duration:.0f}s "
        f"({sum(p.online for p in trace)} online), seed {args.seed}, scenario {args.scenario}",
        flush=True,
    )
    policies = {p.name: p for p in (*POLICY_SETS, *args.variants)}
    # Per-pod series only where an extender learns profiles from them: not the baselines'
    # observer, not the labels-only ablation (no interference signal at all).
    fleets = {p.pipeline: LiveFleet(pods=learns(p)) for p in policies.values()}
    hysteresis = hysteresis_available()
    print(f"hysteresis fields in this checkout: {'yes' if hysteresis else 'no'}", flush=True)
    watch = extender_has_flag("--watch-pods")
    print(f"extender pod watch (--watch-pods): {'yes' if watch else 'no'}", flush=True)
    profiles = extender_has_flag("--profile-weight")
    layout = [(p.name, "none") for p in policies.values() if not p.extender] + [
        (p.name, proto) for p in policies.values() if p.extender for proto in args.protocols
    ]
    with serving(fleets) as port, contextlib.ExitStack() as stack:
        pipelines = {
            name: Pipeline(
                name,
                root / name,
                pipeline_spec(args, policies, name),
                f"127.0.0.1:{port}",
                f"/{name}",
                scrape_interval=args.scrape_interval,
            )
            for name in fleets
        }
        clusters = []
        for i, (policy_name, protocol) in enumerate(layout):
            policy = policies[policy_name]
            pipeline = pipelines[policy.pipeline]
            prefix = f"{policy.prefix}-{protocol[:4]}"
            cluster = Cluster(f"c{i}", prefix, args.nodes, node_kinds(args.scenario, args.nodes))
            pods_api, extender = None, None
            if protocol == "none":
                if "view" not in pipeline.extenders:
                    pipeline.add_extender("view")  # serves the observation only
            else:
                extender_args: tuple[str, ...] = ()
                if watch and protocol == "kube" and policy.reservation:
                    # Its pipeline's own pods API: it watches its own cluster's bindings only.
                    pods_api = kubeapi.PodStore()
                    kubeconfig = stack.enter_context(kubeapi.serving(pods_api, pipeline.workdir))
                    extender_args = ("--watch-pods", f"--kubeconfig={kubeconfig}")
                if not learns(policy) and profiles:
                    extender_args += ("--profile-weight=0",)
                extender = pipeline.add_extender(protocol, extender_args)
            clusters.append((policy, protocol, cluster, pods_api, extender))
        for policy, _, cluster, _, _ in clusters:
            for node in set(cluster.nodes) - down_nodes(cluster, args.exporter_down_share):
                fleets[policy.pipeline].set(node, idle())
        try:
            for p in pipelines.values():
                p.start()
            for name, p in pipelines.items():
                count = sum(
                    len(c.nodes) - len(down_nodes(c, args.exporter_down_share))
                    for pol, _, c, _, _ in clusters
                    if pol.pipeline == name
                )
                p.wait_fresh(count, timeout=120)
            timeout = aiohttp.ClientTimeout(total=30)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                runs = []
                for policy, protocol, cluster, pods_api, extender in clusters:
                    scheduler: Scheduler
                    if extender is None:
                        scheduler = DefaultScheduler(
                            native=policy.baseline == "native",
                            pool=pool(cluster, args.node_pool_share)
                            if policy.baseline == "pool"
                            else frozenset(),
                            tiers=TierLabels() if policy.baseline == "tiers" else None,
                        )
                    elif protocol == "kube":
                        scheduler = KubeExtender(session, extender.url)
                    else:
                        # A Volcano configured with allocateVerb sends it whatever the policy.
                        allocate = extender.has_route("/volcano/allocate")
                        print(
                            f"volcano allocate verb served by {extender.name}: "
                            f"{'yes' if allocate else 'no'}",
                            flush=True,
                        )
                        scheduler = VolcanoExtender(session, extender.url, allocate=allocate)
                    runs.append(
                        Run(
                            policy,
                            protocol,
                            cluster,
                            scheduler,
                            fleets[policy.pipeline],
                            pipelines[policy.pipeline],
                            random.Random(args.seed),
                            list(trace),
                            pods_api=pods_api,
                            extender=extender,
                            down=down_nodes(cluster, args.exporter_down_share),
                        )
                    )
                rates = idle_rates(pipelines, IDLE_WINDOW)
                print(
                    "extender CPU with no decisions (views read each second): "
                    + ", ".join(f"{n} {r * 1e3:.1f} ms/s" for n, r in rates.items()),
                    flush=True,
                )
                # Pods bound before the first observation see the pipeline as it is at t0.
                views = views_of(pipelines)
                for run in runs:
                    run.view = views[run.policy.pipeline]
                update_tiers(runs, 0.0)
                cpu0 = {r.label: r.extender.cpu_seconds() for r in runs if r.extender}
                t0 = time.monotonic()
                next_observe = 1.0
                last_progress = 0.0
                while not done(runs, now := time.monotonic() - t0, shape.duration):
                    for run in runs:
                        await step(run, time.monotonic() - t0, args.startup, now)
                    if now >= next_observe:
                        views = views_of(pipelines)
                        observe(runs, views, time.monotonic() - t0, args.tolerance)
                        update_tiers(runs, time.monotonic() - t0)
                        next_observe = max(next_observe + 1.0, now)
                    if now - last_progress >= 30:
                        last_progress = now
                        placed = ", ".join(f"{r.label} {len(r.cluster.placements)}" for r in runs)
                        print(f"  t={now:4.0f}s placed: {placed}", flush=True)
                    await asyncio.sleep(max(0.0, TICK - (time.monotonic() - t0 - now)))
                elapsed = time.monotonic() - t0
                cpu = {
                    r.label: decision_cpu(
                        r.extender.cpu_seconds() - cpu0[r.label], rates[r.extender.name], elapsed
                    )
                    for r in runs
                    if r.extender
                }
                evaluation = {n: p.rule_evaluation() for n, p in pipelines.items()}
                rows = summary(runs, shape, cpu, args.tolerance, args.startup)
                for row, run in zip(rows, runs, strict=True):
                    row["pipeline"] = run.policy.pipeline
                    row["extender_requests"] = dict(run.scheduler.requests)
                    tiers = getattr(run.scheduler, "tiers", None)
                    if tiers is not None:
                        row["tier_label_changes"] = tiers.changes
                    row["rule_evaluation"] = evaluation[run.policy.pipeline]
                return rows
        finally:
            for p in pipelines.values():
                p.stop()


def pool(cluster: Cluster, share: float) -> frozenset[str]:
    """The node-pool baseline's online-only nodes: the first ``share`` of the cluster's nodes
    (at least one, and at least one left for the rest)."""
    names = list(cluster.nodes)
    k = min(max(1, round(share * len(names))), len(names) - 1)
    return frozenset(names[:k])


def down_nodes(cluster: Cluster, share: float) -> frozenset[str]:
    """The nodes whose exporter is down (``--exporter-down-share``): the last ``share`` of the
    cluster's nodes, at least one left up. Their series are never served, so MCO has no data
    for them (as for a node whose exporter pod crashed); they still hold pods."""
    names = list(cluster.nodes)
    k = min(round(share * len(names)), len(names) - 1)
    return frozenset(names[len(names) - k :]) if k > 0 else frozenset()


def update_tiers(runs: list[Run], now: float) -> None:
    """The ``tier-labels`` clusters' labels follow their view, as the reporter's would."""
    for run in runs:
        tiers = getattr(run.scheduler, "tiers", None)
        if tiers is not None:
            tiers.update({n: e for n, e in run.view.items() if n in run.cluster.nodes}, now)


def views_of(pipelines: dict[str, Pipeline]) -> dict[str, dict[str, dict[str, Any]]]:
    return {n: {e["name"]: e for e in p.nodes()} for n, p in pipelines.items()}


def done(runs: list[Run], now: float, duration: float) -> bool:
    """After the trace, once every arrival was tried and every pending pod retried at least
    once (or ``DRAIN_LIMIT`` later): pods that arrived in its last seconds are not counted
    pending only for being inside their first backoff."""
    if now < duration:
        return False
    if now >= duration + DRAIN_LIMIT:
        return True
    return all(
        not r.arrivals and all(r.tries.get(p.name, 0) >= 2 for p in r.cluster.pending) for r in runs
    )


def invalid(rows: list[dict[str, Any]], max_lag: float, min_default_harmed: float) -> list[str]:
    """Why one seed's run was no valid measurement (nothing when it was)."""
    reasons = []
    worst = max(rows, key=lambda r: -1.0 if math.isnan(r["lag_max_s"]) else r["lag_max_s"])
    if worst["lag_max_s"] > max_lag:
        reasons.append(
            f"an arrival handled {worst['lag_max_s']:.1f} s late in {worst['run']} "
            f"(--max-lag {max_lag:g})"
        )
    for r in rows:
        if r["untried"]:
            reasons.append(f"{r['run']} left {r['untried']} arrivals untried")
    sparse = [r for r in rows if not r["sampled"] >= MIN_SAMPLED]
    if sparse:
        r = min(sparse, key=lambda r: -1.0 if math.isnan(r["sampled"]) else r["sampled"])
        reasons.append(
            f"{r['run']} sampled {r['sampled']:.2f} of the online pod-seconds expected "
            f"(under {MIN_SAMPLED:g})"
        )
    base = next(r["harmed"] for r in rows if r["run"] == "default/none")
    if not base >= min_default_harmed:
        reasons.append(
            f"default harmed {base:.3f} under --min-default-harmed {min_default_harmed:g}"
        )
    for h in headlines(rows).values():
        if math.isnan(h.harm) or math.isnan(h.wait):
            reasons.append(f"no ratio for {h.run} (harmed {h.harm}, batch wait {h.wait})")
    return reasons


def ratio(a: float, b: float) -> float:
    """a / b; 1 when both are 0 (nothing to tell apart), inf when only b is."""
    if b > 0:
        return a / b
    return 1.0 if a == 0 else (math.inf if a > 0 else math.nan)


def best_baseline(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The least harmed baseline among those whose batch wait is within ``FAIR_WAIT`` times
    the default's (the default always is)."""
    by = {r["run"]: r for r in rows}
    default = by["default/none"]
    fair = [
        by[f"{b}/none"]
        for b in BASELINES
        if f"{b}/none" in by
        and ratio(by[f"{b}/none"]["batch_wait_s"], default["batch_wait_s"]) <= FAIR_WAIT
    ]
    return min(fair or [default], key=lambda r: (r["harmed"], r["run"] != "default/none"))


@dataclass(frozen=True)
class Headline:
    run: str  # the MCO run it is of
    best: str  # the best baseline's name
    harm: float  # harmed share, the run over the best baseline
    wait: float  # batch mean wait, the run over the default
    pending: int  # the run's online pods pending at the end
    default_pending: int


def headlines(rows: list[dict[str, Any]], policy: str = "mco-full") -> dict[str, Headline]:
    """Per protocol, ``policy``'s run against the best baseline and the default."""
    best = best_baseline(rows)
    default = next(r for r in rows if r["run"] == "default/none")
    return {
        r["run"].partition("/")[2]: Headline(
            r["run"],
            best["run"].partition("/")[0],
            ratio(r["harmed"], best["harmed"]),
            ratio(r["batch_wait_s"], default["batch_wait_s"]),
            int(r["pending_online"]),
            int(default["pending_online"]),
        )
        for r in rows
        if r["run"].startswith(f"{policy}/")
    }


def worst(per_seed: list[dict[str, Headline]]) -> Headline:
    """Over protocols the worst of each figure (every protocol must meet the targets), over
    seeds the mean of the ratios and the most pending (the most over the default's)."""
    by_seed = []
    for hs in per_seed:
        h = list(hs.values())
        by_seed.append(
            Headline(
                ",".join(x.run for x in h),
                h[0].best,
                max(x.harm for x in h),
                max(x.wait for x in h),
                max(x.pending for x in h),
                h[0].default_pending,
            )
        )
    over = max(by_seed, key=lambda h: h.pending - h.default_pending)
    return Headline(
        by_seed[0].run,
        "/".join(sorted({h.best for h in by_seed})),
        sum(h.harm for h in by_seed) / len(by_seed),
        sum(h.wait for h in by_seed) / len(by_seed),
        over.pending,
        over.default_pending,
    )


def headline_line(scenario: str, h: Headline) -> str:
    return (
        f"placement[{scenario}]: harmed mco/best-baseline = {h.harm:.2f} (best {h.best}), "
        f"batch wait mco/default = {h.wait:.2f}, pending online mco = {h.pending}"
    )


def seed_lines(seed: int, rows: list[dict[str, Any]]) -> list[str]:
    """Each MCO run's figures against the baselines, one line each."""
    best = best_baseline(rows)
    default = next(r for r in rows if r["run"] == "default/none")
    out = [
        f"seed {seed}: baselines "
        + "; ".join(
            f"{r['run']} harmed {r['harmed']:.3f} wait {r['batch_wait_s']:.2f} s"
            for r in rows
            if r["run"].endswith("/none")
        )
        + f" (best {best['run']})"
    ]
    for r in rows:
        if r["run"].endswith("/none"):
            continue
        out.append(
            f"seed {seed}: {r['run']} harmed {r['harmed']:.3f} "
            f"({ratio(r['harmed'], best['harmed']):.2f}x best), batch wait "
            f"{r['batch_wait_s']:.2f} s ({ratio(r['batch_wait_s'], default['batch_wait_s']):.2f}x "
            f"default), pending online {r['pending_online']} (default {default['pending_online']})"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench BENCH_ARGS=placement", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20 nodes, 150 s of trace")
    parser.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default="labelled",
        help="the trace: labelled (every pod carries its class label), unlabelled (half the "
        "aggressor workloads carry none, a quarter of the online pods are aggressors), phases "
        "(aggressors switch between heavy and quiet)",
    )
    parser.add_argument("--nodes", type=int, help="nodes per cluster (default 200; quick 20)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="run this many seeds (--seed, --seed + 1, ...) one after the other; the last line "
        "and the exit status are on the mean ratios over them",
    )
    parser.add_argument("--duration", type=float, help="seconds of trace (default 600; quick 150)")
    parser.add_argument("--burst-every", type=float, help="seconds between bursts")
    parser.add_argument("--startup", type=float, default=5.0, help="pod start-up delay, seconds")
    parser.add_argument(
        "--protocols",
        help="extender protocols to run (default kube,volcano with --quick, else kube: Volcano "
        "asks once per (pod, node), more than 2 CPUs answer in real time at 200 nodes)",
    )
    parser.add_argument(
        "--scrape-interval",
        type=float,
        default=1.0,
        help="seconds between Prometheus scrapes of the nodes' series (default 1; a real "
        "cluster's is often 15)",
    )
    parser.add_argument(
        "--evaluation-interval",
        type=float,
        default=1.0,
        help="the DetectionRuleConfig's evaluationInterval, seconds (default 1, as shipped); "
        "the rules' window and the report's staleAfter grow to 4 of the longer interval",
    )
    parser.add_argument(
        "--exporter-down-share",
        type=float,
        default=0.0,
        help="the share of each cluster's nodes whose exporter is down (no series; default 0)",
    )
    parser.add_argument(
        "--node-pool-share",
        type=float,
        default=0.1,
        help="the node-pool baseline's share of nodes kept for online pods (default 0.1)",
    )
    parser.add_argument(
        "--avoid-per-pod",
        type=float,
        help="avoidPerPod of the policies that avoid others, in mco-full and the variants "
        "(default: as shipped)",
    )
    parser.add_argument(
        "--triggered-level",
        type=float,
        help="triggeredLevel of the policies that have one, in the MCO sets (default: shipped)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="POLICY.FIELD=VALUE",
        type=override,
        action="append",
        default=[],
        help="set a field of a shipped policy in mco-full, e.g. batch.triggeredLevel=0.3 "
        "(repeatable; the value is read as YAML; for tuning)",
    )
    parser.add_argument(
        "--variant",
        dest="variants",
        metavar="NAME:POLICY.FIELD=VALUE[,...]",
        type=variant,
        action="append",
        default=[],
        help="also run mco-full with these policy fields set, as mco-NAME on its own pipeline, "
        "on the same trace at the same time (repeatable; an A/B under the same load)",
    )
    parser.add_argument(
        "--max-lag",
        type=float,
        default=5.0,
        help="the run is invalid (exit 2) when an arrival is handled more than this many "
        "seconds after its trace time",
    )
    parser.add_argument(
        "--min-default-harmed",
        type=float,
        default=0.02,
        help="the run is invalid (exit 2) when the default scheduler's harmed share is under "
        "this (too little interference for a ratio to mean anything)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE,
        help="an online pod-second is harmed when the pod's modeled slowdown is over this "
        "(default 1.2); qos kept: the share of online pods whose own p99 is at or under it",
    )
    parser.add_argument("--workdir", type=Path, help="keep logs and configs here")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    args.overrides = tuple(args.overrides)
    if len({v.name for v in args.variants}) < len(args.variants):
        parser.error("--variant: each needs its own NAME")
    args.nodes = args.nodes or (20 if args.quick else 200)
    args.duration = args.duration or (150.0 if args.quick else 600.0)
    args.burst_every = args.burst_every or (40.0 if args.quick else 60.0)
    protocols = args.protocols or ("kube,volcano" if args.quick else "kube")
    args.protocols = [p for p in protocols.split(",") if p]
    seeds = [args.seed + i for i in range(args.seeds)]
    results: dict[int, list[dict[str, Any]]] = {}
    reasons: list[str] = []
    for seed in seeds:
        args.seed = seed
        where = args.workdir / f"seed-{seed}" if args.workdir and len(seeds) > 1 else args.workdir
        with workdir(where) as root:
            rows = asyncio.run(simulate(args, root))
        print_table(rows)
        results[seed] = rows
        for line in seed_lines(seed, rows):
            print(line)
        print(qos_line(seed, rows, args.tolerance))
        why = invalid(rows, args.max_lag, args.min_default_harmed)
        reasons += [f"seed {seed}: {w}" if len(seeds) > 1 else w for w in why]
    if args.json:
        out: Any = results[seeds[0]] if len(seeds) == 1 else {str(k): v for k, v in results.items()}
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    for v in args.variants:
        h = worst([headlines(rows, v.name) for rows in results.values()])
        print(f"variant {v.name} over {len(seeds)} seed(s): {headline_line(args.scenario, h)}")
    h = worst([headlines(rows) for rows in results.values()])
    if reasons:
        print(f"invalid run: {'; '.join(reasons)}")
    print(headline_line(args.scenario, h))
    return exit_code(args.scenario, h, reasons)


def exit_code(scenario: str, h: Headline, reasons: list[str]) -> int:
    """2 for an invalid run; else 0 when every target is met as printed (2 decimals)."""
    if reasons:
        return 2
    met = (
        round(h.harm, 2) <= HARM_TARGET.get(scenario, 0.5)
        and round(h.wait, 2) <= WAIT_TARGET
        and h.pending <= h.default_pending
    )
    return 0 if met else 1


def qos_line(seed: int, rows: list[dict[str, Any]], target: float) -> str:
    """One seed's qos kept, mco-full against the default, with the run's timing figures."""
    by = {r["run"]: r for r in rows}
    mco = by.get("mco-full/kube") or by[next(r for r in by if r.startswith("mco-full/"))]
    base = by["default/none"]
    lag = max((r["lag_max_s"] for r in rows), default=math.nan)
    sampled = min((r["sampled"] for r in rows), default=math.nan)
    return (
        f"seed {seed}: qos kept (own p99 slowdown <= {target:g}): {mco['run']} "
        f"{mco['qos_kept']:.2f}, default {base['qos_kept']:.2f}; pending online share "
        f"{mco['pending_online_share']:.3f} vs {base['pending_online_share']:.3f}; arrival lag "
        f"max {lag:.1f} s; sampled >= {sampled:.2f} of expected online pod-seconds"
    )


def overrides_of(
    args: argparse.Namespace, policies: dict[str, PolicySet], pipeline: str
) -> dict[str, dict[str, Any]] | None:
    """The policy fields a pipeline's config sets over the shipped ones: ``--set`` for
    mco-full's, a variant's own for its."""
    if pipeline == "full":
        fields: tuple[tuple[str, str, Any], ...] = args.overrides
    else:
        fields = next((p.overrides for p in policies.values() if p.pipeline == pipeline), ())
    out: dict[str, dict[str, Any]] = {}
    for policy, key, value in fields:
        out.setdefault(policy, {})[key] = value
    return out or None


def override(text: str) -> tuple[str, str, Any]:
    """``POLICY.FIELD=VALUE`` of ``--set``: the policy, the field and the value (YAML)."""
    target, sep, value = text.partition("=")
    policy, dot, key = target.partition(".")
    if not (sep and dot and policy and key):
        raise argparse.ArgumentTypeError(f"expected POLICY.FIELD=VALUE, got {text!r}")
    return policy, key, yaml.safe_load(value)


if __name__ == "__main__":
    sys.exit(main())
