"""Reports from the Kubernetes API: list, then watch from the list's resourceVersion.

The client-go informer pattern without the informer: bookmarks advance the resourceVersion, a
watch that ends normally resumes from the last one seen, ``410 Gone`` (as an HTTP status or an
ERROR event) re-lists, and any other failure backs off exponentially (with jitter) before
resuming. Handlers never wait on any of this: they read the store.

Events are split on newlines from the raw stream and decoded with msgspec into the report
schema, so a report object of any size (up to etcd's ~1.5 MiB) is one line, not one read.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
from kubernetes_asyncio import client as k8s

from extender.config import SourceConfig
from extender.metrics import ExtenderMetrics
from extender.reports import ReportStore
from reporter.schema import GROUP, PLURAL, VERSION, NodeInterferenceReport, decode_report

log = logging.getLogger("mco.extender.report_watch")


class Gone(Exception):
    """The resourceVersion is too old for the API server: list again."""


class WatchFailed(Exception):
    pass


class _Meta(msgspec.Struct, rename="camel"):
    name: str = ""
    resource_version: str | None = None


class _Object(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


class _Status(msgspec.Struct):
    code: int = 0
    reason: str = ""
    message: str = ""


class _Event(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str | None = None


class _List(msgspec.Struct):
    items: list[msgspec.Raw] | None = None
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)


_event = msgspec.json.Decoder(_Event)
_object = msgspec.json.Decoder(_Object)
_status = msgspec.json.Decoder(_Status)
_list = msgspec.json.Decoder(_List)


async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    buffer = bytearray()
    async for chunk in response.content.iter_any():
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            if end > start:
                yield bytes(buffer[start:end])
            start = end + 1
        del buffer[:start]
    if buffer.strip():
        yield bytes(buffer)


class ReportWatch:
    def __init__(
        self,
        api: k8s.ApiClient,
        store: ReportStore,
        metrics: ExtenderMetrics,
        config: SourceConfig,
    ) -> None:
        self._objects = k8s.CustomObjectsApi(api)
        self._store = store
        self._metrics = metrics
        self._config = config
        self.resource_version: str | None = None

    async def run(self) -> None:
        """List and watch until cancelled."""
        delay = self._config.backoff_initial
        while True:
            try:
                if self.resource_version is None:
                    await self.list_all()
                started = asyncio.get_running_loop().time()
                await self.watch()
                self._metrics.watch_restarts.labels("closed").inc()
                if asyncio.get_running_loop().time() - started < 1.0:
                    # A server that ends watches at once must not be hammered.
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self._config.backoff_max)
                else:
                    delay = self._config.backoff_initial
            except Gone:
                log.info("resourceVersion expired; listing again")
                self._metrics.watch_restarts.labels("gone").inc()
                self.resource_version = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: back off, keep serving
                self._metrics.watch_restarts.labels("error").inc()
                pause = delay * random.uniform(0.8, 1.2)  # noqa: S311 - jitter, not crypto
                log.warning(
                    "report watch failed; retrying",
                    extra={"err": f"{type(exc).__name__}: {exc}", "retry_in": round(pause, 2)},
                )
                await asyncio.sleep(pause)
                delay = min(delay * 2, self._config.backoff_max)

    async def _request(self, **params: Any) -> aiohttp.ClientResponse:
        response: aiohttp.ClientResponse = await self._objects.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _preload_content=False, **params
        )
        if response.status == 410:
            response.release()
            raise Gone()
        if response.status != 200:
            text = (await response.read())[:300].decode(errors="replace")
            response.release()
            raise WatchFailed(f"HTTP {response.status}: {text}")
        return response

    async def list_all(self) -> None:
        response = await self._request(_request_timeout=60)
        try:
            body = await response.read()
        finally:
            response.release()
        try:
            listed = _list.decode(body)
        except msgspec.DecodeError as exc:
            self._metrics.report_loads.labels("list", "error").inc()
            raise WatchFailed(f"invalid list: {exc}") from exc
        reports = [r for raw in listed.items or () if (r := self._decode(raw, "list")) is not None]
        self._store.replace_all(reports)
        self._metrics.report_loads.labels("list", "ok").inc()
        self.resource_version = listed.metadata.resource_version
        log.info(
            "reports listed",
            extra={
                "objects": len(reports),
                "nodes": len(self._store.nodes),
                "resource_version": self.resource_version,
            },
        )

    async def watch(self) -> None:
        timeout = self._config.watch_timeout
        params: dict[str, Any] = {
            # Lowercase strings: the client would send Python's "True" for a bool.
            "watch": "true",
            "allow_watch_bookmarks": "true",
            "timeout_seconds": timeout,
            # No total limit; a silent connection is dropped after the server's own timeout.
            "_request_timeout": aiohttp.ClientTimeout(total=None, sock_read=timeout + 30),
        }
        if self.resource_version:
            params["resource_version"] = self.resource_version
        response = await self._request(**params)
        try:
            async for line in _lines(response):
                self._handle(line)
        finally:
            response.release()

    def _handle(self, line: bytes) -> None:
        try:
            event = _event.decode(line)
        except msgspec.DecodeError as exc:
            raise WatchFailed(f"undecodable watch event: {exc}") from exc
        kind = event.type
        if kind == "ERROR":
            status = _status.decode(event.object)
            if status.code == 410:
                raise Gone()
            raise WatchFailed(f"watch error {status.code} {status.reason}: {status.message}")
        meta = _object.decode(event.object).metadata
        if kind in ("ADDED", "MODIFIED"):
            report = self._decode(event.object, "watch")
            if report is not None:
                self._store.upsert(report)
                self._metrics.report_loads.labels("watch", "ok").inc()
            else:
                # Its old version must not stay in force: a live entry there would be held
                # fresh by the heartbeat for ever. A list drops such an object the same way.
                self._store.remove(meta.name)
        elif kind == "DELETED":
            self._store.remove(meta.name)
        if meta.resource_version:
            self.resource_version = meta.resource_version

    def _decode(self, raw: msgspec.Raw, source: str) -> NodeInterferenceReport | None:
        try:
            return decode_report(raw)
        except ValueError as exc:
            self._metrics.report_loads.labels(source, "error").inc()
            log.error("report object rejected", extra={"err": str(exc)})
            return None
