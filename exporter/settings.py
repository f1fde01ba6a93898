"""``mco-exporter``'s settings: its flags, parsed once into one frozen object."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.paths import Paths
from exporter.registry import CollectorSpec
from mco.settings import LogSettings, deprecated, log_settings, web_settings
from mco.webconfig import WebSettings


@dataclass(frozen=True, slots=True)
class ExporterSettings:
    web: WebSettings
    paths: Paths = field(default_factory=Paths)
    node_name: str = ""
    collectors: tuple[str, ...] = ()  # enabled, by name
    options: Mapping[str, str] = field(default_factory=dict)  # "collector.option" -> value
    log: LogSettings = field(default_factory=LogSettings)
    deprecated: tuple[str, ...] = ()

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, all_specs: Mapping[str, CollectorSpec]
    ) -> ExporterSettings:
        flags = vars(args)
        return cls(
            web=web_settings(args),
            paths=Paths(
                procfs=args.procfs, sysfs=args.sysfs, rootfs=args.rootfs, cgroupfs=args.cgroupfs
            ),
            node_name=args.node_name,
            collectors=tuple(n for n in all_specs if flags[f"collector_{n}"]),
            options={
                key.removeprefix("option_"): value
                for key, value in flags.items()
                if key.startswith("option_")
            },
            log=log_settings(args),
            deprecated=deprecated(args),
        )
