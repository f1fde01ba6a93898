"""A stand-in HTTP server for the placement tests, reached by URL as the bench reaches one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web
from aiohttp.test_utils import TestServer


@asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[str]:
    """``app`` on a free local port, as its base URL (no trailing slash), until the block ends."""
    server = TestServer(app)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()
