"""The Kubernetes sink: reconcile the NodeInterferenceReport objects with the tracker's view.

Per cycle it sends only what changed: for each object, a merge patch of the status subresource
with the node entries that changed (a removed node patched to ``null``) and the top-level fields
that changed (among them ``summary``, patched only when it changes); the heartbeat
(``lastSyncTime`` of the ``cluster`` object) is the one write that happens every cycle. Every
patch carries the ``resourceVersion`` it was computed against, so a write that raced another
writer (an old leader, a person) fails with 409 and is retried on a fresh read instead of
silently mixing states.

Order matters to readers: node objects are written before the heartbeat, and the heartbeat does
not advance if any node write failed (else an old entry would look current). Objects that the
layout no longer needs are deleted last. Errors: 409 -> re-read and retry; 404 -> create again
(someone deleted the object); 410, 429, 5xx, connection loss -> forget what the object holds
(re-read it) and back off (``mco.backoff``, the pace of every Kubernetes loop); 422/413 -> log,
back off. Every write answers a ``SinkResult`` (``reporter.sink``), failures included.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from mco.apierrors import CONFLICT, NOT_FOUND, TOO_LARGE, UNCERTAIN, ApiError, Conflict, NotFound
from mco.backoff import Backoff
from reporter.kubeapi import ReportApi, gather_limited
from reporter.layout import CLUSTER, PER_NODE, Desired, LayoutChooser
from reporter.patch import merge_diff
from reporter.schema import (
    CLUSTER_REPORT_NAME,
    LAYOUT_LABEL,
    NodeEntry,
    NodeInterferenceReport,
    WorkloadProfile,
    summarize,
)
from reporter.sink import Medium, SinkResult
from reporter.tracker import ReportView

log = logging.getLogger("mco.reporter.kube")
_ATTEMPTS: Final = 4


@dataclass(slots=True)
class _Stored:
    """What the API server holds for one object, as far as this sink knows."""

    rv: str | None
    labels: dict[str, str]
    nodes: dict[str, NodeEntry]
    top: dict[str, Any] = field(default_factory=dict)  # top-level status fields, as JSON

    @classmethod
    def of(cls, obj: NodeInterferenceReport) -> _Stored:
        status = msgspec.to_builtins(obj.status)
        status.pop("nodes", None)
        return cls(
            obj.metadata.resource_version, dict(obj.metadata.labels), dict(obj.status.nodes), status
        )


class KubeSink:
    """The ``Sink`` that writes NodeInterferenceReport objects through the Kubernetes API."""

    medium: Medium = "api"
    loaded_profiles: list[WorkloadProfile]

    def __init__(
        self,
        api: ReportApi,
        chooser: LayoutChooser,
        *,
        concurrency: int = 16,
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        may_write: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.chooser = chooser
        self.loaded_profiles = []
        self.concurrency = concurrency
        self.backoff = Backoff(backoff_base, backoff_cap)
        self.may_write = may_write
        self.clock = clock
        self._stored: dict[str, _Stored] | None = None  # None: not read yet
        self._reread: set[str] = set()
        self.retry_at = 0.0

    # ------------------------------------------------------------------------------------------

    async def load(self) -> dict[str, NodeEntry]:
        """Read what is written (our labelled objects, and a `cluster` object in any case);
        returns every node entry found, for the tracker to start from."""
        try:
            listed = await self.api.list_owned()
        except ApiError as exc:
            if exc.kind == NOT_FOUND:
                raise NotFound(
                    404,
                    "nodeinterferencereports.mco.io not served: is the CRD installed?",
                ) from exc
            raise
        found = {o.metadata.name: o for o in listed}
        if CLUSTER_REPORT_NAME not in found:
            cluster = await self.api.get(CLUSTER_REPORT_NAME)
            if cluster is not None:
                found[CLUSTER_REPORT_NAME] = cluster
        if (cluster := found.get(CLUSTER_REPORT_NAME)) is not None:
            self.loaded_profiles = list(cluster.status.profiles or ())
        self._stored = {name: _Stored.of(obj) for name, obj in found.items()}
        self._reread.clear()
        layouts = {s.labels.get(LAYOUT_LABEL) for s in self._stored.values()}
        if self.chooser.mode == "auto" and "per-node" in layouts:
            self.chooser.current = "per-node"
        entries: dict[str, NodeEntry] = {}
        for stored in self._stored.values():
            entries.update(stored.nodes)
        return entries

    def forget(self) -> None:
        """Drop what we know of the objects (another leader may write meanwhile)."""
        self._stored = None
        self._reread.clear()

    async def write(self, view: ReportView) -> SinkResult:
        result = SinkResult()
        if self.clock() < self.retry_at or not self.may_write():
            result.skipped = True
        else:
            stats = self.api.stats
            bytes_before, writes_before = stats.bytes, dict(stats.writes)
            try:
                if self._stored is None:
                    await self.load()
                await self._reconcile(view, result)
            except ApiError as exc:
                result.errors.append(exc.kind)
                self._failed(exc)
            result.writes = {
                verb: n - writes_before.get(verb, 0)
                for verb, n in stats.writes.items()
                if n != writes_before.get(verb, 0)
            }
            result.bytes = stats.bytes - bytes_before
            if result.errors:
                result.message = f"Kubernetes API write failed: {', '.join(result.errors)}"
            else:
                self.backoff.reset()
        result.object_bytes = self.chooser.largest_object(view.entries)
        result.over_limit = self.chooser.over_limit
        return result

    # ------------------------------------------------------------------------------------------

    async def _reconcile(self, view: ReportView, result: SinkResult) -> None:
        assert self._stored is not None
        stored = self._stored
        entries = view.entries
        layout = result.layout = self.chooser.choose(entries)
        for name in list(self._reread):
            obj = await self.api.get(name)
            self._reread.discard(name)
            if obj is None:
                stored.pop(name, None)
            else:
                stored[name] = _Stored.of(obj)
        # Node objects first (per-node layout): only those whose entry object changed.
        todo: list[Desired] = []
        if layout == PER_NODE:
            for node, entry in entries.items():
                if node == CLUSTER_REPORT_NAME:
                    continue
                st = stored.get(node)
                if (
                    st is not None
                    and st.nodes.get(node) is entry
                    and len(st.nodes) == 1
                    and st.labels.get(LAYOUT_LABEL) == PER_NODE
                    and "summary" in st.top  # written by a reporter without it: add it once
                ):
                    continue
                todo.append(Desired(node, PER_NODE, {node: entry}, False))
        errors = await gather_limited(self.concurrency, [self._sync(d, view) for d in todo])
        failed = [e for e in errors if e is not None]
        result.errors.extend(e.kind for e in failed)
        if failed:
            # No heartbeat: the entries that could not be written must not look current.
            self._failed(failed[0])
            return
        if not self.may_write():
            result.skipped = True
            return
        if layout == CLUSTER:
            heartbeat_nodes = entries
        else:
            own = entries.get(CLUSTER_REPORT_NAME)
            heartbeat_nodes = {CLUSTER_REPORT_NAME: own} if own is not None else {}
        await self._sync(Desired(CLUSTER_REPORT_NAME, layout, heartbeat_nodes, True), view)
        extra = [
            name
            for name, s in stored.items()
            if name != CLUSTER_REPORT_NAME
            and LAYOUT_LABEL in s.labels
            and (layout == CLUSTER or name not in entries)
        ]
        errors = await gather_limited(self.concurrency, [self._delete(n) for n in extra])
        for exc in errors:
            if exc is not None:
                result.errors.append(exc.kind)
                self._failed(exc)

    async def _delete(self, name: str) -> None:
        assert self._stored is not None
        await self.api.delete(name)
        self._stored.pop(name, None)

    def _failed(self, exc: ApiError) -> None:
        delay = self.backoff.next()
        self.retry_at = self.clock() + delay
        log.warning(
            "kubernetes API write failed; backing off",
            extra={
                "kind": exc.kind,
                "status": exc.status,
                "err": exc.message,
                "retry_in_s": round(delay, 1),
                **({"hint": "use --layout per-node or auto"} if exc.kind == TOO_LARGE else {}),
            },
        )

    async def _sync(self, d: Desired, view: ReportView) -> None:
        """Bring one object to ``d``: create, relabel, patch; 409 -> fresh read; 404 -> create."""
        assert self._stored is not None
        stored = self._stored
        for _ in range(_ATTEMPTS):
            if not self.may_write():
                return
            st = stored.get(d.name)
            try:
                if st is None:
                    st = stored[d.name] = await self._create(d)
                if st.labels.get(LAYOUT_LABEL) != d.layout:
                    labels = dict(st.labels)
                    labels[LAYOUT_LABEL] = d.layout
                    st.rv = await self.api.patch_labels(d.name, {LAYOUT_LABEL: d.layout}, st.rv)
                    st.labels = labels
                nodes_patch, top = self._status_patch(st, d, view)
                if not nodes_patch and not top:
                    return
                status: dict[str, Any] = {
                    # An object field is merged key by key: send its diff, so a key that went
                    # away (a summary's maxLevel) is removed instead of kept.
                    k: merge_diff(st.top[k], v)
                    if isinstance(v, dict) and isinstance(st.top.get(k), dict)
                    else v
                    for k, v in top.items()
                }
                if nodes_patch:
                    status["nodes"] = nodes_patch
                body: dict[str, Any] = {"status": status}
                if st.rv:
                    body["metadata"] = {"resourceVersion": st.rv}
                rv = await self.api.patch_status(d.name, body)
            except ApiError as exc:
                if exc.kind == CONFLICT:
                    fresh = await self.api.get(d.name)
                    if fresh is None:
                        stored.pop(d.name, None)
                    else:
                        stored[d.name] = _Stored.of(fresh)
                    continue
                if exc.kind == NOT_FOUND:
                    stored.pop(d.name, None)  # deleted behind our back: create it again
                    continue
                if exc.kind in UNCERTAIN:
                    stored.pop(d.name, None)
                    self._reread.add(d.name)
                raise
            st.rv = rv or st.rv
            for node, value in nodes_patch.items():
                if value is None:
                    st.nodes.pop(node, None)
                else:
                    st.nodes[node] = d.nodes[node]
            st.top.update(top)
            return
        raise Conflict(409, f"{d.name}: still conflicting after {_ATTEMPTS} fresh reads")

    async def _create(self, d: Desired) -> _Stored:
        try:
            return _Stored.of(await self.api.create(d.name, d.labels))
        except ApiError as exc:
            if exc.kind != CONFLICT:
                raise
        existing = await self.api.get(d.name)  # created meanwhile: adopt it
        if existing is None:
            raise Conflict(409, f"{d.name} exists and does not")
        return _Stored.of(existing)

    def _status_patch(
        self, st: _Stored, d: Desired, view: ReportView
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        nodes_patch: dict[str, Any] = {}
        written = st.nodes
        present = 0  # nodes of `d` that the object already holds
        for node, entry in d.nodes.items():
            old = written.get(node)
            if old is entry:
                present += 1
                continue
            if old is None:
                nodes_patch[node] = msgspec.to_builtins(entry)
                continue
            present += 1
            if old == entry:
                written[node] = entry  # equal after a fresh read: adopt, nothing to send
            else:
                diff = merge_diff(msgspec.to_builtins(old), msgspec.to_builtins(entry))
                if diff:
                    nodes_patch[node] = diff
                else:
                    written[node] = entry
        if len(written) > present:
            for node in written:
                if node not in d.nodes:
                    nodes_patch[node] = None
        want: dict[str, Any] = {}
        if d.heartbeat:
            if view.last_sync_time is not None:
                want["lastSyncTime"] = view.last_sync_time
            if view.rule_config_generation is not None:
                want["ruleConfigGeneration"] = view.rule_config_generation
            if view.config is not None:
                want["config"] = msgspec.to_builtins(view.config)
            if view.profiles is not None:
                want["profiles"] = msgspec.to_builtins(view.profiles)
            want["conditions"] = msgspec.to_builtins(view.conditions)
            want["nodeCount"] = len(view.entries)
            want["summary"] = msgspec.to_builtins(view.summary)
        else:
            # A node object: only looked at when its entry changed, so this is cheap.
            want["summary"] = msgspec.to_builtins(summarize(d.nodes.values()))
            if nodes_patch and view.last_sync_time is not None:
                want["lastSyncTime"] = view.last_sync_time
        top = {k: v for k, v in want.items() if st.top.get(k) != v}
        return nodes_patch, top
