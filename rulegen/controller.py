"""``mco-rulegen controller``: DetectionRuleConfig ``default`` -> PrometheusRule, hot.

Watches the one DetectionRuleConfig, validates it with the same model the CRD encodes,
server-side applies the rendered PrometheusRule (field manager ``mco-rulegen``) and reports the
verdict in the object's status. A config that fails validation is Rejected and the
PrometheusRule is not touched, so the last good rules stay in force; Prometheus keeps
evaluating them whatever happens to this controller or the API server. Every error (API
unreachable, 5xx, a watch that breaks) is retried with capped exponential backoff; the loop
never exits on its own.

Conditions: ``Accepted`` (True, reason Valid / False, reason Rejected with the problems) says
whether the latest generation is valid; ``Applied`` (True, RulesApplied / False, ApplyFailed)
whether its PrometheusRule is in force. ``status.appliedGeneration`` and
``status.appliedRulesHash`` name the config the rules in force encode.

With a ``LeaseElector`` only the replica holding the Lease reads, applies and writes status; a
standby does nothing but follow the Lease. A new leader lists and applies at once, so the rules
in force never lag behind a replica that missed an edit. Every write is fenced: it is refused
once the elector's renew deadline has passed, before any standby may take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import aiohttp
import yaml
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, Gauge

from mco import selfmetrics
from mco.leader import LeaseElector
from rulegen import model
from rulegen.render import render_prometheusrule

log = logging.getLogger("mco.rulegen.controller")

FIELD_MANAGER: Final = "mco-rulegen"
RULE_GROUP: Final = "monitoring.coreos.com"
RULE_VERSION: Final = "v1"
RULE_PLURAL: Final = "prometheusrules"
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "mco-rulegen"}
MAX_MESSAGE: Final = 32768  # the CRD's maxLength for condition messages


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    rule_name: str = "mco-rules"
    rule_namespace: str = "monitoring"
    rule_labels: Mapping[str, str] = field(default_factory=dict)
    config_name: str = model.DEFAULT_NAME
    resync_seconds: float = 300.0  # re-read and re-apply, undoing edits to the PrometheusRule
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    leader_poll_seconds: float = 0.1  # how soon a lost or won lease starts or stops the work


class ControllerMetrics:
    """The controller's own series (served on its metrics port)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.accepted = Gauge(
            selfmetrics.RULEGEN_CONFIG_ACCEPTED,
            "1 when the latest DetectionRuleConfig generation was accepted, 0 when rejected.",
            registry=r,
        )
        self.observed_generation = Gauge(
            selfmetrics.RULEGEN_OBSERVED_GENERATION, "Latest generation judged.", registry=r
        )
        self.applied_generation = Gauge(
            selfmetrics.RULEGEN_APPLIED_GENERATION,
            "Generation whose PrometheusRule is in force (0: built-in defaults).",
            registry=r,
        )
        self.applies = Counter(
            selfmetrics.RULEGEN_APPLIES,
            "PrometheusRule server-side applies that succeeded.",
            registry=r,
        )
        self.rejections = Counter(
            selfmetrics.RULEGEN_REJECTIONS, "DetectionRuleConfig generations rejected.", registry=r
        )
        self.errors = Counter(
            selfmetrics.RULEGEN_ERRORS,
            "Kubernetes API errors, by kind (unreachable, http_<status>, watch).",
            ["kind"],
            registry=r,
        )
        self.last_apply = Gauge(
            selfmetrics.RULEGEN_LAST_APPLY,
            "Unix time of the last successful apply.",
            registry=r,
        )
        self.up = Gauge(
            selfmetrics.RULEGEN_API_REACHABLE, "1 while the Kubernetes API answers.", registry=r
        )
        self.leader = Gauge(
            selfmetrics.RULEGEN_LEADER,
            "1 while this replica holds the lease and applies the rules.",
            registry=r,
        )


class NotLeader(Exception):
    """A write was refused: this replica no longer holds the lease."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(
    old: list[dict[str, Any]], kind: str, status: bool, reason: str, message: str, generation: int
) -> dict[str, Any]:
    text = "True" if status else "False"
    previous = next((c for c in old if c.get("type") == kind), None)
    changed = previous is None or previous.get("status") != text
    return {
        "type": kind,
        "status": text,
        "observedGeneration": generation,
        "lastTransitionTime": _now() if changed else previous["lastTransitionTime"],  # type: ignore[index]
        "reason": reason,
        "message": message[:MAX_MESSAGE],
    }


def _same_status(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal apart from condition timestamps (so re-judging an object writes nothing)."""

    def strip(s: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in s.items() if k != "conditions"}
        out["conditions"] = sorted(
            (
                {k: v for k, v in c.items() if k != "lastTransitionTime"}
                for c in s.get("conditions", [])
            ),
            key=lambda c: str(c.get("type")),
        )
        return out

    return strip(a) == strip(b)


class RuleConfigController:
    def __init__(
        self,
        api: client.ApiClient,
        settings: ControllerSettings | None = None,
        metrics: ControllerMetrics | None = None,
        elector: LeaseElector | None = None,
    ) -> None:
        self.settings = settings or ControllerSettings()
        self.metrics = metrics or ControllerMetrics()
        self.elector = elector
        self._custom = client.CustomObjectsApi(api)
        # (generation, hash) of the rules this process applied; None before the first apply.
        self._applied: tuple[int, str] | None = None
        # Set after the first successful reconcile (of this leader term, with an elector).
        self.synced = asyncio.Event()
        self.leading = elector is None  # whether the reconcile loop runs now

    def ready(self) -> bool:
        """Readiness: a leader once it has synced; a standby while it hears from the API."""
        if self.elector is None or self.leading:
            return self.synced.is_set()
        e = self.elector
        if e.is_leader():
            return False  # about to lead: ready once synced
        return e.last_heard is not None and e.clock() - e.last_heard < e.lease_duration

    def _fence(self) -> None:
        if self.elector is not None and not self.elector.is_leader():
            raise NotLeader("lost the lease; not writing")

    # -- API calls ---------------------------------------------------------------------------

    async def _list_config(self) -> tuple[dict[str, Any] | None, str | None]:
        """The DetectionRuleConfig (None when absent) and the list's resourceVersion."""
        listing: dict[str, Any] = await self._custom.list_cluster_custom_object(
            model.API_GROUP,
            model.API_VERSION,
            model.PLURAL,
            field_selector=f"metadata.name={self.settings.config_name}",
        )
        found = None
        for item in listing.get("items") or []:
            if (item.get("metadata") or {}).get("name") == self.settings.config_name:
                found = {"apiVersion": f"{model.API_GROUP}/{model.API_VERSION}", "kind": model.KIND}
                found.update(item)
        return found, (listing.get("metadata") or {}).get("resourceVersion")

    async def _apply_rules(self, config: model.DetectionRuleConfig, generation: int) -> None:
        s = self.settings
        self._fence()
        body = yaml.safe_load(
            render_prometheusrule(
                config,
                name=s.rule_name,
                namespace=s.rule_namespace,
                labels={**s.rule_labels, **MANAGED_BY},
                generation=generation,
            )
        )
        await self._custom.patch_namespaced_custom_object(
            RULE_GROUP,
            RULE_VERSION,
            s.rule_namespace,
            RULE_PLURAL,
            s.rule_name,
            body,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",  # type: ignore[call-arg]  # stubs lack it
        )
        changed = self._applied != (generation, config.config_hash())
        self._applied = (generation, config.config_hash())
        self.metrics.applies.inc()
        self.metrics.applied_generation.set(generation)
        self.metrics.last_apply.set(time.time())
        log.log(
            logging.INFO if changed else logging.DEBUG,
            "PrometheusRule applied",
            extra={
                "prometheusrule": f"{s.rule_namespace}/{s.rule_name}",
                "generation": generation,
                "hash": config.config_hash(),
            },
        )

    async def _write_status(self, obj: Mapping[str, Any], status: dict[str, Any]) -> None:
        if _same_status(obj.get("status") or {}, status):
            return
        self._fence()
        await self._custom.patch_cluster_custom_object_status(
            model.API_GROUP,
            model.API_VERSION,
            model.PLURAL,
            self.settings.config_name,
            {"status": status},
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]
        )

    # -- reconciliation -----------------------------------------------------------------------

    async def reconcile(self, obj: Mapping[str, Any] | None, *, force: bool = False) -> None:
        """Bring the PrometheusRule and the status in line with ``obj`` (None: it is absent).

        Raises on API errors; the caller retries.
        """
        if obj is None:
            # No DetectionRuleConfig: the built-in defaults (what the chart ships) apply.
            default = model.DetectionRuleConfig.default()
            if force or self._applied != (0, default.config_hash()):
                log.info("no DetectionRuleConfig; applying the built-in defaults")
                await self._apply_rules(default, 0)
            self.metrics.accepted.set(1)
            return
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        old = dict(obj.get("status") or {})
        conditions = list(old.get("conditions") or [])
        self.metrics.observed_generation.set(generation)
        try:
            config = model.config_from_object(obj)
        except model.ConfigError as exc:
            self.metrics.accepted.set(0)
            if old.get("observedGeneration") != generation:
                self.metrics.rejections.inc()
                log.warning(
                    "DetectionRuleConfig rejected; the last good rules stay in force",
                    extra={"generation": generation, "problems": exc.problems},
                )
            status = {
                **old,
                "observedGeneration": generation,
                "conditions": [
                    _condition(
                        conditions,
                        "Accepted",
                        False,
                        "Rejected",
                        "; ".join(exc.problems),
                        generation,
                    ),
                    *[c for c in conditions if c.get("type") == "Applied"],
                ],
            }
            await self._write_status(obj, status)
            return
        self.metrics.accepted.set(1)
        digest = config.config_hash()
        accepted = _condition(
            conditions, "Accepted", True, "Valid", "the spec is valid", generation
        )
        if force or self._applied != (generation, digest):
            try:
                await self._apply_rules(config, generation)
            except ApiException as exc:
                failed = _condition(
                    conditions,
                    "Applied",
                    False,
                    "ApplyFailed",
                    f"server-side apply of PrometheusRule {self.settings.rule_namespace}/"
                    f"{self.settings.rule_name} failed: {exc.status} {exc.reason}",
                    generation,
                )
                with contextlib.suppress(ApiException, aiohttp.ClientError):
                    await self._write_status(
                        obj,
                        {**old, "observedGeneration": generation, "conditions": [accepted, failed]},
                    )
                raise
        applied = _condition(
            conditions,
            "Applied",
            True,
            "RulesApplied",
            f"PrometheusRule {self.settings.rule_namespace}/{self.settings.rule_name} encodes "
            f"generation {generation} (hash {digest})",
            generation,
        )
        await self._write_status(
            obj,
            {
                **old,
                "observedGeneration": generation,
                "appliedGeneration": generation,
                "appliedRulesHash": digest,
                "conditions": [accepted, applied],
            },
        )

    # -- the loop ------------------------------------------------------------------------------

    def _count_error(self, exc: BaseException) -> str:
        if isinstance(exc, ApiException):
            kind = f"http_{exc.status}"
        elif isinstance(exc, aiohttp.ClientConnectionError | OSError):
            kind = "unreachable"
            self.metrics.up.set(0)
        else:
            kind = "watch"
        self.metrics.errors.labels(kind).inc()
        return kind

    async def _watch(self, resource_version: str | None) -> None:
        """Follow changes since the list until the resync period ends or the stream breaks.

        Watching from the list's resourceVersion means nothing that happened in between is
        missed (a 410 Gone, when that version is too old, restarts with a fresh list).
        """
        w = watch.Watch()
        since = {"resource_version": resource_version} if resource_version else {}
        try:
            async with asyncio.timeout(self.settings.resync_seconds):
                async for event in w.stream(
                    self._custom.list_cluster_custom_object,
                    model.API_GROUP,
                    model.API_VERSION,
                    model.PLURAL,
                    field_selector=f"metadata.name={self.settings.config_name}",
                    timeout_seconds=max(1, int(self.settings.resync_seconds)),
                    allow_watch_bookmarks=True,
                    **since,
                ):
                    kind, obj = event.get("type"), event.get("raw_object") or event.get("object")
                    if kind == "ERROR":
                        raise RuntimeError(f"watch error: {obj}")
                    if kind == "BOOKMARK":
                        continue
                    if not isinstance(obj, Mapping):
                        continue
                    if (obj.get("metadata") or {}).get("name") != self.settings.config_name:
                        continue  # servers that ignore the field selector
                    await self.reconcile(None if kind == "DELETED" else obj)
        except TimeoutError:
            pass  # time to resync
        finally:
            await w.close()

    async def run(self) -> None:
        """Reconcile forever; with an elector, campaign and reconcile only while leading."""
        if self.elector is None:
            self.metrics.leader.set(1)
            await self._sync_forever()
            return
        self.metrics.leader.set(0)
        campaign = asyncio.create_task(self.elector.run())
        try:
            while True:
                await self._wait_leading(True)
                await self._lead()
        finally:
            # Stop writing before the lease is released (the elector does that on cancel).
            campaign.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await campaign

    async def _wait_leading(self, leading: bool) -> None:
        assert self.elector is not None
        while self.elector.is_leader() != leading:
            await asyncio.sleep(self.settings.leader_poll_seconds)

    async def _lead(self) -> None:
        """One leader term: sync (list, apply at once, watch) until the lease is lost."""
        assert self.elector is not None
        self.synced.clear()
        self._applied = None  # another leader may have applied meanwhile
        self.leading = True
        self.metrics.leader.set(1)
        log.info("leading: applying the rules", extra={"identity": self.elector.identity})
        term = asyncio.create_task(self._sync_forever())
        lost = asyncio.create_task(self._wait_leading(False))
        try:
            await asyncio.wait({term, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (term, lost):
                t.cancel()
            await asyncio.gather(term, lost, return_exceptions=True)
            self.leading = False
            self.synced.clear()
            self.metrics.leader.set(0)
        log.info("not the leader any more: stopped writing")

    async def _sync_forever(self) -> None:
        """Read, apply, watch; on any error back off and start over. Ends only on NotLeader."""
        delay = self.settings.backoff_initial
        while True:
            try:
                obj, resource_version = await self._list_config()
                await self.reconcile(obj, force=True)
                self.metrics.up.set(1)
                self.synced.set()
                delay = self.settings.backoff_initial
                await self._watch(resource_version)
            except asyncio.CancelledError:
                raise
            except NotLeader:
                return
            except Exception as exc:
                kind = self._count_error(exc)
                log.warning(
                    "sync failed; the rules in force are unchanged; retrying",
                    extra={"kind": kind, "err": str(exc) or type(exc).__name__, "retry_in": delay},
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.backoff_max)
