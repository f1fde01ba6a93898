"""``mco-reporter``: PromQL results into the NodeInterferenceReport, every ``--interval``.

This module only wires: flags into the engine (``reporter.engine``, the cycle), its sink (the
Kubernetes API, default and leader-elected, or ``--output FILE|-``), the rule-config source and
the self-metrics server; ``mco.leader.run_while_leading`` runs the engine while leading.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
from collections.abc import Coroutine, Sequence
from functools import partial
from typing import Any, Final

from kubernetes_asyncio import client

from mco.flags import duration, listen_address, size
from mco.kubeconfig import api_client as kube_client
from mco.leader import (
    LeaseElector,
    add_leader_flags,
    elector_from_args,
    identity_from_args,
    run_while_leading,
)
from mco.logs import add_log_flags, setup_logging
from mco.tls import add_tls_flags, tls_from_args
from reporter.engine import Reporter
from reporter.entries import Epsilon
from reporter.filesink import FileSink
from reporter.kubeapi import ReportApi
from reporter.kubesink import KubeSink
from reporter.layout import CLUSTER, DEFAULT_MAX_BYTES, PER_NODE, LayoutChooser
from reporter.metrics import ReporterMetrics, serve
from reporter.promql import (
    DEFAULT_MAX_ANSWER_BYTES,
    PromQLClient,
    SourceConfig,
    mmap_large_buffers,
    safe_url,
)
from reporter.query import Plan
from reporter.ruleconfig import RuleConfigSource
from reporter.sink import Sink
from rulegen.model import ConfigError

log = logging.getLogger("mco.reporter")
DEFAULT_LISTEN: Final = ":9849"
_SA_NAMESPACE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9-]+", name.strip()):
        raise argparse.ArgumentTypeError("a header is 'Name: value'")
    return name.strip(), value.strip()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mco-reporter",
        description="Turn MCO's recorded series into the NodeInterferenceReport custom resource.",
    )
    src = p.add_argument_group("PromQL source")
    src.add_argument("--prometheus-url", required=True, help="base URL of a PromQL HTTP API")
    src.add_argument("--prometheus-timeout", type=duration, default=5.0, metavar="DURATION")
    src.add_argument("--prometheus-bearer-token-file", metavar="FILE")
    src.add_argument("--prometheus-basic-auth-user", metavar="USER")
    src.add_argument("--prometheus-basic-auth-password-file", metavar="FILE")
    src.add_argument("--prometheus-ca-file", metavar="FILE")
    src.add_argument("--prometheus-cert-file", metavar="FILE", help="client certificate")
    src.add_argument("--prometheus-key-file", metavar="FILE")
    src.add_argument("--prometheus-insecure-skip-verify", action="store_true")
    src.add_argument(
        "--prometheus-header",
        type=header,
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="extra request header, e.g. 'X-Scope-OrgID: team-a' (repeatable)",
    )
    src.add_argument(
        "--prometheus-compression",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ask for gzip answers (fewer bytes on the wire, more CPU)",
    )
    src.add_argument(
        "--prometheus-max-answer-bytes",
        type=size,
        default=DEFAULT_MAX_ANSWER_BYTES,
        metavar="SIZE",
        help="answer bytes held in memory at once, all queries together, raw and inflated; "
        "more is refused (default 48Mi: fits the chart's 256Mi limit)",
    )
    rep = p.add_argument_group("report")
    rep.add_argument("--interval", type=duration, default=1.0, metavar="DURATION")
    rep.add_argument("--once", action="store_true", help="run one cycle and exit")
    rep.add_argument("--output", metavar="FILE|-", help="write JSON here instead of the API")
    rep.add_argument("--layout", choices=(CLUSTER, PER_NODE, "auto"), default="auto")
    rep.add_argument(
        "--max-object-bytes",
        type=size,
        default=DEFAULT_MAX_BYTES,
        help="auto layout: switch to per-node above this cluster-object size (default 1Mi)",
    )
    rep.add_argument("--compact", action="store_true", help="leave out the signal snapshot")
    rep.add_argument("--rule-config", metavar="FILE", help="DetectionRuleConfig YAML")
    rep.add_argument("--epsilon", type=float, default=0.01, help="level/index change to write")
    rep.add_argument(
        "--signal-epsilon", type=float, default=0.05, help="relative signal change to write"
    )
    rep.add_argument(
        "--live-within",
        type=duration,
        default=None,
        metavar="DURATION",
        help="a node whose newest sample is older is not live (default: max(5s, 3 x the rules' "
        "evaluation interval))",
    )
    rep.add_argument(
        "--refresh-after",
        type=duration,
        default=0.0,
        metavar="DURATION",
        help="also rewrite a live entry whose sampleTime is older than this (for readers that "
        "ignore the heartbeat; 0: never)",
    )
    kube = p.add_argument_group("Kubernetes")
    kube.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, else ~/.kube")
    kube.add_argument("--api-timeout", type=duration, default=10.0, metavar="DURATION")
    add_leader_flags(
        kube,
        lease_name="mco-reporter",
        namespace_help="namespace of the Lease (default: the pod's)",
        what="write the report",
    )
    web_ = p.add_argument_group("self-metrics")
    web_.add_argument(
        "--web.listen-address", dest="listen", default=DEFAULT_LISTEN, help="'' turns it off"
    )
    add_tls_flags(p)
    add_log_flags(p)
    return p


def source_config(args: argparse.Namespace) -> SourceConfig:
    return SourceConfig(
        url=args.prometheus_url,
        timeout=args.prometheus_timeout,
        bearer_token_file=args.prometheus_bearer_token_file,
        basic_auth_user=args.prometheus_basic_auth_user,
        basic_auth_password_file=args.prometheus_basic_auth_password_file,
        ca_file=args.prometheus_ca_file,
        cert_file=args.prometheus_cert_file,
        key_file=args.prometheus_key_file,
        insecure_skip_verify=args.prometheus_insecure_skip_verify,
        headers=dict(args.prometheus_header),
        compression=args.prometheus_compression,
        max_answer_bytes=args.prometheus_max_answer_bytes,
    )


def default_namespace() -> str:
    env = os.environ.get("POD_NAMESPACE")
    if env:
        return env
    try:
        with open(_SA_NAMESPACE, encoding="utf-8") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


async def run(args: argparse.Namespace) -> int:
    try:
        src = source_config(args)
        src.validate()
        tls = tls_from_args(args)
        tls.validate()
        listen = listen_address(args.listen) if args.listen else None
    except ValueError as exc:
        print(f"mco-reporter: {exc}", file=sys.stderr)
        return 2
    metrics = ReporterMetrics()
    api_client: client.ApiClient | None = None
    if args.output is None:
        try:
            api_client = await kube_client(args.kubeconfig)
        except Exception as exc:
            print(f"mco-reporter: no Kubernetes API configuration: {exc}", file=sys.stderr)
            return 2
    identity = identity_from_args(args)
    if api_client is not None:
        # Audit logs (and the HA test) tell the replicas apart by this.
        api_client.user_agent = f"mco-reporter ({identity})"
    rules = RuleConfigSource(path=args.rule_config, api_client=api_client)
    try:
        rules.load_initial()
    except (ConfigError, OSError) as exc:
        print(f"mco-reporter: --rule-config: {exc}", file=sys.stderr)
        return 2
    chooser = LayoutChooser(args.layout, args.max_object_bytes)
    elector: LeaseElector | None = None
    if api_client is not None and args.leader_elect and not args.once:
        try:
            elector = elector_from_args(
                api_client,
                args,
                identity=identity,
                namespace=default_namespace(),
                on_change=lambda leading: metrics.leader.set(1 if leading else 0),
            )
        except ValueError as exc:
            print(f"mco-reporter: leader election: {exc}", file=sys.stderr)
            return 2
    sink: Sink
    if api_client is not None:
        sink = KubeSink(
            ReportApi(api_client, timeout=args.api_timeout),
            chooser,
            may_write=elector.is_leader if elector is not None else (lambda: True),
        )
    else:
        sink = FileSink(args.output, chooser)
    log.info(
        "starting",
        extra={
            "source": safe_url(args.prometheus_url),
            "sink": args.output or "kubernetes",
            "layout": args.layout,
            "interval_s": args.interval,
        },
    )
    runner = None
    try:
        async with PromQLClient(src) as source:
            reporter = Reporter(
                source=source,
                rules=rules,
                plan=Plan(compact=args.compact),
                epsilon=Epsilon(args.epsilon, args.signal_epsilon),
                metrics=metrics,
                sink=sink,
                live_within=args.live_within,
                refresh_after=args.refresh_after,
            )
            if args.once:
                await rules.refresh()
                outcome = await reporter.cycle()
                if not outcome.ok:
                    print(f"mco-reporter: {outcome.message}", file=sys.stderr)
                    return 1
                return 0
            if listen is not None:
                runner = await serve(
                    metrics, *listen, tls.server_context() if tls.enabled else None
                )
            if elector is None:
                metrics.leader.set(1)
            await _until_stopped(run_while_leading(elector, partial(reporter.lead, args.interval)))
            return 0
    finally:
        if runner is not None:
            await runner.cleanup()
        if api_client is not None:
            await api_client.close()


async def _until_stopped(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` until SIGTERM or SIGINT; cancelling it stops the writes, then releases the
    Lease (``run_while_leading``)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(work)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, stopped):
            t.cancel()
        await asyncio.gather(stopped, return_exceptions=True)
        with contextlib.suppress(asyncio.CancelledError):
            await task


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    mmap_large_buffers()  # so the answer budget's bound holds for resident memory
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
