"""The seeded pod trace every policy sees: online pods and batch pods, a stream and bursts."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from bench.placement.model import Demand

WORKLOAD_CLASS = "mco.io/workload-class"

# Batch profiles: the aggressors. io in stress-ng --hdd writers (one stalls this VM's tasks
# 27 % of the time, PSI io some: over io_congestion's warn alone), cache in MB of LLC
# footprint, page cache in GiB beyond the request.
BATCH_PROFILES: dict[str, Demand] = {
    "io-heavy": Demand(cpu=1.0, memory=2.0, io=1.0, cache_mb=2.0),
    "cache-heavy": Demand(cpu=2.0, memory=2.0, io=0.02, cache_mb=20.0),
    "memory-heavy": Demand(cpu=1.0, memory=6.0, io=0.05, cache_mb=4.0, page_cache_gib=12.0),
}
# Online pods: small, and each sensitive to the one resource its profile names.
ONLINE_PROFILES: dict[str, Demand] = {
    "io": Demand(cpu=0.5, memory=1.0, io=0.01, cache_mb=1.0),
    "cache": Demand(cpu=0.5, memory=1.0, cache_mb=2.0),
    "memory": Demand(cpu=0.5, memory=1.0, cache_mb=1.0, page_cache_gib=0.2),
}


NAMESPACE = "bench"  # every trace pod's
# A pod-template-hash as the ReplicaSet controller writes one (consonants and digits).
TEMPLATE_HASH = "5d8f7c6b9"


@dataclass(frozen=True)
class PodSpec:
    name: str
    arrival: float  # seconds after the trace starts
    lifetime: float
    workload_class: str  # latency-sensitive | batch | best-effort
    profile: str
    demand: Demand
    burst: int | None = None  # which burst it came in, if any
    # Whether it carries its class label (``unlabelled`` scenario: half the aggressors do not).
    # ``workload_class`` stays the truth the figures are taken by; the label is what schedulers
    # see.
    labelled: bool = True
    # What an online pod is slowed by (its own profile, or the resource an online aggressor of
    # the ``unlabelled`` scenario is itself sensitive to).
    sensitive: str = ""
    # ``phases`` scenario: the pod switches between heavy (its demand) and quiet every
    # ``period`` seconds of its run, heavy first or not; 0: always heavy.
    period: float = 0.0
    heavy_first: bool = True

    def heavy_at(self, running_for: float) -> bool:
        """Whether the pod is in a heavy phase ``running_for`` seconds after it started."""
        if self.period <= 0:
            return True
        return (int(running_for // self.period) % 2 == 0) == self.heavy_first

    @property
    def quiet_demand(self) -> Demand:
        """What it adds in a quiet phase: its requests, an online pod's small I/O and cache."""
        return Demand(cpu=self.demand.cpu, memory=self.demand.memory, io=0.01, cache_mb=1.0)

    @property
    def online(self) -> bool:
        return self.workload_class == "latency-sensitive"

    @property
    def sensitivity(self) -> str:
        """The resource whose contention slows this (online) pod."""
        return self.sensitive or self.profile

    @property
    def owner(self) -> tuple[str, str]:
        """Its controller (kind, name), as kube-state-metrics' ``created_by_*`` and the Pod's
        ``ownerReferences`` give it: the pods of one template share it. An online pod is a
        Deployment's (its ReplicaSet ``<deployment>-<pod-template-hash>``), one per profile;
        a burst is one Job; steady batch and best-effort pods one Job per class and profile;
        pods without the class label are a template of their own."""
        plain = "" if self.labelled else "-nolabel"
        if self.online:
            return "ReplicaSet", f"online-{self.profile}{plain}-{TEMPLATE_HASH}"
        if self.burst is not None:
            return "Job", f"burst{self.burst}{plain}"
        return "Job", f"{self.workload_class}-{self.profile}{plain}"

    @property
    def labels(self) -> dict[str, str]:
        labels = {"bench/profile": self.profile}
        if self.burst is not None:
            labels["bench/burst"] = str(self.burst)
        if self.labelled:
            labels[WORKLOAD_CLASS] = self.workload_class
        return labels


@dataclass(frozen=True)
class TraceShape:
    duration: float
    nodes: int
    burst_size: int = 30
    burst_span: float = 2.0
    burst_every: float = 60.0


# ``mixed-nodes`` is the labelled trace on two node types (``cluster.node_kinds``).
SCENARIOS = ("labelled", "unlabelled", "phases", "churn", "mixed-nodes")
# The resource an aggressor profile loads most: what an online pod of that profile (the
# ``unlabelled`` scenario's online aggressors) is itself sensitive to.
LOADS = {"io-heavy": "io", "cache-heavy": "cache", "memory-heavy": "memory"}
# ``phases``: an aggressor's phase lasts this share of the trace, drawn uniformly.
PHASE_SPAN = (0.05, 0.15)
# ``churn``: an online workload rolls its pod (a Deployment's rolling update, one replica) every
# this share of the trace, drawn uniformly per workload: 60-150 s of the 600 s default run,
# "every few minutes" of a busy service's deploys compressed as the trace is.
ROLL_SPAN = (0.1, 0.25)
UNLABELLED_SHARE = 0.5  # of the aggressor workloads (steady pods, bursts) without a class label
ONLINE_AGGRESSOR_SHARE = 0.25  # of the online pods whose own demand is an aggressor's


def generate(shape: TraceShape, seed: int, scenario: str = "labelled") -> list[PodSpec]:
    """The trace of ``scenario`` (``SCENARIOS``): ``labelled`` as ``base`` makes it; the others
    are the same pods changed by a generator of their own, so a seed's arrivals match."""
    pods = base(shape, seed)
    if scenario in ("labelled", "mixed-nodes"):
        return pods
    if scenario == "unlabelled":
        return unlabelled(pods, random.Random(f"unlabelled-{seed}"))
    if scenario == "phases":
        return phases(pods, random.Random(f"phases-{seed}"), shape.duration)
    if scenario == "churn":
        return churn(pods, random.Random(f"churn-{seed}"), shape.duration)
    raise ValueError(f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})")


def unlabelled(pods: list[PodSpec], rng: random.Random) -> list[PodSpec]:
    """Half the aggressor workloads (each steady batch or best-effort pod, each burst as a
    whole) carry no class label, and a quarter of the online pods are aggressors themselves
    (an aggressor profile's demand, sensitive to the resource it loads)."""
    bursts: dict[int, bool] = {}
    out = []
    for p in pods:
        if p.online:
            if rng.random() < ONLINE_AGGRESSOR_SHARE:
                profile = rng.choice(sorted(BATCH_PROFILES))
                p = replace(p, profile=profile, demand=BATCH_PROFILES[profile],
                            sensitive=LOADS[profile])  # fmt: skip
        elif p.burst is not None:
            if p.burst not in bursts:
                bursts[p.burst] = rng.random() >= UNLABELLED_SHARE
            p = replace(p, labelled=bursts[p.burst])
        else:
            p = replace(p, labelled=rng.random() >= UNLABELLED_SHARE)
        out.append(p)
    return out


def churn(pods: list[PodSpec], rng: random.Random, duration: float) -> list[PodSpec]:
    """Every online pod is one replica of a workload that rolls it every ``ROLL_SPAN`` of the
    trace: the pod ends at the roll and its successor (same profile, a new pod to place)
    arrives then, until the trace ends; the last one outlives it. Each roll is a new placement
    among whatever aggressors run by then, where a long-lived online pod was placed once."""
    out = []
    for p in pods:
        if not p.online:
            out.append(p)
            continue
        period = rng.uniform(*ROLL_SPAN) * duration
        at, generation = p.arrival, 0
        while at + period < duration:
            name = p.name if generation == 0 else f"{p.name}-r{generation}"
            out.append(replace(p, name=name, arrival=at, lifetime=period))
            at, generation = at + period, generation + 1
        name = p.name if generation == 0 else f"{p.name}-r{generation}"
        out.append(replace(p, name=name, arrival=at, lifetime=p.lifetime))
    return sorted(out, key=lambda q: (q.arrival, q.name))


def phases(pods: list[PodSpec], rng: random.Random, duration: float) -> list[PodSpec]:
    """Every aggressor (batch and best-effort pod) switches between heavy and quiet, each
    phase ``PHASE_SPAN`` of the trace long, starting in either: its label says nothing of
    which phase it is in."""
    out = []
    for p in pods:
        if not p.online:
            period = rng.uniform(*PHASE_SPAN) * duration
            p = replace(p, period=period, heavy_first=rng.random() < 0.5)
        out.append(p)
    return out


def base(shape: TraceShape, seed: int) -> list[PodSpec]:
    """Online pods arrive over the first 80 % and stay; batch arrives steadily and in bursts;
    best-effort pods (the batch profiles, shorter lived) steadily, about 4 per node in all.

    Rates scale with the node count so a small cluster is as loaded as a large one: about 2
    online pods per node, and 12 steady batch pods per node over the trace, each living 20-50 %
    of it (about 4 running per node at a time, so a node often holds three aggressors of one
    kind: what triggers a cache or memory detection; one io-heavy pod triggers io), plus the
    bursts.
    """
    rng = random.Random(seed)
    pods: list[PodSpec] = []
    online_rate = 2.0 * shape.nodes / (0.8 * shape.duration)
    batch_rate = 12.0 * shape.nodes / (0.9 * shape.duration)
    t = 0.0
    while (t := t + rng.expovariate(online_rate)) < 0.8 * shape.duration:
        profile = rng.choice(sorted(ONLINE_PROFILES))
        pods.append(
            PodSpec(
                f"online-{len(pods)}",
                t,
                rng.uniform(2, 4) * shape.duration,  # outlives the trace
                "latency-sensitive",
                profile,
                ONLINE_PROFILES[profile],
            )
        )
    t = 0.1 * shape.duration
    while (t := t + rng.expovariate(batch_rate)) < shape.duration:
        profile = rng.choice(sorted(BATCH_PROFILES))
        pods.append(
            PodSpec(
                f"batch-{len(pods)}",
                t,
                rng.uniform(0.2, 0.5) * shape.duration,
                "batch",
                profile,
                BATCH_PROFILES[profile],
            )
        )
    t = 0.1 * shape.duration
    best_effort_rate = 4.0 * shape.nodes / (0.9 * shape.duration)
    while (t := t + rng.expovariate(best_effort_rate)) < shape.duration:
        profile = rng.choice(sorted(BATCH_PROFILES))
        pods.append(
            PodSpec(
                f"besteffort-{len(pods)}",
                t,
                rng.uniform(0.1, 0.25) * shape.duration,
                "best-effort",
                profile,
                BATCH_PROFILES[profile],
            )
        )
    burst, start = 0, 0.3 * shape.duration
    while start < 0.9 * shape.duration:
        profile = rng.choice(sorted(BATCH_PROFILES))
        for _ in range(shape.burst_size):
            pods.append(
                PodSpec(
                    f"burst{burst}-{len(pods)}",
                    start + rng.uniform(0, shape.burst_span),
                    rng.uniform(0.2, 0.4) * shape.duration,
                    "batch",
                    profile,
                    BATCH_PROFILES[profile],
                    burst,
                )
            )
        burst += 1
        start += shape.burst_every
    return sorted(pods, key=lambda p: (p.arrival, p.name))
