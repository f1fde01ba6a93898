"""mco-exporter's collectors served by an aiohttp handler instead of prometheus_client's server.

Only for `make bench exporter`, which measures which of the two serves a scrape more cheaply.
Takes mco-exporter's flags.
"""

from __future__ import annotations

import sys

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from exporter.cli import build_collector, parse_settings
from exporter.registry import specs


def main(argv: list[str] | None = None) -> int:
    all_specs = specs()
    settings = parse_settings(argv, all_specs)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(build_collector(settings, all_specs))

    async def metrics(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        response = web.Response(body=encoder(registry), headers={"Content-Type": content_type})
        response.enable_compression()
        return response

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    web.run_app(
        app, host=settings.web.bind_host, port=settings.web.port, print=None, access_log=None
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
