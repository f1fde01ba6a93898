"""Every ``default`` in the chart's CRDs is one kube-apiserver takes when the CRD is created.

The API server validates each ``default`` as written (no nested default filled in first)
against its own node's schema and CEL rules; a real v1.36 API server refused the
DetectionRuleConfig CRD, and so ``helm install``, for 13 ``default: {}`` under rules that read
their fields (issue 26).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.rulegen.crd_validation import default_errors, version_schema

CRDS = sorted((Path(__file__).resolve().parents[2] / "charts/mco/crds").glob("*.yaml"))


def _versions(path: Path) -> list[dict[str, Any]]:
    crd = yaml.safe_load(path.read_text())
    return [version_schema(crd, v["name"]) for v in crd["spec"]["versions"]]


@pytest.mark.parametrize("path", CRDS, ids=[p.name for p in CRDS])
def test_every_default_passes_its_own_schema_and_cel_rules_as_written(path: Path) -> None:
    for schema in _versions(path):
        assert default_errors(schema) == []


def test_the_chart_has_both_crds_and_defaults_to_check() -> None:
    assert [p.name for p in CRDS] == [
        "mco.io_detectionruleconfigs.yaml",
        "mco.io_nodeinterferencereports.yaml",
    ]
    (drc,) = _versions(CRDS[0])
    assert drc["properties"]["spec"]["default"]["detections"]


def test_an_empty_default_under_a_rule_that_reads_its_fields_is_refused() -> None:
    """The shape the API server refused: the check sees what cel-python's defaulting hid."""
    threshold = {
        "type": "object",
        "default": {},
        "properties": {
            "warn": {"type": "number", "default": 0.5},
            "critical": {"type": "number", "default": 0.8},
        },
        "x-kubernetes-validations": [{"rule": "self.warn < self.critical"}],
    }
    (error,) = default_errors({"type": "object", "properties": {"llc": threshold}})
    assert error.startswith("llc.default") and "self.warn < self.critical" in error
    threshold["default"] = {"warn": 0.9, "critical": 0.8}
    (error,) = default_errors(threshold)
    assert "<root>.default" in error
    threshold["default"] = {"warn": "high", "critical": 0.8}
    assert "is not of type 'number'" in default_errors(threshold)[0]
    threshold["default"] = {"warn": 0.5, "critical": 0.8}
    assert default_errors(threshold) == []
