"""``mco-rulegen``: render the detection model's rules, or run the hot-update controller."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from mco.flags import listen_address
from mco.kubeconfig import api_client
from mco.leader import add_leader_flags, elector_from_args, identity_from_args
from mco.logs import add_log_flags, setup_logging
from mco.tls import TLSConfig, add_tls_flags, tls_from_args
from rulegen.controller import ControllerMetrics, ControllerSettings, RuleConfigController
from rulegen.durations import parse_duration
from rulegen.model import DEFAULT_NAME, ConfigError, DetectionRuleConfig, load_config
from rulegen.render import render_prometheusrule, render_rules

DEFAULT_LISTEN = ":9850"
log = logging.getLogger("mco.rulegen")


def _labels(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected key=value, got {pair!r}")
        out[key] = value
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mco-rulegen",
        description="MCO's detection model as Prometheus recording rules and alerts.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    render = sub.add_parser("render", help="print the rules for a DetectionRuleConfig")
    render.add_argument("--config", type=Path, help="DetectionRuleConfig YAML (default: built-in)")
    render.add_argument("--format", choices=("rules", "prometheusrule"), default="rules")
    render.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    render.add_argument("--generation", type=int, default=0, help="generation label (default 0)")
    render.add_argument("--name", default="mco-rules", help="PrometheusRule name")
    render.add_argument("--namespace", default="monitoring", help="PrometheusRule namespace")
    render.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="PrometheusRule label"
    )

    ctl = sub.add_parser("controller", help="watch the DetectionRuleConfig, apply the rules")
    ctl.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, else ~/.kube/config)"
    )
    ctl.add_argument("--context", help="kubeconfig context")
    ctl.add_argument("--web.listen-address", dest="listen", default=DEFAULT_LISTEN)
    add_tls_flags(ctl)
    ctl.add_argument("--config-name", default=DEFAULT_NAME, help="DetectionRuleConfig to watch")
    ctl.add_argument("--prometheusrule-name", default="mco-rules")
    ctl.add_argument(
        "--prometheusrule-namespace",
        default=os.environ.get("POD_NAMESPACE", "monitoring"),
        help="namespace of the PrometheusRule (default: $POD_NAMESPACE, else monitoring)",
    )
    ctl.add_argument(
        "--prometheusrule-label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="label on the PrometheusRule, e.g. release=kube-prometheus-stack (repeatable)",
    )
    ctl.add_argument("--resync", default="5m", help="re-read and re-apply period (default 5m)")
    # The reporter's flags, spelled the same: only the replica holding the Lease writes.
    add_leader_flags(
        ctl,
        lease_name="mco-rulegen",
        namespace_help="namespace of the Lease (default: the PrometheusRule's)",
        what="apply and write status",
    )
    for p in (render, ctl):
        add_log_flags(p)
    return parser


def cmd_render(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config) if args.config else DetectionRuleConfig.default()
        if args.format == "rules":
            text = render_rules(config, generation=args.generation)
        else:
            text = render_prometheusrule(
                config,
                name=args.name,
                namespace=args.namespace,
                labels=_labels(args.label),
                generation=args.generation,
            )
    except (ConfigError, ValueError, argparse.ArgumentTypeError) as exc:
        print(f"mco-rulegen: {exc}", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.write(text)
    else:
        try:
            Path(args.output).write_text(text)
        except OSError as exc:
            print(f"mco-rulegen: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
            return 1
    return 0


def make_metrics_app(
    metrics: ControllerMetrics, controller: RuleConfigController
) -> web.Application:
    async def handle_metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def handle_health(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def handle_ready(_: web.Request) -> web.Response:
        if controller.ready():
            return web.Response(text="ok\n")
        if controller.leading:
            return web.Response(status=503, text="not synced with the API server yet\n")
        return web.Response(status=503, text="standby: the lease cannot be read\n")

    app = web.Application()
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/healthz", handle_health)
    app.router.add_get("/readyz", handle_ready)
    return app


async def run_controller(args: argparse.Namespace, tls: TLSConfig) -> int:
    host, port = listen_address(args.listen)
    settings = ControllerSettings(
        rule_name=args.prometheusrule_name,
        rule_namespace=args.prometheusrule_namespace,
        rule_labels=_labels(args.prometheusrule_label),
        config_name=args.config_name,
        resync_seconds=parse_duration(args.resync),
    )
    api = await api_client(args.kubeconfig, args.context)
    identity = identity_from_args(args)
    # Audit logs (and the HA test) tell the replicas apart by this.
    api.user_agent = f"mco-rulegen ({identity})"
    elector = (
        elector_from_args(api, args, identity=identity, namespace=settings.rule_namespace)
        if args.leader_elect
        else None
    )
    metrics = ControllerMetrics()
    controller = RuleConfigController(api, settings, metrics, elector)
    runner = web.AppRunner(make_metrics_app(metrics, controller), access_log=None)
    await runner.setup()
    site = web.TCPSite(
        runner, host or None, port, ssl_context=tls.server_context() if tls.enabled else None
    )
    try:
        await site.start()
    except OSError as exc:
        log.error("cannot serve metrics", extra={"address": args.listen, "err": str(exc)})
        await runner.cleanup()
        await api.close()
        return 1
    log.info(
        "controller started",
        extra={
            "metrics": f"{'https' if tls.enabled else 'http'}://{host}:{port}/metrics",
            "prometheusrule": f"{settings.rule_namespace}/{settings.rule_name}",
            "config": settings.config_name,
            "lease": f"{elector.namespace}/{elector.name}" if elector else None,
            "identity": identity,
        },
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    task = asyncio.create_task(controller.run())
    await stop.wait()
    log.info("stopping")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await runner.cleanup()
    await api.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    if args.command == "render":
        return cmd_render(args)
    try:
        tls = tls_from_args(args)
        tls.validate()
        _labels(args.prometheusrule_label)
        parse_duration(args.resync)
        listen_address(args.listen)
        if not (
            args.leader_elect_lease_duration
            > args.leader_elect_renew_deadline
            > args.leader_elect_retry_period
            > 0
        ):
            raise ValueError(
                "leader election: need lease duration > renew deadline > retry period > 0"
            )
    except (ValueError, argparse.ArgumentTypeError) as exc:
        log.error("bad flags", extra={"err": str(exc)})
        return 2
    return asyncio.run(run_controller(args, tls))


if __name__ == "__main__":
    sys.exit(main())
