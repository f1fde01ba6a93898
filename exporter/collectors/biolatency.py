"""Block I/O latency histogram from eBPF (bcc), by device (and operation, on request).

The BPF program is compiled once at start-up; each scrape only walks its histogram map, which
counts per device and operation. By default the operations are summed into one histogram per
device: the detection model sums them anyway (a pod waits for its flushes as much as for its
reads), and the rules' cost grows with the series they read. Without
bcc, kernel headers, tracefs or the privilege to load BPF, the collector turns off with the
reason, and the ``diskstats`` collector carries the block-latency signal instead.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import HistogramMetricFamily

from exporter.compiler_memory import captured_output, release_compiler_memory
from exporter.errors import UnavailableError
from exporter.paths import Paths, read_text
from exporter.registry import CollectorConfig, Option, parse_switch, register
from mco.latency_buckets import BOUNDS, SLOTS, parse_bounds

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

PROGRAM = Path(__file__).with_name("biolatency.bpf.c")
OPERATIONS = ("read", "write", "discard", "flush", "other")
# Bucket bounds it can export: 2^k microseconds for k in [MIN_SLOT, MAX_SLOT] (8 us .. ~8.4 s).
BUCKET_BOUNDS = BOUNDS
# The ones exported by default, and +Inf: those the default DetectionRuleConfig's latency
# thresholds need (`mco-rulegen buckets`; tests/test_latency_buckets.py keeps the two equal).
DEFAULT_BUCKETS = "0.016384,0.032768,0.065536,0.131072,0.262144"
# tracefs under --path.sysfs: its own mount (4.1+), else inside debugfs (older kernels).
TRACEFS_UNDER_SYSFS = (("kernel", "tracing"), ("kernel", "debug", "tracing"))
KERNEL_SOURCE_ENV = "BCC_KERNEL_SOURCE"
DEFAULT_BCC_PATH = "/usr/lib/python3/dist-packages"
MINORBITS = 20  # the kernel's dev_t: major << 20 | minor
MINOR_MASK = (1 << MINORBITS) - 1


def load_bcc(fallback_dir: str) -> Any:
    """Import bcc; Debian installs it for the system python only, so also look in its dir."""
    try:
        import bcc  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        init = os.path.join(fallback_dir, "bcc", "__init__.py")
        spec = importlib.util.spec_from_file_location(
            "bcc", init, submodule_search_locations=[os.path.dirname(init)]
        )
        if spec is None or spec.loader is None or not os.path.exists(init):
            raise UnavailableError(
                f"bcc Python module not found (install python3-bpfcc; looked in {fallback_dir})"
            ) from None
        bcc = importlib.util.module_from_spec(spec)
        sys.modules["bcc"] = bcc
        try:
            spec.loader.exec_module(bcc)
        except Exception as exc:
            del sys.modules["bcc"]
            raise UnavailableError(f"bcc Python module failed to import: {exc}") from exc
    return bcc


def tracefs_dir(paths: Paths) -> str | None:
    """The tracefs directory under ``--path.sysfs`` that has the block tracepoints, or None.

    A pre-flight check for a clear reason only: bcc itself attaches through the exporter's own
    /sys/kernel/tracing (the chart mounts the host's there as well).
    """
    for parts in TRACEFS_UNDER_SYSFS:
        directory = paths.sys(*parts)
        if os.path.isdir(os.path.join(directory, "events", "block")):
            return directory
    return None


@contextlib.contextmanager
def kernel_source(path: str) -> Iterator[None]:
    """``BCC_KERNEL_SOURCE`` set to ``path`` (when given) while bcc compiles, then as it was.

    libbcc reads the headers' location with getenv() when it compiles and ``BPF()`` takes no
    argument for it, so the variable must be set; restoring it leaves the environment the
    exporter started with (and that its children inherit) unchanged.
    """
    if not path:
        yield
        return
    before = os.environ.get(KERNEL_SOURCE_ENV)
    os.environ[KERNEL_SOURCE_ENV] = path
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(KERNEL_SOURCE_ENV, None)
        else:
            os.environ[KERNEL_SOURCE_ENV] = before


def histogram_from_slots(
    slots: dict[int, int], bounds: tuple[float, ...] = BUCKET_BOUNDS
) -> tuple[list[tuple[str, float]], float]:
    """bcc log2 slots (count of latencies in [2^(s-1), 2^s) us) -> cumulative buckets, sum.

    Only ``bounds`` (each one of ``BUCKET_BOUNDS``) and +Inf are returned. The sum is estimated
    from each slot's midpoint over all slots; the buckets are exact.
    """
    buckets: list[tuple[str, float]] = []
    total = 0
    estimated_sum = 0.0
    for slot in sorted(slots):
        midpoint_us = 1.0 if slot <= 1 else 1.5 * 2 ** (slot - 1)
        estimated_sum += slots[slot] * midpoint_us / 1e6
    for bound in bounds:
        k = SLOTS[bound]
        total = sum(count for slot, count in slots.items() if slot <= k)
        buckets.append((repr(bound), float(total)))
    buckets.append(("+Inf", float(sum(slots.values()))))
    return buckets, estimated_sum


def latency_family(
    slots: Mapping[tuple[str, str], Mapping[int, int]],
    bounds: tuple[float, ...] = BUCKET_BOUNDS,
    *,
    by_operation: bool = False,
) -> HistogramMetricFamily:
    """(device, operation) -> bcc slot counts, as the exported histogram family.

    One histogram per device and operation with ``by_operation``; else one per device, its
    operations' slots added first. Exact: the buckets count slots and the sum is linear in
    them, so each summed series equals the sum of the per-operation ones.
    """
    merged: dict[tuple[str, ...], dict[int, int]] = defaultdict(dict)
    for (device, operation), counts in slots.items():
        into = merged[(device, operation) if by_operation else (device,)]
        for slot, count in counts.items():
            into[slot] = into.get(slot, 0) + count
    labels = ["device", "operation"] if by_operation else ["device"]
    family = HistogramMetricFamily(
        "mco_block_io_latency_seconds",
        "Block request latency from issue to completion (eBPF), by " + " and ".join(labels) + ".",
        labels=labels,
    )
    for key, counts in sorted(merged.items()):
        buckets, total = histogram_from_slots(counts, bounds)
        family.add_metric(list(key), buckets, total)
    return family


@register(
    "biolatency",
    default_enabled=True,
    help="block I/O latency histogram from eBPF (bcc); falls back to diskstats",
    options=(
        Option("bcc-path", DEFAULT_BCC_PATH, "directory holding the bcc Python package"),
        Option(
            "kernel-source",
            os.environ.get(KERNEL_SOURCE_ENV, ""),
            "kernel headers tree for bcc (default $BCC_KERNEL_SOURCE, else bcc's own search)",
        ),
        Option(
            "buckets",
            DEFAULT_BUCKETS,
            "bucket bounds exported, in seconds, each 2^k us (8e-06 .. 8.388608), or 'all'; "
            "the default is what the default thresholds need: `mco-rulegen buckets` prints "
            "the set for a DetectionRuleConfig",
            check=parse_bounds,
        ),
        Option(
            "by-operation",
            "false",
            "true: one histogram per device and operation (read, write, discard, flush, "
            "other); false (default): one per device, the operations summed",
            check=parse_switch,
            switch=True,
        ),
    ),
)
class BiolatencyCollector:
    def __init__(self, config: CollectorConfig) -> None:
        self._sysfs = config.paths
        self._bounds = parse_bounds(config.option("buckets"))
        self._by_operation = parse_switch(config.option("by-operation"))
        if tracefs_dir(config.paths) is None:
            looked = " or ".join(config.paths.sys(*parts) for parts in TRACEFS_UNDER_SYSFS)
            # tracefs is mode 0700: mounted but unreadable is a privilege problem, not a mount one.
            dirs = [config.paths.sys(*parts) for parts in TRACEFS_UNDER_SYSFS]
            locked = [d for d in dirs if os.path.isdir(d) and not os.access(d, os.X_OK)]
            if locked:
                raise UnavailableError(
                    f"tracefs at {locked[0]} is not readable by UID {os.geteuid()} (root-only): "
                    "run the exporter as root with CAP_BPF and CAP_PERFMON"
                )
            raise UnavailableError(
                f"tracefs is not mounted (no block tracepoints under {looked}); "
                "mount -t tracefs nodev /sys/kernel/tracing"
            )
        bcc = load_bcc(config.option("bcc-path"))
        try:
            with kernel_source(config.option("kernel-source")), captured_output() as printed:
                self._bpf = bcc.BPF(text=PROGRAM.read_bytes())
        except Exception as exc:
            # bcc prints the cause (missing headers, a compile error), not in exc.
            said = " ".join(printed.text.split()[-40:])
            raise UnavailableError(
                f"BPF program failed to load: {str(exc).strip().splitlines()[-1]}"
                + (f"; bcc said: {said}" if said else "")
                + " (kernel headers missing? set BCC_KERNEL_SOURCE; needs CAP_BPF and CAP_PERFMON)"
            ) from exc
        finally:
            release_compiler_memory()  # loaded or not, the compiler is never needed again
        self._dist = self._bpf[b"dist"]
        self._names: dict[int, str] = {}

    def _device(self, dev: int) -> str:
        name = self._names.get(dev)
        if name is None:
            major, minor = dev >> MINORBITS, dev & MINOR_MASK
            name = f"{major}:{minor}"
            try:
                uevent = read_text(self._sysfs.sys("dev", "block", f"{major}:{minor}", "uevent"))
                for line in uevent.splitlines():
                    if line.startswith("DEVNAME="):
                        name = line.removeprefix("DEVNAME=")
            except OSError:
                pass  # a device gone since: keep major:minor
            self._names[dev] = name
        return name

    def _gone(self, devs: set[int]) -> set[int]:
        """Devices no longer in ``/sys/dev/block`` (a detached volume, a removed loop device).

        Their histograms stop growing, but the kernel map (a plain hash of fixed size) would
        keep their keys for ever: on a node that attaches and detaches volumes it fills up, and
        the kernel then drops new keys, such as the first request in a slower latency slot.
        """
        block = self._sysfs.sys("dev", "block")
        if not os.path.isdir(block):
            return set()  # cannot tell: keep everything
        return {
            dev
            for dev in devs
            if dev  # 0: requests without a disk device; there is nothing to look up
            and not os.path.exists(os.path.join(block, f"{dev >> MINORBITS}:{dev & MINOR_MASK}"))
        }

    def update(self) -> list[Metric]:
        slots: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)
        keys = list(self._dist.items())
        gone = self._gone({key.dev for key, _ in keys})
        for key, value in keys:
            if key.dev in gone:
                self._dist.pop(key, None)
                continue
            operation = OPERATIONS[key.op] if key.op < len(OPERATIONS) else "other"
            counts = slots[(self._device(key.dev), operation)]
            counts[key.slot] = counts.get(key.slot, 0) + value.value
        for dev in gone:
            self._names.pop(dev, None)  # the number may come back as another device
        return [latency_family(slots, self._bounds, by_operation=self._by_operation)]

    def close(self) -> None:
        self._bpf.cleanup()
