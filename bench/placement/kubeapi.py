"""The pods of the kube-scheduler clusters as a Kubernetes API serves them: list and watch.

kube-scheduler tells an extender nothing after prioritize, so `mco-extender --watch-pods` learns
of placements from a watch of `/api/v1/pods`. This stand-in serves the benchmark's bindings
there (a list with a resourceVersion, then a watch stream of ADDED and DELETED events from it),
so the real extender's real watch runs against it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from bench.placement import wire
from bench.placement.trace import PodSpec


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodStore:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pods: dict[str, dict[str, Any]] = {}
        self._events: list[tuple[int, str, dict[str, Any]]] = []
        self._rv = 1

    def _put(self, kind: str, obj: dict[str, Any]) -> None:
        with self._cond:
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._events.append((self._rv, kind, obj))
            self._cond.notify_all()

    def bind(self, pod: PodSpec, uid: str, node: str, at: float) -> None:
        obj = wire.pod_object(pod, node, uid)
        obj["metadata"]["creationTimestamp"] = _rfc3339(at)
        obj["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _rfc3339(at)}
        ]
        with self._cond:
            self._pods[uid] = obj
        self._put("ADDED", obj)

    def delete(self, uid: str) -> None:
        with self._cond:
            obj = self._pods.pop(uid, None)
        if obj is not None:
            self._put("DELETED", obj)

    def listing(self) -> dict[str, Any]:
        with self._cond:
            return {
                "apiVersion": "v1",
                "kind": "PodList",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": list(self._pods.values()),
            }

    def events(self, since: int, timeout: float) -> Iterator[bytes]:
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                new = [e for e in self._events if e[0] > since]
                if not new:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self._cond.wait(min(left, 1.0))
                    continue
            for rv, kind, obj in new:
                since = rv
                yield json.dumps({"type": kind, "object": obj}).encode() + b"\n"


@contextmanager
def serving(store: PodStore, workdir: Path) -> Iterator[Path]:
    """Serve ``store``; yields a kubeconfig that points at it."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path != "/api/v1/pods":
                self.send_error(404)
                return
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if query.get("watch") != "true":
                body = json.dumps(store.listing()).encode()
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.end_headers()  # HTTP/1.0: the stream ends when the connection closes
            since = int(query.get("resourceVersion") or 0)
            try:
                for line in store.events(since, float(query.get("timeoutSeconds", 300))):
                    self.wfile.write(line)
                    self.wfile.flush()
            except OSError:
                pass

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "bench",
                        "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"},
                    }
                ],
                "users": [{"name": "extender", "user": {"token": "not-a-secret"}}],
                "contexts": [
                    {"name": "bench", "context": {"cluster": "bench", "user": "extender"}}
                ],
                "current-context": "bench",
            }
        )
    )
    try:
        yield kubeconfig
    finally:
        server.shutdown()
        server.server_close()
