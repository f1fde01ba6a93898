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
import signal
import sys
from collections.abc import Coroutine, Sequence
from functools import partial
from typing import Any, Final

from kubernetes_asyncio import client

from mco.flags import duration, size
from mco.kubeconfig import api_client as kube_client
from mco.leader import LeaseElector, add_leader_flags, run_while_leading
from mco.logs import add_log_flags
from mco.promql import (
    AnswerBudget,
    PromQLClient,
    mmap_large_buffers,
    safe_url,
)
from mco.settings import Parser, add_web_flags, fail, parse, start_logging
from mco.source_flags import add_source_flags
from reporter.engine import Reporter
from reporter.entries import Epsilon
from reporter.filesink import FileSink
from reporter.kubeapi import ReportApi
from reporter.kubesink import KubeSink
from reporter.layout import CLUSTER, DEFAULT_MAX_BYTES, PER_NODE, LayoutChooser
from reporter.metrics import ReporterMetrics, serve
from reporter.nodeapi import NodeApi
from reporter.profiles import DEFAULT_HALF_LIFE, DEFAULT_MAX_WORKLOADS, ProfileBook
from reporter.query import Plan
from reporter.ruleconfig import RuleConfigSource
from reporter.settings import ReporterSettings
from reporter.sink import Sink
from reporter.taints import DEFAULT_MAX_SHARE, NodeTainter
from reporter.tiers import NodeTierLabeller
from rulegen.model import ConfigError

log = logging.getLogger("mco.reporter")
DEFAULT_LISTEN: Final = ":9849"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="mco-reporter",
        description="Turn MCO's recorded series into the NodeInterferenceReport custom resource.",
    )
    add_source_flags(
        p,
        required=True,
        repeatable=True,
        url_help="base URL of a PromQL HTTP API; once per shard (Prometheus Operator shards, "
        "single-node VictoriaMetrics): each is queried every cycle and the answers merged",
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
    rep.add_argument(
        "--compact",
        action="store_true",
        help="leave out the signal snapshot, victims and aggressors",
    )
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
    prof = p.add_argument_group(
        "workload profiles",
        "learn from the victims and aggressors which workloads pollute and which suffer, per "
        "resource, into status.profiles (off with --compact: no lists are asked for)",
    )
    prof.add_argument(
        "--profile-half-life",
        type=duration,
        default=DEFAULT_HALF_LIFE,
        metavar="DURATION",
        help="what a profile learned weighs half as much after this (default 1h)",
    )
    prof.add_argument(
        "--profile-max-workloads",
        type=int,
        default=DEFAULT_MAX_WORKLOADS,
        help="profiles kept at most; the least observed go first (default 500)",
    )
    prof.add_argument(
        "--profile-publish-interval",
        type=duration,
        default=30.0,
        metavar="DURATION",
        help="write status.profiles at most this often (default 30s; 0: never)",
    )
    kube = p.add_argument_group("Kubernetes")
    kube.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, else ~/.kube")
    kube.add_argument("--api-timeout", type=duration, default=10.0, metavar="DURATION")
    add_leader_flags(
        kube,
        lease_name="mco-reporter",
        what="write the report",
    )
    taints = p.add_argument_group(
        "taint mode",
        "keep the taint mco.io/interference=hard-constraint:NoSchedule on nodes with a held "
        "hard constraint, so schedulers filter them without calling the extender (needs RBAC "
        "on nodes: get, list, patch)",
    )
    taints.add_argument(
        "--taint-nodes", action="store_true", help="turn the taint mode on (default off)"
    )
    taints.add_argument(
        "--taint-qps", type=float, default=5.0, help="Node patches per second (default 5)"
    )
    taints.add_argument(
        "--taint-burst", type=int, default=10, help="Node patches at once (default 10)"
    )
    taints.add_argument(
        "--taint-resync",
        type=duration,
        default=600.0,
        metavar="DURATION",
        help="list every Node again this often (default 10m; 0: only at a leader term's start)",
    )
    taints.add_argument(
        "--taint-max-share",
        type=float,
        default=DEFAULT_MAX_SHARE,
        metavar="SHARE",
        help="most of the Nodes tainted at once; past it the rest are held back and left to the "
        "extender (default %(default)s; 1: no bound)",
    )
    tiers = p.add_argument_group(
        "tier-label mode",
        "keep the label mco.io/interference-tier=low|medium|high on every node with fresh data, "
        "with hysteresis, so schedulers score it through preferred node affinity without calling "
        "the extender (needs RBAC on nodes: get, list, patch)",
    )
    tiers.add_argument(
        "--tier-label-nodes", action="store_true", help="turn the tier-label mode on (default off)"
    )
    tiers.add_argument(
        "--tier-medium-at", type=float, default=0.3, help="level entering medium (default 0.3)"
    )
    tiers.add_argument(
        "--tier-high-at", type=float, default=0.6, help="level entering high (default 0.6)"
    )
    tiers.add_argument(
        "--tier-margin",
        type=float,
        default=0.1,
        help="leave a tier only below its threshold minus this (default 0.1)",
    )
    tiers.add_argument(
        "--tier-hold",
        type=duration,
        default=120.0,
        metavar="DURATION",
        help="... and after this long below it (default 2m)",
    )
    tiers.add_argument(
        "--tier-qps", type=float, default=5.0, help="Node requests per second (default 5)"
    )
    tiers.add_argument(
        "--tier-burst", type=int, default=10, help="Node requests at once (default 10)"
    )
    tiers.add_argument(
        "--tier-resync",
        type=duration,
        default=600.0,
        metavar="DURATION",
        help="list every Node again this often (default 10m; 0: only at a leader term's start)",
    )
    web_ = p.add_argument_group("self-metrics")
    add_web_flags(web_, default_listen=DEFAULT_LISTEN, listen_help="; '' turns it off")
    add_log_flags(p)
    return p


def parse_settings(argv: Sequence[str] | None) -> ReporterSettings:
    """The flags as one settings object; a bad one exits 2 with a one-line reason."""
    return parse(build_parser(), argv, ReporterSettings.from_args)


async def run(settings: ReporterSettings) -> int:
    metrics = ReporterMetrics()
    api_client: client.ApiClient | None = None
    if settings.output is None:
        try:
            api_client = await kube_client(settings.kubeconfig)
        except Exception as exc:
            return fail("mco-reporter", f"no Kubernetes API configuration: {exc}")
    identity = settings.leader.identity
    if api_client is not None:
        # Audit logs (and the HA test) tell the replicas apart by this.
        api_client.user_agent = f"mco-reporter ({identity})"
    rules = RuleConfigSource(path=settings.rule_config, api_client=api_client)
    try:
        rules.load_initial()
    except (ConfigError, OSError) as exc:
        return fail("mco-reporter", f"--rule-config: {exc}")
    chooser = LayoutChooser(settings.layout, settings.max_object_bytes)
    elector: LeaseElector | None = None
    if api_client is not None and settings.leader.enabled and not settings.once:
        elector = LeaseElector(
            api_client,
            **settings.leader.elector_kwargs(),
            on_change=lambda leading: metrics.leader.set(1 if leading else 0),
        )
    sink: Sink
    if api_client is not None:
        sink = KubeSink(
            ReportApi(api_client, timeout=settings.api_timeout),
            chooser,
            may_write=elector.is_leader if elector is not None else (lambda: True),
        )
    else:
        assert settings.output is not None  # no API client: --output was given
        sink = FileSink(settings.output, chooser)
    tainter: NodeTainter | None = None
    if api_client is not None and settings.taint is not None:
        tainter = NodeTainter(
            NodeApi(api_client, timeout=settings.api_timeout),
            metrics,
            qps=settings.taint.qps,
            burst=settings.taint.burst,
            resync=settings.taint.resync,
            max_share=settings.taint.max_share,
            may_write=elector.is_leader if elector is not None else (lambda: True),
        )
    labeller: NodeTierLabeller | None = None
    if api_client is not None and settings.tiers is not None:
        labeller = NodeTierLabeller(
            NodeApi(api_client, timeout=settings.api_timeout),
            metrics,
            rule=settings.tiers.rule,
            qps=settings.tiers.qps,
            burst=settings.tiers.burst,
            resync=settings.tiers.resync,
            may_write=elector.is_leader if elector is not None else (lambda: True),
        )
    log.info(
        "starting",
        extra={
            "source": ",".join(safe_url(s.url) for s in settings.sources),
            "sink": settings.output or "kubernetes",
            "layout": settings.layout,
            "interval_s": settings.interval,
            "taint_nodes": tainter is not None,
            "tier_label_nodes": labeller is not None,
        },
    )
    runner = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            # One answer budget for all shards: the memory bound holds whatever their number.
            budget = AnswerBudget(settings.source.max_answer_bytes)
            sources = [
                await stack.enter_async_context(PromQLClient(config, budget))
                for config in settings.sources
            ]
            reporter = Reporter(
                source=sources,
                rules=rules,
                plan=Plan(compact=settings.compact),
                epsilon=Epsilon(settings.epsilon, settings.signal_epsilon),
                metrics=metrics,
                sink=sink,
                live_within=settings.live_within,
                refresh_after=settings.refresh_after,
                tainter=tainter,
                labeller=labeller,
                profiles=ProfileBook(settings.profile_half_life, settings.profile_max_workloads),
                profile_interval=settings.profile_publish_interval,
            )
            if settings.once:
                await rules.refresh()
                outcome = await reporter.cycle()
                if not outcome.ok:
                    print(f"mco-reporter: {outcome.message}", file=sys.stderr)
                    return 1
                return 0
            if settings.web is not None:
                runner = await serve(metrics, settings.web)
            if elector is None:
                metrics.leader.set(1)
            await _until_stopped(
                run_while_leading(elector, partial(reporter.lead, settings.interval))
            )
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
    settings = parse_settings(argv)
    start_logging(settings.log, settings.deprecated)
    mmap_large_buffers()  # so the answer budget's bound holds for resident memory
    try:
        return asyncio.run(run(settings))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
