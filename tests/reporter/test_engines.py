"""Real engines: Prometheus and VictoriaMetrics scraping the real mco-exporter, evaluating the
rules rulegen renders. The report's numbers must equal the engine's PromQL values, and an engine
that dies must leave the entries aging (stale), never zeroed."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mco.promql import UNREACHABLE, PromQLClient, SourceConfig, SourceError
from reporter.engine import Reporter
from reporter.entries import Epsilon
from reporter.filesink import FileSink
from reporter.layout import LayoutChooser
from reporter.metrics import ReporterMetrics
from reporter.query import Plan
from reporter.ruleconfig import RuleConfigSource
from reporter.schema import NodeEntry, entry_time, parse_time
from rulegen import series
from rulegen.model import DetectionRuleConfig
from rulegen.render import Engine, render_rules
from scripts.procs import (
    Managed,
    Prometheus,
    ScrapeTarget,
    VictoriaMetrics,
    VMAlert,
    free_port,
    wait_until,
)
from tests.reporter.conftest import validate_object

ROOT = Path(__file__).resolve().parents[2]
NO_PSI = ROOT / "tests" / "fixtures" / "linux-4.4-no-psi"
pytestmark = pytest.mark.slow


def exporter(name: str, workdir: Path, *extra: str) -> tuple[Managed, str]:
    port = free_port()
    proc = Managed(
        [
            sys.executable,
            "-m",
            "exporter",
            f"--web.listen-address=127.0.0.1:{port}",
            "--no-collector.biolatency",
            f"--node-name={name}",
            "--log.level=warn",
            *extra,
        ],
        name=f"exporter-{name}",
        log_path=workdir / f"exporter-{name}.log",
    )
    return proc, f"127.0.0.1:{port}"


@pytest.fixture
def exporters(tmp_path: Path) -> Iterator[list[ScrapeTarget]]:
    """Two nodes: this host (PSI) and a recorded kernel without PSI (the fallback path)."""
    a, addr_a = exporter("host", tmp_path)
    b, addr_b = exporter(
        "old", tmp_path, f"--path.procfs={NO_PSI / 'proc'}", f"--path.sysfs={NO_PSI / 'sys'}"
    )
    a.start()
    b.start()
    try:
        a.wait_http(f"http://{addr_a}/metrics")
        b.wait_http(f"http://{addr_b}/metrics")
        yield [
            ScrapeTarget("mco-exporter", addr_a, {"node": "host"}),
            ScrapeTarget("mco-exporter", addr_b, {"node": "old"}),
        ]
    finally:
        a.stop()
        b.stop()


def rules_file(workdir: Path, engine: Engine = "prometheus") -> Path:
    path = workdir / f"mco-rules-{engine}.yaml"
    path.write_text(render_rules(DetectionRuleConfig.default(), engine=engine))
    return path


def new_reporter(client: PromQLClient, out: Path) -> Reporter:
    return Reporter(
        source=client,
        rules=RuleConfigSource(),
        plan=Plan(compact=False),
        epsilon=Epsilon(),
        metrics=ReporterMetrics(),
        sink=FileSink(str(out), LayoutChooser("cluster")),
    )


def value(engine: Any, expr: str, at: float) -> float | None:
    result = engine.query(expr, at)
    if not result:
        return None
    assert len(result) == 1, (expr, result)
    return float(result[0]["value"][1])


def assert_entry_equals_promql(engine: Any, node: str, entry: NodeEntry, at: float) -> None:
    sel = f'node="{node}"'
    assert entry.level == value(engine, f"{series.INTERFERENCE_LEVEL}{{{sel}}}", at)
    assert entry.score == value(engine, f"{series.SCHEDULE_SCORE}{{{sel}}}", at)
    assert entry.fallback == (value(engine, f"{series.MEMORY_PRESSURE_FALLBACK}{{{sel}}}", at) == 1)
    assert entry.kata_ready == (value(engine, f"max({series.KATA_READY}{{{sel}}})", at) == 1)
    for label in series.DETECTIONS.values():
        index = value(engine, f'{series.DETECTION_INDEX}{{{sel},detection="{label}"}}', at)
        triggered = value(engine, f'{series.DETECTION_TRIGGERED}{{{sel},detection="{label}"}}', at)
        if index is None:
            assert label not in entry.detections and f"detections.{label}" in entry.missing
        else:
            assert entry.detections[label].index == index
            assert entry.detections[label].triggered == (triggered == 1)
    assert entry.signals is not None
    for key, name in {**series.SIGNAL_SERIES, **series.CONTEXT_SERIES}.items():
        expected = value(engine, f"{name}{{{sel}}}", at)
        if expected is None or not math.isfinite(expected):
            assert key not in entry.signals and f"signals.{key}" in entry.missing
        else:
            assert entry.signals[key] == expected, key
    violated = {
        label
        for label in series.HARD_CONSTRAINTS.values()
        if value(engine, f'{series.HARD_CONSTRAINT_VIOLATED}{{{sel},constraint="{label}"}}', at)
        == 1
    }
    assert entry.schedulable == (not violated)
    sample = value(engine, f"timestamp({series.MEMORY_PRESSURE_FALLBACK}{{{sel}}})", at)
    assert sample is not None and parse_time(entry.sample_time) == pytest.approx(sample, abs=1e-3)


async def test_prometheus_numbers_equal_promql_and_a_dead_prometheus_means_stale(
    exporters: list[ScrapeTarget], tmp_path: Path
) -> None:
    prom = Prometheus(tmp_path / "prom", targets=exporters, rule_files=[rules_file(tmp_path)])
    prom.start()
    out = tmp_path / "report.json"
    try:
        wait_until(
            lambda: len(prom.query(series.INTERFERENCE_LEVEL)) == 2, timeout=60, what="the rules"
        )
        async with PromQLClient(SourceConfig(prom.url)) as client:
            reporter = new_reporter(client, out)
            at = time.time()
            outcome = await reporter.cycle(at)
            assert outcome.ok, outcome.message
            entries = reporter.tracker.entries
            assert set(entries) == {"host", "old"}
            for node, entry in entries.items():
                assert_entry_equals_promql(prom, node, entry, at)
                assert entry.live
            assert entries["old"].fallback and "fallback:memory_pressure" in entries["old"].reasons
            assert not entries["host"].fallback
            validate_object(json.loads(out.read_text()))
            assert reporter.tracker.generation == 0

            # Prometheus dies mid-run.
            before = dict(entries)
            os.killpg(prom.pid, signal.SIGKILL)
            prom.proc.wait(10)  # type: ignore[union-attr]
            outcome = await reporter.cycle(time.time())
            assert not outcome.ok and "source_unreachable" in outcome.message
            after = reporter.tracker.entries
            assert after == before and all(after[n] is before[n] for n in before)  # untouched
            view = reporter.tracker.view()
            reachable = next(c for c in view.conditions if c.type == "SourceReachable")
            assert reachable.status == "False" and reachable.reason == "Unreachable"
            heartbeat = parse_time(view.last_sync_time)
            assert heartbeat == pytest.approx(at, abs=1e-3)  # the heartbeat stopped
            # ...so for a reader every node goes stale once staleAfter has passed: not zero,
            # not fresh.
            later = at + 31
            result = reporter.tracker.fail(SourceError(UNREACHABLE, "down"), later)
            assert result.stale == 2
            for entry in after.values():
                assert later - entry_time(entry, heartbeat) > 30
                assert entry.level is not None  # the last known values, not zeros

            # Prometheus comes back (same data): fresh again.
            prom.start()
            wait_until(
                lambda: len(prom.query(series.INTERFERENCE_LEVEL)) == 2, timeout=60, what="rules"
            )
            outcome = await reporter.cycle(time.time())
            assert outcome.ok, outcome.message
            assert (
                next(
                    c for c in reporter.tracker.view().conditions if c.type == "SourceReachable"
                ).status
                == "True"
            )
    finally:
        prom.stop()


# How far behind now the reporter and the checks read VictoriaMetrics: past its latency offset
# (1 s here) and past what vmalert's writes trail its evaluations by on a loaded machine (under
# xdist the other worker's load once put the report's figures and VictoriaMetrics' answers at
# different evaluations when they read 3 s back), so both see the same, settled samples.
SETTLED = 10.0


async def test_victoriametrics_numbers_equal_its_promql(
    exporters: list[ScrapeTarget], tmp_path: Path
) -> None:
    vm = VictoriaMetrics(tmp_path / "vm", targets=exporters)
    vm.start()
    alert = VMAlert(
        tmp_path / "vmalert",
        rule_files=[rules_file(tmp_path, "victoriametrics")],
        datasource_url=vm.url,
        remote_write_url=vm.url,
    )
    alert.start()
    try:
        vm.wait_for_series(series.INTERFERENCE_LEVEL, timeout=90)
        wait_until(
            lambda: (
                len(vm.query(series.INTERFERENCE_LEVEL, time.time() - SETTLED)) == 2
                and len(vm.query(series.RULE_CONFIG_INFO, time.time() - SETTLED)) >= 1
            ),
            timeout=90,
            what=f"both nodes and the info series {SETTLED:g} s back",
        )
        async with PromQLClient(SourceConfig(vm.url)) as client:
            reporter = new_reporter(client, tmp_path / "report.json")
            at = time.time() - SETTLED
            outcome = await reporter.cycle(at)
            assert outcome.ok, outcome.message
            entries = reporter.tracker.entries
            assert set(entries) == {"host", "old"}
            for node, entry in entries.items():
                assert_entry_equals_promql(vm, node, entry, at)
            assert entries["old"].fallback
    finally:
        alert.stop()
        vm.stop()
