"""Whether this node can run Kata Containers: a shim binary on the host and a KVM device."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import GaugeMetricFamily

from exporter.registry import CollectorConfig, FileCollector, Option, register

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

DEFAULT_SHIMS = ",".join(
    (
        "/usr/bin/containerd-shim-kata-v2",
        "/usr/local/bin/containerd-shim-kata-v2",
        "/opt/kata/bin/containerd-shim-kata-v2",  # where kata-deploy installs it
    )
)
KVM_DEVICE = "/dev/kvm"


@register(
    "kata",
    default_enabled=True,
    help="Kata runtime readiness (shim present and /dev/kvm a device)",
    options=(Option("shim-paths", DEFAULT_SHIMS, "comma-separated host paths of the Kata shim"),),
)
class KataCollector(FileCollector):
    def __init__(self, config: CollectorConfig) -> None:
        paths = config.paths
        self._shims = [paths.root(p) for p in config.option("shim-paths").split(",") if p.strip()]
        self._kvm = paths.root(KVM_DEVICE)

    def update(self) -> list[Metric]:
        shim = any(os.path.isfile(p) and os.access(p, os.X_OK) for p in self._shims)
        try:
            kvm = stat.S_ISCHR(os.stat(self._kvm).st_mode)
        except OSError:
            kvm = False
        return [
            GaugeMetricFamily(
                "mco_kata_runtime_ready",
                "1 when a Kata shim is installed on the host and /dev/kvm exists, else 0.",
                value=1.0 if shim and kvm else 0.0,
            )
        ]
