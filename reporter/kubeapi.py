"""NodeInterferenceReport calls on the Kubernetes API, through kubernetes-asyncio.

Responses are read raw (``_preload_content=False``) and decoded with msgspec: a patch answer
holds the whole object (up to a MiB), and only its ``resourceVersion`` is needed. Each failure
becomes an ``mco.apierrors.ApiError``, whose ``kind`` says how to react (retry on a fresh read,
recreate, back off, or give up on this write): the vocabulary every part shares.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import aiohttp
import msgspec
from kubernetes_asyncio import client

from mco.apierrors import NOT_FOUND, ApiError, Malformed, Unreachable, classify, status_error
from reporter.schema import GROUP, LAYOUT_LABEL, PLURAL, VERSION, NodeInterferenceReport, ReportList

MERGE_PATCH: Final = "application/merge-patch+json"
_T = TypeVar("_T")


class _Meta(msgspec.Struct):
    resourceVersion: str = ""


class _Slim(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


_slim = msgspec.json.Decoder(_Slim)
_report = msgspec.json.Decoder(NodeInterferenceReport)
_list = msgspec.json.Decoder(ReportList)


def _decode(decoder: msgspec.json.Decoder[_T], data: bytes, what: str) -> _T:
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise Malformed(200, f"{what} does not decode: {exc}") from exc


@dataclass(slots=True)
class WriteStats:
    """Counts of what was sent (the bench and the self-metrics read these)."""

    writes: dict[str, int] = field(default_factory=dict)  # verb -> requests
    bytes: int = 0

    def add(self, verb: str, size: int) -> None:
        self.writes[verb] = self.writes.get(verb, 0) + 1
        self.bytes += size


class ReportApi:
    def __init__(self, api_client: client.ApiClient, *, timeout: float = 10.0) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self.timeout = timeout
        self.stats = WriteStats()

    async def _call(self, method: Any, *args: Any, **kwargs: Any) -> bytes:
        return await call(method, *args, timeout=self.timeout, **kwargs)

    def _count(self, verb: str, body: Any) -> None:
        # The client sends json.dumps(body); count exactly that.
        self.stats.add(verb, len(json.dumps(body).encode()))

    async def get(self, name: str) -> NodeInterferenceReport | None:
        try:
            data = await self._call(
                self._api.get_cluster_custom_object, GROUP, VERSION, PLURAL, name
            )
        except ApiError as exc:
            if exc.kind == NOT_FOUND:
                return None
            raise
        return _decode(_report, data, f"NodeInterferenceReport {name}")

    async def list_owned(self) -> list[NodeInterferenceReport]:
        """Every report carrying the layout label (the reporter's own objects)."""
        data = await self._call(
            self._api.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            label_selector=LAYOUT_LABEL,
        )
        return _decode(_list, data, "NodeInterferenceReport list").items

    async def create(self, name: str, labels: dict[str, str]) -> NodeInterferenceReport:
        """A new, empty object (a real API server ignores ``status`` on create)."""
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeInterferenceReport",
            "metadata": {"name": name, "labels": labels},
        }
        self._count("create", body)
        data = await self._call(
            self._api.create_cluster_custom_object, GROUP, VERSION, PLURAL, body
        )
        return _decode(_report, data, f"NodeInterferenceReport {name}")

    async def patch_status(self, name: str, body: dict[str, Any]) -> str:
        """Merge-patch the status subresource; returns the new resourceVersion."""
        return await self._merge_patch(self._api.patch_cluster_custom_object_status, name, body)

    async def patch_labels(self, name: str, labels: dict[str, str], rv: str | None) -> str:
        body: dict[str, Any] = {"metadata": {"labels": labels}}
        if rv:
            body["metadata"]["resourceVersion"] = rv
        return await self._merge_patch(self._api.patch_cluster_custom_object, name, body)

    async def _merge_patch(self, method: Any, name: str, body: dict[str, Any]) -> str:
        """One merge patch (of the object or of its status); the new resourceVersion."""
        self._count("patch", body)
        data = await self._call(
            method, GROUP, VERSION, PLURAL, name, body, _content_type=MERGE_PATCH
        )
        return _decode(_slim, data, "patch answer").metadata.resourceVersion

    async def delete(self, name: str) -> None:
        self.stats.add("delete", 0)
        try:
            await self._call(self._api.delete_cluster_custom_object, GROUP, VERSION, PLURAL, name)
        except ApiError as exc:
            if exc.kind != NOT_FOUND:
                raise


async def call(method: Any, *args: Any, timeout: float, **kwargs: Any) -> bytes:
    """One kubernetes-asyncio call, its answer read raw; any failure as an ``ApiError``."""
    try:
        response = await method(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
        try:
            body: bytes = await response.read()
            status: int = response.status
        finally:
            response.release()
    except TimeoutError as exc:
        raise Unreachable(0, f"no answer within {timeout:g}s") from exc
    except (aiohttp.ClientError, OSError, client.ApiException) as exc:
        error = classify(exc)  # ApiException: raised by some client versions on errors
        assert error is not None
        raise error from exc
    if 200 <= status < 300:
        return body
    raise status_error(status, body)


async def gather_limited(limit: int, jobs: list[Any]) -> list[ApiError | None]:
    """Run coroutines with at most ``limit`` in flight; the exception (or None) of each."""
    semaphore = asyncio.Semaphore(limit)

    async def one(job: Any) -> ApiError | None:
        async with semaphore:
            try:
                await job
            except ApiError as exc:
                return exc
            return None

    return list(await asyncio.gather(*(one(j) for j in jobs)))
