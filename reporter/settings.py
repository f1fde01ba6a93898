"""``mco-reporter``'s settings: its flags, parsed once into one frozen object."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from mco.promql import SourceConfig
from mco.settings import (
    LeaderSettings,
    LogSettings,
    deprecated,
    leader_settings,
    log_settings,
    web_settings,
)
from mco.source_flags import source_configs
from mco.webconfig import WebSettings
from reporter.layout import DEFAULT_MAX_BYTES, LayoutMode
from reporter.tiers import TierRule


@dataclass(frozen=True, slots=True)
class TaintSettings:
    """The taint mode's pace (``reporter.taints``)."""

    qps: float = 5.0
    burst: int = 10
    resync: float = 600.0  # seconds between full Node lists; 0: only at a leader term's start
    max_share: float = 0.5  # of the Nodes tainted at once (reporter.taints.DEFAULT_MAX_SHARE)


def taint_settings(args: argparse.Namespace) -> TaintSettings | None:
    if not args.taint_nodes:
        return None
    if args.output is not None:
        raise ValueError(
            "--taint-nodes patches Nodes through the Kubernetes API: not with --output"
        )
    if not args.taint_qps > 0 or args.taint_burst < 1:
        raise ValueError("--taint-qps must be positive and --taint-burst at least 1")
    if args.taint_resync < 0:
        raise ValueError("--taint-resync must not be negative")
    if not 0 < args.taint_max_share <= 1:
        raise ValueError("--taint-max-share must be above 0 and at most 1")
    return TaintSettings(args.taint_qps, args.taint_burst, args.taint_resync, args.taint_max_share)


@dataclass(frozen=True, slots=True)
class TierSettings:
    """The tier-label mode's thresholds and pace (``reporter.tiers``)."""

    rule: TierRule = field(default_factory=TierRule)
    qps: float = 5.0
    burst: int = 10
    resync: float = 600.0


def tier_settings(args: argparse.Namespace) -> TierSettings | None:
    if not args.tier_label_nodes:
        return None
    if args.output is not None:
        raise ValueError(
            "--tier-label-nodes patches Nodes through the Kubernetes API: not with --output"
        )
    if not args.tier_qps > 0 or args.tier_burst < 1:
        raise ValueError("--tier-qps must be positive and --tier-burst at least 1")
    if args.tier_resync < 0:
        raise ValueError("--tier-resync must not be negative")
    try:
        rule = TierRule(args.tier_medium_at, args.tier_high_at, args.tier_margin, args.tier_hold)
    except ValueError as exc:
        raise ValueError(f"--tier-*: {exc}") from None
    return TierSettings(rule, args.tier_qps, args.tier_burst, args.tier_resync)


@dataclass(frozen=True, slots=True)
class ReporterSettings:
    sources: tuple[SourceConfig, ...]  # one, or one per shard (the same flags, another URL)
    interval: float = 1.0
    once: bool = False
    output: str | None = None  # FILE or "-": write JSON there instead of the API
    layout: LayoutMode = "auto"
    max_object_bytes: int = DEFAULT_MAX_BYTES
    compact: bool = False
    rule_config: str | None = None
    epsilon: float = 0.01
    signal_epsilon: float = 0.05
    live_within: float | None = None
    refresh_after: float = 0.0
    profile_half_life: float = 3600.0
    profile_max_workloads: int = 500
    profile_publish_interval: float = 30.0
    kubeconfig: str | None = None
    api_timeout: float = 10.0
    taint: TaintSettings | None = None  # --taint-nodes; None: off, no Node is touched
    tiers: TierSettings | None = None  # --tier-label-nodes; None: off, no label is touched
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    web: WebSettings | None = None  # None: no self-metrics server (--web.listen-address='')
    log: LogSettings = field(default_factory=LogSettings)
    deprecated: tuple[str, ...] = ()

    @property
    def source(self) -> SourceConfig:
        """The one source, or the first shard (the flags they share)."""
        return self.sources[0]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ReporterSettings:
        sources = tuple(source_configs(args))
        if args.interval <= 0:
            raise ValueError("--interval must be positive")
        if not args.profile_half_life > 0:
            raise ValueError("--profile-half-life must be positive")
        if args.profile_max_workloads < 1:
            raise ValueError("--profile-max-workloads must be at least 1")
        if args.profile_publish_interval < 0:
            raise ValueError("--profile-publish-interval must not be negative")
        return cls(
            sources=sources,
            interval=args.interval,
            once=args.once,
            output=args.output,
            layout=args.layout,
            max_object_bytes=args.max_object_bytes,
            compact=args.compact,
            rule_config=args.rule_config,
            epsilon=args.epsilon,
            signal_epsilon=args.signal_epsilon,
            live_within=args.live_within,
            refresh_after=args.refresh_after,
            profile_half_life=args.profile_half_life,
            profile_max_workloads=args.profile_max_workloads,
            profile_publish_interval=args.profile_publish_interval,
            kubeconfig=args.kubeconfig,
            api_timeout=args.api_timeout,
            taint=taint_settings(args),
            tiers=tier_settings(args),
            leader=leader_settings(args),
            web=web_settings(args) if args.listen else None,
            log=log_settings(args),
            deprecated=deprecated(args),
        )
