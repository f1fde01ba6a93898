"""``mco-rulegen controller``: DetectionRuleConfig ``default`` -> PrometheusRule, hot.

Watches the one DetectionRuleConfig, validates it with the same model the CRD encodes,
server-side applies the rendered PrometheusRule (field manager ``mco-rulegen``) and reports the
verdict in the object's status. A config that fails validation is Rejected and the
PrometheusRule is not touched, so the last good rules stay in force; Prometheus keeps
evaluating them whatever happens to this controller or the API server. The list, the watch and
the retries are ``mco.watch``'s: every error (API unreachable, 5xx, a watch that breaks, a failed
apply) backs off with jitter and lists again; every resync period it lists and applies again,
undoing hand edits of the PrometheusRule. The loop never exits on its own.

Conditions: ``Accepted`` (True, reason Valid / False, reason Rejected with the problems) says
whether the latest generation is valid; ``Applied`` (True, RulesApplied / False, ApplyFailed)
whether its PrometheusRule is in force. ``status.appliedGeneration`` and
``status.appliedRulesHash`` name the config the rules in force encode.

With a ``LeaseElector`` only the replica holding the Lease reads, applies and writes status
(``mco.leader.run_while_leading``: the term starts on the elector's event and is cancelled when
the lease is lost); a standby does nothing but follow the Lease. A new leader lists and applies
at once, so the rules in force never lag behind a replica that missed an edit. Every write is
fenced: it is refused once the elector's renew deadline has passed, before any standby may take
over.
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
import msgspec
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, Gauge

from mco import selfmetrics
from mco.apierrors import CONNECTION, ApiError
from mco.asynciotasks import AsyncioTasks
from mco.latency_buckets import BOUNDS, format_bounds
from mco.leader import LeaseElector, run_while_leading
from mco.watch import ListWatch, Resource, WatchSettings
from rulegen import guard, history, model
from rulegen.latency import needed_bounds
from rulegen.render import DEFAULT_ENGINE, Engine, render_prometheusrule

log = logging.getLogger("mco.rulegen.controller")

FIELD_MANAGER: Final = "mco-rulegen"
RULE_GROUP: Final = "monitoring.coreos.com"
RULE_VERSION: Final = "v1"
RULE_PLURAL: Final = "prometheusrules"
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "mco-rulegen"}
MAX_MESSAGE: Final = 32768  # the CRD's maxLength for condition messages
GUARD_REJECTED: Final = "GuardRejected"  # Accepted=False reason when the guard refuses a spec


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    rule_name: str = "mco-rules"
    rule_namespace: str = "monitoring"
    rule_labels: Mapping[str, str] = field(default_factory=dict)
    engine: Engine = DEFAULT_ENGINE  # the rule engine the PrometheusRule is for
    config_name: str = model.DEFAULT_NAME
    resync_seconds: float = 300.0  # re-read and re-apply, undoing edits to the PrometheusRule
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    guard: guard.GuardSettings | None = None  # None: no guard (no --prometheus-url)
    history_limit: int = history.DEFAULT_LIMIT  # accepted specs kept in status.history
    # The exporters' --collector.biolatency.buckets (default: all of them, nothing to check).
    exporter_buckets: tuple[float, ...] = BOUNDS


class ControllerMetrics:
    """The controller's own series (served on its metrics port)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        r.register(AsyncioTasks(selfmetrics.RULEGEN_ASYNCIO_TASKS))
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
            "Kubernetes API errors, by kind (mco.apierrors: connection, server_error, gone, ...).",
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
        self.guard_checks = Counter(
            selfmetrics.RULEGEN_GUARD_CHECKS,
            "Guard checks of a new spec against the live data, by result (passed, rejected, "
            "unchecked: Prometheus did not answer and the spec was applied).",
            ["result"],
            registry=r,
        )
        self.latency_buckets_missing = Gauge(
            selfmetrics.RULEGEN_LATENCY_BUCKETS_MISSING,
            "Latency bucket bounds the accepted config's thresholds need and the exporters do "
            "not export (0: its P95/P99 verdicts are exact).",
            registry=r,
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
        self._api = api
        self._custom = client.CustomObjectsApi(api)
        # (generation, hash) of the rules this process applied; None before the first apply.
        self._applied: tuple[int, str] | None = None
        # Set after the first successful reconcile (of this leader term, with an elector).
        self.synced = asyncio.Event()
        self.leading = elector is None  # whether the reconcile loop runs now
        self._warned: tuple[float, ...] = ()  # the missing latency buckets last logged

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
                engine=s.engine,
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

    def _judge_buckets(self, config: model.DetectionRuleConfig) -> str:
        """The Accepted message; it names latency buckets the exporters lack (a threshold moved
        outside the deployed brackets by an edit in the cluster: docs/helm.md)."""
        needed = needed_bounds(config)
        missing = sorted(set(needed) - set(self.settings.exporter_buckets))
        self.metrics.latency_buckets_missing.set(len(missing))
        flag = format_bounds({*needed, *self.settings.exporter_buckets})
        if missing and tuple(missing) != self._warned:
            log.warning(
                "the exporters do not export latency buckets this config's thresholds need: "
                "P95/P99 verdicts near those thresholds differ from the model until they do",
                extra={"missing": format_bounds(missing), "exporter_flag": flag},
            )
        self._warned = tuple(missing)
        if not missing:
            return "the spec is valid"
        return (
            f"the spec is valid, but the exporters do not export the latency buckets "
            f"{format_bounds(missing)} its P95/P99 thresholds need: set "
            f"--collector.biolatency.buckets={flag} (helm upgrade with these thresholds in "
            f"detectionRuleConfig.spec does)"
        )

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
            await self._reject(obj, generation, "Rejected", exc.problems)
            return
        digest = config.config_hash()
        verdict = await self._guard(obj, config, generation)
        if verdict is not None and not verdict.allowed:
            await self._reject(obj, generation, GUARD_REJECTED, [verdict.message])
            return
        self.metrics.accepted.set(1)
        message = self._judge_buckets(config)
        if verdict is not None:
            message += f"; {verdict.message}"
        else:
            # Judged again (a resync, a new term) with nothing to guard: keep what the guard
            # said when this generation was accepted.
            prior: Mapping[str, Any] = next(
                (c for c in conditions if c.get("type") == "Accepted"), {}
            )
            said = str(prior.get("message", ""))
            same = prior.get("observedGeneration") == generation and prior.get("status") == "True"
            if same and said.startswith(message + "; "):
                message = said
        accepted = _condition(conditions, "Accepted", True, "Valid", message, generation)
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
                "history": self._remember(old.get("history") or [], obj, generation, digest),
            },
        )

    def _remember(
        self, past: list[dict[str, Any]], obj: Mapping[str, Any], generation: int, digest: str
    ) -> list[dict[str, Any]]:
        """status.history with the spec now in force first (unchanged when it already is)."""
        if past and past[0].get("generation") == generation and past[0].get("hash") == digest:
            return past
        return history.remember(
            past,
            generation=generation,
            digest=digest,
            spec=obj.get("spec") or {},
            now=_now(),
            limit=self.settings.history_limit,
        )

    async def _guard(
        self, obj: Mapping[str, Any], config: model.DetectionRuleConfig, generation: int
    ) -> guard.Verdict | None:
        """The guard's verdict on a spec whose rules differ from those in force; None when
        there is nothing to guard (no guard configured, the same rules, or the skip annotation).
        A generation the guard rejected stays rejected: data that changes later never applies
        it behind the user's back."""
        settings = self.settings.guard
        old = obj.get("status") or {}
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if settings is None or config.config_hash() == old.get("appliedRulesHash"):
            return None
        if annotations.get(guard.SKIP_ANNOTATION) == "true":
            return None
        accepted: Mapping[str, Any] = next(
            (c for c in old.get("conditions") or [] if c.get("type") == "Accepted"), {}
        )
        if old.get("observedGeneration") == generation and accepted.get("reason") == GUARD_REJECTED:
            return guard.Verdict(False, str(accepted.get("message", "")), checked=True)
        verdict = await guard.check(settings, config)
        result = "unchecked" if not verdict.checked else "passed" if verdict.allowed else "rejected"
        self.metrics.guard_checks.labels(result).inc()
        log.log(
            logging.WARNING if result != "passed" else logging.INFO,
            "guard: " + result,
            extra={"generation": generation, "reason": verdict.message},
        )
        return verdict

    async def _reject(
        self, obj: Mapping[str, Any], generation: int, reason: str, problems: list[str]
    ) -> None:
        """Accepted=False with the problems; the PrometheusRule and history stay as they are."""
        old = dict(obj.get("status") or {})
        conditions = list(old.get("conditions") or [])
        self.metrics.accepted.set(0)
        if old.get("observedGeneration") != generation:
            self.metrics.rejections.inc()
            log.warning(
                "DetectionRuleConfig rejected; the last good rules stay in force",
                extra={"generation": generation, "reason": reason, "problems": problems},
            )
        status = {
            **old,
            "observedGeneration": generation,
            "conditions": [
                _condition(conditions, "Accepted", False, reason, "; ".join(problems), generation),
                *[c for c in conditions if c.get("type") == "Applied"],
            ],
        }
        await self._write_status(obj, status)

    # -- the loop (mco.watch) -----------------------------------------------------------------

    def _list_watch(self) -> ListWatch:
        s = self.settings
        resource = Resource(
            model.API_GROUP,
            model.API_VERSION,
            model.PLURAL,
            field_selector=f"metadata.name={s.config_name}",
        )
        settings = WatchSettings(
            timeout=max(1, int(s.resync_seconds)),
            relist_every=s.resync_seconds,
            backoff_initial=s.backoff_initial,
            backoff_max=s.backoff_max,
        )
        return ListWatch(self._api, resource, self, settings, on_restart=self._restarted)

    def _restarted(self, reason: str, error: ApiError | None) -> None:
        if error is None:
            return  # a watch the server ended: resumed
        self.metrics.errors.labels(error.kind).inc()
        if error.kind == CONNECTION:
            self.metrics.up.set(0)

    async def listed(self, items: list[msgspec.Raw]) -> None:
        """Each list (the first of a term, after an error, every resync): apply at once."""
        found = None
        for raw in items:
            item = msgspec.json.decode(raw)
            if isinstance(item, dict) and (item.get("metadata") or {}).get("name") == (
                self.settings.config_name
            ):
                # A list's items carry no apiVersion and kind.
                found = {"apiVersion": f"{model.API_GROUP}/{model.API_VERSION}", "kind": model.KIND}
                found.update(item)
        await self.reconcile(found, force=True)
        self.metrics.up.set(1)
        self.synced.set()

    async def changed(self, kind: str, obj: msgspec.Raw) -> None:
        item = msgspec.json.decode(obj)
        if not isinstance(item, dict):
            return
        if (item.get("metadata") or {}).get("name") != self.settings.config_name:
            return  # servers that ignore the field selector
        await self.reconcile(None if kind == "DELETED" else item)

    async def run(self) -> None:
        """Reconcile forever; with an elector, campaign and reconcile only while leading."""
        self.metrics.leader.set(1 if self.elector is None else 0)
        await run_while_leading(self.elector, self._term)

    async def _term(self) -> None:
        """One leader term (the whole run without an elector): list, apply at once, watch;
        cancelled by ``run_while_leading`` when the lease is lost."""
        self.synced.clear()
        self._applied = None  # another leader may have applied meanwhile
        self.leading = True
        if self.elector is not None:
            self.metrics.leader.set(1)
            log.info("leading: applying the rules", extra={"identity": self.elector.identity})
        try:
            await self._list_watch().run()
        except NotLeader:
            return  # the fence saw the deadline pass first; the term ends at once
        finally:
            if self.elector is not None:
                self.leading = False
                self.synced.clear()
                self.metrics.leader.set(0)
                log.info("not the leader any more: stopped writing")
