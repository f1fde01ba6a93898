"""``mco-rulegen rollback`` against objects it must not trust: a ``status.history`` that is not
a list, a 200 answer that is not an object, and history entries without a usable ``spec`` are
refused with a reason (exit 2), and nothing is patched. A stand-in API server, since a real one
never answers garbage; the restore itself runs against kmock in test_guard_rollback.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client

from rulegen import model
from rulegen.rollback import RollbackError, rollback

PATH = f"/apis/{model.API_GROUP}/{model.API_VERSION}/{model.PLURAL}/default"
SPEC = {"hardConstraints": {"psiMemoryFullMax": 0.05}}


def drc(status: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{model.API_GROUP}/{model.API_VERSION}",
        "kind": "DetectionRuleConfig",
        "metadata": {"name": "default", "generation": 3, "resourceVersion": "7"},
        "spec": {"hardConstraints": {"psiMemoryFullMax": 0.001}},
        "status": status,
    }


class StandIn:
    """Answers the GET with ``body`` (bytes, as given) and records every PATCH."""

    def __init__(self) -> None:
        self.body = b"{}"
        self.patches: list[Any] = []

    async def get(self, request: web.Request) -> web.Response:
        return web.Response(body=self.body, content_type="application/json")

    async def patch(self, request: web.Request) -> web.Response:
        self.patches.append(await request.json())
        return web.Response(body=self.body, content_type="application/json")


@pytest.fixture
async def stand_in() -> AsyncIterator[tuple[StandIn, client.ApiClient]]:
    state = StandIn()
    app = web.Application()
    app.router.add_get(PATH, state.get)
    app.router.add_patch(PATH, state.patch)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    api = client.ApiClient(client.Configuration(host=str(server.make_url("")).rstrip("/")))
    try:
        yield state, api
    finally:
        await api.close()
        await server.close()


GOOD = {"generation": 2, "hash": "h2", "acceptedTime": "2026-01-01T00:00:00Z", "spec": SPEC}

REFUSED: dict[str, tuple[Any, str]] = {
    "history is a string": (drc({"history": "x"}), "status.history"),
    "history is a mapping": (drc({"history": {"generation": 2}}), "status.history"),
    "status is a list": (drc([1, 2]), "status"),
    "answer is a list": ([1, 2, 3], "not a DetectionRuleConfig"),
    "answer is a string": ("hello", "not a DetectionRuleConfig"),
    "answer is null": (None, "not a DetectionRuleConfig"),
    "entry without spec": (
        drc({"history": [{"generation": 2, "hash": "h2"}]}),
        "generation 2 has no spec",
    ),
    "entry with a list spec": (
        drc({"history": [{"generation": 2, "hash": "h2", "spec": [1]}]}),
        "generation 2 has no spec",
    ),
    "entry that is a string": (drc({"history": ["x", GOOD]}), "status.history"),
    "generation that is a string": (
        drc({"history": [{**GOOD, "generation": "2"}]}),
        "status.history",
    ),
    "spec that is not an object": (
        {**drc({"history": [GOOD]}), "spec": "x"},
        "spec",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
async def test_a_history_that_cannot_be_trusted_is_refused_with_a_reason(stand_in, case) -> None:
    state, api = stand_in
    body, reason = REFUSED[case]
    state.body = json.dumps(body).encode()
    with pytest.raises(RollbackError, match=reason):
        await rollback(api, name="default", to_generation=None)
    with pytest.raises(RollbackError, match=reason):
        await rollback(api, name="default", to_generation=2)
    assert state.patches == []


async def test_garbage_that_is_not_json_is_refused(stand_in) -> None:
    state, api = stand_in
    state.body = b"<html>proxy error</html>"
    with pytest.raises(RollbackError, match="not a DetectionRuleConfig"):
        await rollback(api, name="default", to_generation=None)
    assert state.patches == []


async def test_a_good_entry_after_a_bad_spec_is_still_restorable_by_generation(stand_in) -> None:
    """Only the entry picked must be whole: an older good one is restored when asked for."""
    state, api = stand_in
    bad = {"generation": 3, "hash": "h3"}
    state.body = json.dumps(drc({"history": [bad, GOOD], "appliedRulesHash": "h3"})).encode()
    restored = await rollback(api, name="default", to_generation=2)
    assert restored.from_generation == 2
    patch = {"metadata": {"resourceVersion": "7"}, "spec": SPEC}
    assert state.patches == [patch]
