"""The contention model: what a node's pods do to its host signals (docs/placement-model.md).

Small on purpose: it is the benchmark's yardstick, not MCO's detection. I/O and memory are
interpolated between points measured on this machine (``measured.json``, written by
``bench.placement.measure``); the LLC miss ratio, which this VM cannot measure (no PMU), follows
a cited analytic model. Everything here is a pure function of a node's load.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

MEASURED = Path(__file__).with_name("measured.json")

# The simulated node (docs/placement-model.md, "The node": each value's source or reason).
# A general-purpose cloud node: 4 GiB per vCPU, taken as 16 cores.
NODE_CPU = 16.0  # cores
NODE_MEMORY = 64.0  # GiB
# 16 cores' share of a current server CPU's L3: 1.4 MB per core (Xeon 8280) to 4 MB (EPYC Rome).
LLC_MB = 32.0
# LLC model: compulsory/conflict misses of a node whose working sets fit (m0), and the share
# of the sum of footprints beyond the cache that misses (uniform reuse, fully associative LRU:
# hit ratio C/F when the footprint F exceeds the capacity C). m0 is a stated choice: below a
# whole server's measured 17 % (bcc's llcstat example), above the very low ratios of half of
# SPEC CPU (Navarro-Torres et al. 2019).
LLC_BASE_MISS = 0.1
# P: an LLC miss (a DRAM load) costs P LLC hits: ~113 ns against ~10.3 ns on EPYC Rome
# (AnandTech's latency test), so a wholly memory-bound pod's time goes as 1 + (P-1) m.
MISS_COST = 11.0
# The most any modeled slowdown may be: a stalled share p = 0.9 (1/(1-p) = 10), beyond every
# point measured (PSI io some 0.82 at 8 writers); past it 1/(1-p) diverges on nothing measured.
INFLATION_CAP = 10.0


@dataclass(frozen=True)
class Curve:
    """Piecewise-linear through measured (x, y) points, flat beyond the last one."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    def __call__(self, x: float) -> float:
        if x <= self.xs[0]:
            return self.ys[0]
        if x >= self.xs[-1]:
            return self.ys[-1]
        i = bisect.bisect_right(self.xs, x)
        x0, x1, y0, y1 = self.xs[i - 1], self.xs[i], self.ys[i - 1], self.ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def curve(points: Sequence[dict[str, Any]], x: str, y: str, *, monotone: bool = True) -> Curve:
    """A curve of ``y`` against ``x``; ``monotone`` takes the running maximum, so adding load
    never makes a node look quieter. Where the measurement falls (io full, mean latency past
    one writer), it is the aggressors' own mix that changes, not a victim that gets faster
    (docs/placement-model.md)."""
    pts = sorted((float(p[x]), max(0.0, min(1.0, float(p[y])))) for p in points)
    ys: list[float] = []
    for _, v in pts:
        ys.append(max(v, ys[-1]) if monotone and ys else v)
    return Curve(tuple(p[0] for p in pts), tuple(ys))


@dataclass(frozen=True)
class Model:
    psi_io_some: Curve  # against stress-ng --hdd writers (I/O demand units)
    psi_io_full: Curve
    block_latency: Curve  # mean request latency, seconds (diskstats)
    psi_memory_some: Curve  # against working set over the memory left for it
    psi_memory_full: Curve


def load(path: Path = MEASURED) -> Model:
    data = json.loads(path.read_text())
    io, memory = data["io"], data["memory"]["points"]
    x_io, x_mem = "hdd_workers", "working_set_over_limit"
    # Monotone too: the diskstats mean averages over the writers' own (merged) requests.
    latency = sorted((float(p[x_io]), float(p["block_latency_mean_seconds"])) for p in io)
    lat: list[float] = []
    for _, v in latency:
        lat.append(max(v, lat[-1]) if lat else v)
    return Model(
        psi_io_some=curve(io, x_io, "psi_io_some"),
        psi_io_full=curve(io, x_io, "psi_io_full"),
        block_latency=Curve(tuple(p[0] for p in latency), tuple(lat)),
        psi_memory_some=curve(memory, x_mem, "psi_memory_some"),
        psi_memory_full=curve(memory, x_mem, "psi_memory_full"),
    )


@cache
def default_model() -> Model:
    return load()


@dataclass(frozen=True)
class NodeKind:
    """A node type (docs/placement-model.md, "Node types"): its LLC and how fast its disk is
    against the disk the I/O curves were measured on (``disk_speed`` 4: one writer there loads
    it as a quarter writer loads the measured one)."""

    name: str
    llc_mb: float = LLC_MB
    disk_speed: float = 1.0


STANDARD = NodeKind("standard")
# ``mixed-nodes``: two node types, each better at one resource. 16 cores' share of each CPU's
# L3: Xeon Platinum 8280, 38.5 MB for 28 cores (1.375 MB a core, Intel ARK) -> 22 MB; EPYC 7002
# (Rome), 16 MB per 4-core CCX (4 MB a core, AMD) -> 64 MB. Disks: AWS EBS gp3 gives 125 MiB/s
# at baseline and up to 1,000 MiB/s provisioned (AWS EBS volume types); the fast type's disk is
# provisioned at 500 MiB/s, 4x the baseline taken as the measured disk.
LARGE_CACHE = NodeKind("large-llc", llc_mb=64.0, disk_speed=1.0)
FAST_DISK = NodeKind("fast-disk", llc_mb=22.0, disk_speed=4.0)


@dataclass(frozen=True)
class Demand:
    """What one running pod adds to its node."""

    cpu: float = 0.0  # cores requested
    memory: float = 0.0  # GiB requested (anonymous, counted by resource fit)
    io: float = 0.0  # I/O demand in stress-ng --hdd writers
    cache_mb: float = 0.0  # LLC footprint
    page_cache_gib: float = 0.0  # file working set beyond its request


@dataclass(frozen=True)
class Signals:
    """A node's host signals, as rates and ratios the exporter's series encode."""

    psi_io_some: float
    psi_io_full: float
    block_latency_seconds: float
    psi_memory_some: float
    psi_memory_full: float
    llc_miss_ratio: float
    memory_available_ratio: float


def llc_miss_ratio(footprint_mb: float, llc_mb: float = LLC_MB) -> float:
    """Node-wide LLC miss ratio for the summed footprint of its pods."""
    if footprint_mb <= llc_mb:
        return LLC_BASE_MISS
    return LLC_BASE_MISS + (1 - LLC_BASE_MISS) * (1 - llc_mb / footprint_mb)


def working_set_ratio(demands: Sequence[Demand], memory_gib: float = NODE_MEMORY) -> float:
    """Page-cache working set over the memory the requests leave for it (0 if none wanted)."""
    wanted = sum(d.page_cache_gib for d in demands)
    if wanted <= 0:
        return 0.0
    left = max(memory_gib - sum(d.memory for d in demands), 0.5)
    return wanted / left


def signals(
    demands: Sequence[Demand], model: Model | None = None, kind: NodeKind = STANDARD
) -> Signals:
    m = model or default_model()
    # A disk ``disk_speed`` times as fast is as busy with this demand as the measured one with
    # demand / disk_speed (utilisation is demand over capacity).
    io = sum(d.io for d in demands) / kind.disk_speed
    ws = working_set_ratio(demands)
    return Signals(
        psi_io_some=m.psi_io_some(io),
        psi_io_full=m.psi_io_full(io),
        block_latency_seconds=m.block_latency(io),
        psi_memory_some=m.psi_memory_some(ws),
        psi_memory_full=m.psi_memory_full(ws),
        llc_miss_ratio=llc_miss_ratio(sum(d.cache_mb for d in demands), kind.llc_mb),
        memory_available_ratio=max(0.0, 1 - min(1.0, sum(d.memory for d in demands) / NODE_MEMORY)),
    )


def inflation(sensitive_to: str, s: Signals) -> float:
    """Modeled slowdown of an online pod sensitive to one resource (a mean stretch of its work;
    the benchmark takes percentiles of it: `slowdown p99`, `qos kept`).

    I/O and memory: a pod that stalls a share p of its time on the resource takes 1/(1-p) as
    long (PSI some is exactly that share for the tasks that wait). Cache: a hit costs 1 and a
    miss ``MISS_COST`` (P), so a wholly memory-bound pod (an upper bound) takes
    (1 + (P-1) m) / (1 + (P-1) m0) as long at the node's miss ratio m as at the base m0.
    Each is capped at ``INFLATION_CAP``.
    """
    if sensitive_to == "io":
        stall = s.psi_io_some
    elif sensitive_to == "memory":
        stall = s.psi_memory_some
    elif sensitive_to == "cache":
        m = max(s.llc_miss_ratio, LLC_BASE_MISS)
        slowdown = (1 + (MISS_COST - 1) * m) / (1 + (MISS_COST - 1) * LLC_BASE_MISS)
        return min(INFLATION_CAP, slowdown)
    else:
        raise ValueError(f"unknown resource {sensitive_to!r}")
    return min(INFLATION_CAP, 1 / max(1 - stall, 1 / INFLATION_CAP))
