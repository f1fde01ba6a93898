"""status.config carries the thresholds in force (what /v1/explain quotes), keyed as the
report's nodes are, and the CRD accepts them."""

from __future__ import annotations

import msgspec

from reporter.engine import report_config
from reporter.schema import (
    LAYOUT_LABEL,
    ConstraintConfig,
    NodeInterferenceReport,
    ObjectMeta,
    ReportStatus,
    ThresholdConfig,
    decode_report,
    encode,
)
from rulegen.model import DetectionRuleConfig, from_spec
from tests.reporter.conftest import validate_object

DEFAULTS = DetectionRuleConfig.default().hard_constraints  # not in SPEC: the default stands
SPEC = {
    "detections": {
        "ioCongestion": {"weight": 2.5, "signals": {"psiIOSome": {"warn": 0.2, "critical": 0.7}}},
        "memoryPressure": {"fallback": {"pageScanRate": {"warn": 5000, "critical": 50000}}},
    },
    "hardConstraints": {"psiIOSomeMax": 0.9},
}


def test_the_accepted_thresholds_are_in_status_config():
    config = report_config(from_spec(SPEC), 4)
    assert config.detections is not None and config.hard_constraints is not None
    assert list(config.detections) == [
        "cache_pollution", "io_congestion", "memory_pressure", "cpu_contention"
    ]  # fmt: skip
    io = config.detections["io_congestion"]
    assert io.weight == 2.5
    assert io.signals["psiIOSome"] == ThresholdConfig(0.2, 0.7)
    assert io.signals["blockIOLatencyP95Seconds"] == ThresholdConfig(0.025, 0.1)  # a default
    mem = config.detections["memory_pressure"]
    assert mem.fallback["pageScanRate"] == ThresholdConfig(5000.0, 50000.0)
    assert mem.fallback["memoryAvailableRatio"].warn > mem.fallback["memoryAvailableRatio"].critical
    assert config.detections["cpu_contention"].fallback == {}
    assert config.hard_constraints == {
        "psi_memory_full": ConstraintConfig("psiMemoryFull", DEFAULTS["psiMemoryFullMax"]),
        "psi_io_some": ConstraintConfig("psiIOSome", 0.9),
    }
    report = NodeInterferenceReport(
        ObjectMeta("cluster", labels={LAYOUT_LABEL: "cluster"}), status=ReportStatus(config=config)
    )
    validate_object(msgspec.json.decode(encode(report)))
    assert decode_report(encode(report)).status.config == config


def test_a_report_without_them_still_reads():
    """An older reporter's status.config: readers fall back to the defaults (extender.explain)."""
    raw = b'{"metadata":{"name":"cluster"},"status":{"config":{"staleAfter":"30s",'
    raw += b'"neutralScore":50}}}'
    config = decode_report(raw).status.config
    assert config is not None
    assert (config.detections, config.hard_constraints) == (None, None)
