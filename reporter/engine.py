"""The reporter's cycle: query, track, write, behind one ``Sink`` (``reporter.sink``).

One cycle is one instant query (``reporter.query``; one per shard, merged by
``reporter.shards``, when there are several sources), the tracker's update
(``reporter.tracker``), then the sink's write and, with ``--taint-nodes``, the Nodes' taints
(``reporter.taints``) and, with ``--tier-label-nodes``, their tier labels (``reporter.tiers``);
``lead`` repeats it every interval for one
leader term (the whole run without leader election), following the DetectionRuleConfig
meanwhile. The CLI, the tests and the benchmark all drive this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from mco.promql import PromQLClient, SourceError
from reporter import culprits
from reporter.entries import EntryBuilder, Epsilon
from reporter.metrics import ReporterMetrics
from reporter.profiles import ProfileBook
from reporter.query import Plan
from reporter.ruleconfig import RuleConfigSource
from reporter.schema import ReportConfig, WorkloadProfile
from reporter.shards import gather
from reporter.sink import Sink, SinkResult
from reporter.taints import NodeTainter, TaintResult
from reporter.thresholds import constraint_configs, detection_configs
from reporter.tiers import NodeTierLabeller, TierResult
from reporter.tracker import CycleResult, Tracker
from rulegen.durations import format_duration
from rulegen.model import DetectionRuleConfig

log = logging.getLogger("mco.reporter")
RULES_WAIT: Final = 10.0  # at a term's start, how long the first rule-config list may take


@dataclass(slots=True)
class Outcome:
    ok: bool
    message: str = ""
    result: CycleResult | None = None
    written: SinkResult | None = None  # what the sink did (None: it was not reached)
    taints: TaintResult | None = None  # what the taint mode did (None: off, or not reached)
    tiers: TierResult | None = None  # what the tier-label mode did (None: off, or not reached)


def report_config(cfg: DetectionRuleConfig, generation: int | None) -> ReportConfig:
    """``status.config``: what the extender follows from the accepted DetectionRuleConfig."""
    return ReportConfig(
        stale_after=format_duration(cfg.report.stale_after),
        neutral_score=cfg.report.neutral_score,
        policies=list(cfg.policies),
        generation=generation,
        detections=detection_configs(cfg),
        hard_constraints=constraint_configs(cfg),
    )


def settle_memory() -> None:
    """After the first cycle (the whole fleet read and written once): move what survives into
    the permanent generation, so full garbage collections stop walking every node's entry.
    Allocation per cycle is then mostly untracked (msgspec structs with gc=False)."""
    gc.collect()
    gc.freeze()


class Reporter:
    """One reporter: source, tracker, sink. ``cycle()`` is the unit the tests and bench drive."""

    def __init__(
        self,
        *,
        source: PromQLClient | Sequence[PromQLClient],
        rules: RuleConfigSource,
        plan: Plan,
        epsilon: Epsilon,
        metrics: ReporterMetrics,
        sink: Sink,
        live_within: float | None = None,
        refresh_after: float = 0.0,
        tainter: NodeTainter | None = None,
        labeller: NodeTierLabeller | None = None,
        profiles: ProfileBook | None = None,
        profile_interval: float = 30.0,
    ) -> None:
        # One source, or one per shard (the same query layer's URL given twice is refused).
        self.sources = (source,) if isinstance(source, PromQLClient) else tuple(source)
        if not self.sources:
            raise ValueError("a reporter needs at least one PromQL source")
        self.rules = rules
        # The recorded query reads staleAfter of history (query.window): it follows the config.
        self.plan = plan.windowed(rules.config.report.stale_after)
        self.epsilon = epsilon
        self.metrics = metrics
        self.sink = sink
        self.live_within = live_within
        self.refresh_after = refresh_after
        self.tainter = tainter  # --taint-nodes: None when off (no Node is ever touched)
        self.labeller = labeller  # --tier-label-nodes: None when off (no label is touched)
        # Workload profiles (reporter.profiles): learned from every answered cycle's lists,
        # published every profile_interval (0: never); None or --compact: not learned.
        self.profiles = profiles if not plan.compact else None
        self.profile_interval = profile_interval
        self._published: list[WorkloadProfile] | None = None
        self._published_at = -math.inf
        self._config = rules.config
        self._report_config = report_config(rules.config, rules.generation)
        self._culprits = self._culprits_query(self._config)
        self.tracker = self._new_tracker(self._config)
        self.seeded = False
        self.settled = False
        self._source_error: dict[str, str] = {}  # shard -> kind of its ongoing failure
        for client in self.sources:
            metrics.source_up.labels(client.where)
            metrics.source_nodes.labels(client.where)

    def _culprits_query(self, cfg: DetectionRuleConfig) -> str | None:
        """Victims and aggressors: built from the config's window and warns; none if compact."""
        return None if self.plan.compact else culprits.query(cfg)

    def _live_within(self, cfg: DetectionRuleConfig) -> float:
        return self.live_within or max(5.0, 3.0 * cfg.evaluation_interval)

    def _new_tracker(self, cfg: DetectionRuleConfig) -> Tracker:
        return Tracker(
            EntryBuilder(self.plan, cfg, self.epsilon),
            stale_after=float(cfg.report.stale_after),
            live_within=self._live_within(cfg),
            refresh_after=self.refresh_after,
        )

    def reset(self) -> None:
        """Forget everything (leadership lost): the next leader term starts from the sink."""
        self.tracker = self._new_tracker(self._config)
        self.seeded = False
        self.sink.forget()
        if self.tainter is not None:
            self.tainter.forget()
        if self.labeller is not None:
            self.labeller.forget()

    async def seed(self) -> None:
        """Start from what the sink already holds, so unchanged nodes are not rewritten and a
        failing source leaves the existing entries in place to age."""
        self.tracker.seed(await self.sink.load())
        if self.profiles is not None:
            self.profiles.seed(self.sink.loaded_profiles, time.time())
        self.seeded = True

    async def cycle(self, at: float | None = None) -> Outcome:
        cpu0 = time.process_time()
        wall0 = time.perf_counter()
        at = time.time() if at is None else at
        m = self.metrics
        cfg = await self.rules.current()
        if cfg != self._config or self.rules.generation != self._report_config.generation:
            self._report_config = report_config(cfg, self.rules.generation)
        if cfg != self._config:
            self._config = cfg
            self._culprits = self._culprits_query(cfg)
            self.plan = self.plan.windowed(cfg.report.stale_after)
            self.tracker.with_builder(
                EntryBuilder(self.plan, cfg, self.epsilon),
                float(cfg.report.stale_after),
                self._live_within(cfg),
            )
        if not self.seeded:
            try:
                await self.seed()
            except Exception as exc:
                m.errors.labels(f"{self.sink.medium}_read").inc()
                return self._done(
                    Outcome(False, f"cannot read the existing report: {exc}"), cpu0, wall0
                )
        outcome = Outcome(True)
        m.queries.inc(len(self.plan.exprs) * len(self.sources))
        gathered = await gather(self.sources, self.plan, at, self._culprits)
        self._log_sources(gathered.failed)
        for where, failure in gathered.failed.items():
            m.errors.labels(failure.kind).inc()
            m.source_up.labels(where).set(0)
        for where, count in gathered.nodes.items():
            m.source_up.labels(where).set(1)
            m.source_nodes.labels(where).set(count)
        snap = gathered.snapshot
        if snap is None:
            error = gathered.error()
            result = self.tracker.fail(error, at)
            outcome = Outcome(
                False, f"PromQL source failed ({error.kind}): {error.message}", result
            )
            queried = False
        else:
            m.answer_bytes.inc(snap.answer_bytes)
            queried = True
            result = self.tracker.apply(snap, gathered.failed)
            outcome.result = result
            if self.profiles is not None:
                self.profiles.observe(snap.culprits, snap.at)
            if gathered.failed:  # some shards answered: their nodes are current, not the rest
                error = gathered.error()
                outcome = Outcome(
                    False,
                    f"{len(gathered.failed)} of {len(self.sources)} PromQL sources failed "
                    f"({error.kind}): {error.message}",
                    result,
                )
            m.changed_nodes.inc(result.changed)
            m.rule_config_mismatch.set(1 if result.rule_hash_mismatch else 0)
        m.nodes.set(result.nodes)
        m.stale_nodes.set(result.stale)
        m.lagging_nodes.set(result.lagging)
        view = self.tracker.view()
        # No config while the object in the API was never accepted: readers keep the last good
        # one they have (an API sink leaves the field as written; a reader keeps its last).
        view.config = None if self.rules.unaccepted else self._report_config
        view.profiles = self._profiles_view(at)
        written = await self.sink.write(view)
        m.wrote(self.sink.medium, written)
        if not written.ok and outcome.ok:
            outcome = Outcome(False, written.message, result)
        outcome.written = written
        if self.tainter is not None:
            # After the report: the taints follow the entries just written, and the same
            # staleAfter the extender applies to them.
            outcome.taints = await self.tainter.sync(view, float(cfg.report.stale_after), at)
        if self.labeller is not None:
            # The tier labels likewise: the entries just written, with the same staleAfter.
            outcome.tiers = await self.labeller.sync(view, float(cfg.report.stale_after), at)
        # The heartbeat gauge (alert MCOReportStale) moves only when this cycle's heartbeat
        # reached the readers: a sink that fails or backs off leaves them with old data.
        if queried and written.delivered:
            m.last_sync.set(at)
        return self._done(outcome, cpu0, wall0)

    def _profiles_view(self, at: float) -> list[WorkloadProfile] | None:
        """``status.profiles``: what was last published, again every ``profile_interval``
        (a list that changes every cycle would cost a write every cycle)."""
        book = self.profiles
        if book is None or self.profile_interval <= 0:
            return None
        if at - self._published_at >= self.profile_interval or at < self._published_at:
            self._published = book.published(at)
            self._published_at = at
        return self._published

    def _log_sources(self, failed: dict[str, SourceError]) -> None:
        """Once per outage of a source (and per change of reason), not once a cycle."""
        for where, exc in failed.items():
            before = self._source_error.get(where)
            level = logging.WARNING if exc.kind != before else logging.DEBUG
            log.log(
                level,
                "PromQL source failed",
                extra={"source": where, "kind": exc.kind, "err": exc.message},
            )
            self._source_error[where] = exc.kind
        for where in [w for w in self._source_error if w not in failed]:
            log.info(
                "PromQL source answers again",
                extra={"source": where, "after": self._source_error.pop(where)},
            )

    def _done(self, outcome: Outcome, cpu0: float, wall0: float) -> Outcome:
        self.metrics.cycle_seconds.observe(time.perf_counter() - wall0)
        self.metrics.cycle_cpu.inc(time.process_time() - cpu0)
        return outcome

    async def lead(self, interval: float) -> None:
        """Cycle every ``interval`` until cancelled (the end of the leader term), following the
        DetectionRuleConfig meanwhile; the next term starts afresh from the sink."""
        follow = asyncio.create_task(self.rules.follow(), name="rule config")
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.rules.synced.wait(), RULES_WAIT)
            loop = asyncio.get_running_loop()
            next_at = loop.time()
            while True:
                outcome = await self.cycle()
                if not outcome.ok:
                    log.debug("cycle failed", extra={"err": outcome.message})
                elif not self.settled:
                    settle_memory()
                    self.settled = True
                next_at += interval
                if next_at < loop.time():
                    next_at = loop.time()  # late: the next cycle now, no burst to catch up
                await asyncio.sleep(next_at - loop.time())
        finally:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow
            self.reset()
