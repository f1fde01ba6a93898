"""``mco-rulegen recommend`` against an engine whose answers are well-formed JSON holding
numbers that are not usable (a NaN node count, a value ``"abc"``, ``changes()`` of NaN): one
``mco-rulegen:`` line and exit 1, never a traceback. A stand-in engine, since a real Prometheus
does not answer ``"abc"``; the healthy path runs on a real one in test_recommend.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from mco.promql import SourceConfig
from rulegen.cli import RecommendCommand, cmd_recommend

DAY = 86400.0
NODES = ["node-1", "node-2"]

Answer = Callable[[str], str]  # the query -> the value every node gets


def _vector(value: str) -> dict[str, object]:
    result = [{"metric": {"node": n}, "value": [0, value]} for n in NODES]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def _matrix(value: str, start: float, end: float, step: float) -> dict[str, object]:
    times = [start + i * step for i in range(int((end - start) / step) + 1)][:5]
    result = [{"metric": {"node": n}, "values": [[t, value] for t in times]} for n in NODES]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def _engine(instant: Answer, ranged: str = "0.01") -> web.Application:
    """Every instant query gets ``instant(query)`` for each node; every range query
    ``ranged``. Coverage queries (``count_over_time``) answer a day, so the history checks
    pass and the values are what is judged."""

    async def query(request: web.Request) -> web.Response:
        form = await request.post()
        expr = str(form["query"])
        value = str(DAY) if expr.startswith("count_over_time") else instant(expr)
        return web.json_response(_vector(value))

    async def query_range(request: web.Request) -> web.Response:
        form = await request.post()
        start, end, step = (float(str(form[k])) for k in ("start", "end", "step"))
        return web.json_response(_matrix(ranged, start, end, step))

    app = web.Application()
    app.router.add_post("/api/v1/query", query)
    app.router.add_post("/api/v1/query_range", query_range)
    return app


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[web.Application], Awaitable[str]]]:
    servers: list[TestServer] = []

    async def start(app: web.Application) -> str:
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("")).rstrip("/")

    yield start
    for server in servers:
        await server.close()


def _nan_nodes(expr: str) -> str:
    return "NaN" if expr.startswith("count(count by (node)") else "0"


def _nan_changes(expr: str) -> str:
    return "NaN" if expr.startswith("changes(") else "0"


CASES = {
    "a NaN node count": (_nan_nodes, "0.01", False, "node count"),
    "a value abc": (lambda expr: "0", "abc", False, "'abc'"),
    "an instant value abc": (lambda expr: "abc", "0.01", False, "'abc'"),
    "changes() of NaN in --replay": (_nan_changes, "0.01", True, "NaN"),
}


@pytest.mark.parametrize("case", CASES)
async def test_unusable_numbers_are_one_line_and_exit_1(serve, capsys, case: str) -> None:
    instant, ranged, replay, named = CASES[case]
    url = await serve(_engine(instant, ranged))
    command = RecommendCommand(
        source=SourceConfig(str(url), timeout=5),
        range_seconds=DAY,
        step=3600,
        window=None,
        replay=replay,
        min_history=60,
        min_node_history=60,
    )
    code = await cmd_recommend(command)
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mco-rulegen:"), err
    assert named in lines[0] and "Traceback" not in err
    assert out == ""  # no half-written proposal
