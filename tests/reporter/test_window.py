"""The recorded query reads ``staleAfter`` of history (``query.window``), not the engine's whole
lookback, and reports what the plain selector reported: a real Prometheus and a real
VictoriaMetrics hold a node that is current and one whose rules stopped 10 s before (longer than
``live_within``, shorter than ``staleAfter``); the lagging node's entry is not live and carries
its last values and sample time, until it is older than ``staleAfter`` and goes. On Prometheus
every report equals the one the plain selector gives."""

from __future__ import annotations

import copy
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from mco.promql import PromQLClient, SourceConfig
from reporter import query
from reporter.engine import Reporter
from reporter.entries import Epsilon
from reporter.filesink import FileSink
from reporter.layout import LayoutChooser
from reporter.metrics import ReporterMetrics
from reporter.query import Kind, Plan
from reporter.ruleconfig import RuleConfigSource
from reporter.schema import parse_time
from rulegen import series
from rulegen.model import DetectionRuleConfig
from scripts.procs import Prometheus, VictoriaMetrics, wait_until
from testkit.answers import answers, quiet_values

pytestmark = pytest.mark.slow
STALE_AFTER = float(DetectionRuleConfig.default().report.stale_after)
LIVE_WITHIN = 5.0
HISTORY = 120  # seconds of 1 s samples before the current node's last one
LAG = 10  # the lagging node's rules stopped this long before
DETECTION = "io_congestion"
CONSTRAINT = "psi_io_some"


def _node(level: float, index: float) -> dict[tuple[Kind, str], float]:
    values = quiet_values(Plan(compact=False))
    values[(Kind.LEVEL, "")] = level
    values[(Kind.SCORE, "")] = 100 * (1 - level)
    values[(Kind.INDEX, DETECTION)] = index
    values[(Kind.TRIGGERED, DETECTION)] = float(index >= 0.5)
    values[(Kind.VIOLATED, CONSTRAINT)] = float(index >= 0.5)
    values[(Kind.SIGNAL, "psiIOSome")] = index / 2
    return values


# Each node's values before and for its last 5 samples: the entry must carry the last ones.
EARLY = {"current": _node(0.1, 0.2), "lagging": _node(0.2, 0.3)}
LATE = {"current": _node(0.15, 0.25), "lagging": _node(0.6, 0.8)}


def _lines(t_end: int, ms: bool) -> list[str]:
    """Exposition lines of both nodes' series, one sample a second (timestamps in seconds for
    promtool's OpenMetrics, milliseconds for VictoriaMetrics' Prometheus import)."""
    plan = Plan(compact=False)
    ends = {"current": t_end, "lagging": t_end - LAG}
    lines: list[str] = []
    for node, end in ends.items():
        for t in range(t_end - HISTORY, end + 1):
            values = (LATE if t > end - 5 else EARLY)[node]
            recorded, _, _ = answers(plan, {node: values}, {})
            stamp = t * 1000 if ms else t
            for sample in recorded:
                metric = dict(sample["metric"])
                name = metric.pop("__name__")
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items()))
                lines.append(f"{name}{{{labels}}} {sample['value'][1]} {stamp}")
            lines.append(f'{series.KATA_READY}{{node="{node}"}} 1 {stamp}')
        for t in range(t_end - HISTORY, t_end + 1):
            stamp = t * 1000 if ms else t
            digest = DetectionRuleConfig.default().config_hash()
            lines.append(f'{series.RULE_CONFIG_INFO}{{generation="0",hash="{digest}"}} 1 {stamp}')
    return lines


def _end() -> int:
    return (int(time.time()) // 3600 - 2) * 3600  # two hours ago: a finished block's range


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[Prometheus, int]]:
    end = _end()
    om = tmp_path / "fleet.om"
    lines = _lines(end, ms=False)
    # OpenMetrics wants each metric family's lines together.
    lines.sort(key=lambda line: line.split("{", 1)[0])
    om.write_text("\n".join(lines) + "\n# EOF\n")
    data = tmp_path / "prom" / "data"
    data.mkdir(parents=True)
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    prom = Prometheus(tmp_path / "prom", extra_args=["--storage.tsdb.retention.time=30d"])
    prom.start()
    try:
        wait_until(
            lambda: prom.value(f"count({series.INTERFERENCE_LEVEL})", at=end - LAG) == 2,
            timeout=60,
            what="the backfilled nodes",
        )
        yield prom, end
    finally:
        prom.stop()


@pytest.fixture
def victoriametrics(tmp_path: Path) -> Iterator[tuple[VictoriaMetrics, int]]:
    end = _end()
    vm = VictoriaMetrics(tmp_path / "vm")
    vm.start()
    try:
        body = "\n".join(_lines(end, ms=True)) + "\n"
        requests.post(
            f"{vm.url}/api/v1/import/prometheus", data=body.encode(), timeout=60
        ).raise_for_status()
        requests.get(f"{vm.url}/internal/force_flush", timeout=30).raise_for_status()
        wait_until(
            lambda: vm.value(f"count({series.INTERFERENCE_LEVEL})", at=end - LAG) == 2,
            timeout=60,
            what="the imported nodes",
        )
        yield vm, end
    finally:
        vm.stop()


def _reporter(client: PromQLClient, out: Path, plan: Plan) -> Reporter:
    return Reporter(
        source=client,
        rules=RuleConfigSource(),
        plan=plan,
        epsilon=Epsilon(),
        metrics=ReporterMetrics(),
        sink=FileSink(str(out), LayoutChooser("cluster")),
        live_within=LIVE_WITHIN,
    )


def _plain(plan: Plan) -> Plan:
    """The query this reporter sent before: the same selector without a window (the
    engine's lookback, 5 minutes in Prometheus)."""
    old = copy.copy(plan)
    old.recorded_expr = plan.recorded_selector
    return old


async def _walk(url: str, end: int, tmp_path: Path, compare: bool) -> None:
    async with PromQLClient(SourceConfig(url)) as client:
        windowed = _reporter(client, tmp_path / "windowed.json", Plan(compact=False))
        assert windowed.plan.recorded_expr.endswith(f"[{query.window(STALE_AFTER)}s])")
        plain = _reporter(client, tmp_path / "plain.json", _plain(Plan(compact=False)))
        # Assume the plain reporter is not windowed again: same config, same plan object.
        assert plain.plan.recorded_expr == plain.plan.recorded_selector
        lagging_end = end - LAG
        for at in (end + 0.5, end + 3, lagging_end + 20, lagging_end + STALE_AFTER - 0.5):
            for r in (windowed, plain) if compare else (windowed,):
                outcome = await r.cycle(float(at))
                assert outcome.ok, outcome.message
            entries = windowed.tracker.entries
            assert set(entries) == {"current", "lagging"}, at
            current, lagging = entries["current"], entries["lagging"]
            assert parse_time(lagging.sample_time) == lagging_end
            assert not lagging.live  # older than live_within...
            # ...its last values intact, not the earlier ones, not zeros, not missing.
            assert lagging.level == 0.6 and lagging.score == pytest.approx(40.0)
            assert lagging.detections[DETECTION].index == 0.8
            assert lagging.detections[DETECTION].triggered
            assert [v.constraint for v in lagging.violations] == [CONSTRAINT]
            assert lagging.signals is not None and lagging.signals["psiIOSome"] == 0.4
            assert not lagging.missing and lagging.kata_ready
            assert current.level == 0.15 and parse_time(current.sample_time) <= at
            assert current.live == (at - end <= LIVE_WITHIN)
            if compare:
                assert plain.tracker.entries == entries, at
        # Older than staleAfter: the lagging node goes, as it did with the plain selector.
        at = lagging_end + STALE_AFTER + 2
        outcome = await windowed.cycle(float(at))
        assert outcome.ok, outcome.message
        assert "lagging" not in windowed.tracker.entries
        if compare:
            assert (await plain.cycle(float(at))).ok
            assert plain.tracker.entries == windowed.tracker.entries


async def test_prometheus_window_keeps_a_lagging_node_s_values_as_the_plain_selector_did(
    prometheus: tuple[Prometheus, int], tmp_path: Path
) -> None:
    prom, end = prometheus
    await _walk(prom.url, end, tmp_path, compare=True)


async def test_victoriametrics_window_keeps_a_lagging_node_s_values(
    victoriametrics: tuple[VictoriaMetrics, int], tmp_path: Path
) -> None:
    vm, end = victoriametrics
    await _walk(vm.url, end, tmp_path, compare=False)
