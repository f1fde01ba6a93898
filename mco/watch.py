"""List, then watch from the list's resourceVersion, for ever: the one Kubernetes loop.

The client-go informer pattern without the informer, as kopf's ``infinite_watch`` does it:

* list (the handler gets the whole collection), then watch from the list's resourceVersion,
  so nothing that happened in between is missed; bookmarks advance the resourceVersion;
* a watch that the server ends (its ``timeoutSeconds``) resumes from the last resourceVersion
  seen; one that ends within a second without an event counts as a failure (a server that
  closes watches at once must not be hammered);
* ``410 Gone`` (as the HTTP status or as an ERROR event with code 410): list again at once;
* any other API failure (``mco.apierrors``) backs off (``mco.backoff``) and resumes the watch;
  a failure inside the handler backs off and lists again, which hands it the state again;
* ``relist_every`` (a resync period) lists again even while the watch is healthy.

Events are split on newlines from the raw stream and decoded with msgspec; handlers get each
object as ``msgspec.Raw`` and decode what they need. Exceptions that are not API failures
(a bug, or a handler that wants to stop, like a fenced write) end ``run``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

import aiohttp
import msgspec
from kubernetes_asyncio import client

from mco.apierrors import ApiError, Gone, Malformed, api_error, classify, status_error
from mco.backoff import Backoff

log = logging.getLogger("mco.watch")

# Reasons a watch restarts (the extender's mco_extender_watch_restarts_total{reason}).
RESTART_GONE: Final = "gone"
RESTART_ERROR: Final = "error"
RESTART_CLOSED: Final = "closed"
_HEALTHY_AFTER: Final = 1.0  # a watch open this long was not refused


@dataclass(frozen=True, slots=True)
class Resource:
    """A cluster-scoped custom resource, or with ``group`` empty a core resource across all
    namespaces (``/api/v1/pods``), optionally narrowed by selectors."""

    group: str
    version: str
    plural: str
    field_selector: str | None = None
    label_selector: str | None = None


@dataclass(frozen=True, slots=True)
class WatchSettings:
    timeout: int = 300  # the server ends each watch after this many seconds; it then resumes
    relist_every: float | None = None  # list again after this long (a resync); None: never
    list_timeout: float = 60.0
    backoff_initial: float = 0.5
    backoff_max: float = 30.0

    def __post_init__(self) -> None:
        if self.timeout < 1:
            raise ValueError("watch timeout must be at least 1s")
        if self.relist_every is not None and self.relist_every <= 0:
            raise ValueError("relist period must be positive")


class Handler(Protocol):
    async def listed(self, items: list[msgspec.Raw]) -> None:
        """The whole collection, after each list: replace what is known."""

    async def changed(self, kind: str, obj: msgspec.Raw) -> None:
        """One ``ADDED``, ``MODIFIED`` or ``DELETED`` event."""


class ObjectMeta(msgspec.Struct, rename="camel"):
    """The part of an object's ``metadata`` the loop and the handlers route by."""

    name: str = ""
    resource_version: str | None = None


class _Object(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class _Status(msgspec.Struct):
    code: int = 0
    reason: str = ""
    message: str = ""


class _Event(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _List(msgspec.Struct):
    items: list[msgspec.Raw] | None = None
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


# The snake_case keywords of the generated client's list calls, as query parameters.
_CORE_PARAMS: Final = {
    "field_selector": "fieldSelector",
    "label_selector": "labelSelector",
    "watch": "watch",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "timeout_seconds": "timeoutSeconds",
    "resource_version": "resourceVersion",
}

_event = msgspec.json.Decoder(_Event)
_object = msgspec.json.Decoder(_Object)
_status = msgspec.json.Decoder(_Status)
_list = msgspec.json.Decoder(_List)


def object_meta(obj: msgspec.Raw | bytes) -> ObjectMeta:
    """A handed object's name and resourceVersion, without decoding the rest of it (raises
    ``msgspec.DecodeError`` on a malformed object)."""
    return _object.decode(obj).metadata


class _HandlerFailed(Exception):
    """An API failure inside the handler: the state it was handed is not in force."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(str(error))
        self.error = error


async def lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The stream's newline-separated lines (one event each, however large)."""
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


class ListWatch:
    def __init__(
        self,
        api: client.ApiClient,
        resource: Resource,
        handler: Handler,
        settings: WatchSettings | None = None,
        *,
        on_restart: Callable[[str, ApiError | None], None] | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self._api = api
        self._objects = client.CustomObjectsApi(api)
        self.resource = resource
        self.handler = handler
        self.settings = settings or WatchSettings()
        self.on_restart = on_restart
        s = self.settings
        self.backoff = backoff or Backoff(s.backoff_initial, s.backoff_max)
        self.resource_version: str | None = None
        self._listed_at = 0.0

    async def run(self) -> None:
        """List and watch until cancelled (or until the handler raises something that is not an
        API failure)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                if self.resource_version is None:
                    await self.list_once()
                started = loop.time()
                events = await self._watch_until_resync()
                if self.resource_version is None:
                    continue  # resync: list again
                self._restarted(RESTART_CLOSED, None)
                if events or loop.time() - started >= _HEALTHY_AFTER:
                    self.backoff.reset()
                else:
                    await asyncio.sleep(self.backoff.next())
            except Gone as exc:
                if self.resource_version is None:  # the list itself: not a stale version
                    await self._pause(exc)
                    continue
                log.info(
                    "resourceVersion expired; listing again",
                    extra={"resource": self.resource.plural},
                )
                self._restarted(RESTART_GONE, exc)
                self.resource_version = None
            except _HandlerFailed as exc:
                self.resource_version = None  # the list hands the state over again
                await self._pause(exc.error)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._pause(_api_failure(exc))

    async def _pause(self, error: ApiError) -> None:
        self._restarted(RESTART_ERROR, error)
        pause = self.backoff.next()
        log.warning(
            "list/watch failed; retrying",
            extra={
                "resource": self.resource.plural,
                "kind": error.kind,
                "status": error.status,
                "err": error.message,
                "retry_in_s": round(pause, 2),
            },
        )
        await asyncio.sleep(pause)

    def _restarted(self, reason: str, error: ApiError | None) -> None:
        if self.on_restart is not None:
            self.on_restart(reason, error)

    def _selectors(self) -> dict[str, Any]:
        r = self.resource
        out: dict[str, Any] = {}
        if r.field_selector:
            out["field_selector"] = r.field_selector
        if r.label_selector:
            out["label_selector"] = r.label_selector
        return out

    async def _request(self, **params: Any) -> aiohttp.ClientResponse:
        r = self.resource
        response: aiohttp.ClientResponse
        if r.group:
            response = await self._objects.list_cluster_custom_object(
                r.group, r.version, r.plural, _preload_content=False, **self._selectors(), **params
            )
        else:
            response = await self._core_list(**self._selectors(), **params)
        if response.status != 200:
            try:
                body = (await response.read())[:4096]
            finally:
                response.release()
            raise status_error(response.status, body)
        return response

    async def _core_list(self, **params: Any) -> aiohttp.ClientResponse:
        """``GET /api/{version}/{plural}``: the generated client has no generic call for the
        core group, so the query is spelled here with the API's own parameter names."""
        r = self.resource
        timeout = params.pop("_request_timeout", None)
        query = [(_CORE_PARAMS[k], v) for k, v in params.items()]
        response: aiohttp.ClientResponse = await self._api.call_api(
            f"/api/{r.version}/{r.plural}",
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        return response

    async def list_once(self) -> None:
        """One list, handed to the handler; the watch then starts from its resourceVersion."""
        response = await self._request(_request_timeout=self.settings.list_timeout)
        try:
            body = await response.read()
        finally:
            response.release()
        try:
            listed = _list.decode(body)
        except msgspec.DecodeError as exc:
            raise Malformed(200, f"the {self.resource.plural} list does not decode: {exc}") from exc
        await self._handle(self.handler.listed(listed.items or []))
        self.resource_version = listed.metadata.resource_version or ""
        self._listed_at = asyncio.get_running_loop().time()

    async def _handle(self, work: Any) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise _HandlerFailed(_api_failure(exc)) from exc

    async def _watch_until_resync(self) -> int:
        """One watch request; the number of object events it delivered. Ends when the server
        closes it, or at the resync time (resource_version then None)."""
        every = self.settings.relist_every
        if every is None:
            return await self._watch(self.settings.timeout)
        left = self._listed_at + every - asyncio.get_running_loop().time()
        if left > 0:
            try:
                async with asyncio.timeout(left) as deadline:
                    return await self._watch(max(1, min(self.settings.timeout, int(left))))
            except TimeoutError:
                if not deadline.expired():
                    raise  # the connection timed out, not the resync period
        self.resource_version = None
        return 0

    async def _watch(self, timeout: int) -> int:
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
        events = 0
        try:
            async for line in lines(response):
                if await self._event(line):
                    events += 1
        finally:
            response.release()
        return events

    async def _event(self, line: bytes) -> bool:
        try:
            event = _event.decode(line)
        except msgspec.DecodeError as exc:
            raise Malformed(200, f"undecodable watch event: {exc}") from exc
        kind = event.type
        if kind == "ERROR":
            try:
                status = _status.decode(event.object)
            except msgspec.DecodeError as exc:
                raise Malformed(200, f"undecodable watch error: {exc}") from exc
            raise api_error(status.code, f"watch error {status.reason}: {status.message}")
        try:
            meta = object_meta(event.object)
        except msgspec.DecodeError as exc:
            raise Malformed(200, f"undecodable object in a watch event: {exc}") from exc
        delivered = kind in ("ADDED", "MODIFIED", "DELETED")
        if delivered:
            await self._handle(self.handler.changed(kind, event.object))
        if meta.resource_version:
            self.resource_version = meta.resource_version
        return delivered


def _api_failure(exc: Exception) -> ApiError:
    """The API failure ``exc`` stands for; anything else is a bug and propagates as it is."""
    error = classify(exc)
    if error is None:
        raise exc
    return error
