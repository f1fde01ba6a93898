"""Real interference on this machine is detected end to end: exporter → Prometheus rules →
reporter → extender verdict, within the window plus 10 s, and it recovers when the load stops."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from scripts.local_stack import LocalStack
from scripts.procs import wait_until
from scripts.stress import StressUnavailableError
from tests.e2e.conftest import short_stale_config
from tests.extender.bodies import kube_args

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def kube_score(stack: LocalStack) -> int:
    """What kube-scheduler's prioritize call gets for this node (0-10)."""
    response = requests.post(
        f"{stack.extender_url}/scheduler/prioritize",
        data=kube_args([stack.settings.node]),
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    response.raise_for_status()
    (host,) = response.json()
    assert host["Host"] == stack.settings.node
    score: int = host["Score"]
    return score


def wait_for(stack: LocalStack, check, *, timeout: float, what: str) -> float:
    """Seconds until ``check(node_view)`` holds."""
    start = time.monotonic()
    wait_until(lambda: check(stack.node_view()), timeout=timeout, interval=0.25, what=what)
    return time.monotonic() - start


def test_io_stress_triggers_io_congestion_and_lowers_the_score(stack_factory) -> None:
    stack: LocalStack = stack_factory()
    stack.start()
    limit = stack.config.window + 10
    wait_for(
        stack,
        lambda n: not n["detections"]["io_congestion"]["triggered"],
        timeout=60,
        what="an idle start (io_congestion not triggered)",
    )
    idle_score = kube_score(stack)
    assert idle_score >= 8
    stack.start_load("io")
    took = wait_for(
        stack,
        lambda n: n["detections"]["io_congestion"]["triggered"],
        timeout=limit,
        what="io_congestion triggered under stress-ng --hdd",
    )
    assert took <= limit
    wait_until(
        lambda: kube_score(stack) < idle_score, timeout=5, what="the extender's score to drop"
    )
    report = stack.report_path.read_text()
    assert '"io_congestion":{"index"' in report.replace(" ", "")
    stack.stop_load()
    wait_for(
        stack,
        lambda n: not n["detections"]["io_congestion"]["triggered"],
        timeout=stack.config.window + 30,
        what="recovery after the stress stopped",
    )
    wait_until(lambda: kube_score(stack) >= idle_score - 1, timeout=10, what="the score to recover")


def test_memory_pressure_in_a_cgroup_raises_page_scans_and_the_index(stack_factory) -> None:
    stack: LocalStack = stack_factory()
    stack.start()
    before = stack.node_view()
    assert before is not None
    try:
        stack.start_load("memory")
    except StressUnavailableError as exc:
        pytest.skip(f"no memory cgroup here: {exc}")
    limit = stack.config.window + 10
    wait_for(
        stack,
        lambda n: (n["detections"].get("memory_pressure") or {}).get("index", 0) > 0,
        timeout=limit,
        what="the memory-pressure index to rise",
    )
    signal = "pageScanRate"
    scans = stack.prometheus.value(f'node:mco_pgscan_rate:smoothed{{node="{stack.settings.node}"}}')
    assert scans is not None and scans > 1000, scans
    report_signals = _report_signals(stack.report_path)
    assert report_signals.get(signal, 0) > 1000


def _report_signals(path: Path) -> dict[str, float]:
    import json

    obj = json.loads(path.read_text())
    items = obj["items"] if obj.get("kind") == "List" else [obj]
    for item in items:
        for entry in item["status"].get("nodes", {}).values():
            signals: dict[str, float] = entry.get("signals") or {}
            return signals
    return {}


def test_prometheus_down_goes_stale_and_neutral_then_recovers(stack_factory, tmp_path) -> None:
    stack: LocalStack = stack_factory(rule_config=short_stale_config(tmp_path))
    stack.start()
    assert stack.config.report.stale_after == 10
    fresh = stack.node_view()
    assert fresh is not None and not fresh["stale"]
    stack.prometheus.stop()
    wait_for(stack, lambda n: n["stale"], timeout=10 + 10, what="the entry to go stale")
    neutral = round(stack.config.report.neutral_score / 10)
    assert kube_score(stack) == neutral
    node = stack.node_view()
    assert node is not None and node["verdict"]["passed"]  # fail-open: not filtered
    stack.prometheus.start()
    wait_for(
        stack,
        lambda n: not n["stale"],
        timeout=stack.config.window + 20,
        what="fresh data after Prometheus restarted",
    )
