"""The exporter's latency buckets come from the DetectionRuleConfig spec the chart installs."""

from __future__ import annotations

from typing import Any

import pytest

from rulegen.latency import buckets_flag
from rulegen.model import from_spec
from tests.chart.helm import render

FLAG = "--collector.biolatency.buckets="


def _exporter_args(values: dict[str, Any]) -> list[str]:
    daemonset = render(values).one("DaemonSet", "exporter")
    args: list[str] = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def _signals(**thresholds: tuple[float, float]) -> dict[str, Any]:
    signals = {key: {"warn": w, "critical": c} for key, (w, c) in thresholds.items()}
    return {"detections": {"ioCongestion": {"signals": signals}}}


@pytest.mark.parametrize(
    "spec",
    [
        {},
        _signals(blockIOLatencyP95Seconds=(0.001, 0.002)),
        _signals(blockIOLatencyP99Seconds=(2, 20)),
        _signals(blockIOLatencyP95Seconds=(1e-6, 0.5), blockIOLatencyP99Seconds=(0.75, 1)),
        _signals(blockIOLatencyP95Seconds=(0.016384, 0.032768)),  # thresholds on bounds
    ],
    ids=["default", "fast-disks", "slow-p99", "wide", "on-bounds"],
)
def test_the_flag_is_what_rulegen_derives_from_the_same_spec(spec: dict[str, Any]) -> None:
    values = {
        "detectionRuleConfig": {"spec": spec},
        "exporter": {"kernelEvents": {"enabled": True}},
    }
    args = _exporter_args(values)
    assert [a for a in args if a.startswith(FLAG)] == [FLAG + buckets_flag(from_spec(spec))]


def test_an_explicit_collector_option_wins() -> None:
    exporter = {
        "kernelEvents": {"enabled": True},
        "collectorOptions": {"biolatency.buckets": "all"},
    }
    args = _exporter_args({"exporter": exporter})
    assert [a for a in args if a.startswith(FLAG)] == [FLAG + "all"]


@pytest.mark.parametrize(
    ("exporter", "flag"),
    [
        ({}, False),  # kernel events off: biolatency off
        ({"collectors": {"biolatency": True}}, True),
        ({"kernelEvents": {"enabled": True}, "collectors": {"biolatency": False}}, False),
    ],
)
def test_the_flag_is_set_where_biolatency_runs(exporter: dict[str, Any], flag: bool) -> None:
    args = _exporter_args({"exporter": exporter})
    assert any(a.startswith(FLAG) for a in args) == flag


def _rulegen_flag(values: dict[str, Any]) -> str:
    deployment = render(values).one("Deployment", "rulegen")
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    (flag,) = [a for a in args if a.startswith("--exporter-latency-buckets=")]
    return flag.removeprefix("--exporter-latency-buckets=")


@pytest.mark.parametrize(
    ("exporter", "flag"),
    [
        ({}, "all"),  # no histogram: nothing to check
        ({"kernelEvents": {"enabled": True}}, "0.016384,0.032768,0.065536,0.131072,0.262144"),
        (
            {"kernelEvents": {"enabled": True}, "collectorOptions": {"biolatency.buckets": "all"}},
            "all",
        ),
    ],
)
def test_the_rulegen_controller_knows_what_the_exporters_export(
    exporter: dict[str, Any], flag: str
) -> None:
    assert _rulegen_flag({"exporter": exporter}) == flag
