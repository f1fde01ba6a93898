"""The web configuration (``mco.webconfig``) applied to an aiohttp server: basic auth as the
first middleware, the configured headers, TLS with renewed certificates reloaded, and the
listen address (``:PORT`` binds every interface, IPv4 and IPv6)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from mco import webconfig
from mco.webconfig import UNAUTHORIZED, BasicAuth, WebConfig, WebSettings


async def start(app: web.Application, settings: WebSettings) -> web.AppRunner:
    """Serve ``app`` as the settings say (TLS, basic auth, headers, address); the caller
    cleans the runner up. ``:PORT`` binds every interface, IPv4 and IPv6."""
    install(app, settings.config)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(
        runner, settings.bind_host, settings.port, ssl_context=settings.config.ssl_context
    )
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def _verified(auth: BasicAuth, header: str | None) -> bool:
    """A cached verdict at once; bcrypt (tens of ms) in a thread, off the event loop."""
    known = auth.cached(header)
    if known is not None:
        return known
    return await asyncio.get_running_loop().run_in_executor(None, auth.verify, header)


_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def install(app: web.Application, config: WebConfig) -> None:
    """Basic auth (first of the app's middlewares) and the configured response headers.

    Nothing is added when the configuration asks for neither, so a plain server pays nothing.
    With TLS, renewed certificate files are picked up every ``RELOAD_SECONDS``.
    """
    if config.reloader is not None:
        reloader = config.reloader

        async def reload_certificates(_: web.Application) -> AsyncIterator[None]:
            async def loop() -> None:
                while True:
                    await asyncio.sleep(webconfig.RELOAD_SECONDS)
                    reloader.reload_if_changed()

            task = asyncio.create_task(loop())
            yield
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        app.cleanup_ctx.append(reload_certificates)
    if config.auth is not None:
        auth, open_paths = config.auth, config.auth_excluded_paths

        @web.middleware
        async def authenticate(request: web.Request, handler: _Handler) -> web.StreamResponse:
            if request.path in open_paths or await _verified(
                auth, request.headers.get("Authorization")
            ):
                return await handler(request)
            return web.Response(status=401, text="Unauthorized\n", headers=UNAUTHORIZED)

        app.middlewares.insert(0, authenticate)
    if config.headers:
        headers = dict(config.headers)

        async def add_headers(_: web.Request, response: web.StreamResponse) -> None:
            response.headers.update(headers)

        app.on_response_prepare.append(add_headers)
