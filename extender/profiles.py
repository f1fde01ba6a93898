"""Learned workload profiles as a per-node term (docs/extender.md, "Workload profiles").

The reporter publishes, per workload and resource (llc, io, memory), how much it pollutes
(aggressor intensity) and how much it suffers (victim sensitivity), each with the decayed
number of samples behind it (``reporter.profiles``, ``status.profiles``). For a pod to place,
on each node whose residents (``extender.residents``, from the pod watch) include a profiled
workload:

* ``predicted``: what the residents are expected to do to it, the worst resource of
  ``sensitivity(pod, r) x min(1, sum over residents of pods x intensity(resident, r))``, times
  ``--profile-weight``. It is a floor under the node's measured level (``decide``), so it counts
  toward the policy's maxLevel and the score like the level would once the harm shows.
* ``inflicted``: what the pod is expected to do to them, the worst resource of
  ``intensity(pod, r) x max over residents of sensitivity(resident, r)``, times the weight;
  ``100 x inflicted`` comes off the score (it protects the residents, like ``avoidPolicies``),
  never filters.

Each learned value counts with its confidence ``c = n / (n + PRIOR)`` (``n`` its decayed
samples): ``intensity = c x aggressor``; ``sensitivity = c x victim + (1 - c) x default``.
Where a workload has no history the labels and shipped policies decide, as without profiles:
the default sensitivity is 1 under a policy with a maxLevel (the latency-sensitive class) and
0 otherwise, and an unknown workload pollutes nothing. The reporter learns no ``llc``
sensitivity (no per-pod cache victim), so a workload's llc sensitivity is its larger learned
memory or io sensitivity, blended with the default the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from extender.reports import ReportStore
from extender.residents import Residents
from extender.verdict import NodeTerms, PodFacts
from mco.policy import Policy
from reporter.schema import WorkloadProfile

RESOURCES: Final = ("llc", "io", "memory")
PRIOR: Final = 10.0  # samples at which a learned value counts half
DEFAULT_WEIGHT: Final = 0.5
NOTHING: Final[dict[str, float]] = dict.fromkeys(RESOURCES, 0.0)


class Part(NamedTuple):
    """One resident workload's share of a node's profile terms (for /v1/explain)."""

    workload: str
    pods: int
    resource: str
    role: str  # aggressor: it harms the pod; victim: the pod harms it
    value: float  # its intensity (aggressor) or sensitivity (victim), confidence-weighted
    product: float  # with the pod's own sensitivity or intensity on that resource


def confidence(count: float) -> float:
    return count / (count + PRIOR) if count > 0 else 0.0


class Profiles:
    """The published profiles, indexed by workload, as of the report the store holds."""

    def __init__(self, store: ReportStore, weight: float = DEFAULT_WEIGHT) -> None:
        if not 0 <= weight <= 1:
            raise ValueError(f"the profile weight must be within 0-1: {weight}")
        self.store = store
        self.weight = weight
        self._seen: list[WorkloadProfile] | None = None
        self._by: dict[str, WorkloadProfile] = {}
        self._polluters: frozenset[str] = frozenset()
        self._sufferers: frozenset[str] = frozenset()

    def _current(self) -> dict[str, WorkloadProfile]:
        published = self.store.profiles
        if published is not self._seen:
            self._seen = published
            self._by = {p.workload: p for p in published}
            self._polluters = frozenset(
                p.workload for p in published if any(r.aggressor > 0 for r in p.resources.values())
            )
            self._sufferers = frozenset(
                p.workload for p in published if any(r.victim > 0 for r in p.resources.values())
            )
        return self._by

    def get(self, workload: str) -> WorkloadProfile | None:
        return self._current().get(workload) if workload else None

    def polluters(self) -> frozenset[str]:
        self._current()
        return self._polluters

    def sufferers(self) -> frozenset[str]:
        self._current()
        return self._sufferers

    def intensity(self, workload: str) -> dict[str, float]:
        """Per resource: how much the workload pollutes, confidence-weighted (0 unknown)."""
        p = self.get(workload)
        if p is None:
            return NOTHING
        return {
            r: round(confidence(rp.aggressor_count) * rp.aggressor, 6) if rp else 0.0
            for r in RESOURCES
            for rp in (p.resources.get(r),)
        }

    def sensitivity(self, workload: str, default: float) -> dict[str, float]:
        """Per resource: how much the workload suffers, learned blended with ``default``."""
        p = self.get(workload)
        out = dict.fromkeys(RESOURCES, default)
        if p is None:
            return out
        for r in ("io", "memory"):
            rp = p.resources.get(r)
            if rp is not None and rp.victim_count > 0:
                c = confidence(rp.victim_count)
                out[r] = round(c * rp.victim + (1 - c) * default, 6)
        learned = [
            (confidence(rp.victim_count), rp.victim)
            for r in ("io", "memory")
            if (rp := p.resources.get(r)) is not None and rp.victim_count > 0
        ]
        if learned:
            c, victim = max(learned, key=lambda cv: cv[0] * cv[1])
            out["llc"] = round(c * victim + (1 - c) * default, 6)
        return out


def default_sensitivity(policy: Policy | None) -> float:
    """What a workload without history is taken to suffer: fully under a policy that limits
    the level (latency-sensitive as shipped), nothing otherwise."""
    return 1.0 if policy is not None and policy.max_level is not None else 0.0


class ProfileTerm:
    """The `TermSource` of ``predicted`` and ``inflicted`` for one pod (made per call)."""

    def __init__(
        self,
        profiles: Profiles,
        residents: Residents,
        pod: PodFacts,
        policies: Mapping[str, Policy],
    ) -> None:
        self.profiles = profiles
        self.residents = residents
        self.policies = policies
        self.pod = pod
        self.weight = profiles.weight
        self.sensitive = profiles.sensitivity(pod.workload, default_sensitivity(pod.policy))
        self.polluting = profiles.intensity(pod.workload)

    def touched(self, names: Sequence[str], policy: Policy, now: float) -> set[str]:
        if self.weight <= 0:
            return set()
        found: set[str] = set()
        if any(self.sensitive.values()):
            found |= self.residents.nodes_of(self.profiles.polluters())
        if any(self.polluting.values()):
            found |= self.residents.nodes_of(self.profiles.sufferers())
            online = [n for n, p in self.policies.items() if default_sensitivity(p) > 0]
            if online:
                found |= self.residents.nodes_with(online)
        return found.intersection(names) if found else found

    def add(
        self, terms: NodeTerms, name: str, held_until: float, policy: Policy, now: float
    ) -> NodeTerms:
        predicted, inflicted, _ = self.judge(name)
        if predicted <= 0 and inflicted <= 0:
            return terms
        return terms._replace(predicted=predicted, inflicted=inflicted)

    def judge(self, name: str) -> tuple[float, float, list[Part]]:
        """``predicted`` and ``inflicted`` on node ``name``, and the parts behind them."""
        parts: list[Part] = []
        pressure = dict.fromkeys(RESOURCES, 0.0)
        suffering = dict.fromkeys(RESOURCES, 0.0)
        for (workload, policy_name), pods in self.residents.workloads_on(name).items():
            polluting = self.profiles.intensity(workload)
            default = default_sensitivity(self.policies.get(policy_name))
            sensitive = self.profiles.sensitivity(workload, default)
            for r in RESOURCES:
                if self.sensitive[r] > 0 and polluting[r] > 0:
                    pressure[r] += pods * polluting[r]
                    part = Part(workload, pods, r, "aggressor", polluting[r],
                                round(self.sensitive[r] * polluting[r] * pods, 6))  # fmt: skip
                    parts.append(part)
                if self.polluting[r] > 0 and sensitive[r] > 0:
                    suffering[r] = max(suffering[r], sensitive[r])
                    part = Part(workload, pods, r, "victim", sensitive[r],
                                round(self.polluting[r] * sensitive[r], 6))  # fmt: skip
                    parts.append(part)
        predicted = max(self.sensitive[r] * min(1.0, pressure[r]) for r in RESOURCES)
        inflicted = max(self.polluting[r] * suffering[r] for r in RESOURCES)
        return round(self.weight * predicted, 6), round(self.weight * inflicted, 6), parts
