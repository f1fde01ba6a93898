"""``mco-exporter``: command line, flags in node_exporter's style, and the HTTP server."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import ssl
import sys
import threading
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, start_http_server

from exporter import __version__
from exporter.paths import Paths, read_text
from exporter.registry import CollectorConfig, CollectorSpec, specs
from exporter.scrape import NodeCollector
from mco.flags import listen_address
from mco.logs import add_log_flags, setup_logging
from mco.tls import add_tls_flags, tls_from_args

DEFAULT_LISTEN = ":9847"
_NO_IPV6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL)
log = logging.getLogger("mco.exporter")


def build_parser(all_specs: dict[str, CollectorSpec]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mco-exporter",
        description="Expose host interference signals (PSI, reclaim, LLC, block I/O, steal) "
        "for Prometheus.",
    )
    parser.add_argument("--version", action="version", version=f"mco-exporter {__version__}")
    parser.add_argument(
        "--web.listen-address",
        dest="listen",
        default=DEFAULT_LISTEN,
        help="[host]:port to serve on",
    )
    add_tls_flags(parser)
    parser.add_argument("--path.procfs", dest="procfs", default="/proc")
    parser.add_argument("--path.sysfs", dest="sysfs", default="/sys")
    parser.add_argument("--path.rootfs", dest="rootfs", default="/")
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
                help=option.help,
            )
    return parser


def build_collector(args: argparse.Namespace, all_specs: dict[str, CollectorSpec]) -> NodeCollector:
    """The scrape-time collector for parsed flags (shared with the serving benchmark)."""
    paths = Paths(procfs=args.procfs, sysfs=args.sysfs, rootfs=args.rootfs)
    options = {
        key.removeprefix("option_"): value
        for key, value in vars(args).items()
        if key.startswith("option_")
    }
    enabled = [s for s in all_specs.values() if getattr(args, f"collector_{s.name}")]
    try:
        kernel = read_text(paths.proc("sys", "kernel", "osrelease")).strip()
    except OSError:
        kernel = "unknown"
    return NodeCollector(
        enabled, CollectorConfig(paths, options), node_name=args.node_name, kernel=kernel
    )


def main(argv: Sequence[str] | None = None) -> int:
    all_specs = specs()
    args = build_parser(all_specs).parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    try:
        host, port = listen_address(args.listen)
        tls = tls_from_args(args)
        tls.validate()
    except ValueError as exc:
        log.error("bad flags", extra={"err": str(exc)})
        return 2
    node = build_collector(args, all_specs)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(node)
    # No host: "::" is dual-stack on Linux; on a node with IPv6 disabled fall back to IPv4.
    candidates = [host] if host else ["::", "0.0.0.0"]  # noqa: S104  (a node agent)
    try:
        for i, addr in enumerate(candidates):
            try:
                server, _thread = start_http_server(
                    port,
                    addr=addr,
                    registry=registry,
                    certfile=tls.cert_file,
                    keyfile=tls.key_file,
                    client_cafile=tls.client_ca_file,
                    client_auth_required=tls.client_ca_file is not None,
                    tls_min_version=ssl.TLSVersion.TLSv1_2,
                )
                break
            except OSError as exc:
                if i == len(candidates) - 1 or exc.errno not in _NO_IPV6:
                    raise
    except OSError as exc:
        log.error("cannot serve", extra={"address": args.listen, "err": str(exc)})
        node.close()
        return 1
    scheme = "https" if tls.enabled else "http"
    log.info(
        "serving metrics",
        extra={
            "url": f"{scheme}://{host}:{server.server_port}/metrics",
            "collectors": ",".join(n for n, why in node.collectors.items() if why is None),
        },
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    log.info("shutting down")
    server.shutdown()
    node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
