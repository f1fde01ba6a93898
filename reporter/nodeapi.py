"""Node calls of the taint mode (``reporter.taints``) and the tier-label mode
(``reporter.tiers``): list, get, patch ``spec.taints`` or one label.

Only a Node's name, ``resourceVersion`` and taints are decoded (msgspec reads the declared
fields and skips the rest of a 10-100 KB Node). Taints are kept as raw JSON objects, so a
patch gives every other taint back exactly as it was read, fields this client does not know
included. A patch is a JSON merge patch of the whole ``spec.taints`` list carrying the
``resourceVersion`` it was computed from: the API server answers 409 when the Node changed
meanwhile (a kubelet, the node controller, a person), and the caller reads it again. A label
patch is a merge patch of that one key (``null`` removes it): the server merges it into the
labels, so every other label stays exactly as it is.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from kubernetes_asyncio import client

from mco.apierrors import NOT_FOUND, ApiError, Malformed
from reporter.kubeapi import MERGE_PATCH, WriteStats, call

PAGE: Final = 500  # nodes per list request (the API server's chunking)


class _Meta(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""
    labels: dict[str, str] | None = None


class _Spec(msgspec.Struct):
    taints: list[dict[str, Any]] | None = None


class NodeTaints(msgspec.Struct):
    """A Node as the taint and tier-label modes see it."""

    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec = msgspec.field(default_factory=_Spec)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def rv(self) -> str:
        return self.metadata.resourceVersion

    @property
    def taints(self) -> list[dict[str, Any]]:
        return self.spec.taints or []

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels or {}


class _ListMeta(msgspec.Struct):
    # Field name of the API (`continue` is a Python keyword).
    next: str = msgspec.field(default="", name="continue")


class _NodeList(msgspec.Struct):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[NodeTaints] = msgspec.field(default_factory=list)


_node = msgspec.json.Decoder(NodeTaints)
_list = msgspec.json.Decoder(_NodeList)


def _decode(decoder: msgspec.json.Decoder[Any], data: bytes, what: str) -> Any:
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise Malformed(200, f"{what} does not decode: {exc}") from exc


class NodeApi:
    def __init__(self, api_client: client.ApiClient, *, timeout: float = 10.0) -> None:
        self._api = client.CoreV1Api(api_client)
        self.timeout = timeout
        self.stats = WriteStats()  # patches sent, and their bytes
        self.reads = 0  # list pages and gets

    async def list_all(self) -> list[NodeTaints]:
        """Every Node, in pages of ``PAGE``."""
        nodes: list[NodeTaints] = []
        token = ""
        while True:
            self.reads += 1
            kwargs: dict[str, Any] = {"limit": PAGE}
            if token:
                kwargs["_continue"] = token
            data = await call(self._api.list_node, timeout=self.timeout, **kwargs)
            page: _NodeList = _decode(_list, data, "Node list")
            nodes.extend(page.items)
            token = page.metadata.next
            if not token:
                return nodes

    async def get(self, name: str) -> NodeTaints | None:
        """The Node now, or None when it is gone."""
        self.reads += 1
        try:
            data = await call(self._api.read_node, name, timeout=self.timeout)
        except ApiError as exc:
            if exc.kind == NOT_FOUND:
                return None
            raise
        node: NodeTaints = _decode(_node, data, f"Node {name}")
        return node

    async def patch_taints(self, name: str, taints: list[dict[str, Any]], rv: str) -> NodeTaints:
        """Set the Node's taints to ``taints`` if it is still at ``rv`` (else 409)."""
        body: dict[str, Any] = {"spec": {"taints": taints}}
        if rv:
            body["metadata"] = {"resourceVersion": rv}
        self.stats.add("patch", len(msgspec.json.encode(body)))
        data = await call(
            self._api.patch_node, name, body, timeout=self.timeout, _content_type=MERGE_PATCH
        )
        node: NodeTaints = _decode(_node, data, f"Node {name}")
        return node

    async def patch_label(self, name: str, key: str, value: str | None, rv: str) -> NodeTaints:
        """Set the Node's label ``key`` to ``value`` (None: remove it) if the Node is still at
        ``rv`` (else 409); no other label is in the patch."""
        meta: dict[str, Any] = {"labels": {key: value}}
        if rv:
            meta["resourceVersion"] = rv
        body = {"metadata": meta}
        self.stats.add("patch", len(msgspec.json.encode(body)))
        data = await call(
            self._api.patch_node, name, body, timeout=self.timeout, _content_type=MERGE_PATCH
        )
        node: NodeTaints = _decode(_node, data, f"Node {name}")
        return node
