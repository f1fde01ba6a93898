"""A scrape target whose nodes' signals change as pods come and go.

The series are built with the synthetic fleet's helpers (testkit/fleet_series.py: the exporter's
own metric names and labels, one ``node`` label per series), but each node's rates can change:
a counter keeps its value when its slope changes, so ``rate()`` over a window that spans the
change is what a real exporter's counter would give.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.placement.model import NODE_CPU, Signals
from testkit.fleet_series import Series, common, disk, memory, psi, series

DISK_REQUESTS = 200.0  # completed requests/s of the simulated data disk
LLC_REFERENCES = 1e9  # LLC references/s


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
    """Every node's exposition at the current time; ``set`` changes a node's rates from now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # node -> [(prefix, value at t, slope per second)], t
        self._nodes: dict[str, tuple[list[tuple[str, float, float]], float]] = {}

    def set(self, node: str, signals: Signals, now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self._lock:
            old, since = self._nodes.get(node, ([], now))
            current = {p: v + slope * (now - since) for p, v, slope in old}
            lines = [(f'mco_node_info{{node="{node}",nodename="{node}",kernel="6.1"}} ', 1.0, 0.0)]
            for s in node_series(signals):
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
