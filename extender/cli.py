"""``mco-extender``: serve the extender, or ``print-config`` for the schedulers."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from aiohttp import web
from kubernetes_asyncio.config.config_exception import ConfigException

from extender import __version__, print_config
from extender.app import make_app
from extender.config import (
    DEFAULT_DECISIONS_MEMORY,
    DEFAULT_LISTEN,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_BODY_MEMORY,
    DEFAULT_RESERVATION_SPAN,
    SCHEDULER_AUTH,
    VOLCANO_PLACEMENTS,
    ExtenderConfig,
    ExtenderSettings,
    ReservationConfig,
    SourceConfig,
    VerdictConfig,
)
from mco import webserver
from mco.flags import duration, listen_address, size
from mco.logs import add_log_flags
from mco.settings import (
    Parser,
    add_web_flags,
    deprecated,
    fail,
    log_settings,
    parse,
    start_logging,
    web_settings,
)

log = logging.getLogger("mco.extender")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mco-extender",
        description="Volcano and kube-scheduler extender: keeps pods off interfered nodes and "
        "places Kata pods on Kata-ready nodes. `mco-extender print-config --help` prints the "
        "scheduler configuration.",
    )
    parser.add_argument("--version", action="version", version=f"mco-extender {__version__}")
    parser.add_argument("--workers", type=int, default=1, help="server processes (SO_REUSEPORT)")
    parser.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # workers
    source = parser.add_argument_group("report source (default: the Kubernetes API)")
    source.add_argument("--report-file", help="read reports from this file, reloaded on change")
    source.add_argument(
        "--report-poll-interval",
        type=duration,
        default=0.5,
        metavar="DURATION",
        help="how often the report file is checked for a change (default 500ms)",
    )
    source.add_argument(
        "--kubeconfig", help="kubeconfig (default: in-cluster, else ~/.kube/config)"
    )
    verdicts = parser.add_argument_group("verdicts")
    verdicts.add_argument(
        "--stale-after",
        type=duration,
        default=30.0,
        metavar="DURATION",
        help="entries older than this count as missing (default 30s); the report's "
        "status.config (spec.report.staleAfter) overrides it once present",
    )
    verdicts.add_argument(
        "--neutral-score",
        type=float,
        default=50.0,
        help="0-100 score for missing or stale data (default 50, i.e. 5 for kube-scheduler); "
        "the report's status.config (spec.report.neutralScore) overrides it once present",
    )
    verdicts.add_argument(
        "--fail-closed",
        action="store_true",
        help="reject nodes with missing or stale data instead of passing them",
    )
    verdicts.add_argument(
        "--kata-runtime-class",
        action="append",
        metavar="GLOB",
        help="runtimeClassName glob that needs a Kata-ready node (repeatable; default kata-*)",
    )
    verdicts.add_argument(
        "--reject-code",
        type=int,
        choices=(2, 3),
        default=3,
        help="Volcano code for hard-constraint rejections: 3 UnschedulableAndUnresolvable "
        "(default; kube: FailedAndUnresolvableNodes) or 2 Unschedulable (preemption may help; "
        "kube: FailedNodes)",
    )
    verdicts.add_argument(
        "--volcano-weight",
        type=float,
        default=1.0,
        help="multiplier on Volcano scores (Volcano adds extender scores unweighted)",
    )
    reservation = parser.add_argument_group("reservations for pods placed since the data")
    reservation.add_argument(
        "--reservation-span",
        type=duration,
        default=DEFAULT_RESERVATION_SPAN,
        metavar="DURATION",
        help="how long after its placement a pod shows in its node's data: window + scrape + "
        "evaluation + report + pod start (default 15s)",
    )
    reservation.add_argument(
        "--volcano-placements",
        choices=VOLCANO_PLACEMENTS,
        default="auto",
        help="Volcano placements from its allocate/deallocate calls (verbs), from the tasks of "
        "each request's NodeInfos (tasks), or from the tasks until the first such call "
        "(auto, the default)",
    )
    reservation.add_argument(
        "--watch-pods",
        action="store_true",
        help="kube-scheduler placements: watch pods bound to nodes (RBAC: list, watch pods)",
    )
    parser.add_argument(
        "--profile-weight",
        type=float,
        default=0.5,
        help="what the learned workload profiles of the report (status.profiles) weigh, 0-1: "
        "the harm predicted from the residents' profiles floors the level, the harm predicted "
        "to them comes off the score (default 0.5; 0: off; residents come from --watch-pods)",
    )
    server = parser.add_argument_group("server")
    server.add_argument(
        "--max-body-size",
        type=size,
        default=DEFAULT_MAX_BODY,
        metavar="SIZE",
        help="largest request body accepted (default 64MiB)",
    )
    server.add_argument(
        "--max-body-memory",
        type=size,
        default=DEFAULT_MAX_BODY_MEMORY,
        metavar="SIZE",
        help="request body bytes held at once, all connections together; beyond it requests "
        "get 503 (default 128MiB, per process)",
    )
    server.add_argument(
        "--decisions-memory",
        type=size,
        default=DEFAULT_DECISIONS_MEMORY,
        metavar="SIZE",
        help="bytes the ring of recent decisions (/v1/decisions) may hold; the least recently "
        "decided pods go first (default 32MiB, per process)",
    )
    server.add_argument(
        "--scheduler-auth",
        choices=SCHEDULER_AUTH,
        default=None,  # none
        help="who may call the scheduler routes (/scheduler/*, /volcano/*): anyone who reaches "
        "the port (none, the default) or clients with a certificate the web config's "
        "client_ca_file verifies (client-cert: needs tls_server_config with client_ca_file and "
        "client_auth_type VerifyClientCertIfGiven, so /metrics and the probes need none)",
    )
    server.add_argument(
        "--web.scheduler-listen-address",
        dest="scheduler_listen",
        default="",
        metavar="[HOST]:PORT",
        help="serve the scheduler routes (/scheduler/*, /volcano/*) on this address of their "
        "own, with the same --web.config.file, and answer them 404 on --web.listen-address, "
        "which keeps /metrics, the probes and /v1/*: a NetworkPolicy can then let only the "
        "schedulers reach this port (default: every route on --web.listen-address)",
    )
    add_web_flags(
        server,
        default_listen=DEFAULT_LISTEN,
        legacy_listen=("--listen",),
        legacy_tls=("--tls-", "--client-ca"),
    )
    add_log_flags(parser)
    return parser


def config_from_args(args: argparse.Namespace) -> ExtenderConfig:
    if args.max_body_size <= 0:
        raise ValueError("--max-body-size must be positive")
    if args.max_body_memory < args.max_body_size:
        raise ValueError("--max-body-memory must be at least --max-body-size")
    if args.decisions_memory <= 0:
        raise ValueError("--decisions-memory must be positive")
    scheduler_port = None
    if args.scheduler_listen:
        try:
            _, scheduler_port = listen_address(args.scheduler_listen)
        except ValueError as exc:
            raise ValueError(f"--web.scheduler-listen-address: {exc}") from exc
        _, main_port = listen_address(args.listen)
        if scheduler_port == 0 or scheduler_port == main_port:
            raise ValueError(
                "--web.scheduler-listen-address needs a port of its own, not 0 and not "
                "--web.listen-address's"
            )
    return ExtenderConfig(
        verdict=VerdictConfig(
            stale_after=args.stale_after,
            neutral_score=args.neutral_score,
            fail_closed=args.fail_closed,
            kata_globs=tuple(args.kata_runtime_class or ("kata-*",)),
            reject_code=args.reject_code,
            volcano_weight=args.volcano_weight,
        ),
        source=SourceConfig(
            report_file=args.report_file,
            kubeconfig=args.kubeconfig,
            poll_interval=args.report_poll_interval,
        ),
        reservation=ReservationConfig(
            span=args.reservation_span,
            volcano_placements=args.volcano_placements,
            watch_pods=args.watch_pods,
        ),
        max_body_bytes=args.max_body_size,
        max_body_memory=args.max_body_memory,
        decisions_memory=args.decisions_memory,
        profile_weight=args.profile_weight,
        scheduler_auth=args.scheduler_auth or "none",
        scheduler_port=scheduler_port,
    )


def settings_from_args(args: argparse.Namespace) -> ExtenderSettings:
    if args.workers < 1:
        raise ValueError("--workers must be at least 1")
    web_ = web_settings(args)
    if args.scheduler_auth == "client-cert":
        tls = web_.config.tls
        if tls is None or not tls.client_ca_file:
            raise ValueError(
                "--scheduler-auth=client-cert needs --web.config.file with tls_server_config "
                "client_ca_file (and client_auth_type VerifyClientCertIfGiven)"
            )
    return ExtenderSettings(
        web=web_,
        config=config_from_args(args),
        workers=args.workers,
        reuse_port=args.reuse_port,
        log=log_settings(args),
        deprecated=deprecated(args),
    )


def parse_settings(argv: Sequence[str] | None) -> ExtenderSettings:
    """The flags as one settings object; a bad one exits 2 with a one-line reason."""
    return parse(build_parser(), argv, settings_from_args)


def serve(settings: ExtenderSettings) -> None:
    """Run one server process until SIGTERM/SIGINT."""
    web_ = settings.web

    async def announce(_: web.Application) -> None:
        # After the report and pod sources started: unusable credentials stop the start-up
        # with their one error line, not after a "serving" line that was not true.
        log.info(
            "serving",
            extra={
                "url": f"{web_.config.scheme}://{web_.address}",
                "pid": os.getpid(),
                "web_config": web_.config.source or None,
            },
        )

    app = make_app(settings.config)
    app.on_startup.append(announce)
    webserver.install(app, web_.config)
    scheduler_socks = []
    if settings.config.scheduler_port is not None:
        # Same host as the main address, same TLS and auth (run_app serves both).
        scheduler_socks = listen_sockets(
            web_.host, settings.config.scheduler_port, reuse_port=settings.reuse_port
        )
    web.run_app(
        app,
        host=web_.bind_host,  # None: every interface, both address families
        port=web_.port,
        sock=scheduler_socks or None,
        ssl_context=web_.config.ssl_context,
        reuse_port=settings.reuse_port,
        access_log=None,
        print=None,
        shutdown_timeout=5.0,
    )


def listen_sockets(host: str, port: int, *, reuse_port: bool) -> list[socket.socket]:
    """Bound sockets for ``[host]:port``; no host binds every interface, IPv4 and IPv6 (as
    aiohttp does for the main address), so one scheduler port works in any cluster."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def serve_workers(argv: Sequence[str], workers: int) -> int:
    """N processes on one port (SO_REUSEPORT); the kernel spreads connections across them.

    Each worker is this program again with the same flags, so nothing is pickled across; the
    first to exit takes the others down and the pod restarts as a whole.
    """
    metrics_dir = tempfile.mkdtemp(prefix="mco-extender-metrics-")
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=metrics_dir)
    command = [sys.executable, "-m", "extender", *argv, "--workers=1", "--reuse-port"]
    children: list[subprocess.Popen[bytes]] = []
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        children.extend(subprocess.Popen(command, env=env) for _ in range(workers))
        while all(child.poll() is None for child in children) and not stopping:
            time.sleep(0.2)
        if not stopping:
            log.error("a worker exited; stopping the others")
            stop(signal.SIGTERM, None)
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        return 0 if stopping else 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        shutil.rmtree(metrics_dir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["print-config"]:
        return print_config.main(argv[1:])
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    settings = parse_settings(argv)
    # The workers of --workers get the same flags: the parent alone warns about old ones.
    start_logging(settings.log, () if settings.reuse_port else settings.deprecated)
    try:
        if settings.workers > 1:
            return serve_workers(argv, settings.workers)
        serve(settings)
    except OSError as exc:
        log.error("cannot serve", extra={"address": settings.web.address, "err": str(exc)})
        return 1
    except ConfigException as exc:
        if settings.config.source.report_file is not None:  # then only --watch-pods needs them
            needs = "the pod watch of --watch-pods (use --kubeconfig)"
        else:
            needs = "the report watch (use --report-file or --kubeconfig)"
        return fail("mco-extender", f"no Kubernetes credentials for {needs}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
