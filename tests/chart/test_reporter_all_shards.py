"""MCOReporterAbsent on a Prometheus Operator ``shards`` install, in three real Prometheus.

Each shard runs the scrape configs the operator makes of the chart's ServiceMonitors, with the
operator's sharding relabelings for its shard number (tests/chart/operator.py), and the
rendered PrometheusRule's MCOReporterAbsent expression is queried on every shard. Without the
chart's ``reporter.serviceMonitor.allShards`` the reporter's target lands on one shard and the
expression is true on the others while the reporter runs; with it (the default) every shard
keeps the target, the exporters stay split, and the expression is true on every shard once the
reporter is gone, never before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from scripts.procs import Prometheus, free_port, running, wait_until
from tests.chart.helm import Rendered, render
from tests.chart.operator import scrape_config

pytestmark = pytest.mark.slow

SHARDS = 3
EXPORTERS = [f"127.0.0.1:{free_port()}" for _ in range(6)]  # nobody answers: up == 0, enough


class Heartbeat(BaseHTTPRequestHandler):
    """The reporter's heartbeat gauge, as of the scrape."""

    def do_GET(self) -> None:
        body = f"mco_reporter_last_sync_timestamp_seconds {time.time():.3f}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def reporter() -> Iterator[ThreadingHTTPServer]:
    """A stand-in for the reporter's /metrics: its heartbeat, fresh on every scrape."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Heartbeat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


class Shard(Prometheus):
    """One shard's Prometheus with the operator-made scrape configs it is given."""

    def __init__(self, workdir: Path, scrape: list[dict[str, Any]]) -> None:
        self.scrape = scrape
        super().__init__(workdir)

    def write_config(self) -> None:
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": self.scrape,
        }
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def active(self, job: str) -> set[str]:
        body = requests.get(f"{self.url}/api/v1/targets", timeout=10).json()
        return {
            t["labels"]["instance"]
            for t in body["data"]["activeTargets"]
            if t["labels"].get("job") == job
        }


def _service_labels(rendered: Rendered, monitor: dict[str, Any]) -> dict[str, str]:
    selector = monitor["spec"]["selector"]["matchLabels"].items()
    (service,) = [
        s for s in rendered.of_kind("Service") if selector <= s["metadata"]["labels"].items()
    ]
    labels: dict[str, str] = service["metadata"]["labels"]
    return labels


def shard_scrapes(rendered: Rendered, reporter: str, shard: int) -> list[dict[str, Any]]:
    exporter = rendered.one("ServiceMonitor", "-exporter")
    monitor = rendered.one("ServiceMonitor", "-reporter")
    return [
        scrape_config(
            exporter,
            _service_labels(rendered, exporter),
            {a: f"node-{i}" for i, a in enumerate(EXPORTERS)},
            shard=(shard, SHARDS),
        ),
        scrape_config(
            monitor, _service_labels(rendered, monitor), {reporter: "node-0"}, shard=(shard, SHARDS)
        ),
    ]


def absent_expr(rendered: Rendered) -> str:
    rules = rendered.one("PrometheusRule")["spec"]["groups"]
    (expr,) = [
        r["expr"] for g in rules for r in g["rules"] if r.get("alert") == "MCOReporterAbsent"
    ]
    assert "absent(" in expr
    return str(expr)


def test_every_shard_scrapes_the_reporter_and_alerts_only_when_it_is_gone(
    tmp_path: Path, reporter: ThreadingHTTPServer
) -> None:
    address = f"127.0.0.1:{reporter.server_address[1]}"
    interval = {"reporter": {"serviceMonitor": {"interval": "1s"}}}
    sharded = render(interval)
    one_shard = render({"reporter": {"serviceMonitor": {"interval": "1s", "allShards": False}}})
    expr = absent_expr(sharded)
    shards = [
        Shard(tmp_path / f"shard-{i}", shard_scrapes(one_shard, address, i)) for i in range(SHARDS)
    ]

    def firing() -> list[bool]:
        return [bool(s.query(expr)) for s in shards]

    with running(*shards):
        # Without allShards: the operator keeps the reporter on the one shard it hashes to.
        wait_until(
            lambda: sum(len(s.active("mco-reporter")) for s in shards) == 1,
            timeout=30,
            what="the reporter target on one shard",
        )
        holder = next(i for i, s in enumerate(shards) if s.active("mco-reporter"))
        shards[holder].wait_for_series("mco_reporter_last_sync_timestamp_seconds", timeout=30)
        assert firing() == [i != holder for i in range(SHARDS)]

        # The chart's default: every shard keeps it, and nothing fires while it runs.
        for i, s in enumerate(shards):
            s.scrape = shard_scrapes(sharded, address, i)
            s.reload()
        for s in shards:
            s.wait_for_series("mco_reporter_last_sync_timestamp_seconds", timeout=30)
            assert s.active("mco-reporter") == {address}
        assert firing() == [False] * SHARDS
        # The exporters are still split: each on exactly one shard.
        held = [s.active("mco-exporter") for s in shards]
        assert sorted(a for h in held for a in h) == sorted(EXPORTERS)

        # The reporter goes away: every shard's heartbeat goes stale, and every shard fires.
        reporter.shutdown()
        reporter.server_close()
        wait_until(lambda: all(firing()), timeout=30, what="MCOReporterAbsent true on every shard")
