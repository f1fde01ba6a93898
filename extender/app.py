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
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from extender import decisions, kube, volcano
from extender.body import BodyBudget, BudgetExhausted, quiet_bad_requests, read_body
from extender.config import ExtenderConfig
from extender.fallback import Rounds
from extender.judge import Judge
from extender.metrics import ExtenderMetrics
from extender.node_view import node_view_chunks
from extender.pod_watch import PodWatch
from extender.profiles import Profiles
from extender.report_file import follow_file
from extender.report_watch import ReportWatch
from extender.reports import ReportStore
from extender.reservation import POD_WATCH, AmountFor, Reservations
from extender.residents import Residents
from extender.verdict import Verdict
from extender.volcano_placements import VolcanoPlacements
from extender.why_routes import decisions_route, explain_route
from extender.wire import BadRequest, Body
from mco.kubeconfig import api_client

log = logging.getLogger("mco.extender")

CONFIG = web.AppKey("config", ExtenderConfig)
STORE = web.AppKey("store", ReportStore)
METRICS = web.AppKey("metrics", ExtenderMetrics)
SOURCE = web.AppKey("source", asyncio.Task[None])
JUDGE = web.AppKey("judge", Judge)
BUDGET = web.AppKey("budget", BodyBudget)
RESERVATIONS = web.AppKey("reservations", Reservations)
RESIDENTS = web.AppKey("residents", Residents)
AMOUNT_FOR: web.AppKey[AmountFor] = web.AppKey("amount_for")
DECISIONS = web.AppKey("decisions", decisions.Decisions)
# The costly read-only answers (/v1/nodes, /v1/explain) run one at a time: clients looping
# them wait for each other, not the scheduler routes for all of them.
READ_GATE = web.AppKey("read_gate", asyncio.Lock)

Answer = Callable[[Body, Judge, float], tuple[bytes, Sequence[Verdict]]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_encode = msgspec.json.Encoder().encode
_JSON = "application/json"


def _error(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=_encode({"error": message}), content_type=_JSON)


def _unreadable(request: web.Request, response: web.Response) -> web.Response:
    """``response`` for a request whose body stream broke (an encoding that does not decode,
    a bad chunk): its rest can never be read. aiohttp drains an unread body after the answer
    and would log the stream's error as an unhandled exception; a timeout ends that drain
    quietly, and the connection closes after the answer."""
    response.force_close()
    request.content.set_exception(TimeoutError("the request body stream broke"))
    return response


def _scheduler_route(
    route: str,
    answer: Answer,
    judge: Judge,
    limit: int,
    budget: BodyBudget,
    metrics: ExtenderMetrics,
    ring: decisions.Decisions | None = None,
) -> Handler:

    async def handle(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        verdicts: Sequence[Verdict] = ()
        notes: list[decisions.Note] = []  # what the route decided, per pod (extender.decisions)
        now = 0.0
        try:
            body = await read_body(request, limit, budget)
            notes, token = decisions.collect()
            now = time.time()
            try:
                payload, verdicts = answer(body, judge, now)
            finally:
                decisions.stop(token)
                budget.give(len(body))
                del body
            response = web.Response(body=payload, content_type=_JSON)
        except BadRequest as exc:
            response = _error(400, str(exc))
            if request.content.exception() is not None:
                _unreadable(request, response)
        except web.HTTPRequestEntityTooLarge as exc:
            response = _error(413, exc.text or "request body too large")
        except BudgetExhausted as exc:
            response = _error(503, str(exc))
        except OSError:
            raise  # the client went away: nobody to answer
        except Exception:  # a bug, not bad input: say so, keep serving
            log.exception("request failed", extra={"route": route})
            response = _error(500, "internal error; see the extender's log")
        metrics.observe(route, response.status, time.perf_counter() - started)
        if notes and ring is not None:  # condensed once the answer is on its way
            asyncio.get_running_loop().call_soon(ring.record, route, notes, now)
        if len(verdicts) == 1:
            metrics.count_verdict(route, verdicts[0])
        elif verdicts:
            # Tallying thousands of verdicts waits until the answer is on its way.
            asyncio.get_running_loop().call_soon(metrics.count_verdicts, route, verdicts)
        return response

    return handle


def _volcano_routes(placements: VolcanoPlacements) -> dict[str, Answer]:
    """Volcano's answers; each body's placed tasks are read first (when the mode says so), so
    that the answer already counts them."""
    rounds = Rounds()  # per task, the predicates of its rounds (extender.fallback)

    def predicate(body: Body, judge: Judge, now: float) -> tuple[bytes, Sequence[Verdict]]:
        args = volcano.decode_predicate(body)
        assert args.node is not None  # checked by decode_predicate
        placements.in_predicate(body, args.node.name, now)
        result, verdict = volcano.predicate(args, judge, now, rounds)
        return _encode(result), (verdict,)

    def prioritize(body: Body, judge: Judge, now: float) -> tuple[bytes, Sequence[Verdict]]:
        args = volcano.decode_prioritize(body, judge.config)
        placements.in_prioritize(body, now, [info.name for info in args.nodes or ()])
        result, verdicts = volcano.prioritize(args, judge, now)
        return _encode(result), verdicts

    def allocate(body: Body, judge: Judge, now: float) -> tuple[bytes, Sequence[Verdict]]:
        placements.allocated(volcano.decode_task_event(body, needs_node=True), now)
        return _EVENT_OK, ()

    def deallocate(body: Body, judge: Judge, now: float) -> tuple[bytes, Sequence[Verdict]]:
        placements.deallocated(volcano.decode_task_event(body, needs_node=False))
        return _EVENT_OK, ()

    return {
        "predicate": predicate,
        "prioritize": prioritize,
        "allocate": allocate,
        "deallocate": deallocate,
    }


_EVENT_OK = _encode(volcano.EventResult())


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
    try:
        while await request.content.readany():
            pass
    except (web.RequestPayloadError, HttpProcessingError) as exc:
        return _unreadable(request, _error(400, f"unreadable request body: {exc}"))
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


async def _nodes(request: web.Request) -> web.StreamResponse:
    """Streamed in chunks, the event loop given back between them, one answer at a time
    (``READ_GATE``): a client looping it never holds a scheduler call longer than one chunk."""
    app = request.app
    async with app[READ_GATE]:
        response = web.StreamResponse(headers={"Content-Type": _JSON})
        await response.prepare(request)
        for piece in node_view_chunks(app[JUDGE], time.time()):
            await response.write(piece)
            await asyncio.sleep(0)  # the scheduler routes' turn
        await response.write_eof()
    return response


def _open(handler: Handler) -> Handler:
    return handler


_NO_CERT = _encode(
    {"error": "the scheduler routes need a client certificate (--scheduler-auth=client-cert)"}
)


def _client_cert_required(handler: Handler) -> Handler:
    """``--scheduler-auth=client-cert``: the route answers only a connection whose client
    certificate the TLS layer verified against ``client_ca_file`` (kube-scheduler's
    ``tlsConfig.certFile``); others get 403, before their body is read. ``/metrics``, the
    probes and ``/v1/*`` are not wrapped: a scraper needs no certificate."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        transport = request.transport
        if transport is None or not transport.get_extra_info("peercert"):
            response = web.Response(status=403, body=_NO_CERT, content_type=_JSON)
            response.force_close()  # the body stays unread
            return response
        return await handler(request)

    return guarded


_SCHEDULER_PREFIXES = ("/scheduler/", "/volcano/")


def _split_ports(scheduler_port: int) -> Middleware:
    """``--web.scheduler-listen-address``: the scheduler routes answer only on their own port
    and every other route only on the main one; elsewhere 404, as if the route did not exist,
    so a NetworkPolicy on the scheduler port decides who may create reservations."""

    @web.middleware
    async def split(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        sockname = transport.get_extra_info("sockname") if transport is not None else None
        on_scheduler_port = sockname is not None and sockname[1] == scheduler_port
        if request.path.startswith(_SCHEDULER_PREFIXES) != on_scheduler_port:
            raise web.HTTPNotFound()
        return await handler(request)

    return split


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


def _placement_ended(task: asyncio.Task[None], watch: PodWatch) -> None:
    if not task.cancelled():
        watch.fall_back(repr(task.exception()))
        log.error("the pod watch stopped: no reservations from it", exc_info=task.exception())


async def _placement_source(app: web.Application) -> AsyncIterator[None]:
    """kube-scheduler placements (``--watch-pods``). Unlike the report source, a pod watch that
    stops only takes the reservations away: the extender keeps serving, and stays live."""
    config = app[CONFIG].source
    metrics = app[METRICS]
    metrics.source_up[POD_WATCH] = False
    async with contextlib.AsyncExitStack() as stack:
        api = await api_client(config.kubeconfig)
        stack.push_async_callback(api.close)
        watch = PodWatch(
            api, app[RESERVATIONS], app[AMOUNT_FOR], metrics, config, residents=app[RESIDENTS]
        )
        task = asyncio.create_task(watch.run(), name="pod-watch")
        task.add_done_callback(lambda t: _placement_ended(t, watch))
        log.info("watching pods bound to nodes for reservations and avoidPolicies")
        yield
        task.cancel()
        await asyncio.wait([task])


def make_app(config: ExtenderConfig, amount_for: AmountFor | None = None) -> web.Application:
    """``amount_for``: a pod's labels -> the level its placement reserves (default: the
    ``reservationPerPod`` of the pod's policy, from the policies in force)."""
    quiet_bad_requests()
    app = web.Application(client_max_size=config.max_body_bytes)
    if config.scheduler_port is not None:
        app.middlewares.append(_split_ports(config.scheduler_port))
    store = ReportStore()
    rc = config.reservation
    reservations = Reservations(rc.span, rc.span + config.verdict.stale_after)
    judge = app[JUDGE] = Judge(store, config.verdict, reservations=reservations)
    # The pods on each node (fed by --watch-pods), for policies with avoidPolicies.
    judge.residents = app[RESIDENTS] = Residents(lambda labels: judge.policy_for(labels).name)
    # Learned workload profiles (status.profiles): a term for pods of a known workload.
    if config.profile_weight > 0:
        judge.profiles = Profiles(store, config.profile_weight)
    # Staleness follows the config in force (the report's status.config once it has one).
    metrics = ExtenderMetrics(
        store, lambda: judge.config.stale_after, config.verdict.clock_skew, reservations
    )
    app[CONFIG] = config
    app[STORE] = store
    app[METRICS] = metrics
    app[RESERVATIONS] = reservations
    app[AMOUNT_FOR] = amount_for or (lambda labels: judge.policy_for(labels).reservation_per_pod)
    app.cleanup_ctx.append(_report_source)
    if rc.watch_pods:
        app.cleanup_ctx.append(_placement_source)

    budget = app[BUDGET] = BodyBudget(config.max_body_memory)
    placements = VolcanoPlacements(
        rc.volcano_placements,
        store,
        reservations,
        app[AMOUNT_FOR],
        metrics,
        residents=app[RESIDENTS],
        wants_residents=lambda: any(
            p.avoid_policies and p.avoid_per_pod > 0 for p in judge.policies.policies
        ),
    )
    vc = _volcano_routes(placements)
    ring = app[DECISIONS] = decisions.Decisions(max_bytes=config.decisions_memory)

    guard = _client_cert_required if config.scheduler_auth == "client-cert" else _open

    def route(name: str, answer: Answer) -> Handler:
        return guard(
            _scheduler_route(name, answer, judge, config.max_body_bytes, budget, metrics, ring)
        )

    app.router.add_post("/volcano/predicate", route("volcano_predicate", vc["predicate"]))
    app.router.add_post("/volcano/prioritize", route("volcano_prioritize", vc["prioritize"]))
    app.router.add_post("/volcano/allocate", route("volcano_allocate", vc["allocate"]))
    app.router.add_post("/volcano/deallocate", route("volcano_deallocate", vc["deallocate"]))
    app.router.add_post("/volcano/onSessionOpen", guard(_session_hook))
    app.router.add_post("/volcano/onSessionClose", guard(_session_hook))
    app.router.add_post("/scheduler/filter", route("scheduler_filter", _kube_filter))
    app.router.add_post("/scheduler/prioritize", route("scheduler_prioritize", _kube_prioritize))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    app[READ_GATE] = asyncio.Lock()
    app.router.add_get("/v1/nodes", _nodes)
    app.router.add_post(
        "/v1/explain", explain_route(judge, config.max_body_bytes, budget, app[READ_GATE])
    )
    app.router.add_get("/v1/decisions", decisions_route(ring))
    return app
