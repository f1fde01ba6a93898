"""``mco-reporter``: PromQL results into the NodeInterferenceReport, every ``--interval``.

One cycle: one instant query (``reporter.query``), the tracker's update (``reporter.tracker``),
then the sink: the Kubernetes API (default; leader-elected) or ``--output FILE|-``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from kubernetes_asyncio import client

from mco.flags import duration, listen_address, size
from mco.kubeconfig import api_client as kube_client
from mco.leader import LeaseElector, add_leader_flags, elector_from_args, identity_from_args
from mco.logs import add_log_flags, setup_logging
from mco.tls import add_tls_flags, tls_from_args
from reporter.entries import EntryBuilder, Epsilon
from reporter.filesink import FileSink
from reporter.kubeapi import ReportApi
from reporter.kubesink import KubeSink
from reporter.layout import CLUSTER, DEFAULT_MAX_BYTES, PER_NODE, LayoutChooser
from reporter.metrics import ReporterMetrics, serve
from reporter.promql import PromQLClient, SourceConfig, SourceError, safe_url
from reporter.query import Plan, fetch
from reporter.ruleconfig import RuleConfigSource
from reporter.tracker import CycleResult, Tracker
from rulegen.model import ConfigError, DetectionRuleConfig

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


@dataclass(slots=True)
class Outcome:
    ok: bool
    message: str = ""
    result: CycleResult | None = None


class Reporter:
    """One reporter: source, tracker, sink. ``cycle()`` is the unit the tests and bench drive."""

    def __init__(
        self,
        *,
        source: PromQLClient,
        rules: RuleConfigSource,
        plan: Plan,
        epsilon: Epsilon,
        metrics: ReporterMetrics,
        file_sink: FileSink | None = None,
        kube_sink: KubeSink | None = None,
        live_within: float | None = None,
        refresh_after: float = 0.0,
    ) -> None:
        self.source = source
        self.rules = rules
        self.plan = plan
        self.epsilon = epsilon
        self.metrics = metrics
        self.file_sink = file_sink
        self.kube_sink = kube_sink
        self.live_within = live_within
        self.refresh_after = refresh_after
        self._config = rules.config
        self.tracker = self._new_tracker(self._config)
        self.seeded = False
        self._source_error = ""  # kind of the ongoing source failure, for logging

    def _live_within(self, cfg: DetectionRuleConfig) -> float:
        return self.live_within or max(5.0, 3.0 * cfg.evaluation_interval)

    def _new_tracker(self, cfg: DetectionRuleConfig) -> Tracker:
        return Tracker(
            EntryBuilder(self.plan, cfg, self.epsilon),
            stale_after=float(cfg.report.stale_after),
            live_within=self._live_within(cfg),
            refresh_after=self.refresh_after,
        )

    def reset(self) -> None:
        """Forget everything (leadership lost): the next leader term starts from the API."""
        self.tracker = self._new_tracker(self._config)
        self.seeded = False
        if self.kube_sink is not None:
            self.kube_sink.forget()

    async def seed(self) -> None:
        """Start from what the sink already holds, so unchanged nodes are not rewritten and a
        failing source leaves the existing entries in place to age."""
        if self.kube_sink is not None:
            self.tracker.seed(await self.kube_sink.load())
        elif self.file_sink is not None:
            self.tracker.seed(self.file_sink.load())
        self.seeded = True

    async def cycle(self, at: float | None = None) -> Outcome:
        cpu0 = time.process_time()
        wall0 = time.perf_counter()
        at = time.time() if at is None else at
        m = self.metrics
        cfg = await self.rules.current()
        if cfg != self._config:
            self._config = cfg
            self.tracker.with_builder(
                EntryBuilder(self.plan, cfg, self.epsilon),
                float(cfg.report.stale_after),
                self._live_within(cfg),
            )
        if not self.seeded:
            try:
                await self.seed()
            except Exception as exc:
                m.errors.labels("api_read").inc()
                return self._done(
                    Outcome(False, f"cannot read the existing report: {exc}"), cpu0, wall0
                )
        outcome = Outcome(True)
        # The heartbeat gauge (alert MCOReportStale) moves only when this cycle's heartbeat
        # reached every sink: a sink that fails or backs off leaves readers with old data.
        delivered = False
        m.queries.inc(len(self.plan.exprs))
        try:
            snap = await fetch(self.source, self.plan, at)
        except SourceError as exc:
            m.errors.labels(exc.kind).inc()
            result = self.tracker.fail(exc, at)
            outcome = Outcome(False, f"PromQL source failed ({exc.kind}): {exc.message}", result)
            # Once per outage (and per change of reason), not once a second.
            level = logging.WARNING if exc.kind != self._source_error else logging.DEBUG
            log.log(level, "PromQL source failed", extra={"kind": exc.kind, "err": exc.message})
            self._source_error = exc.kind
        else:
            if self._source_error:
                log.info("PromQL source answers again", extra={"after": self._source_error})
                self._source_error = ""
            m.answer_bytes.inc(snap.answer_bytes)
            delivered = True
            result = self.tracker.apply(snap)
            outcome.result = result
            m.changed_nodes.inc(result.changed)
            m.rule_config_mismatch.set(1 if result.rule_hash_mismatch else 0)
        m.nodes.set(result.nodes)
        m.stale_nodes.set(result.stale)
        m.lagging_nodes.set(result.lagging)
        view = self.tracker.view()
        if self.file_sink is not None:
            try:
                written = self.file_sink.write(view, self.tracker.last_seen)
                m.file_bytes.inc(written)
                m.object_bytes.set(self.file_sink.largest_object)
                m.set_layout(self.file_sink.chooser.current)
                m.object_over_limit.set(1 if self.file_sink.chooser.over_limit else 0)
            except OSError as exc:
                delivered = False
                m.errors.labels("file_write").inc()
                outcome = Outcome(False, f"cannot write {self.file_sink.target}: {exc}", result)
        if self.kube_sink is not None:
            api = self.kube_sink.api.stats
            before_bytes, before = api.bytes, dict(api.writes)
            synced = await self.kube_sink.write(view)
            for verb, count in api.writes.items():
                m.api_writes.labels(verb).inc(count - before.get(verb, 0))
            m.api_bytes.inc(api.bytes - before_bytes)
            for kind in synced.errors:
                m.errors.labels(f"api_{kind}").inc()
            if synced.layout:
                m.set_layout(synced.layout)
            m.object_bytes.set(self.kube_sink.largest_object(view.entries))
            m.object_over_limit.set(1 if self.kube_sink.chooser.over_limit else 0)
            if synced.errors or synced.skipped:
                delivered = False
            if synced.errors and outcome.ok:
                outcome = Outcome(
                    False, f"Kubernetes API write failed: {', '.join(synced.errors)}", result
                )
        if delivered:
            m.last_sync.set(at)
        return self._done(outcome, cpu0, wall0)

    def _done(self, outcome: Outcome, cpu0: float, wall0: float) -> Outcome:
        self.metrics.cycle_seconds.observe(time.perf_counter() - wall0)
        self.metrics.cycle_cpu.inc(time.process_time() - cpu0)
        return outcome


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
    file_sink = FileSink(args.output, chooser) if args.output is not None else None
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
    kube_sink = (
        KubeSink(
            ReportApi(api_client, timeout=args.api_timeout),
            chooser,
            may_write=elector.is_leader if elector is not None else (lambda: True),
        )
        if api_client is not None
        else None
    )
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
                file_sink=file_sink,
                kube_sink=kube_sink,
                live_within=args.live_within,
                refresh_after=args.refresh_after,
            )
            if args.once:
                outcome = await reporter.cycle()
                if not outcome.ok:
                    print(f"mco-reporter: {outcome.message}", file=sys.stderr)
                    return 1
                return 0
            if listen is not None:
                runner = await serve(
                    metrics, *listen, tls.server_context() if tls.enabled else None
                )
            return await _loop(reporter, elector, args.interval, metrics)
    finally:
        if runner is not None:
            await runner.cleanup()
        if api_client is not None:
            await api_client.close()


def settle_memory() -> None:
    """After the first cycle (the whole fleet read and written once): move what survives into
    the permanent generation, so full garbage collections stop walking every node's entry.
    Allocation per cycle is then mostly untracked (msgspec structs with gc=False)."""
    gc.collect()
    gc.freeze()


async def _loop(
    reporter: Reporter, elector: LeaseElector | None, interval: float, metrics: ReporterMetrics
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    campaign = asyncio.create_task(elector.run()) if elector is not None else None
    if elector is None:
        metrics.leader.set(1)
    leading = settled = False
    next_at = time.monotonic()
    try:
        while not stop.is_set():
            now_leading = elector.is_leader() if elector is not None else True
            if leading and not now_leading:
                log.info("not the leader any more: stop writing")
                reporter.reset()
            leading = now_leading
            if leading:
                outcome = await reporter.cycle()
                if not outcome.ok:
                    log.debug("cycle failed", extra={"err": outcome.message})
                if not settled and outcome.ok:
                    settle_memory()
                    settled = True
            next_at += interval
            delay = next_at - time.monotonic()
            if delay < 0:
                next_at = time.monotonic()
                delay = 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
    finally:
        if campaign is not None:
            campaign.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await campaign
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
