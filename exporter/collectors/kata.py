"""Whether this node can run Kata Containers: a shim binary on the host and a KVM device.

The KVM device is found either as ``/dev/kvm`` under the rootfs or as the kvm misc device in
sysfs, which the kernel registers exactly when it creates ``/dev/kvm``. The chart mounts only
the shim directories under the rootfs, never the host's ``/dev`` (its ``/dev/shm`` holds other
pods' shared memory, and a hostPath of ``/dev/kvm`` cannot be optional), so in a pod the sysfs
entry is what answers.
"""

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
KVM_SYSFS = ("class", "misc", "kvm", "dev")  # "10:232" while the kvm module is loaded


@register(
    "kata",
    default_enabled=True,
    help="Kata runtime readiness (shim present and /dev/kvm a device, or kvm in sysfs)",
    options=(Option("shim-paths", DEFAULT_SHIMS, "comma-separated host paths of the Kata shim"),),
)
class KataCollector(FileCollector):
    def __init__(self, config: CollectorConfig) -> None:
        paths = config.paths
        self._shims = [paths.root(p) for p in config.option("shim-paths").split(",") if p.strip()]
        self._kvm = paths.root(KVM_DEVICE)
        self._kvm_sysfs = paths.sys(*KVM_SYSFS)

    def update(self) -> list[Metric]:
        shim = any(os.path.isfile(p) and os.access(p, os.X_OK) for p in self._shims)
        try:
            kvm = stat.S_ISCHR(os.stat(self._kvm).st_mode)
        except OSError:
            kvm = False
        kvm = kvm or os.path.isfile(self._kvm_sysfs)
        return [
            GaugeMetricFamily(
                "mco_kata_runtime_ready",
                "1 when a Kata shim is installed on the host and /dev/kvm exists, else 0.",
                value=1.0 if shim and kvm else 0.0,
            )
        ]
