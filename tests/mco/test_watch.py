"""mco.watch's list-then-watch loop against a scripted aiohttp API server: 410 Gone (status and
ERROR event) re-lists, errors are classified in mco.apierrors' words and backed off with a
growing, jittered pause that resets once a watch is healthy, a handler failure re-lists, a
resync period re-lists. Every wait is on an event, with a timeout."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from mco import apierrors
from mco.apierrors import ApiError, classify
from mco.backoff import Backoff
from mco.watch import ListWatch, ObjectMeta, Resource, WatchSettings, object_meta

RESOURCE = Resource("example.io", "v1", "things", field_selector="metadata.name=a")
PATH = "/apis/example.io/v1/things"
WAIT = 5.0


def thing(name: str, rv: str, value: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}, "spec": {"value": value}}


def status(code: int, message: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": "Injected",
        "message": message or f"injected {code}",
    }


@dataclass
class Reply:
    """One scripted answer: an HTTP error, or (watches) a stream of events that then ends or
    stays open."""

    code: int = 200
    body: Any = None  # JSON of an error or of a list
    events: list[Any] = field(default_factory=list)  # dicts, or raw bytes lines
    hold: bool = False  # keep the watch open after its events


class FakeApi:
    def __init__(self) -> None:
        self.lists: list[Reply] = []
        self.watches: list[Reply] = []
        self.requests: asyncio.Queue[tuple[str, dict[str, str]]] = asyncio.Queue()
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.items = [thing("a", "5")]
        self.rv = "5"
        self.closing = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        params = dict(request.query)
        kind = "watch" if params.get("watch") == "true" else "list"
        self.seen.append((kind, params))
        self.requests.put_nowait((kind, params))
        script = self.lists if kind == "list" else self.watches
        reply = script.pop(0) if script else Reply(hold=True)
        if reply.code != 200:
            return web.json_response(reply.body or status(reply.code), status=reply.code)
        if kind == "list":
            body = reply.body or {"metadata": {"resourceVersion": self.rv}, "items": self.items}
            return web.json_response(body)
        response = web.StreamResponse()
        await response.prepare(request)
        for event in reply.events:
            line = event if isinstance(event, bytes) else json.dumps(event).encode()
            await response.write(line + b"\n")
        if reply.hold:
            await self.closing.wait()
        return response


@pytest.fixture
async def api() -> AsyncIterator[tuple[FakeApi, client.ApiClient]]:
    fake = FakeApi()
    app = web.Application()
    app.router.add_get(PATH, fake.handle)
    server = TestServer(app)
    await server.start_server()
    api_client = client.ApiClient(client.Configuration(host=str(server.make_url("")).rstrip("/")))
    try:
        yield fake, api_client
    finally:
        fake.closing.set()
        await api_client.close()
        await server.close()


class Recorder:
    """The handler: every call lands in a queue the test awaits."""

    def __init__(self, fail_lists: list[BaseException] | None = None) -> None:
        self.calls: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.fail_lists = fail_lists or []

    async def listed(self, items: list[msgspec.Raw]) -> None:
        if self.fail_lists:
            raise self.fail_lists.pop(0)
        self.calls.put_nowait(
            ("listed", [msgspec.json.decode(i)["metadata"]["name"] for i in items])
        )

    async def changed(self, kind: str, obj: msgspec.Raw) -> None:
        self.calls.put_nowait((kind, msgspec.json.decode(obj)["metadata"]["name"]))


class Pauses(Backoff):
    """The real backoff, with every pause it hands out kept (and a seeded jitter)."""

    def __init__(self, initial: float = 0.01, cap: float = 0.08) -> None:
        super().__init__(initial, cap, rng=random.Random(7))
        self.given: list[float] = []
        self.resets = 0

    def next(self) -> float:
        pause = Backoff.next(self)
        self.given.append(pause)
        return pause

    def reset(self) -> None:
        self.resets += 1
        Backoff.reset(self)


class Run:
    def __init__(self, api_client: client.ApiClient, handler: Recorder, **settings: Any) -> None:
        self.restarts: asyncio.Queue[tuple[str, ApiError | None]] = asyncio.Queue()
        self.backoff = Pauses()
        self.watch = ListWatch(
            api_client,
            RESOURCE,
            handler,
            WatchSettings(**settings),
            on_restart=lambda reason, error: self.restarts.put_nowait((reason, error)),
            backoff=self.backoff,
        )
        self.task = asyncio.create_task(self.watch.run())

    async def restart(self) -> tuple[str, ApiError | None]:
        return await asyncio.wait_for(self.restarts.get(), WAIT)

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def next_request(fake: FakeApi) -> tuple[str, dict[str, str]]:
    return await asyncio.wait_for(fake.requests.get(), WAIT)


async def next_call(handler: Recorder) -> tuple[str, Any]:
    return await asyncio.wait_for(handler.calls.get(), WAIT)


async def test_lists_then_watches_from_the_lists_resource_version(api) -> None:
    fake, api_client = api
    fake.watches = [Reply(events=[{"type": "MODIFIED", "object": thing("a", "6", 1)}], hold=True)]
    handler = Recorder()
    run = Run(api_client, handler)
    try:
        kind, params = await next_request(fake)
        assert kind == "list" and params["fieldSelector"] == "metadata.name=a"
        assert await next_call(handler) == ("listed", ["a"])
        kind, params = await next_request(fake)
        assert kind == "watch" and params["resourceVersion"] == "5"
        assert params["allowWatchBookmarks"] == "true" and params["timeoutSeconds"] == "300"
        assert await next_call(handler) == ("MODIFIED", "a")
        assert run.watch.resource_version == "6"
    finally:
        await run.stop()


async def test_410_gone_as_a_status_and_as_an_error_event_relists(api) -> None:
    fake, api_client = api
    fake.watches = [
        Reply(410, status(410, "too old")),
        Reply(events=[{"type": "ERROR", "object": status(410, "expired")}]),
    ]
    handler = Recorder()
    run = Run(api_client, handler)
    try:
        for _ in range(2):
            reason, error = await run.restart()
            assert reason == "gone" and isinstance(error, apierrors.Gone)
            assert error.kind == "gone" and error.status == 410
        kinds = [(await next_request(fake))[0] for _ in range(5)]
        assert kinds == ["list", "watch", "list", "watch", "list"]
        assert [await next_call(handler) for _ in range(3)] == [("listed", ["a"])] * 3
        assert run.backoff.given == []  # a re-list is not a failure: no pause
    finally:
        await run.stop()


async def test_errors_are_classified_and_back_off_with_growing_jittered_pauses(api) -> None:
    fake, api_client = api
    # ...and a list that does not decode.
    fake.lists = [Reply(500), Reply(503), Reply(429), Reply(403), Reply(200, {"items": "no"})]
    handler = Recorder()
    run = Run(api_client, handler)
    try:
        kinds = [(await run.restart()) for _ in range(5)]
        assert [(reason, e.kind if e else None) for reason, e in kinds] == [
            ("error", "server_error"),
            ("error", "server_error"),
            ("error", "throttled"),
            ("error", "forbidden"),
            ("error", "malformed"),
        ]
        assert await next_call(handler) == ("listed", ["a"])  # then it recovers
        pauses = run.backoff.given
        assert len(pauses) == 5
        for i, pause in enumerate(pauses):  # 0.01, 0.02, 0.04, 0.08, 0.08 (the cap), +-20 %
            base = min(0.08, 0.01 * 2**i)
            assert 0.8 * base <= pause <= 1.2 * base
        assert pauses[0] < pauses[1] < pauses[2] < pauses[3]  # grows
        assert len({round(p / min(0.08, 0.01 * 2**i), 6) for i, p in enumerate(pauses)}) > 1
    finally:
        await run.stop()


async def test_a_healthy_watch_resets_the_backoff(api) -> None:
    fake, api_client = api
    fake.watches = [
        Reply(500),
        Reply(500),
        Reply(events=[{"type": "ADDED", "object": thing("a", "7")}]),  # delivers, then ends
        Reply(500),
    ]
    handler = Recorder()
    run = Run(api_client, handler)
    try:
        assert [(await run.restart())[0] for _ in range(4)] == ["error", "error", "closed", "error"]
        assert run.backoff.resets == 1
        first, second, after_reset = run.backoff.given
        assert 0.8 * 0.01 <= first <= 1.2 * 0.01 and 0.8 * 0.02 <= second <= 1.2 * 0.02
        assert 0.8 * 0.01 <= after_reset <= 1.2 * 0.01  # back to the initial pause
        # API errors on the watch resume it from the resourceVersion: no re-list.
        requests = [kind for kind, _ in fake.seen]
        assert requests.count("list") == 1
        assert fake.seen[-1][1].get("resourceVersion") == "7"
    finally:
        await run.stop()


async def test_a_watch_that_ends_at_once_is_paced_and_resumes_from_the_bookmark(api) -> None:
    fake, api_client = api
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "77"}}}
    fake.watches = [Reply(events=[bookmark])]
    handler = Recorder()
    run = Run(api_client, handler)
    try:
        assert await run.restart() == ("closed", None)
        kinds = [await next_request(fake) for _ in range(3)]
        assert kinds[2] == ("watch", kinds[2][1]) and kinds[2][1]["resourceVersion"] == "77"
        assert len(run.backoff.given) == 1  # a bookmark alone is not progress
    finally:
        await run.stop()


async def test_a_broken_event_is_malformed_and_the_watch_resumes(api) -> None:
    fake, api_client = api
    fake.watches = [Reply(events=[b"{not json"])]
    handler = Recorder()
    run = Run(api_client, handler)
    try:
        reason, error = await run.restart()
        assert reason == "error" and error is not None and error.kind == "malformed"
        kinds = [(await next_request(fake))[0] for _ in range(3)]
        assert kinds == ["list", "watch", "watch"]
    finally:
        await run.stop()


async def test_an_api_failure_in_the_handler_relists_and_a_bug_ends_the_loop(api) -> None:
    fake, api_client = api
    handler = Recorder(fail_lists=[ApiException(status=503, reason="Service Unavailable")])
    run = Run(api_client, handler)
    try:
        reason, error = await run.restart()
        assert reason == "error" and error is not None and error.kind == "server_error"
        assert await next_call(handler) == ("listed", ["a"])  # handed the state again
        assert [kind for kind, _ in fake.seen[:2]] == ["list", "list"]
    finally:
        await run.stop()
    buggy = Run(api_client, Recorder(fail_lists=[KeyError("bug")]))
    with pytest.raises(KeyError):
        await asyncio.wait_for(buggy.task, WAIT)


async def test_the_resync_period_relists_while_the_watch_is_open(api) -> None:
    fake, api_client = api
    handler = Recorder()
    run = Run(api_client, handler, relist_every=0.2)
    try:
        assert [await next_call(handler) for _ in range(3)] == [("listed", ["a"])] * 3
        assert all(params["timeoutSeconds"] == "1" for kind, params in fake.seen if kind == "watch")
        assert run.backoff.given == [] and run.restarts.empty()  # no error, no restart
    finally:
        await run.stop()


async def test_unreachable_api_is_a_connection_error() -> None:
    api_client = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    try:
        run = Run(api_client, Recorder())
        reason, error = await run.restart()
        assert reason == "error" and error is not None and error.kind == "connection"
        await run.stop()
    finally:
        await api_client.close()


@pytest.mark.parametrize(
    "exc,kind",
    [
        (ApiException(status=409, reason="Conflict"), "conflict"),
        (ApiException(status=404, reason="NotFound"), "not_found"),
        (ApiException(status=410, reason="Gone"), "gone"),
        (ApiException(status=422, reason="Invalid"), "invalid"),
        (ApiException(status=413, reason="Too Large"), "too_large"),
        (ApiException(status=401, reason="Unauthorized"), "forbidden"),
        (ApiException(status=429, reason="Throttled"), "throttled"),
        (ApiException(status=500, reason="Internal"), "server_error"),
        (TimeoutError(), "connection"),
        (ConnectionRefusedError(), "connection"),
        (msgspec.DecodeError("x"), "malformed"),
    ],
)
def test_one_vocabulary_for_every_failure(exc: BaseException, kind: str) -> None:
    error = classify(exc)
    assert error is not None and error.kind == kind and kind in apierrors.KINDS
    assert classify(KeyError("a bug")) is None


def test_a_status_body_gives_the_message() -> None:
    exc = ApiException(status=409, reason="Conflict")
    exc.body = json.dumps(status(409, "the object has been modified")).encode()
    error = classify(exc)
    assert isinstance(error, apierrors.Conflict)
    assert error.message == "the object has been modified"


def test_backoff_doubles_to_the_cap_with_jitter_and_resets() -> None:
    b = Backoff(1.0, 8.0, rng=random.Random(1))
    pauses = [b.next() for _ in range(6)]
    for i, pause in enumerate(pauses):
        base = min(8.0, 2.0**i)
        assert 0.8 * base <= pause <= 1.2 * base
    assert len({round(p / min(8.0, 2.0**i), 9) for i, p in enumerate(pauses)}) == 6  # jittered
    b.reset()
    assert 0.8 <= b.next() <= 1.2
    with pytest.raises(ValueError):
        Backoff(0.0, 1.0)


def test_object_meta_reads_name_and_resource_version_only() -> None:
    raw = json.dumps(
        {"metadata": {"name": "n1", "resourceVersion": "42", "labels": {"a": "b"}}, "spec": [1]}
    ).encode()
    assert object_meta(raw) == ObjectMeta(name="n1", resource_version="42")
    assert object_meta(b"{}") == ObjectMeta()
    with pytest.raises(msgspec.DecodeError):
        object_meta(b'{"metadata": {"name": 7}}')
