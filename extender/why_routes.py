"""The routes a person asks "why" with: ``POST /v1/explain`` and ``GET /v1/decisions``.

Bad input is answered 400 with a JSON error (never 500): a body that is not a JSON object with
a pod, more nodes than one answer explains, a ``pod`` query that is not ``namespace/name``.
Bodies are read within the same bounds as the scheduler routes (``extender.body``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from extender import explain
from extender.body import BodyBudget, BudgetExhausted, read_body
from extender.decisions import Decisions
from extender.judge import Judge
from extender.wire import MAX_NAME, BadRequest

log = logging.getLogger("mco.extender")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_encode = msgspec.json.Encoder().encode
_JSON = "application/json"


def _error(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=_encode({"error": message}), content_type=_JSON)


def explain_route(
    judge: Judge, limit: int, budget: BodyBudget, gate: asyncio.Lock | None = None
) -> Handler:
    """``gate``: held while the answer is worked out (one costly read-only answer at a time)."""
    gate = gate or asyncio.Lock()

    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            body = await read_body(request, limit, budget)
            try:
                args = explain.decode(body)
            finally:
                budget.give(len(body))
                del body
            async with gate:
                answer = explain.explain(args, judge, time.time())
            return web.Response(body=_encode(answer), content_type=_JSON)
        except BadRequest as exc:
            response = _error(400, str(exc))
            if request.content.exception() is not None:  # a broken stream: as app._unreadable
                response.force_close()
                request.content.set_exception(TimeoutError("the request body stream broke"))
            return response
        except web.HTTPRequestEntityTooLarge as exc:
            return _error(413, exc.text or "request body too large")
        except BudgetExhausted as exc:
            return _error(503, str(exc))
        except OSError:
            raise  # the client went away
        except Exception:  # a bug, not bad input: say so, keep serving
            log.exception("request failed", extra={"route": "explain"})
            return _error(500, "internal error; see the extender's log")

    return handle


def decisions_route(ring: Decisions) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        pod = request.query.get("pod", "")
        namespace, _, name = pod.partition("/")
        if not namespace or not name or "/" in name or len(pod) > 2 * MAX_NAME + 1:
            return _error(400, "pod: expected ?pod=<namespace>/<name>")
        body = {
            "pod": pod,
            "decisions": ring.of(pod),
            "bounds": {
                "pods": ring.max_pods,
                "perPod": ring.max_per_pod,
                "nodesPerDecision": ring.max_nodes,
            },
        }
        return web.Response(body=_encode(body), content_type=_JSON)

    return handle
