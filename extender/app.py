"""The aiohttp application: routes of DESIGN §5, each scheduler route a thin shell over its wire
module, the report source run as a background task through ``cleanup_ctx``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import msgspec
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from extender import kube, volcano
from extender.config import ExtenderConfig
from extender.judge import Judge
from extender.metrics import ExtenderMetrics
from extender.node_view import node_view
from extender.report_file import follow_file
from extender.report_watch import ReportWatch
from extender.reports import ReportStore
from extender.verdict import Verdict
from extender.wire import BadRequest, Body
from mco.kubeconfig import api_client

log = logging.getLogger("mco.extender")

CONFIG = web.AppKey("config", ExtenderConfig)
STORE = web.AppKey("store", ReportStore)
METRICS = web.AppKey("metrics", ExtenderMetrics)
SOURCE = web.AppKey("source", asyncio.Task[None])

Answer = Callable[[Body, Judge, float], tuple[bytes, Sequence[Verdict]]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_encode = msgspec.json.Encoder().encode
_JSON = "application/json"


def _error(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=_encode({"error": message}), content_type=_JSON)


_JOIN_BELOW = 1 << 20


async def read_body(request: web.Request, limit: int) -> Body:
    """The whole body, checked against ``limit``, copied at most once.

    aiohttp's ``read()`` grows a bytearray chunk by chunk and then copies it all into bytes.
    Here a body that arrives in one chunk is used as it is, a small one is joined once, and a
    large one (Volcano's tens of MB) is copied into a buffer of its Content-Length as each
    chunk arrives, while the chunk is still in the CPU cache.
    """
    length = request.content_length
    if length is None:  # chunked: aiohttp enforces client_max_size (= limit) itself
        return await request.read()
    if length > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=length)
    content = request.content
    if length < _JOIN_BELOW:
        chunks: list[bytes] = []
        size = 0
        while size < length and (chunk := await content.readany()):
            chunks.append(chunk)
            size += len(chunk)
        if size != length:
            raise BadRequest(f"request body of {size} bytes, Content-Length {length}")
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    buffer = bytearray(length)
    view = memoryview(buffer)
    size = 0
    while size < length and (chunk := await content.readany()):
        end = size + len(chunk)
        if end > length:
            break
        view[size:end] = chunk
        size = end
    if size != length:
        raise BadRequest(f"request body does not match its Content-Length {length}")
    return buffer


def _scheduler_route(
    route: str, answer: Answer, judge: Judge, limit: int, metrics: ExtenderMetrics
) -> Handler:

    async def handle(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        verdicts: Sequence[Verdict] = ()
        try:
            body = await read_body(request, limit)
            payload, verdicts = answer(body, judge, time.time())
            response = web.Response(body=payload, content_type=_JSON)
        except BadRequest as exc:
            response = _error(400, str(exc))
        except web.HTTPRequestEntityTooLarge as exc:
            response = _error(413, exc.text or "request body too large")
        except HttpProcessingError as exc:  # the body itself could not be read
            response = _error(400, f"unreadable request body: {exc.message}")
        except OSError:
            raise  # the client went away: nobody to answer
        except Exception:  # a bug, not bad input: say so, keep serving
            log.exception("request failed", extra={"route": route})
            response = _error(500, "internal error; see the extender's log")
        metrics.observe(route, response.status, time.perf_counter() - started)
        if len(verdicts) == 1:
            metrics.count_verdict(route, verdicts[0])
        elif verdicts:
            # Tallying thousands of verdicts waits until the answer is on its way.
            asyncio.get_running_loop().call_soon(metrics.count_verdicts, route, verdicts)
        return response

    return handle


def _volcano_predicate(body: Body, judge: Judge, now: float) -> tuple[bytes, Sequence[Verdict]]:
    result, verdict = volcano.predicate(volcano.decode_predicate(body), judge, now)
    return _encode(result), (verdict,)


def _volcano_prioritize(body: Body, judge: Judge, now: float) -> tuple[bytes, Sequence[Verdict]]:
    args = volcano.decode_prioritize(body, judge.config)
    result, verdicts = volcano.prioritize(args, judge, now)
    return _encode(result), verdicts


def _kube_filter(body: Body, judge: Judge, now: float) -> tuple[bytes, Sequence[Verdict]]:
    result, verdicts = kube.filter_nodes(kube.decode_filter(body), judge, now)
    return _encode(result), verdicts


def _kube_prioritize(body: Body, judge: Judge, now: float) -> tuple[bytes, Sequence[Verdict]]:
    result, verdicts = kube.prioritize(kube.decode_prioritize(body), judge, now)
    return _encode(result), verdicts


async def _session_hook(request: web.Request) -> web.Response:
    """Volcano's onSessionOpen/onSessionClose: only a 200 matters; the body is never read.

    The (multi-MB) snapshot is drained without being kept, and the answer is empty so that
    Go's client can reuse the connection.
    """
    async for _chunk in request.content.iter_any():
        pass
    return web.Response(status=200)


async def _healthz(request: web.Request) -> web.Response:
    source = request.app.get(SOURCE)
    if source is not None and source.done():
        # The report source never ends on its own; without it the data only ages. A failing
        # liveness probe restarts the pod instead of serving ever older reports.
        return web.Response(status=503, text="the report source has stopped\n")
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    if request.app[STORE].loaded:
        return web.Response(text="ready\n")
    return web.Response(status=503, text="no report loaded yet\n")


async def _metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _nodes(request: web.Request) -> web.Response:
    app = request.app
    view = node_view(app[STORE], app[CONFIG].verdict, time.time())
    return web.Response(body=_encode(view), content_type=_JSON)


def _source_ended(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("the report source stopped", exc_info=exc)


async def _report_source(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG].source
    store, metrics = app[STORE], app[METRICS]
    async with contextlib.AsyncExitStack() as stack:
        if config.report_file is not None:
            work = follow_file(Path(config.report_file), store, metrics, config.poll_interval)
            log.info("reading reports from a file", extra={"path": config.report_file})
        else:
            api = await api_client(config.kubeconfig)  # no credentials: start-up fails here
            stack.push_async_callback(api.close)
            work = ReportWatch(api, store, metrics, config).run()
            log.info("watching NodeInterferenceReports through the Kubernetes API")
        task = app[SOURCE] = asyncio.create_task(work, name="report-source")
        task.add_done_callback(_source_ended)
        yield
        task.cancel()
        await asyncio.wait([task])  # an error it ended with was logged by _source_ended


def make_app(config: ExtenderConfig) -> web.Application:
    app = web.Application(client_max_size=config.max_body_bytes)
    store = ReportStore()
    metrics = ExtenderMetrics(store, config.verdict.stale_after)
    app[CONFIG] = config
    app[STORE] = store
    app[METRICS] = metrics
    app.cleanup_ctx.append(_report_source)

    judge = Judge(store, config.verdict)

    def route(name: str, answer: Answer) -> Handler:
        return _scheduler_route(name, answer, judge, config.max_body_bytes, metrics)

    app.router.add_post("/volcano/predicate", route("volcano_predicate", _volcano_predicate))
    app.router.add_post("/volcano/prioritize", route("volcano_prioritize", _volcano_prioritize))
    app.router.add_post("/volcano/onSessionOpen", _session_hook)
    app.router.add_post("/volcano/onSessionClose", _session_hook)
    app.router.add_post("/scheduler/filter", route("scheduler_filter", _kube_filter))
    app.router.add_post("/scheduler/prioritize", route("scheduler_prioritize", _kube_prioritize))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/v1/nodes", _nodes)
    return app
