"""The detection model: DetectionRuleConfig as typed Python, its defaults and its validation.

One config drives the recording rules, the alerts, the CRD and the dashboards (DESIGN §2–3).
What a signal, a detection or a hard constraint is (config key, series, label, direction,
natural bounds, default thresholds) is declared once in ``rulegen.catalog``; the defaults and
the checks here are derived from a ``Catalog``. ``load_config`` accepts the custom resource's
YAML and fills every field the object leaves out from the defaults, field by field, exactly as
the CRD's structural defaults do on the API server; it then checks what the CRD's CEL rules
check, so a config the API server would reject is rejected here with the same path.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from mco.policy import DEFAULT_POLICIES, Policy, parse_policies
from mco.policy import to_spec as policies_spec
from rulegen import limits
from rulegen.catalog import CATALOG, Catalog, Signal
from rulegen.durations import format_duration, parse_duration
from rulegen.yamlload import MAX_BYTES, load_documents

API_GROUP: Final = "mco.io"
API_VERSION: Final = "v1alpha1"
KIND: Final = "DetectionRuleConfig"
PLURAL: Final = "detectionruleconfigs"
DEFAULT_NAME: Final = "default"
# Hard-constraint hysteresis (docs/detection-model.md, "Hysteresis"): a few evaluations of
# exceeding hold a node; half a minute clear lets it go.
DEFAULT_HOLD_FOR: Final = "5s"
DEFAULT_CLEAR_AFTER: Final = "30s"
# The longest holdFor or clearAfter: each evaluation reads that range of the exceeded series,
# so an hour at the 1 s evaluation interval is 3,600 samples per node and constraint.
MAX_HYSTERESIS: Final = "1h"

# PromQL label matchers (``job=~".*mco-exporter.*"``), nothing else: the selector is pasted
# into alert expressions, so it must not be able to carry any other PromQL.
MATCHER: Final = r'[a-zA-Z_][a-zA-Z0-9_]*[ \t]*(=|!=|=~|!~)[ \t]*"([^"\\\n]|\\.)*"'
SELECTOR_PATTERN: Final = rf"^[ \t]*{MATCHER}([ \t]*,[ \t]*{MATCHER})*[ \t]*$"
URL_PATTERN: Final = r'^https?://[^\s"\\<>{}]+$'
MAX_SELECTOR: Final = 256  # the CRD's maxLength for each
MAX_URL: Final = 512


class ConfigError(ValueError):
    """An invalid DetectionRuleConfig; ``problems`` lists each one with its field path."""

    def __init__(self, problems: list[str]) -> None:
        problems = limits.capped(problems)
        self.problems = problems
        summary = problems[0] if len(problems) == 1 else f"{len(problems)} problems: "
        if len(problems) > 1:
            summary += "; ".join(problems)
        super().__init__(f"invalid DetectionRuleConfig: {summary}")


# The default catalog's signals, for readers that need no other catalog.
SIGNALS: Final[tuple[Signal, ...]] = CATALOG.signals


@dataclass(frozen=True, slots=True)
class Threshold:
    warn: float
    critical: float


@dataclass(frozen=True, slots=True)
class Detection:
    weight: float
    signals: Mapping[str, Threshold]  # primary signals, by config key
    # Only for a detection with a PSI fallback (catalog.Detection.psi_fallback): memoryPressure.
    fallback: Mapping[str, Threshold] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Hysteresis:
    """How long a hard constraint must be exceeded before it holds, and clear before it lets go.

    docs/detection-model.md ("Hysteresis") says why and how the rules record it.
    """

    hold_for: int  # seconds
    clear_after: int  # seconds

    def ranges(self, evaluation_interval: int) -> tuple[int, int]:
        """The rules' ranges for holdFor and clearAfter: at least one evaluation interval, so
        each holds a sample of the exceeded series besides the current one."""
        return max(self.hold_for, evaluation_interval), max(self.clear_after, evaluation_interval)


@dataclass(frozen=True, slots=True)
class ReportSettings:
    stale_after: int  # seconds
    neutral_score: float


@dataclass(frozen=True, slots=True)
class AlertSettings:
    exporter_selector: str
    runbook_url: str
    node_interfered_level: float
    node_interfered_for: int  # seconds


def default_spec(catalog: Catalog = CATALOG) -> dict[str, Any]:
    """The defaults, as the CR spells them, from the catalog's defaults.

    docs/detection-model.md gives the measurements and the literature behind each number;
    change both together.
    """
    detections: dict[str, Any] = {}
    for d in catalog.detections:
        entry: dict[str, Any] = {"weight": float(d.weight), "signals": _defaults(catalog, d.key)}
        if d.psi_fallback:
            entry["fallback"] = _defaults(catalog, d.key, fallback=True)
        detections[d.key] = entry
    return {
        "window": "10s",
        "evaluationInterval": "1s",
        "detections": detections,
        "hardConstraints": {
            **{c.key: float(c.default) for c in catalog.constraints},
            "holdFor": DEFAULT_HOLD_FOR,
            "clearAfter": DEFAULT_CLEAR_AFTER,
        },
        "report": {"staleAfter": "30s", "neutralScore": 50.0},
        "alerts": {
            "exporterSelector": 'job=~".*mco-exporter.*"',
            "runbookURL": "https://github.com/mco-io/mco/blob/main/docs/runbook.md",
            "nodeInterferedLevel": 0.5,
            "nodeInterferedFor": "5m",
        },
        "policies": policies_spec(DEFAULT_POLICIES),
    }


def _defaults(catalog: Catalog, detection: str, *, fallback: bool = False) -> dict[str, Any]:
    return {
        s.key: {"warn": float(s.warn), "critical": float(s.critical)}
        for s in catalog.signals_of(detection, fallback=fallback)
    }


DEFAULT_SPEC: Final[dict[str, Any]] = default_spec()
# Leaves that are durations (strings) rather than free strings.
DURATION_FIELDS: Final = frozenset(
    {
        "window",
        "evaluationInterval",
        "hardConstraints.holdFor",
        "hardConstraints.clearAfter",
        "report.staleAfter",
        "alerts.nodeInterferedFor",
    }
)


@dataclass(frozen=True, slots=True)
class DetectionRuleConfig:
    window: int  # seconds
    evaluation_interval: int  # seconds
    detections: Mapping[str, Detection]  # by config key, in catalog order
    hard_constraints: Mapping[str, float]  # limit by config key, in catalog order
    hysteresis: Hysteresis  # spec.hardConstraints.holdFor / clearAfter
    report: ReportSettings
    alerts: AlertSettings
    policies: tuple[Policy, ...] = DEFAULT_POLICIES  # spec.policies, first match wins

    @classmethod
    def default(cls, catalog: Catalog = CATALOG) -> DetectionRuleConfig:
        return from_spec({}, catalog)

    def threshold(self, signal_key: str) -> Threshold:
        for detection in self.detections.values():
            found = detection.signals.get(signal_key) or detection.fallback.get(signal_key)
            if found is not None:
                return found
        raise KeyError(signal_key)

    def weight(self, detection_key: str) -> float:
        return self.detections[detection_key].weight

    def to_spec(self) -> dict[str, Any]:
        """The CR ``spec`` with every field filled in (durations spelled canonically)."""
        detections: dict[str, Any] = {}
        for key, detection in self.detections.items():
            entry: dict[str, Any] = {
                "weight": detection.weight,
                "signals": {k: _threshold_spec(t) for k, t in detection.signals.items()},
            }
            if detection.fallback:
                entry["fallback"] = {k: _threshold_spec(t) for k, t in detection.fallback.items()}
            detections[key] = entry
        return {
            "window": format_duration(self.window),
            "evaluationInterval": format_duration(self.evaluation_interval),
            "detections": detections,
            "hardConstraints": {
                **self.hard_constraints,
                "holdFor": format_duration(self.hysteresis.hold_for),
                "clearAfter": format_duration(self.hysteresis.clear_after),
            },
            "report": {
                "staleAfter": format_duration(self.report.stale_after),
                "neutralScore": self.report.neutral_score,
            },
            "alerts": {
                "exporterSelector": self.alerts.exporter_selector,
                "runbookURL": self.alerts.runbook_url,
                "nodeInterferedLevel": self.alerts.node_interfered_level,
                "nodeInterferedFor": format_duration(self.alerts.node_interfered_for),
            },
            "policies": policies_spec(self.policies),
        }

    def config_hash(self) -> str:
        """16 hex digits of SHA-256 over the canonical spec: equal configs, equal hashes.

        Durations are canonical and numbers are floats, so ``weight: 1`` and ``weight: 1.0``,
        or ``window: 60s`` and ``window: 1m``, hash the same.
        """
        canonical = json.dumps(self.to_spec(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def to_object(self, name: str = DEFAULT_NAME) -> dict[str, Any]:
        """The whole custom resource (what the chart installs)."""
        return {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "metadata": {"name": name},
            "spec": self.to_spec(),
        }


def _threshold_spec(t: Threshold) -> dict[str, float]:
    return {"warn": t.warn, "critical": t.critical}


# ---------------------------------------------------------------------------------------------
# Loading


def load_config(text_or_path: str | Path) -> DetectionRuleConfig:
    """Parse a DetectionRuleConfig custom resource from YAML text or a file path.

    Raises ConfigError (a ValueError) naming the file and each bad field.
    """
    source = "<text>"
    if isinstance(text_or_path, Path) or (
        "\n" not in text_or_path and Path(text_or_path).is_file()
    ):
        path = Path(text_or_path)
        source = str(path)
        try:
            with path.open(encoding="utf-8", errors="replace") as f:
                text = f.read(MAX_BYTES + 1)  # bounded: the loader refuses anything longer
        except OSError as exc:
            raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from exc
    else:
        text = text_or_path
    try:
        documents = load_documents(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{source}: not valid YAML: {exc}"]) from exc
    if len(documents) != 1:
        what = "no document" if not documents else f"{len(documents)} documents"
        raise ConfigError([f"{source}: expected one DetectionRuleConfig, found {what}"])
    obj = documents[0]
    if not isinstance(obj, Mapping):
        hint = " (no such file)" if isinstance(obj, str) and "\n" not in text.strip() else ""
        raise ConfigError(
            [f"{source}: expected a DetectionRuleConfig object, got {limits.shown(obj)}{hint}"]
        )
    try:
        return config_from_object(obj)
    except ConfigError as exc:
        if source == "<text>":
            raise
        raise ConfigError([f"{source}: {p}" for p in exc.problems]) from exc


def config_from_object(obj: Mapping[str, Any], catalog: Catalog = CATALOG) -> DetectionRuleConfig:
    """The config of a DetectionRuleConfig object (as read from the API or a file)."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    problems = []
    if api_version != f"{API_GROUP}/{API_VERSION}":
        problems.append(
            f"apiVersion: expected {API_GROUP}/{API_VERSION}, got {limits.shown(api_version)}"
        )
    if kind != KIND:
        problems.append(f"kind: expected {KIND}, got {limits.shown(kind)}")
    if problems:
        raise ConfigError(problems)
    spec = obj.get("spec")
    return from_spec({} if spec is None else spec, catalog)


def from_spec(spec: Any, catalog: Catalog = CATALOG) -> DetectionRuleConfig:
    """Fill ``spec`` from the defaults field by field, then check every rule the CRD checks."""
    problems: list[str] = []
    defaults = DEFAULT_SPEC if catalog is CATALOG else default_spec(catalog)
    merged = _merge(defaults, spec, "spec", problems)
    if problems:
        raise ConfigError(problems)
    config = _build(merged, problems, catalog)
    if problems or config is None:
        raise ConfigError(problems)
    return config


def _merge(default: Any, given: Any, path: str, problems: list[str]) -> Any:
    if isinstance(default, dict):
        if not isinstance(given, Mapping):
            problems.append(f"{path}: expected a mapping, got {limits.shown(given)}")
            return default
        merged = {}
        for key in given:
            if key not in default:
                known = ", ".join(default)
                problems.append(f"{path}.{limits.field_name(key)}: unknown field (known: {known})")
        for key, value in default.items():
            merged[key] = (
                _merge(value, given[key], f"{path}.{key}", problems) if key in given else value
            )
        return merged
    if isinstance(default, list):  # a list is replaced whole, as the CRD's default is
        if not isinstance(given, list):
            problems.append(f"{path}: expected a list, got {limits.shown(given)}")
            return default
        return given
    if isinstance(default, float):
        number = limits.as_number(given, path, problems)
        return default if number is None else number
    if not isinstance(given, str):
        problems.append(f"{path}: expected a string, got {limits.shown(given)}")
        return default
    return given


def _duration(merged: Mapping[str, Any], dotted: str, problems: list[str]) -> int:
    value: Any = merged
    for part in dotted.split("."):
        value = value[part]
    try:
        return parse_duration(value)
    except ValueError as exc:
        problems.append(f"spec.{dotted}: {exc}")
        return 1


def _threshold(
    signal: Signal, raw: Mapping[str, float], path: str, problems: list[str]
) -> Threshold:
    warn, critical = raw["warn"], raw["critical"]
    maximum = limits.threshold_maximum(signal.maximum)
    for name, value in (("warn", warn), ("critical", critical)):
        if value < 0:
            problems.append(f"{path}.{name}: must be >= 0, got {value:g}")
        elif value > maximum:
            problems.append(f"{path}.{name}: must be <= {maximum:g}, got {value:g}")
    if signal.lower_is_worse and not warn > critical:
        problems.append(
            f"{path}: warn ({warn:g}) must be above critical ({critical:g}): "
            "lower values are worse for this signal"
        )
    if not signal.lower_is_worse and not warn < critical:
        problems.append(
            f"{path}: warn ({warn:g}) must be below critical ({critical:g}): "
            "higher values are worse for this signal"
        )
    return Threshold(warn=warn, critical=critical)


def _hysteresis(merged: Mapping[str, Any], problems: list[str]) -> Hysteresis:
    """holdFor and clearAfter: durations of at most MAX_HYSTERESIS. One shorter than the
    evaluation interval is not refused (the defaults must hold for any interval): the rules
    use one interval instead (``Hysteresis.ranges``)."""
    seconds = {}
    for name in ("holdFor", "clearAfter"):
        before = len(problems)
        value = _duration(merged, f"hardConstraints.{name}", problems)
        text = merged["hardConstraints"][name]
        if len(problems) > before:
            pass  # not a duration: already said
        elif value > parse_duration(MAX_HYSTERESIS):
            problems.append(
                f"spec.hardConstraints.{name}: must be at most {MAX_HYSTERESIS}, got {text}"
            )
        seconds[name] = value
    return Hysteresis(hold_for=seconds["holdFor"], clear_after=seconds["clearAfter"])


def _build(
    merged: dict[str, Any], problems: list[str], catalog: Catalog
) -> DetectionRuleConfig | None:
    before = len(problems)
    window = _duration(merged, "window", problems)
    interval = _duration(merged, "evaluationInterval", problems)
    if len(problems) == before and window < interval:
        problems.append(
            f"spec.window ({merged['window']}) must be at least "
            f"spec.evaluationInterval ({merged['evaluationInterval']})"
        )
    detections: dict[str, Detection] = {}
    for key in (d.key for d in catalog.detections):
        raw = merged["detections"][key]
        path = f"spec.detections.{key}"
        limits.check_weight(raw["weight"], f"{path}.weight", problems)
        thresholds: dict[str, dict[str, Threshold]] = {"signals": {}, "fallback": {}}
        for part in ("signals", "fallback"):
            for signal_key, t in raw.get(part, {}).items():
                signal = catalog.signal(signal_key)
                thresholds[part][signal_key] = _threshold(
                    signal, t, f"{path}.{part}.{signal_key}", problems
                )
        detections[key] = Detection(raw["weight"], thresholds["signals"], thresholds["fallback"])
    if all(d.weight <= 0 for d in detections.values()):
        problems.append("spec.detections: at least one detection needs a weight above 0")
    hard = merged["hardConstraints"]
    for constraint in catalog.constraints:
        value, maximum = hard[constraint.key], limits.threshold_maximum(constraint.maximum)
        if not 0 <= value <= maximum:
            problems.append(
                f"spec.hardConstraints.{constraint.key}: must be within [0, {maximum:g}], "
                f"got {value:g}"
            )
    report = merged["report"]
    if not 0 <= report["neutralScore"] <= 100:
        problems.append(
            f"spec.report.neutralScore: must be within [0, 100], got {report['neutralScore']:g}"
        )
    alerts = merged["alerts"]
    selector, runbook = alerts["exporterSelector"], alerts["runbookURL"]
    if len(selector) > MAX_SELECTOR or not re.fullmatch(SELECTOR_PATTERN, selector):
        problems.append(
            "spec.alerts.exporterSelector: expected PromQL label matchers such as "
            f'job="mco-exporter" (at most {MAX_SELECTOR} characters), got {limits.shown(selector)}'
        )
    if len(runbook) > MAX_URL or not re.fullmatch(URL_PATTERN, runbook):
        problems.append(
            f"spec.alerts.runbookURL: expected an http(s) URL of at most {MAX_URL} characters, "
            f"got {limits.shown(runbook)}"
        )
    if not 0 < alerts["nodeInterferedLevel"] <= 1:
        problems.append(
            "spec.alerts.nodeInterferedLevel: must be within (0, 1], "
            f"got {alerts['nodeInterferedLevel']:g}"
        )
    hysteresis = _hysteresis(merged, problems)
    stale_after = _duration(merged, "report.staleAfter", problems)
    interfered_for = _duration(merged, "alerts.nodeInterferedFor", problems)
    policies = parse_policies(merged["policies"], "spec.policies", problems)
    if problems:
        return None
    return DetectionRuleConfig(
        window=window,
        evaluation_interval=interval,
        detections=detections,
        hard_constraints={c.key: hard[c.key] for c in catalog.constraints},
        hysteresis=hysteresis,
        report=ReportSettings(stale_after, report["neutralScore"]),
        alerts=AlertSettings(
            alerts["exporterSelector"],
            alerts["runbookURL"],
            alerts["nodeInterferedLevel"],
            interfered_for,
        ),
        policies=policies,
    )
