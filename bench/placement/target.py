"""A scrape target whose nodes' signals change as pods come and go.

The series are built with the synthetic fleet's helpers (testkit/fleet_series.py: the exporter's
own metric names and labels, one ``node`` label per series), but each node's rates can change:
a counter keeps its value when its slope changes, so ``rate()`` over a window that spans the
change is what a real exporter's counter would give.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.placement.model import LLC_MB, NODE_CPU, Demand, Signals
from bench.placement.trace import NAMESPACE, PodSpec
from testkit.fleet_series import Series, common, disk, memory, psi, series

DISK_REQUESTS = 200.0  # completed requests/s of the simulated data disk
LLC_REFERENCES = 1e9  # LLC references/s
# Bytes/s one I/O demand unit (one stress-ng --hdd writer, model.py) writes. Only its ratio
# between pods matters: the reporter ranks aggressors by it and blames each by its share.
WRITER_BYTES = 64.0 * 2**20
GIB = float(2**30)
# The QoS class each workload class's pods get (requests only: burstable; none: besteffort).
QOS = {"latency-sensitive": "guaranteed", "batch": "burstable", "best-effort": "besteffort"}


@dataclass(frozen=True)
class Resident:
    """A running pod as its node's exporter and kube-state-metrics see it: its UID (the
    cluster's), its trace spec (owner, class) and what it adds now (its phase's demand)."""

    uid: str
    pod: PodSpec
    demand: Demand


def pod_series(residents: Sequence[Resident], s: Signals, llc_mb: float = LLC_MB) -> list[Series]:
    """The per-pod series the reporter's culprits query reads (reporter/culprits.py), from the
    contention model's own per-pod demand: a pod stalls on a resource it uses as long as the
    node's PSI says tasks wait on it (model.py has no per-pod stall of its own, and every user
    of the shared disk or the squeezed page cache waits alike); it holds its requested memory
    and its page cache, writes its I/O demand, and occupies the LLC by its footprint, shared
    out pro rata where the footprints overflow it. Plus kube-state-metrics' kube_pod_info, with
    the pod's controller, which the reporter joins to name the workload."""
    footprint = sum(r.demand.cache_mb for r in residents)
    share = min(1.0, llc_mb / footprint) if footprint > 0 else 1.0
    out: list[Series] = []
    for r in residents:
        pod = {"pod_uid": r.uid, "qos": QOS[r.pod.workload_class]}
        d = r.demand
        stalls = {
            "io": (s.psi_io_some, s.psi_io_full) if d.io > 0 else (0.0, 0.0),
            "memory": (s.psi_memory_some, s.psi_memory_full)
            if d.page_cache_gib > 0
            else (0.0, 0.0),
        }
        for resource, (some, full) in stalls.items():
            for kind, slope in (("some", some), ("full", full)):
                out.append(
                    series(
                        "mco_pod_pressure_stalled_seconds_total",
                        0,
                        slope,
                        resource=resource,
                        kind=kind,
                        **pod,
                    )
                )
        held = (d.memory + d.page_cache_gib) * GIB
        out.append(series("mco_pod_memory_usage_bytes", held, 0.0, **pod))
        out.append(
            series("mco_pod_io_bytes_total", 0, d.io * WRITER_BYTES, operation="write", **pod)
        )
        occupancy = d.cache_mb * share * 2**20
        out.append(series("mco_llc_occupancy_bytes", occupancy, group=f"/pod{r.uid}", domain="0"))
        kind, owner = r.pod.owner
        out.append(
            series(
                "kube_pod_info",
                1,
                namespace=NAMESPACE,
                pod=r.pod.name,
                uid=r.uid,
                created_by_kind=kind,
                created_by_name=owner,
            )
        )
    return out


def node_series(s: Signals) -> list[Series]:
    """One node's raw series for these signals, as the exporter names them."""
    return [
        *common(int(NODE_CPU)),
        *psi(0.01, s.psi_io_some, s.psi_io_full, s.psi_memory_some, s.psi_memory_full),
        series("mco_llc_references_total", 0, LLC_REFERENCES),
        series("mco_llc_misses_total", 0, LLC_REFERENCES * s.llc_miss_ratio),
        *disk("vda", s.block_latency_seconds * DISK_REQUESTS, DISK_REQUESTS),
        *memory(s.memory_available_ratio),
    ]


def _key(node: str, series: Series) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in (("node", node), *series.labels))
    return f"{series.name}{{{inner}}} "


class LiveFleet:
    """Every node's exposition at the current time; ``set`` changes a node's rates from now.
    ``pods``: whether it serves per-pod series too (a pipeline that learns profiles from them;
    the others are spared the series)."""

    def __init__(self, pods: bool = False) -> None:
        self.pods = pods
        self._lock = threading.Lock()
        # node -> [(prefix, value at t, slope per second)], t
        self._nodes: dict[str, tuple[list[tuple[str, float, float]], float]] = {}

    def set(
        self,
        node: str,
        signals: Signals,
        now: float | None = None,
        residents: Sequence[Resident] = (),
        llc_mb: float = LLC_MB,
    ) -> None:
        now = time.time() if now is None else now
        served = node_series(signals)
        if self.pods:
            served += pod_series(residents, signals, llc_mb)
        with self._lock:
            old, since = self._nodes.get(node, ([], now))
            current = {p: v + slope * (now - since) for p, v, slope in old}
            lines = [(f'mco_node_info{{node="{node}",nodename="{node}",kernel="6.1"}} ', 1.0, 0.0)]
            for s in served:
                prefix = _key(node, s)
                lines.append((prefix, current.get(prefix, s.base), s.slope))
            self._nodes[node] = (lines, now)

    def render(self, now: float | None = None) -> bytes:
        now = time.time() if now is None else now
        stamp = f" {int(now * 1000)}\n"
        with self._lock:
            nodes = list(self._nodes.values())
        out: list[str] = []
        for lines, since in nodes:
            dt = now - since
            out.extend(f"{p}{v + slope * dt!r}{stamp}" for p, v, slope in lines)
        return "".join(out).encode()

    def value(self, node: str, name_prefix: str, now: float) -> float:
        """A series' value at ``now`` (tests)."""
        lines, since = self._nodes[node]
        for p, v, slope in lines:
            if p.startswith(name_prefix):
                return v + slope * (now - since)
        raise KeyError(name_prefix)


@contextmanager
def serving(fleets: dict[str, LiveFleet], host: str = "127.0.0.1") -> Iterator[int]:
    """Serve each fleet at ``/<name>``; yields the port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fleet = fleets.get(self.path.strip("/"))
            if fleet is None:
                self.send_error(404)
                return
            body = fleet.render()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
