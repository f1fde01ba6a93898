"""Render the detection model into Prometheus rules: a plain rule file or a PrometheusRule.

The PromQL lives in ``templates/groups.yaml.j2``; this module only prepares the numbers and
names it needs. Both output formats embed the very same ``groups`` text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any, Final

import jinja2
import yaml

from mco import selfmetrics
from rulegen import series
from rulegen.durations import format_duration
from rulegen.model import SIGNALS, DetectionRuleConfig

_DNS1123_SUBDOMAIN: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1123_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def format_number(value: float) -> str:
    """Shortest exact spelling (``5000.0`` -> ``5000``, ``0.05`` -> ``0.05``)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rulegen", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701  (YAML and PromQL, not HTML)
    )
    env.filters["num"] = format_number
    # Go templates for alert annotations, which Prometheus (not Jinja) expands.
    env.globals["go"] = lambda inner: "{{ " + inner + " }}"
    return env


def _gate(signal_fallback: bool, detection: str) -> str:
    """Where a signal counts: memory-pressure signals depend on whether the node has PSI."""
    if detection != "memoryPressure":
        return ""
    return f"{series.MEMORY_PRESSURE_FALLBACK} == {1 if signal_fallback else 0}"


def _context(config: DetectionRuleConfig, generation: int) -> dict[str, Any]:
    signals: list[dict[str, Any]] = []
    for spec in SIGNALS:
        threshold = config.threshold(spec.key)
        signals.append(
            {
                "key": spec.key,
                "label": spec.label,
                "series": spec.series,
                "detection": series.DETECTIONS[spec.detection],
                "detection_key": spec.detection,
                "warn": threshold.warn,
                "critical": threshold.critical,
                "lower_is_worse": spec.lower_is_worse,
                "gate": _gate(spec.fallback, spec.detection),
            }
        )
    detections: list[dict[str, Any]] = [
        {
            "key": key,
            "label": label,
            "weight": config.weight(key),
            "signals": [s for s in signals if s["detection_key"] == key],
        }
        for key, label in series.DETECTIONS.items()
    ]
    hard = config.hard_constraints
    return {
        "s": series,
        "series_of": {**series.SIGNAL_SERIES, **series.CONTEXT_SERIES},
        "w": format_duration(config.window),
        "interval": format_duration(config.evaluation_interval),
        "generation": generation,
        "hash": config.config_hash(),
        "signals": signals,
        "detections": detections,
        "weighted": [d for d in detections if d["weight"] > 0],
        "hard": [
            {
                "label": series.HARD_CONSTRAINTS["psiMemoryFullMax"],
                "series": series.CONTEXT_SERIES["psiMemoryFull"],
                "max": hard.psi_memory_full_max,
            },
            {
                "label": series.HARD_CONSTRAINTS["psiIOSomeMax"],
                "series": series.SIGNAL_SERIES["psiIOSome"],
                "max": hard.psi_io_some_max,
            },
        ],
        "alerts": config.alerts,
        "runbook": config.alerts.runbook_url,
        "interfered_for": format_duration(config.alerts.node_interfered_for),
        "stale_after": config.report.stale_after,
        "config_accepted_metric": selfmetrics.RULEGEN_CONFIG_ACCEPTED,
        "leader_metric": selfmetrics.RULEGEN_LEADER,
    }


def _groups(config: DetectionRuleConfig, generation: int) -> tuple[str, dict[str, Any]]:
    if generation < 0:
        raise ValueError(f"generation must be >= 0, got {generation}")
    context = _context(config, generation)
    text = _environment().get_template("groups.yaml.j2").render(context)
    return text.rstrip("\n") + "\n", context


def render_rules(config: DetectionRuleConfig, generation: int = 0) -> str:
    """A Prometheus rule file (``rule_files:``) encoding ``config``.

    ``generation`` is the DetectionRuleConfig's metadata.generation (0: the built-in default).
    """
    groups, context = _groups(config, generation)
    text = _environment().get_template("rules.yaml.j2").render(context, groups=groups)
    _check_yaml(text)
    return text


def render_prometheusrule(
    config: DetectionRuleConfig,
    *,
    name: str,
    namespace: str | None,
    labels: Mapping[str, str] | None = None,
    generation: int = 0,
) -> str:
    """A monitoring.coreos.com/v1 PrometheusRule holding the same groups as ``render_rules``."""
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        raise ValueError(f"PrometheusRule name {name!r} is not a DNS-1123 subdomain")
    if namespace is not None and (len(namespace) > 63 or not _DNS1123_LABEL.match(namespace)):
        raise ValueError(f"namespace {namespace!r} is not a DNS-1123 label")
    groups, context = _groups(config, generation)
    text = (
        _environment()
        .get_template("prometheusrule.yaml.j2")
        .render(context, groups=groups, name=name, namespace=namespace, labels=dict(labels or {}))
    )
    _check_yaml(text)
    return text


def _check_yaml(text: str) -> None:
    """A template bug must fail here, not in Prometheus."""
    yaml.safe_load(text)
