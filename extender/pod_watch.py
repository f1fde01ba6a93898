"""kube-scheduler's placements: a watch of pods bound to nodes, keeping only recent ones.

kube-scheduler tells an extender nothing after prioritize, so the pods it placed are read from
the API: ``mco.watch``'s list-then-watch of ``/api/v1/pods`` with ``fieldSelector=spec.nodeName!=``
(bound pods only). A pod counts from the time it was placed, its ``PodScheduled`` condition's
``lastTransitionTime`` (the bind; ``creationTimestamp`` for a pod created with its node already
set, which has no such condition), so a re-list rebuilds the same reservations. A time ahead of
this clock by up to ``CLOCK_SKEW`` counts as now (another clock); one further ahead is not
believed and the pod reserves nothing (a pod dated 2100 reserved its amount for as long as it
existed, issue 27). Only pods placed
within the reservations' ``keep_for`` are kept: memory follows recent placements, not all pods
(the list itself is read once per list, then dropped). Finished and deleted pods are forgotten.
Every bound pod that has not finished also goes to the residents (``extender.residents``), which
policies with ``avoidPolicies`` count.

A watch that breaks (an API failure) falls back to no reservation: its placements are dropped,
``mco_extender_reservation_source_up{source="pod_watch"}`` goes to 0, the failure is logged, and
the loop lists again after its backoff; answers never turn into errors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import msgspec
from kubernetes_asyncio import client as k8s

from extender.config import CLOCK_SKEW, SourceConfig
from extender.metrics import ExtenderMetrics
from extender.reservation import POD_WATCH, AmountFor, Placement, Reservations
from extender.residents import Residents
from extender.wire import OwnerReference, owner_workload
from mco.apierrors import ApiError
from mco.watch import RESTART_ERROR, ListWatch, Resource, WatchSettings
from reporter.schema import parse_time

log = logging.getLogger("mco.extender.pod_watch")

PODS = Resource("", "v1", "pods", field_selector="spec.nodeName!=")
_FINISHED = frozenset({"Succeeded", "Failed"})


class _Meta(msgspec.Struct, rename="camel", gc=False):
    uid: str = ""
    labels: dict[str, str] | None = None
    creation_timestamp: str | None = None
    name: str = ""
    namespace: str = ""
    owner_references: list[OwnerReference] | None = None  # its workload (extender.profiles)


class _Spec(msgspec.Struct, rename="camel", gc=False):
    node_name: str = ""


class _Condition(msgspec.Struct, rename="camel", gc=False):
    type: str = ""
    status: str = ""
    last_transition_time: str | None = None


class _Status(msgspec.Struct, gc=False):
    phase: str = ""
    conditions: list[_Condition] | None = None


class _Pod(msgspec.Struct, gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec = msgspec.field(default_factory=_Spec)
    status: _Status = msgspec.field(default_factory=_Status)


_pod = msgspec.json.Decoder(_Pod)


def placed_at(pod: _Pod) -> float:
    """When the pod was bound to its node (Unix time; -inf when the pod does not say)."""
    for condition in pod.status.conditions or ():
        scheduled = condition.type == "PodScheduled" and condition.status == "True"
        if scheduled and condition.last_transition_time:
            return parse_time(condition.last_transition_time)
    if pod.metadata.creation_timestamp:
        return parse_time(pod.metadata.creation_timestamp)
    return float("-inf")


class PodWatch:
    """Feeds ``Reservations`` from the pods bound to nodes.

    Placements on nodes the report does not know (yet: the pod list may well arrive before the
    first report) are kept as well; they are real nodes, and a lookup only ever asks about
    nodes the report knows. Memory stays bounded by ``keep_for`` and ``MAX_PLACEMENTS``.
    """

    def __init__(
        self,
        api: k8s.ApiClient,
        reservations: Reservations,
        amount_for: AmountFor,
        metrics: ExtenderMetrics,
        config: SourceConfig,
        clock: Callable[[], float] = time.time,
        residents: Residents | None = None,
    ) -> None:
        self._reservations = reservations
        self._residents = residents
        self._amount_for = amount_for
        self._metrics = metrics
        self._clock = clock
        self._watch = ListWatch(
            api,
            PODS,
            self,
            WatchSettings(
                timeout=config.watch_timeout,
                backoff_initial=config.backoff_initial,
                backoff_max=config.backoff_max,
            ),
            on_restart=self._restarted,
        )

    async def run(self) -> None:
        """List and watch until cancelled."""
        await self._watch.run()

    def fall_back(self, why: str) -> None:
        """No reservation from this source until the next list succeeds."""
        if self._metrics.source_up.get(POD_WATCH, False):
            log.warning(
                "pod watch broke: no reservations from it until it lists again", extra={"err": why}
            )
        self._metrics.source_up[POD_WATCH] = False
        self._reservations.clear(POD_WATCH)
        if self._residents is not None:
            self._residents.clear()

    def _restarted(self, reason: str, error: ApiError | None) -> None:
        self._metrics.watch_restarts.labels(reason).inc()
        if reason == RESTART_ERROR:
            self.fall_back(error.message if error is not None else reason)
            # Events missed while it was broken are only in a new list: resume from one.
            self._watch.resource_version = None

    # -- mco.watch.Handler ----------------------------------------------------------------------

    async def listed(self, items: list[msgspec.Raw]) -> None:
        self._reservations.clear(POD_WATCH)
        if self._residents is not None:
            self._residents.clear()
        now = self._clock()
        for raw in items:
            self._seen(raw, now)
        self._metrics.source_up[POD_WATCH] = True
        log.info("pods listed", extra={"pods": len(items), "recent": len(self._reservations)})

    async def changed(self, kind: str, obj: msgspec.Raw) -> None:
        if kind == "DELETED":
            pod = self._decode(obj)
            if pod is not None:
                self._reservations.remove(pod.metadata.uid)
                if self._residents is not None:
                    self._residents.remove(pod.metadata.uid)
            return
        self._seen(obj, self._clock())

    def _decode(self, raw: msgspec.Raw) -> _Pod | None:
        try:
            return _pod.decode(raw)
        except msgspec.DecodeError as exc:
            log.warning("pod object does not decode", extra={"err": str(exc)})
            return None

    def _seen(self, raw: msgspec.Raw, now: float) -> None:
        pod = self._decode(raw)
        if pod is None or not pod.metadata.uid:
            return
        uid, node = pod.metadata.uid, pod.spec.node_name
        if self._residents is not None:
            if node and pod.status.phase not in _FINISHED:
                meta = pod.metadata
                workload = owner_workload(meta.namespace, meta.owner_references, meta.name)
                self._residents.put(uid, node, meta.labels or {}, workload)
            else:
                self._residents.remove(uid)
        at = placed_at(pod)
        if at > now + CLOCK_SKEW:  # dated ahead of any clock skew: when it was placed is unknown
            self._reservations.remove(uid)
            return
        at = min(at, now)  # a little ahead: another clock; it was placed by now
        if not node or pod.status.phase in _FINISHED or now - at > self._reservations.keep_for:
            self._reservations.remove(uid)  # not placed, done, or no longer recent
            return
        amount = self._amount_for(pod.metadata.labels or {})
        if self._reservations.place(uid, Placement(node, amount, at, POD_WATCH)):
            self._metrics.count_placement(POD_WATCH, "recorded")
