"""The thresholds in force as the report's ``status.config`` spells them: detections and hard
constraints keyed by their labels (the keys of ``status.nodes[].detections`` and
``violations``), signals by their report keys, so a reader can set each value beside its
``warn`` and ``critical`` without the catalog."""

from __future__ import annotations

from collections.abc import Mapping

from reporter.schema import ConstraintConfig, DetectionConfig, ThresholdConfig
from rulegen.catalog import CATALOG, Catalog
from rulegen.model import DetectionRuleConfig, Threshold


def _thresholds(signals: Mapping[str, Threshold]) -> dict[str, ThresholdConfig]:
    return {key: ThresholdConfig(t.warn, t.critical) for key, t in signals.items()}


def detection_configs(
    cfg: DetectionRuleConfig, catalog: Catalog = CATALOG
) -> dict[str, DetectionConfig]:
    """Each detection's weight and thresholds, by detection label."""
    return {
        catalog.detection(key).label: DetectionConfig(
            detection.weight, _thresholds(detection.signals), _thresholds(detection.fallback)
        )
        for key, detection in cfg.detections.items()
    }


def constraint_configs(
    cfg: DetectionRuleConfig, catalog: Catalog = CATALOG
) -> dict[str, ConstraintConfig]:
    """Each hard constraint's limit and the signal it limits, by constraint label."""
    return {
        c.label: ConstraintConfig(c.recorded, float(cfg.hard_constraints[c.key]))
        for c in catalog.constraints
        if c.key in cfg.hard_constraints
    }
