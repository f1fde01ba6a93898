"""The asyncio task gauge counts the serving loop's tasks, over a real HTTP scrape."""

from __future__ import annotations

import asyncio
import re

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from mco.asynciotasks import AsyncioTasks


def _value(text: str) -> float | None:
    m = re.search(r"^mco_test_asyncio_tasks (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else None


def test_outside_a_loop_the_family_is_described_without_a_sample() -> None:
    registry = CollectorRegistry()
    registry.register(AsyncioTasks("mco_test_asyncio_tasks"))
    text = generate_latest(registry).decode()
    assert "# TYPE mco_test_asyncio_tasks gauge" in text
    assert _value(text) is None


async def test_a_scrape_counts_the_tasks_alive_in_the_serving_loop() -> None:
    registry = CollectorRegistry()
    registry.register(AsyncioTasks("mco_test_asyncio_tasks"))

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry))

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession() as session:

            async def scrape() -> float:
                async with session.get(f"http://127.0.0.1:{port}/metrics") as r:
                    value = _value(await r.text())
                assert value is not None
                return value

            before = await scrape()
            leaked = [asyncio.create_task(asyncio.sleep(60)) for _ in range(5)]
            await asyncio.sleep(0)
            assert await scrape() == before + 5
            for task in leaked:
                task.cancel()
            await asyncio.gather(*leaked, return_exceptions=True)
            assert await scrape() == before
    finally:
        await runner.cleanup()
