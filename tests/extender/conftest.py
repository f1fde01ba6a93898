from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from extender.app import STORE, make_app
from extender.config import ExtenderConfig, SourceConfig, VerdictConfig
from reporter.schema import (
    LAYOUT_LABEL,
    DetectionState,
    NodeEntry,
    NodeInterferenceReport,
    ObjectMeta,
    ReportStatus,
    Violation,
    encode,
)


def metric(text: str, name: str, **labels: str) -> float | None:
    """One sample's value from a Prometheus text exposition, or None when absent."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def entry(
    level: float | None = 0.2,
    *,
    age: float = 0.0,
    schedulable: bool = True,
    kata: bool = False,
    violations: Iterable[Violation] = (),
    reasons: Iterable[str] = (),
    now: float | None = None,
    live: bool = False,
) -> NodeEntry:
    """A report entry as mco-reporter writes it, sampled ``age`` seconds ago."""
    at = (time.time() if now is None else now) - age
    return NodeEntry(
        sample_time=rfc3339(at),
        schedulable=schedulable,
        fallback=False,
        kata_ready=kata,
        level=level,
        score=None if level is None else round(100 * (1 - level), 3),
        reasons=list(reasons),
        detections={"io_congestion": DetectionState(level or 0.0, (level or 0.0) > 0)},
        signals={"node:mco_psi_io_some_ratio:smoothed": 0.01},
        violations=list(violations),
        live=live,
    )


def cluster_report(
    nodes: dict[str, NodeEntry], name: str = "cluster", *, heartbeat: float | None = None
) -> NodeInterferenceReport:
    """The ``cluster`` object; ``heartbeat`` (Unix time) becomes its ``lastSyncTime``."""
    status = ReportStatus(
        nodes=nodes, last_sync_time=None if heartbeat is None else rfc3339(heartbeat)
    )
    return NodeInterferenceReport(ObjectMeta(name, labels={LAYOUT_LABEL: "cluster"}), status=status)


def per_node_reports(nodes: dict[str, NodeEntry]) -> list[NodeInterferenceReport]:
    return [
        NodeInterferenceReport(
            ObjectMeta(n, labels={LAYOUT_LABEL: "per-node"}), status=ReportStatus(nodes={n: e})
        )
        for n, e in nodes.items()
    ]


def write_atomic(path: Path, data: bytes) -> None:
    """The way mco-reporter replaces its output: a new file renamed over the old one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_reports(path: Path, reports: list[NodeInterferenceReport]) -> None:
    """One object as-is, several as a Kubernetes List (both are what --output writes)."""
    if len(reports) == 1:
        write_atomic(path, encode(reports[0]))
    else:
        write_atomic(path, encode({"apiVersion": "v1", "kind": "List", "items": reports}))


def file_config(path: Path, **verdict: object) -> ExtenderConfig:
    return ExtenderConfig(
        verdict=VerdictConfig(**verdict),  # type: ignore[arg-type]
        source=SourceConfig(report_file=str(path), poll_interval=0.05),
    )


async def wait_for(check: Callable[[], bool], timeout: float = 5.0, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


Serve = Callable[..., Awaitable[TestClient[Any, Any]]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start make_app(config) on a real local port; waits for the first report load."""
    clients: list[TestClient[Any, Any]] = []

    async def start(config: ExtenderConfig, *, ready: bool = True) -> TestClient[Any, Any]:
        app = make_app(config)
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        if ready:
            await wait_for(lambda: app[STORE].loaded, what="the first report load")
        return client

    yield start
    for client in clients:
        await client.close()


@pytest.fixture
def kubeconfig(kmock: Any, tmp_path: Path) -> Path:
    """A kubeconfig pointing at kmock (the Kubernetes API stand-in)."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": str(kmock.url).rstrip("/")}}],
                "users": [{"name": "extender", "user": {"token": "not-a-secret"}}],
                "contexts": [
                    {"name": "kmock", "context": {"cluster": "kmock", "user": "extender"}}
                ],
                "current-context": "kmock",
            }
        )
    )
    return path
