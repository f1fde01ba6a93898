"""One pass per scheduler call: the verdicts every wire format and ``/v1/explain`` answer with.

`Judge.verdicts` answers the nodes of one call top to bottom:

1. The pod's facts and policy (`Judge.pod`): its runtime class, and the first policy in force
   whose podSelector matches its labels (``extender.policy``).
2. The cached table verdicts (``extender.tables``): each node's `decide` on its report entry
   alone, kept per kind of pod and looked up at C speed. A Kata pod whose request carries its
   nodes (their Kata labels count) is decided node by node instead.
3. The per-node adjustments (`TermSource`): each source names the nodes of the call it adds to,
   and only those are decided again with their `NodeTerms`: the reservation of pods placed since
   the node's data (``extender.reservation``), the pods there that the policy keeps away from
   (``extender.residents``). A new per-node term (learned workload profiles) is one more source
   in `Judge.sources` and one more field of `NodeTerms`; learned workload profiles
   (``extender.profiles``) are one, made for the pod of the call.
4. No data is no proof: under a policy with ``maxLevel``, a node without fresh data (no report,
   stale) passes only where no node with data in the same call passes the policy; where one
   does, it is rejected with reason ``no_data``. A node without data counts at the neutral
   level plus its own reservation; one whose count stays within ``maxLevel`` passes anyway.
   So pods do not pile onto the node MCO knows nothing about while known quiet nodes are
   there, and still schedule where MCO has no data at all or every node with data is over
   its limit (docs/extender.md, "Nodes without data").
5. Never starve (``extender.fallback``): where no node of the call passes and some were
   rejected by a limit of the policy (maxLevel, hard constraints, no data), the least
   interfered of those pass, reason ``least_interfered``.
6. The answer: one verdict per node, in the order asked.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Final, Protocol

from extender.config import VerdictConfig
from extender.fallback import least_interfered
from extender.policy import LiveConfig, PolicySet, from_report
from extender.profiles import Profiles, ProfileTerm
from extender.reports import ReportStore
from extender.reservation import Reservations
from extender.residents import Residents
from extender.tables import MAX_TABLE_ENTRIES, Table
from extender.verdict import (
    NO_TERMS,
    NodeFacts,
    NodeTerms,
    PodFacts,
    Reason,
    Verdict,
    decide,
    no_data,
    pod_facts,
)
from extender.wire import Pod, pod_labels, pod_workload, runtime_class
from mco.policy import Policy
from reporter.schema import ReportConfig

log = logging.getLogger("mco.extender.judge")

_UNPROVEN = itemgetter(6)  # Verdict.unproven, read at C speed
# Reasons only a node with fresh data gets (step 4: one such node makes "no data" a rejection).
_WITH_DATA: Final = frozenset(
    (Reason.OK, Reason.NO_LEVEL, Reason.MAX_LEVEL, Reason.HARD_CONSTRAINT, Reason.AVOIDED)
)


class TermSource(Protocol):
    """Where one per-node term of `NodeTerms` comes from."""

    def touched(self, names: Sequence[str], policy: Policy, now: float) -> set[str]:
        """The nodes of ``names`` this source may add to for ``policy`` (found at C speed;
        more than it adds to is fine, every other node keeps its table verdict)."""
        ...

    def add(
        self, terms: NodeTerms, name: str, held_until: float, policy: Policy, now: float
    ) -> NodeTerms:
        """``terms`` with this source's part for node ``name``, whose data holds up to
        ``held_until`` (-inf: no data)."""
        ...


class ReservationTerm:
    """Pods placed since the node's data (``extender.reservation``); on a node without data,
    every placement not yet forgotten."""

    def __init__(self, reservations: Reservations) -> None:
        self.reservations = reservations

    def touched(self, names: Sequence[str], policy: Policy, now: float) -> set[str]:
        active = self.reservations.active(now)
        return active.keys() & names if active else set()

    def add(
        self, terms: NodeTerms, name: str, held_until: float, policy: Policy, now: float
    ) -> NodeTerms:
        if math.isfinite(held_until):
            reserved = self.reservations.reserved(name, held_until, now)
        else:
            reserved = self.reservations.recent(name, now)
        return terms._replace(reserved=reserved) if reserved > 0 else terms


class AvoidTerm:
    """The pods on the node that the policy keeps away from (``avoidPolicies``, scored or, with
    ``avoidFilter``, filtered) and those of its own policy it gathers with (``gatherPerPod``)."""

    def __init__(self, residents: Residents) -> None:
        self.residents = residents

    def touched(self, names: Sequence[str], policy: Policy, now: float) -> set[str]:
        found: set[str] = set()
        if policy.avoid_policies and (policy.avoid_per_pod > 0 or policy.avoid_filter):
            found = self.residents.nodes_with(policy.avoid_policies).intersection(names)
        if policy.gather_per_pod > 0:
            found |= self.residents.nodes_with((policy.name,)).intersection(names)
        return found

    def add(
        self, terms: NodeTerms, name: str, held_until: float, policy: Policy, now: float
    ) -> NodeTerms:
        if policy.avoid_policies and (policy.avoid_per_pod > 0 or policy.avoid_filter):
            count = self.residents.count(name, policy.avoid_policies)
            avoided = min(1.0, count * policy.avoid_per_pod)
            if avoided > 0:
                terms = terms._replace(avoided=avoided)
            if policy.avoid_filter and count > 0:
                terms = terms._replace(kept_off=count)
        if policy.gather_per_pod > 0:
            gathered = min(1.0, self.residents.count(name, (policy.name,)) * policy.gather_per_pod)
            if gathered > 0:
                terms = terms._replace(gathered=gathered)
        return terms


class Judge:
    """The store and the configuration in force, asked by the wire formats for verdicts.

    The configuration starts as the flags with the shipped policies and follows the report's
    ``status.config`` from then on (``extender.policy``); a change drops every table.
    """

    def __init__(
        self,
        store: ReportStore,
        config: VerdictConfig,
        max_entries: int = MAX_TABLE_ENTRIES,
        reservations: Reservations | None = None,
        residents: Residents | None = None,
        profiles: Profiles | None = None,
    ) -> None:
        self.store = store
        self.reservations = reservations
        self.residents = residents
        self.profiles = profiles
        self._flags = config
        self.live = LiveConfig(config, PolicySet())
        self._max_entries = max_entries
        # Keyed by (Kata runtime class or None, policy name); least recently used first.
        self._tables: dict[tuple[str | None, str], Table] = {}
        self._current: Table | None = None
        store.subscribe(self._changed)
        store.subscribe_config(self._configured)
        if store.config is not None:
            self._configured(store.config)

    @property
    def config(self) -> VerdictConfig:
        return self.live.verdict

    @property
    def policies(self) -> PolicySet:
        return self.live.policies

    def policy_for(self, labels: Mapping[str, str] | None) -> Policy:
        """The workload-class policy of a pod with ``labels``, from the policies in force."""
        return self.live.policies.policy_for(labels)

    def sources(self, pod: PodFacts | None = None) -> tuple[TermSource, ...]:
        """The per-node terms in force (step 3) for ``pod``; a new per-node term is added here."""
        found: list[TermSource] = []
        if self.reservations is not None:
            found.append(ReservationTerm(self.reservations))
        if self.residents is not None:
            found.append(AvoidTerm(self.residents))
            if self.profiles is not None and pod is not None:
                policies = {p.name: p for p in self.policies.policies}
                found.append(ProfileTerm(self.profiles, self.residents, pod, policies))
        return tuple(found)

    # -- the pass -------------------------------------------------------------------------------

    def pod(self, pod: Pod | None) -> PodFacts:
        """Step 1: what the verdicts need of the request's Pod, its runtime class and policy."""
        facts = pod_facts(runtime_class(pod), self.config, self.policy_for(pod_labels(pod)))
        workload = pod_workload(pod)
        return facts._replace(workload=workload) if workload else facts

    def verdicts(
        self,
        names: Sequence[str],
        pod: PodFacts,
        now: float,
        nodes: Sequence[NodeFacts] | None = None,
        fallback: bool = True,
    ) -> list[Verdict]:
        """Steps 2-6 for the nodes ``names`` of one call; ``nodes``: the same nodes with what the
        request told about each (their Kata labels), when it carried them; ``fallback``: False
        where the call is not every candidate (Volcano's predicate, one node a call)."""
        # 2. The cached table verdicts, or node by node where the nodes' Kata labels count.
        # Whether a verdict may be ``unproven`` is known without reading them all (step 4).
        kata_nodes = nodes if nodes is not None and pod.wants_kata else None
        if kata_nodes is not None:
            verdicts = [self._decide(facts, pod, now, NO_TERMS) for facts in kata_nodes]
            unproven = True
        else:
            table = self._table(pod)
            verdicts = table.lookup(names, now)
            unproven = table.may_be_unproven(names)
            self._trimmed(table)
        # 3. The per-node adjustments, for the nodes some source adds to.
        sources = self.sources(pod)
        touched: set[str] = set()
        for source in sources:
            touched |= source.touched(names, pod.policy, now)
        if touched:
            facts = {f.name: f for f in kata_nodes} if kata_nodes is not None else {}
            redo: dict[str, Verdict] = {}
            for name in touched:
                terms = self._terms(sources, name, pod.policy, now)
                if terms != NO_TERMS:
                    redo[name] = verdict = self._decide(
                        facts.get(name, NodeFacts(name)), pod, now, terms
                    )
                    unproven = unproven or verdict.unproven
            _put(names, verdicts, redo)
        # 4. No data is no proof, where other nodes of the call have data.
        if unproven:
            verdicts = settle(verdicts, pod.policy, self.config)
        # 5. Never starve: where no node passes a limit, the least interfered do.
        return least_interfered(verdicts, pod.policy, self.config) if fallback else verdicts

    def node(self, facts: NodeFacts, pod: PodFacts, now: float) -> Verdict:
        """The pass for a call about one node (Volcano's predicate; its fallback is
        ``extender.fallback.Rounds``, across the task's calls)."""
        return self.verdicts((facts.name,), pod, now, (facts,), fallback=False)[0]

    def terms(
        self, name: str, policy: Policy, now: float, pod: PodFacts | None = None
    ) -> NodeTerms:
        """What the per-node adjustments add to node ``name`` for ``pod`` (for explain and
        /v1/nodes)."""
        return self._terms(self.sources(pod), name, policy, now)

    def _terms(
        self, sources: Sequence[TermSource], name: str, policy: Policy, now: float
    ) -> NodeTerms:
        known = self.store.get(name)
        held = known.held_until(self.store.heartbeat) if known is not None else -math.inf
        terms = NO_TERMS
        for source in sources:
            terms = source.add(terms, name, held, policy, now)
        return terms

    def _decide(self, facts: NodeFacts, pod: PodFacts, now: float, terms: NodeTerms) -> Verdict:
        known = self.store.get(facts.name)
        if known is None:
            return decide(None, -math.inf, pod, facts, self.config, now, terms)
        held = known.held_until(self.store.heartbeat)
        return decide(known.entry, held, pod, facts, self.config, now, terms)

    # -- the tables -----------------------------------------------------------------------------

    def _table(self, pod: PodFacts) -> Table:
        """The table of this kind of pod, made if need be, now the most recently used."""
        key = (pod.runtime_class if pod.wants_kata else None, pod.policy.name)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = Table(self.store, pod, self.config)
        if table is not self._current:
            self._tables[key] = self._tables.pop(key)
            self._current = table
        return table

    def _trimmed(self, table: Table) -> None:
        """After a lookup: the least recently used tables go while all are over the bound."""
        if table.grew:
            table.grew = False
            self._trim(table)

    def table_entries(self) -> int:
        """Verdicts held by all tables (for tests and the bound above)."""
        return sum(len(t.verdicts) for t in self._tables.values())

    def table_cost(self) -> int:
        """What ``max_entries`` bounds: the verdicts plus each table's own cost."""
        return sum(t.cost() for t in self._tables.values())

    def _trim(self, keep: Table) -> None:
        total = sum(t.cost() for t in self._tables.values())
        for key, table in list(self._tables.items()):
            if total <= self._max_entries:
                break
            if table is not keep:
                del self._tables[key]
                total -= table.cost()

    def _configured(self, report: ReportConfig) -> None:
        live = from_report(self._flags, report)
        if live is None:
            return
        if self.reservations is not None:  # placements last as long as data can stay fresh
            self.reservations.keep_for = self.reservations.span + live.verdict.stale_after
        same = (
            live.verdict == self.live.verdict and live.policies.policies == self.policies.policies
        )
        self.live = live
        if not same:
            self._tables.clear()
            self._current = None
            if self.residents is not None:
                self.residents.reclassify()
            log.info(
                "following status.config of the report",
                extra={
                    "generation": live.generation,
                    "stale_after": live.verdict.stale_after,
                    "neutral_score": live.verdict.neutral_score,
                    "policies": [p.name for p in live.policies.policies],
                },
            )

    def _changed(self, changes: Mapping[str, bool]) -> None:
        for table in self._tables.values():
            table.changed(changes)


def settle(verdicts: list[Verdict], policy: Policy, config: VerdictConfig) -> list[Verdict]:
    """Step 4 over one call's verdicts: where MCO has data for any node of the call, the nodes
    without data whose neutral level (plus reservation) is above ``policy``'s maxLevel are
    rejected; only where it has data for none (a new install, a reporter down) do they pass."""
    if policy.max_level is None or config.fail_closed or not any(map(_UNPROVEN, verdicts)):
        return verdicts
    if not any(v.reason in _WITH_DATA for v in verdicts):
        return verdicts  # no data anywhere: fail open, the scores spread the pods
    rejected = no_data(policy, config)
    return [rejected._replace(level=v.level) if v.unproven else v for v in verdicts]


def _put(names: Sequence[str], verdicts: list[Verdict], redo: Mapping[str, Verdict]) -> None:
    """The verdicts in ``redo`` in place of those of their names (every copy of a name)."""
    if not redo:
        return
    where = dict(zip(names, range(len(names)), strict=True))  # at C speed
    if len(where) == len(names):
        for name, verdict in redo.items():
            verdicts[where[name]] = verdict
    else:  # a name asked twice: every copy gets its verdict
        for i, name in enumerate(names):
            if name in redo:
                verdicts[i] = redo[name]
