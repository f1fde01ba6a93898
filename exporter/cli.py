"""``mco-exporter``: command line, flags in node_exporter's style, and the HTTP server."""

from __future__ import annotations

import argparse
import errno
import logging
import math
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from exporter import __version__
from exporter.paths import read_text
from exporter.registry import CollectorConfig, CollectorSpec, Option, specs
from exporter.scrape import NodeCollector
from exporter.settings import ExporterSettings
from mco import webconfig
from mco.flags import FlagError
from mco.logs import add_log_flags
from mco.settings import Parser, add_web_flags, parse, start_logging
from mco.webconfig import WebSettings

DEFAULT_LISTEN = ":9847"
_NO_IPV6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL)
log = logging.getLogger("mco.exporter")


def _checked(option: Option) -> Callable[[str], str]:
    """An argparse ``type=`` that runs the option's own check and keeps the text."""

    def parse(text: str) -> str:
        if option.check is not None:
            try:
                option.check(text)
            except (ValueError, re.error) as exc:
                raise FlagError(f"{text!r}: {exc}") from exc
        return text

    return parse


def build_parser(all_specs: dict[str, CollectorSpec]) -> argparse.ArgumentParser:
    parser = Parser(
        prog="mco-exporter",
        description="Expose host interference signals (PSI, reclaim, LLC, block I/O, steal) "
        "for Prometheus.",
    )
    parser.add_argument("--version", action="version", version=f"mco-exporter {__version__}")
    add_web_flags(parser, default_listen=DEFAULT_LISTEN)
    parser.add_argument("--path.procfs", dest="procfs", default="/proc")
    parser.add_argument("--path.sysfs", dest="sysfs", default="/sys")
    parser.add_argument("--path.rootfs", dest="rootfs", default="/")
    parser.add_argument(
        "--path.cgroupfs",
        dest="cgroupfs",
        default="/sys/fs/cgroup",
        help="the host's cgroup file system (v2, or the v1 controllers' parent)",
    )
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME") or socket.gethostname(),
        help="node name for mco_node_info (default: $NODE_NAME, else the hostname)",
    )
    add_log_flags(parser)
    group = parser.add_argument_group("collectors")
    for spec in all_specs.values():
        state = "on" if spec.default_enabled else "off"
        group.add_argument(
            f"--collector.{spec.name}",
            dest=f"collector_{spec.name}",
            action=argparse.BooleanOptionalAction,
            default=spec.default_enabled,
            help=f"{spec.help} (default {state})",
        )
        for option in spec.options:
            group.add_argument(
                f"--collector.{spec.name}.{option.name}",
                dest=f"option_{spec.name}.{option.name}",
                default=option.default,
                type=_checked(option),
                help=option.help,
                # A switch: bare, it is "true"; with a value, that value.
                nargs="?" if option.switch else None,
                const="true" if option.switch else None,
            )
    return parser


def parse_settings(
    argv: Sequence[str] | None, all_specs: dict[str, CollectorSpec] | None = None
) -> ExporterSettings:
    """The flags as one settings object; a bad one exits 2 with a one-line reason."""
    all_specs = specs() if all_specs is None else all_specs
    return parse(build_parser(all_specs), argv, lambda a: ExporterSettings.from_args(a, all_specs))


def build_collector(
    settings: ExporterSettings, all_specs: dict[str, CollectorSpec]
) -> NodeCollector:
    """The scrape-time collector for the settings (shared with the serving benchmark)."""
    paths = settings.paths
    enabled = [all_specs[name] for name in settings.collectors]
    try:
        kernel = read_text(paths.proc("sys", "kernel", "osrelease")).strip()
    except OSError:
        kernel = "unknown"
    return NodeCollector(
        enabled,
        CollectorConfig(paths, dict(settings.options)),
        node_name=settings.node_name,
        kernel=kernel,
    )


LISTEN_BACKLOG = 4096  # connections the kernel completes before the accept loop takes them
MAX_CONNECTIONS = 2048  # connections served at once (each holds a thread)


class _SilentHandler(WSGIRequestHandler):
    timeout = 30  # an idle or half-open connection frees its thread

    def log_message(self, format: str, *args: object) -> None:
        """No access log."""


class _Server(ThreadingWSGIServer):
    """prometheus_client's threaded server; "::" with IPV6_V6ONLY off takes IPv4 too.

    The listen backlog is socketserver's 5 by default: a burst of connections (scrapers
    restarting together, a flood) overflowed it while the accept loop waited for the GIL, and
    the kernel dropped SYNs that the clients retried 1 s, 3 s, 7 s later (issue 27: 100
    connections took 15 s). The kernel caps the backlog at net.core.somaxconn (4096 by
    default since Linux 5.4)."""

    request_queue_size = LISTEN_BACKLOG
    # A thread per connection (an idle one holds its thread until the handler's timeout):
    # 1,000 held connections cost ~30 MiB. Past this many at once a new connection is closed
    # at accept, so a flood cannot grow threads and memory without bound.
    max_connections = MAX_CONNECTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._refused = 0
        self._refused_logged = -math.inf
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread could start: the slot and the socket go back
            self._slots.release()
            self.shutdown_request(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse(self, request: Any) -> None:
        self.shutdown_request(request)
        self._refused += 1
        now = time.monotonic()
        if now - self._refused_logged >= 60:  # one line a minute at most while flooded
            self._refused_logged = now
            log.warning(
                "too many connections: closed new ones at accept",
                extra={"max_connections": self.max_connections, "closed": self._refused},
            )

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def handle_error(self, request: object, client_address: object) -> None:
        # A failed TLS handshake, a plain-HTTP client on the TLS port, a reset: not our fault.
        log.debug("connection failed", extra={"peer": str(client_address)}, exc_info=True)


def start_server(web: WebSettings, registry: CollectorRegistry) -> _Server:
    """Serve ``/metrics`` in daemon threads; the web config's TLS, basic auth and headers.

    No host (``:9847``): one IPv6 socket that also accepts IPv4 (dual stack); on a node with
    IPv6 disabled, IPv4 only.
    """
    app = webconfig.wsgi(make_wsgi_app(registry), web.config)
    candidates = [web.host] if web.host else ["::", "0.0.0.0"]  # noqa: S104  (a node agent)
    for i, host in enumerate(candidates):
        try:
            family, _, _, _, sockaddr = socket.getaddrinfo(
                host, web.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            server_class = type("Server", (_Server,), {"address_family": family})
            server: _Server = make_server(
                str(sockaddr[0]), web.port, app, server_class, handler_class=_SilentHandler
            )
            break
        except OSError as exc:
            if i == len(candidates) - 1 or exc.errno not in _NO_IPV6:
                raise
    if web.config.ssl_context is not None:
        # The handshake runs in the request's thread, not in the accept loop.
        server.socket = web.config.ssl_context.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
    threading.Thread(target=server.serve_forever, daemon=True, name="metrics").start()
    return server


def main(argv: Sequence[str] | None = None) -> int:
    all_specs = specs()
    settings = parse_settings(argv, all_specs)
    start_logging(settings.log, settings.deprecated)
    node = build_collector(settings, all_specs)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(node)
    try:
        server = start_server(settings.web, registry)
    except OSError as exc:
        log.error("cannot serve", extra={"address": settings.web.address, "err": str(exc)})
        node.close()
        return 1
    web = settings.web
    log.info(
        "serving metrics",
        extra={
            "url": f"{web.config.scheme}://{web.address}/metrics",
            "web_config": web.config.source or None,
            "collectors": ",".join(n for n, why in node.collectors.items() if why is None),
        },
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    reloader = web.config.reloader  # renewed certificate files, as the aiohttp servers do
    while not stop.wait(webconfig.RELOAD_SECONDS):
        if reloader is not None:
            reloader.reload_if_changed()
    log.info("shutting down")
    server.shutdown()
    node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
