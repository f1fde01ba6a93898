"""A synthetic fleet: one HTTP target serving many nodes' raw mco-exporter series.

Every counter grows linearly with the sample timestamp it is exposed with, so ``rate()`` over
any window is exactly its slope in any PromQL engine (Prometheus extrapolates, MetricsQL does
not: both give the slope), and gauges are constant. That makes the recorded values known in
advance (``expected_inputs``) and lets two engines be compared sample for sample. Each series
carries its own ``node`` label (the target sets none, so the label survives the scrape).
A profile declares its latency histograms per device and operation; the fleet serves them as
the exporter does by default, summed over operations (``served``), or per operation.

Run as ``python -m testkit.fleet --port P --nodes N [--profiles a,b]``
(``--latency-by-operation``: the per-operation histograms).
"""

from __future__ import annotations

import argparse
import itertools
import operator
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

from exporter.collectors.biolatency import DEFAULT_BUCKETS
from mco.latency_buckets import BOUNDS, parse_bounds
from testkit.fleet_series import Series
from testkit.fleet_series import common as _common
from testkit.fleet_series import disk as _disk
from testkit.fleet_series import memory as _memory
from testkit.fleet_series import psi as _psi
from testkit.fleet_series import series as _s

# Every bucket the exporter can export: 2^k microseconds, k = 3..23. A profile's spread is over
# all of them; the fleet serves those of ``--latency-buckets`` (default: the exporter's).
BUCKETS = BOUNDS


@dataclass(frozen=True)
class Profile:
    name: str
    series: tuple[Series, ...]


HISTOGRAM: Final = "mco_block_io_latency_seconds"


def _histogram(device: str, operation: str, rate: float, spread: Sequence[float]) -> list[Series]:
    """``rate`` requests/s with cumulative shares ``spread`` per bucket (then all), as the
    exporter's ``--collector.biolatency.by-operation`` serves them (``served`` sums them)."""
    out = []
    for i, bound in enumerate(BUCKETS):
        share = spread[i] if i < len(spread) else 1.0
        out.append(
            _s(
                "mco_block_io_latency_seconds_bucket",
                0,
                rate * share,
                device=device,
                operation=operation,
                le=repr(bound),
            )
        )
    out.append(
        _s(
            "mco_block_io_latency_seconds_bucket",
            0,
            rate,
            device=device,
            operation=operation,
            le="+Inf",
        )
    )
    out.append(
        _s("mco_block_io_latency_seconds_count", 0, rate, device=device, operation=operation)
    )
    out.append(
        _s("mco_block_io_latency_seconds_sum", 0, rate * 0.001, device=device, operation=operation)
    )
    return out


def _irq(hard: float, soft: float, busiest: float) -> list[Series]:
    """IRQ CPU-seconds per second by kind, and the busiest CPU's IRQ share (a gauge)."""
    return [
        _s("mco_cpu_irq_seconds_total", 20, hard, kind="hard"),
        _s("mco_cpu_irq_seconds_total", 300, soft, kind="soft"),
        _s("mco_cpu_irq_busiest_ratio", busiest),
    ]


def _pod(
    uid: str,
    qos: str,
    stall: dict[str, tuple[float, float]],
    *,
    usage: float = 2**20,
    limit: float | None = None,
    events: dict[str, float] | None = None,
    io: dict[str, tuple[float, float]] | None = None,
    io_limit: dict[str, tuple[float | None, float | None]] | None = None,
) -> list[Series]:
    """One pod as the cgroup collector exports it: stall slopes per resource (some, full)."""
    pod = {"pod_uid": uid, "qos": qos}
    out = []
    for resource in ("cpu", "io", "memory"):
        some, full = stall.get(resource, (0.0, 0.0))
        for kind, slope in (("some", some), ("full", full)):
            out.append(
                _s(
                    "mco_pod_pressure_stalled_seconds_total",
                    50,
                    slope,
                    **pod,
                    resource=resource,
                    kind=kind,
                )
            )
    for event in ("max", "high", "oom_kill"):
        out.append(
            _s("mco_pod_memory_events_total", 3, (events or {}).get(event, 0.0), **pod, event=event)
        )
    out.append(_s("mco_pod_memory_usage_bytes", usage, 0.0, **pod))
    if limit is not None:
        out.append(_s("mco_pod_memory_limit_bytes", limit, 0.0, **pod))
    out.append(_s("mco_pod_memory_reclaimed_pages_total", 0, 10.0, **pod))
    for operation in ("read", "write"):
        per_s, ops = (io or {}).get(operation, (0.0, 0.0))
        out.append(_s("mco_pod_io_bytes_total", 0, per_s, **pod, operation=operation))
        out.append(_s("mco_pod_io_operations_total", 0, ops, **pod, operation=operation))
        bps, iops = (io_limit or {}).get(operation, (None, None))
        if bps is not None:
            out.append(
                _s("mco_pod_io_limit_bytes_per_second", bps, 0.0, **pod, operation=operation)
            )
        if iops is not None:
            out.append(
                _s("mco_pod_io_limit_operations_per_second", iops, 0.0, **pod, operation=operation)
            )
    return out


# Cumulative shares over BUCKETS (8us, 16us, ... 8.4s): fast SSD, congested disk.
FAST = (0, 0, 0, 0, 0.05, 0.3, 0.7, 0.9, 0.97, 0.995, 0.999)
SLOW = (0, 0, 0, 0, 0, 0, 0, 0.01, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 0.93, 0.97, 0.99)

PROFILES: dict[str, Profile] = {
    # The common case, and the benchmark's: everything a bare-metal node exports.
    "typical": Profile(
        "typical",
        tuple(
            _common(64)
            + _psi(0.02, 0.03, 0.01, 0.002, 0.0)
            + [_s("mco_llc_references_total", 1e9, 2e8), _s("mco_llc_misses_total", 1e8, 5e7)]
            + _histogram("nvme0n1", "read", 800, FAST)
            + _histogram("nvme0n1", "write", 300, FAST)
            + _disk("nvme0n1", 0.3, 1100)
            + _memory(0.6)
            + [
                _s("mco_vmstat_pgscan_by_type_total", 0, 10, type="anon"),
                _s("mco_vmstat_pgscan_by_type_total", 0, 200, type="file"),
                _s("mco_vmstat_pgscan_total", 0, 150, reclaimer="kswapd"),
                _s("mco_vmstat_pgscan_total", 0, 60, reclaimer="direct"),
                _s("mco_cpu_steal_seconds_total", 10, 0.32),
                _s("mco_runqueue_wait_seconds_total", 10, 4.0),
            ]
            + _irq(0.06, 0.58, 0.04)
        ),
    ),
    "idle": Profile(
        "idle",
        tuple(
            _common(4)
            + _psi(0, 0, 0, 0, 0)
            + [_s("mco_llc_references_total", 1e6), _s("mco_llc_misses_total", 1e5)]
            + _histogram("vda", "read", 0, FAST)
            + _disk("vda", 0, 0)
            + _memory(0.9)
            + [
                _s("mco_vmstat_pgscan_by_type_total", 0, 0, type="anon"),
                _s("mco_vmstat_pgscan_by_type_total", 0, 0, type="file"),
                _s("mco_cpu_steal_seconds_total", 3),
            ]
            + _irq(0, 0, 0)
        ),
    ),
    # Interfered: slow second disk, I/O and memory stalls, LLC thrashing, steal, one CPU
    # drowning in softirqs (NET_RX).
    "busy": Profile(
        "busy",
        tuple(
            _common(16)
            + _psi(0.3, 0.25, 0.15, 0.04, 0.0)
            + [_s("mco_llc_references_total", 0, 3e8), _s("mco_llc_misses_total", 0, 1.9e8)]
            + _histogram("nvme0n1", "read", 500, FAST)
            + _histogram("sdb", "read", 40, SLOW)
            + _histogram("sdb", "write", 60, SLOW)
            + _disk("sdb", 20.0, 100)
            + _memory(0.03)
            + [
                _s("mco_vmstat_pgscan_by_type_total", 0, 90000, type="file"),
                _s("mco_cpu_steal_seconds_total", 0, 1.6),
                _s("mco_runqueue_wait_seconds_total", 0, 6.0),
                _s("mco_pressure_stalled_seconds_total", 100, 0.08, resource="irq", kind="full"),
            ]
            + _irq(0.4, 2.4, 0.7)
        ),
    ),
    # No PMU, no eBPF: diskstats of the worst device; hard constraints violated.
    "hot": Profile(
        "hot",
        tuple(
            _common(8)
            + _psi(0.5, 0.7, 0.6, 0.3, 0.02)
            + _disk("vda", 0.4, 40)
            + _disk("vdb", 3.0, 20)
            + _disk("vdc", 0, 0)
            + _memory(0.4)
            + [
                _s("mco_vmstat_pgscan_by_type_total", 0, 0, type="anon"),
                _s("mco_vmstat_pgscan_by_type_total", 0, 0, type="file"),
                _s("mco_cpu_steal_seconds_total", 0, 0),
            ]
        ),
    ),
    # Kernel without PSI: memory from MemAvailable and by-reclaimer page scans.
    "nopsi": Profile(
        "nopsi",
        tuple(
            [
                *_common(8),
                _s("mco_pressure_available", 0),
                _s("mco_llc_references_total", 0, 100000000.0),
                _s("mco_llc_misses_total", 0, 20000000.0),
                *_disk("sda", 0.02, 100),
                *_memory(0.1),
                _s("mco_vmstat_pgscan_total", 0, 30000, reclaimer="kswapd"),
                _s("mco_vmstat_pgscan_total", 0, 4000, reclaimer="direct"),
                _s("mco_cpu_steal_seconds_total", 0, 0.1),
            ]
        ),
    ),
    # Pressure collector off: fallback; by-type scans win over by-reclaimer.
    "scan": Profile(
        "scan",
        tuple(
            [
                _s("mco_cpu_online", 2),
                *_memory(0.5),
                _s("mco_vmstat_pgscan_by_type_total", 0, 20000, type="anon"),
                _s("mco_vmstat_pgscan_by_type_total", 0, 50000, type="file"),
                _s("mco_vmstat_pgscan_total", 0, 100, reclaimer="kswapd"),
            ]
        ),
    ),
    # Per-pod series (the cgroup collector): node PSI is high, but most of it is pods at their
    # own limits; the victim's stall is what counts (docs/detection-model.md).
    "pods": Profile(
        "pods",
        tuple(
            _common(8)
            + _psi(0.1, 0.7, 0.4, 0.3, 0.2)
            + _disk("vda", 0.01, 10)
            + _memory(0.7)
            + _pod(
                "thrash",
                "burstable",
                {"memory": (0.3, 0.2), "io": (0.5, 0.3)},
                usage=60 * 2**20,
                limit=64 * 2**20,
                events={"max": 40.0},
            )
            + _pod("near", "burstable", {"memory": (0.2, 0.1)}, usage=62 * 2**20, limit=64 * 2**20)
            + _pod(
                "throttled",
                "guaranteed",
                {"io": (0.6, 0.4)},
                io={"write": (2**20, 16)},
                io_limit={"write": (2**20, None)},
            )
            + _pod(
                "ops",
                "burstable",
                {"io": (0.4, 0.1)},
                io={"read": (4096, 95)},
                io_limit={"read": (None, 100)},
            )
            + _pod(
                "victim",
                "besteffort",
                {"memory": (0.05, 0.01), "io": (0.25, 0.125)},
                io={"read": (2**16, 2)},
                io_limit={"read": (2**20, 1000)},
            )
            + _pod("quiet", "besteffort", {})
        ),
    ),
    # Only a weight-0 detection has data: no level.
    "cpuonly": Profile(
        "cpuonly",
        (_s("mco_cpu_online", 4), _s("mco_cpu_steal_seconds_total", 0, 0.6)),
    ),
}


def served(profile: Profile, by_operation: bool = False) -> tuple[Series, ...]:
    """The profile's series as an exporter serves them: each device's latency histogram summed
    over operations (its default), or one per operation (``--collector.biolatency.by-operation``).
    Counters grow linearly, so the sum is exact: base plus base, slope plus slope."""
    if by_operation:
        return profile.series
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], Series] = {}
    for s in profile.series:
        if not s.name.startswith(f"{HISTOGRAM}_"):
            merged[(s.name, s.labels)] = s
            continue
        labels = tuple(kv for kv in s.labels if kv[0] != "operation")
        before = merged.get((s.name, labels), Series(s.name, labels, 0.0))
        merged[(s.name, labels)] = Series(
            s.name, labels, before.base + s.base, before.slope + s.slope
        )
    return tuple(merged.values())


def node_names(count: int) -> list[str]:
    return [f"node-{i:05d}" for i in range(count)]


def assign(nodes: Sequence[str], profiles: Sequence[str]) -> dict[str, Profile]:
    return {n: PROFILES[p] for n, p in zip(nodes, itertools.cycle(profiles), strict=False)}


def kept_bounds(buckets: str = DEFAULT_BUCKETS) -> frozenset[str]:
    """The ``le`` values served for the exporter's ``--collector.biolatency.buckets`` value:
    those bounds and +Inf. Buckets are cumulative, so dropping some leaves a valid histogram."""
    return frozenset([*(repr(b) for b in parse_bounds(buckets)), "+Inf"])


def _prefix(series: Series, node: str) -> str:
    labels = [("node", node), *series.labels]
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return f"{series.name}{{{inner}}} "


class Fleet:
    """The exposition text of every node at a given time (milliseconds).

    Values are computed once per distinct (base, slope) pair, not per line, and joined with the
    series prefixes made once: serving 1,000 nodes (75,000 series) costs ~8 ms of CPU per
    scrape here, not the ~45 ms a line-by-line render took, so the benchmark's fleet takes
    little CPU from the Prometheus it measures.
    """

    def __init__(
        self,
        assignment: dict[str, Profile],
        start_ms: int | None = None,
        buckets: str = DEFAULT_BUCKETS,
        by_operation: bool = False,
    ) -> None:
        self.start_ms = start_ms if start_ms is not None else int(time.time() * 1000)
        keep = kept_bounds(buckets)
        lines: list[tuple[str, float, float]] = []
        for node, profile in assignment.items():
            lines.append(
                (f'mco_node_info{{node="{node}",nodename="{node}",kernel="6.1"}} ', 1.0, 0.0)
            )
            for s in served(profile, by_operation):
                if (
                    s.name == "mco_block_io_latency_seconds_bucket"
                    and dict(s.labels)["le"] not in keep
                ):
                    continue
                lines.append((_prefix(s, node), s.base, s.slope))
        self._lines = lines
        slot: dict[tuple[float, float], int] = {}
        for _, base, slope in lines:
            slot.setdefault((base, slope), len(slot))
        self._pairs = tuple(slot)
        slots = [slot[(base, slope)] for _, base, slope in lines]
        # itemgetter of one index returns the item, not a 1-tuple.
        self._pick: Callable[[list[str]], Sequence[str]] = (
            operator.itemgetter(*slots)
            if len(slots) > 1
            else (lambda values: [values[i] for i in slots])
        )
        self._prefixes = [prefix for prefix, _, _ in lines]

    @property
    def series_count(self) -> int:
        return len(self._lines)

    @property
    def lines(self) -> tuple[tuple[str, float, float], ...]:
        """Every series as (``name{labels} ``, value at start, slope per second)."""
        return tuple(self._lines)

    def render(self, now_ms: int) -> bytes:
        elapsed = (now_ms - self.start_ms) / 1000
        values = [f"{b + s * elapsed!r} {now_ms}\n" for b, s in self._pairs]
        pairs = zip(self._prefixes, self._pick(values), strict=True)
        return "".join(itertools.chain.from_iterable(pairs)).encode()

    def render_plainly(self, now_ms: int) -> bytes:
        """Line by line: what ``render`` must equal, byte for byte (tests compare the two)."""
        elapsed = (now_ms - self.start_ms) / 1000
        suffix = f" {now_ms}\n"
        return "".join(f"{p}{b + s * elapsed!r}{suffix}" for p, b, s in self._lines).encode()


def handler(fleet: Fleet) -> type[BaseHTTPRequestHandler]:
    """An HTTP handler serving ``fleet`` at any path, samples stamped with the time of the GET."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = fleet.render(int(time.time() * 1000))
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def serve(fleet: Fleet, host: str, port: int) -> None:
    ThreadingHTTPServer((host, port), handler(fleet)).serve_forever()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fleet")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--nodes", type=int, default=len(PROFILES))
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--start-ms", type=int, default=None)
    parser.add_argument(
        "--latency-buckets",
        default=DEFAULT_BUCKETS,
        help="the latency buckets served, as the exporter's --collector.biolatency.buckets "
        "(default: its default; 'all': every one)",
    )
    parser.add_argument(
        "--latency-by-operation",
        action="store_true",
        help="one latency histogram per device and operation, as the exporter's "
        "--collector.biolatency.by-operation (default: per device, the operations summed)",
    )
    args = parser.parse_args(argv)
    fleet = Fleet(
        assign(node_names(args.nodes), args.profiles.split(",")),
        args.start_ms,
        args.latency_buckets,
        args.latency_by_operation,
    )
    print(f"serving {fleet.series_count} series on {args.host}:{args.port}", flush=True)
    serve(fleet, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
