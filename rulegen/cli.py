"""``mco-rulegen``: render the detection model's rules, run the hot-update controller, or roll
the DetectionRuleConfig back to an accepted spec."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from mco import webserver
from mco.flags import FlagError, duration
from mco.kubeconfig import api_client
from mco.latency_buckets import parse_bounds
from mco.leader import LeaseElector, add_leader_flags
from mco.logs import add_log_flags
from mco.promql import PromQLClient, SourceConfig, SourceError
from mco.settings import (
    LeaderSettings,
    LogSettings,
    Parser,
    add_web_flags,
    deprecated,
    fail,
    leader_settings,
    log_settings,
    one_line,
    parse,
    start_logging,
    web_settings,
)
from mco.source_flags import add_source_flags, source_config
from mco.webconfig import WebSettings
from rulegen import guard, history, recommend
from rulegen.controller import ControllerMetrics, ControllerSettings, RuleConfigController
from rulegen.durations import format_duration
from rulegen.latency import buckets_flag
from rulegen.model import DEFAULT_NAME, ConfigError, DetectionRuleConfig, load_config
from rulegen.render import (
    DEFAULT_ENGINE,
    ENGINES,
    Engine,
    render_prometheusrule,
    render_rules,
)
from rulegen.rollback import RollbackError, rollback

DEFAULT_LISTEN = ":9850"
log = logging.getLogger("mco.rulegen")


def _labels(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise FlagError(f"expected key=value, got {pair!r}")
        out[key] = value
    return out


def add_engine_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=DEFAULT_ENGINE,
        help="the rule engine that evaluates the rules (default prometheus): prometheus reads "
        "series recorded earlier in the same evaluation over half an interval; "
        "victoriametrics (vmalert, or any ruler reading its results back through a query API) "
        "reads them over the lookback",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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
    add_engine_flag(render)

    buckets = sub.add_parser(
        "buckets",
        help="print the exporter's --collector.biolatency.buckets for a DetectionRuleConfig",
    )
    buckets.add_argument("--config", type=Path, help="DetectionRuleConfig YAML (default: built-in)")

    ctl = sub.add_parser("controller", help="watch the DetectionRuleConfig, apply the rules")
    ctl.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, else ~/.kube/config)"
    )
    ctl.add_argument("--context", help="kubeconfig context")
    add_web_flags(ctl, default_listen=DEFAULT_LISTEN)
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
    add_engine_flag(ctl)
    ctl.add_argument(
        "--exporter-latency-buckets",
        default="all",
        metavar="BOUNDS",
        help="the exporters' --collector.biolatency.buckets (default all): an accepted config "
        "whose latency thresholds need others says so in its status and "
        "mco_rulegen_latency_buckets_missing",
    )
    ctl.add_argument(
        "--resync",
        type=duration,
        default=300.0,
        metavar="DURATION",
        help="re-read and re-apply period (default 5m)",
    )
    ctl.add_argument(
        "--history-limit",
        type=int,
        default=history.DEFAULT_LIMIT,
        metavar="N",
        help="accepted specs kept in status.history for rollback (default %(default)s)",
    )
    ctl.add_argument(
        "--guard.max-filtered-share",
        dest="guard_max_filtered_share",
        type=float,
        default=guard.DEFAULT_MAX_SHARE,
        metavar="SHARE",
        help="reject a new spec whose hard constraints would filter, or whose warn or critical "
        "thresholds would catch, more than this share of the nodes now (needs "
        "--prometheus-url; default 0.5)",
    )
    add_source_flags(
        ctl,
        required=False,
        url_help="PromQL API the guard reads the live data from (default: no guard)",
    )
    # The reporter's flags, spelled the same: only the replica holding the Lease writes.
    add_leader_flags(
        ctl,
        lease_name="mco-rulegen",
        what="apply and write status",
    )

    back = sub.add_parser(
        "rollback", help="restore an accepted DetectionRuleConfig spec from its history"
    )
    back.add_argument(
        "--to-generation",
        type=int,
        metavar="N",
        help="the generation to restore (default: the last accepted one before the rules in force)",
    )
    back.add_argument("--config-name", default=DEFAULT_NAME, help="DetectionRuleConfig name")
    back.add_argument("--kubeconfig", help="kubeconfig file (default: ~/.kube/config)")
    back.add_argument("--context", help="kubeconfig context")
    rec = sub.add_parser(
        "recommend", help="propose thresholds from the engine's history (and replay them)"
    )
    add_source_flags(rec, required=True, url_help="PromQL API holding the exporters' history")
    rec.add_argument(
        "--range",
        type=duration,
        default=7 * 86400.0,
        metavar="DURATION",
        help="how far back to look (default 7d)",
    )
    rec.add_argument(
        "--step",
        type=duration,
        default=60.0,
        metavar="DURATION",
        help="resolution of the history (default 1m)",
    )
    rec.add_argument(
        "--window",
        type=duration,
        metavar="DURATION",
        help="smoothing window of the signals (default: the config's window; widen it for "
        "history scraped less often than twice per window)",
    )
    rec.add_argument(
        "--min-history",
        type=duration,
        default=recommend.MIN_HISTORY,
        metavar="DURATION",
        help="refuse below this much history in the range, any node reporting (default 1d: "
        "one daily cycle of load)",
    )
    rec.add_argument(
        "--min-node-history",
        type=duration,
        default=recommend.MIN_NODE_HISTORY,
        metavar="DURATION",
        help="leave out nodes seen for less than this in the range, and refuse when none is "
        "left (default 6h)",
    )
    rec.add_argument(
        "--config", type=Path, help="the DetectionRuleConfig in force (default: built-in)"
    )
    rec.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    rec.add_argument(
        "--replay",
        action="store_true",
        help="also replay the current and the proposed configs over the same history",
    )
    for p in (render, buckets, ctl, back, rec):
        add_log_flags(p)
    return parser


@dataclass(frozen=True, slots=True)
class RenderSettings:
    """``mco-rulegen render``: which rules, in which shape, where."""

    config: Path | None = None  # None: the built-in DetectionRuleConfig
    format: str = "rules"
    output: str = "-"
    generation: int = 0
    name: str = "mco-rules"
    namespace: str = "monitoring"
    labels: Mapping[str, str] = field(default_factory=dict)
    engine: Engine = DEFAULT_ENGINE
    log: LogSettings = field(default_factory=LogSettings)


@dataclass(frozen=True, slots=True)
class BucketsSettings:
    """``mco-rulegen buckets``: the latency buckets a DetectionRuleConfig needs."""

    config: Path | None = None  # None: the built-in DetectionRuleConfig
    log: LogSettings = field(default_factory=LogSettings)


@dataclass(frozen=True, slots=True)
class ControllerCommand:
    """``mco-rulegen controller``: what to watch and apply, how to serve, how to lead."""

    web: WebSettings
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    kubeconfig: str | None = None
    context: str | None = None
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    log: LogSettings = field(default_factory=LogSettings)
    deprecated: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RollbackCommand:
    """``mco-rulegen rollback``: which object, to which generation, through which cluster."""

    config_name: str = DEFAULT_NAME
    to_generation: int | None = None
    kubeconfig: str | None = None
    context: str | None = None
    log: LogSettings = field(default_factory=LogSettings)


@dataclass(frozen=True, slots=True)
class RecommendCommand:
    """``mco-rulegen recommend``: which history, judged against which config, written where."""

    source: SourceConfig
    range_seconds: float
    step: float
    window: int | None  # None: the config's
    config: Path | None = None
    output: str = "-"
    replay: bool = False
    min_history: float = recommend.MIN_HISTORY
    min_node_history: float = recommend.MIN_NODE_HISTORY
    log: LogSettings = field(default_factory=LogSettings)


Command = RenderSettings | BucketsSettings | ControllerCommand | RollbackCommand | RecommendCommand


def settings_from_args(args: argparse.Namespace) -> Command:
    if args.command == "render":
        return RenderSettings(
            config=args.config,
            format=args.format,
            output=args.output,
            generation=args.generation,
            name=args.name,
            namespace=args.namespace,
            labels=_labels(args.label),
            engine=args.engine,
            log=log_settings(args),
        )
    if args.command == "buckets":
        return BucketsSettings(config=args.config, log=log_settings(args))
    if args.command == "recommend":
        source = source_config(args)
        if source is None:
            raise ValueError("--prometheus-url is required")
        if args.step <= 0 or args.range < args.step:
            raise ValueError("--step must be positive and --range at least one step")
        if args.window is not None and (args.window < 1 or args.window != int(args.window)):
            raise ValueError("--window must be whole seconds, at least 1s")
        for flag, value in (
            ("--min-history", args.min_history),
            ("--min-node-history", args.min_node_history),
        ):
            if value > args.range:
                raise ValueError(f"{flag} is longer than --range: lower it, or widen the range")
        return RecommendCommand(
            source=source,
            range_seconds=args.range,
            step=args.step,
            window=None if args.window is None else int(args.window),
            config=args.config,
            output=args.output,
            replay=args.replay,
            min_history=args.min_history,
            min_node_history=args.min_node_history,
            log=log_settings(args),
        )
    if args.command == "rollback":
        return RollbackCommand(
            config_name=args.config_name,
            to_generation=args.to_generation,
            kubeconfig=args.kubeconfig,
            context=args.context,
            log=log_settings(args),
        )
    if args.resync <= 0:
        raise ValueError("--resync must be positive")
    if not 1 <= args.history_limit <= history.MAX_LIMIT:
        raise ValueError(f"--history-limit must be within 1..{history.MAX_LIMIT}")
    if not 0 < args.guard_max_filtered_share <= 1:
        raise ValueError("--guard.max-filtered-share must be within (0, 1]")
    source = source_config(args)
    return ControllerCommand(
        web=web_settings(args),
        controller=ControllerSettings(
            rule_name=args.prometheusrule_name,
            rule_namespace=args.prometheusrule_namespace,
            rule_labels=_labels(args.prometheusrule_label),
            engine=args.engine,
            config_name=args.config_name,
            resync_seconds=args.resync,
            history_limit=args.history_limit,
            exporter_buckets=parse_bounds(args.exporter_latency_buckets),
            guard=None
            if source is None
            else guard.GuardSettings(source, max_filtered_share=args.guard_max_filtered_share),
        ),
        kubeconfig=args.kubeconfig,
        context=args.context,
        leader=leader_settings(args),
        log=log_settings(args),
        deprecated=deprecated(args),
    )


def parse_settings(argv: Sequence[str] | None) -> Command:
    """The flags as one settings object; a bad one exits 2 with a one-line reason."""
    return parse(build_parser(), argv, settings_from_args)


def cmd_render(s: RenderSettings) -> int:
    try:
        config = load_config(s.config) if s.config else DetectionRuleConfig.default()
        if s.format == "rules":
            text = render_rules(config, generation=s.generation, engine=s.engine)
        else:
            text = render_prometheusrule(
                config,
                name=s.name,
                namespace=s.namespace,
                labels=dict(s.labels),
                generation=s.generation,
                engine=s.engine,
            )
    except (ConfigError, ValueError) as exc:
        print(f"mco-rulegen: {exc}", file=sys.stderr)
        return 1
    return _write(text, s.output)


def _write(text: str, output: str) -> int:
    """``text`` to stdout (``-``) or the file ``output``; 1 with one line when it cannot."""
    if output == "-":
        sys.stdout.write(text)
        return 0
    try:
        Path(output).write_text(text)
    except OSError as exc:
        print(f"mco-rulegen: cannot write {output}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


async def cmd_recommend(command: RecommendCommand) -> int:
    try:
        config = load_config(command.config) if command.config else DetectionRuleConfig.default()
    except (ConfigError, ValueError) as exc:
        return fail("mco-rulegen", f"--config: {exc}")
    window = command.window or config.window
    end = time.time()
    start = end - command.range_seconds
    try:
        async with PromQLClient(command.source) as client:
            seen = await recommend.coverage(client, start=start, end=end, step=command.step)
            kept = recommend.check_history(
                seen,
                range_seconds=command.range_seconds,
                min_history=command.min_history,
                min_node_history=command.min_node_history,
            )
            proposals = await recommend.recommend(
                client,
                config,
                start=start,
                end=end,
                step=command.step,
                window=window,
                only=kept,
                min_samples=math.ceil(command.min_node_history / command.step),
            )
            try:
                proposed = recommend.proposed_config(config, proposals)
            except ConfigError as exc:
                return fail("mco-rulegen", f"the proposal does not validate: {exc}")
            verdict = await guard.check(guard.GuardSettings(command.source), proposed)
            replays = None
            if command.replay:
                replays = (
                    await recommend.replay(
                        client, config, start=start, end=end, step=command.step, window=window
                    ),
                    await recommend.replay(
                        client, proposed, start=start, end=end, step=command.step, window=window
                    ),
                )
    except SourceError as exc:
        print(f"mco-rulegen: {one_line(exc.message)}", file=sys.stderr)
        return 1
    except recommend.HistoryTooShort as exc:
        print(f"mco-rulegen: {exc}", file=sys.stderr)
        return 1
    left_out = sorted(set(seen.per_node) - kept)
    header = [
        f"Proposed by mco-rulegen recommend from {client.where} over the last "
        f"{format_duration(int(command.range_seconds))} at {command.step:g}s steps, "
        f"signals over {format_duration(window)} windows, from "
        f"{format_duration(int(seen.total))} of history on {len(kept)} nodes.",
        *(
            [
                f"Left out, seen for less than {format_duration(int(command.min_node_history))}"
                f": {', '.join(left_out)}."
            ]
            if left_out
            else []
        ),
        "Guard, as the controller would run it on applying this now: "
        + (("passes: " if verdict.allowed else "REJECTS it: ") if verdict.checked else "")
        + f"{verdict.message}.",
    ]
    text = recommend.patch_yaml(proposals, header)
    if replays is not None:
        text += "# Replay over the same history, current → proposed (node-seconds):\n"
        text += "".join(f"#   {line}\n" for line in recommend.replay_table(*replays))
    return _write(text, command.output)


async def cmd_rollback(command: RollbackCommand) -> int:
    try:
        api = await api_client(command.kubeconfig, command.context)
    except Exception as exc:  # the client raises ConfigException, OSError, yaml errors, ...
        return fail("mco-rulegen", f"no Kubernetes API configuration: {exc}")
    try:
        restored = await rollback(
            api, name=command.config_name, to_generation=command.to_generation
        )
    except RollbackError as exc:
        return fail("mco-rulegen", str(exc))
    except ApiException as exc:
        print(f"mco-rulegen: the API server refused: {exc.status} {exc.reason}", file=sys.stderr)
        return 1
    finally:
        await api.close()
    print(
        f"DetectionRuleConfig {command.config_name}: restored the spec of generation "
        f"{restored.from_generation} (was generation {restored.previous_generation}); "
        "the controller validates and applies it"
    )
    return 0


def cmd_buckets(s: BucketsSettings) -> int:
    try:
        config = load_config(s.config) if s.config else DetectionRuleConfig.default()
    except (ConfigError, ValueError) as exc:
        print(f"mco-rulegen: {exc}", file=sys.stderr)
        return 1
    print(buckets_flag(config))
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


async def run_controller(command: ControllerCommand) -> int:
    settings, web_ = command.controller, command.web
    try:
        api = await api_client(command.kubeconfig, command.context)
    except Exception as exc:  # the client raises ConfigException, OSError, yaml errors, ...
        return fail("mco-rulegen", f"no Kubernetes API configuration: {exc}")
    identity = command.leader.identity
    # Audit logs (and the HA test) tell the replicas apart by this.
    api.user_agent = f"mco-rulegen ({identity})"
    elector = (
        LeaseElector(api, **command.leader.elector_kwargs()) if command.leader.enabled else None
    )
    metrics = ControllerMetrics()
    controller = RuleConfigController(api, settings, metrics, elector)
    try:
        runner = await webserver.start(make_metrics_app(metrics, controller), web_)
    except OSError as exc:
        log.error("cannot serve metrics", extra={"address": web_.address, "err": str(exc)})
        await api.close()
        return 1
    log.info(
        "controller started",
        extra={
            "metrics": f"{web_.config.scheme}://{web_.address}/metrics",
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
    settings = parse_settings(argv)
    if isinstance(settings, RenderSettings):
        start_logging(settings.log)
        return cmd_render(settings)
    if isinstance(settings, BucketsSettings):
        start_logging(settings.log)
        return cmd_buckets(settings)
    if isinstance(settings, RecommendCommand):
        start_logging(settings.log)
        return asyncio.run(cmd_recommend(settings))
    if isinstance(settings, RollbackCommand):
        start_logging(settings.log)
        return asyncio.run(cmd_rollback(settings))
    start_logging(settings.log, settings.deprecated)
    return asyncio.run(run_controller(settings))


if __name__ == "__main__":
    sys.exit(main())
