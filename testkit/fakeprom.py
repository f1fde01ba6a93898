"""A PromQL HTTP endpoint answering the reporter's three queries from a mutable fleet, for the
API-path tests (leader election, CLI) and the benchmarks, and a hostile one that turns into a
gzip bomb or a 200 MB answer on demand. The numbers-equal-PromQL tests use a real Prometheus."""

from __future__ import annotations

import contextlib
import functools
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.test_utils import TestServer

from reporter.query import Kind, Plan
from scripts.procs import free_port
from testkit.answers import answers, ok, quiet_values

MIB = 1 << 20


@dataclass
class FakeProm:
    nodes: dict[str, dict[tuple[Kind, str], float]] = field(default_factory=dict)
    down: bool = False
    queries: int = 0
    url: str = ""
    recorded_query: str = ""  # the last recorded query asked (its window follows staleAfter)
    skew: float = 0.0  # seconds this engine's clock runs ahead (its sample times with it)

    async def handle(self, request: web.Request) -> web.Response:
        if self.down:
            return web.json_response(
                {"status": "error", "errorType": "unavailable", "error": "fake outage"}, status=503
            )
        self.queries += 1
        form = await request.post()
        query, at = str(form["query"]), float(str(form["time"]))
        plan = Plan(compact=False)
        recorded, extra, info = answers(
            plan, self.nodes, {n: at - 0.5 + self.skew for n in self.nodes}
        )
        if query == plan.info_expr:
            return web.json_response(ok(info))
        # The recorded query, over whatever window the reporter's staleAfter gives it.
        compact = Plan(compact=True)
        if plan.recorded_selector in query or compact.recorded_selector in query:
            self.recorded_query = query
        if compact.recorded_selector in query:
            recorded, _, _ = answers(compact, _only(compact, self.nodes), {})
            return web.json_response(ok(recorded))
        if plan.recorded_selector in query:
            return web.json_response(ok(recorded))
        return web.json_response(ok(extra))


def _only(
    plan: Plan, nodes: dict[str, dict[tuple[Kind, str], float]]
) -> dict[str, dict[tuple[Kind, str], float]]:
    keep = {(s.kind, s.key) for s in plan.slots}
    return {n: {k: v for k, v in values.items() if k in keep} for n, values in nodes.items()}


@asynccontextmanager
async def fake_prometheus() -> AsyncIterator[FakeProm]:
    prom = FakeProm()
    app = web.Application()
    app.router.add_post("/api/v1/query", prom.handle)
    server = TestServer(app, host="127.0.0.1", port=free_port())
    await server.start_server()
    prom.url = f"http://127.0.0.1:{server.port}"
    try:
        yield prom
    finally:
        await server.close()


@functools.cache
def gzip_bomb(inflated: int, level: int = 1) -> bytes:
    """A gzip stream of ``inflated`` zero bytes: about 1/230 of that on the wire at ``level``
    1 (512 MiB in 3 s), 1/1000 at 9 (in 7 s)."""
    z = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * MIB
    return b"".join([*(z.compress(zeros) for _ in range(inflated // MIB)), z.flush()])


class Hostile:
    """A PromQL endpoint that answers like Prometheus until ``attack`` is set."""

    def __init__(self) -> None:
        self.prom = FakeProm()
        self.prom.nodes = {f"n{i}": quiet_values(Plan(compact=False)) for i in range(50)}
        self.attack = ""
        self.bomb = b""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.attack == "gzip-bomb":  # 512 MiB of zeros in ~2 MiB
            return web.Response(body=self.bomb, headers={"Content-Encoding": "gzip"})
        if self.attack == "200MB":  # chunked, no length: nothing to refuse up front
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            spaces = b" " * MIB
            with contextlib.suppress(ConnectionError):
                await resp.write(b'{"status":"success","data":{"resultType":"vector","result":[')
                for _ in range(200):
                    await resp.write(spaces)
                await resp.write(b"]}}")
            return resp
        return await self.prom.handle(request)
