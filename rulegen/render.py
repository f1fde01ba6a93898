"""Render the detection model into Prometheus rules: a plain rule file or a PrometheusRule.

The fixed PromQL lives in ``templates/groups.yaml.j2``, which loops over the catalog's tables
(``rulegen.catalog``: each recorded series' expression, each signal, detection and hard
constraint); this module only prepares the numbers and names it needs. Both output formats
embed the very same ``groups`` text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, Final, Literal

import jinja2
import yaml

from mco import selfmetrics
from rulegen import series
from rulegen.catalog import CATALOG, Catalog, Detection, Signal
from rulegen.durations import format_duration
from rulegen.model import DetectionRuleConfig

_DNS1123_SUBDOMAIN: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1123_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# Which rule engine evaluates the rules: how the model reads its own recorded series.
Engine = Literal["prometheus", "victoriametrics"]
ENGINES: Final[tuple[Engine, ...]] = ("prometheus", "victoriametrics")
DEFAULT_ENGINE: Final[Engine] = "prometheus"
# The group whose rules read series recorded earlier in the same evaluation.
MODEL_GROUP: Final = "mco.rules"
# The group of what explains without deciding (signal indices, context series), every window.
EXPLAIN_GROUP: Final = "mco.explain"


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


def signal_gate(signal: Signal, detection: Detection) -> str:
    """Where a signal counts: a detection with a PSI fallback depends on whether the node has
    PSI (its primary signals where it does, its fallback signals where it does not)."""
    if not detection.psi_fallback:
        return ""
    return f"{series.MEMORY_PRESSURE_FALLBACK} == {1 if signal.fallback else 0}"


def _excess(signals: list[dict[str, Any]]) -> str:
    """A detection's excess (``series.DETECTION_EXCESS``): the max over its signals of
    ``(v - warn) / (critical - warn)``, mirrored when lower is worse, each gate applied once
    to the signals it gates. Empty for a detection without signals."""
    by_gate: dict[str, list[str]] = {}
    for s in signals:
        warn, critical = format_number(s["warn"]), format_number(s["critical"])
        if s["lower_is_worse"]:
            term = f"({warn} - {s['series']}) / ({warn} - {critical})"
        else:
            term = f"({s['series']} - {warn}) / ({critical} - {warn})"
        if len(signals) > 1:  # told apart, so that `or` keeps every signal
            term = f'label_replace({term}, "signal", "{s["label"]}", "", "")'
        by_gate.setdefault(s["gate"], []).append(term)
    if len(signals) == 1:
        ((gate, (term,)),) = by_gate.items()
        return f"{term}\nand on (node)\n({gate})" if gate else term
    parts = [
        "(\n    " + "\n    or\n    ".join(terms) + f"\n  )\n  and on (node)\n  ({gate})"
        if gate
        else "\n  or\n  ".join(terms)
        for gate, terms in by_gate.items()
    ]
    return "max by (node) (\n  " + "\n  or\n  ".join(parts) + "\n)"


def _plain_scalar(text: str) -> bool:
    """``text`` reads back as itself written as a plain YAML scalar (no ``: ``, `` #`` …)."""
    try:
        return bool(yaml.safe_load(f"k: {text}") == {"k": text})
    except yaml.YAMLError:
        return False


def _context(config: DetectionRuleConfig, generation: int, catalog: Catalog) -> dict[str, Any]:
    window = format_duration(config.window)
    hold_for, clear_after = config.hysteresis.ranges(config.evaluation_interval)
    recorded: list[dict[str, Any]] = []
    for r in catalog.recorded:
        expr = catalog.expr(r, window)
        recorded.append(
            {
                "series": r.series,
                "expr": expr,
                "block": "\n" in expr or not _plain_scalar(expr),
                "comment": r.comment.splitlines(),
                "explained": r.key in catalog.explanatory,
            }
        )
    signals: list[dict[str, Any]] = []
    for spec in catalog.signals:
        threshold = config.threshold(spec.key)
        detection = catalog.detection(spec.detection)
        signals.append(
            {
                "key": spec.key,
                "label": spec.label,
                "series": spec.series,
                "detection": detection.label,
                "detection_key": spec.detection,
                "warn": threshold.warn,
                "critical": threshold.critical,
                "lower_is_worse": spec.lower_is_worse,
                "gate": signal_gate(spec, detection),
            }
        )
    detections: list[dict[str, Any]] = [
        {
            "key": d.key,
            "label": d.label,
            "weight": config.weight(d.key),
            "signals": [s for s in signals if s["detection_key"] == d.key],
            "excess": _excess([s for s in signals if s["detection_key"] == d.key]),
        }
        for d in catalog.detections
    ]
    weighted = [d for d in detections if d["weight"] > 0]
    return {
        "s": series,  # recorded series names
        "w": window,
        "interval": format_duration(config.evaluation_interval),
        "explain_group": EXPLAIN_GROUP,
        "explain_interval": format_duration(max(config.window, config.evaluation_interval)),
        "generation": generation,
        "hash": config.config_hash(),
        "recorded": recorded,
        "signals": signals,
        "detections": detections,
        "weighted": weighted,
        "equal_weights": len({d["weight"] for d in weighted}) == 1,
        "hard": [
            {
                "label": c.label,
                "series": catalog.by_key(c.recorded).series,
                "operator": c.operator,
                "lower_is_worse": c.lower_is_worse,
                "max": config.hard_constraints[c.key],
            }
            for c in catalog.constraints
        ],
        "thresholds": _thresholds(config, catalog),
        "hold_for": format_duration(hold_for),
        "clear_after": format_duration(clear_after),
        "alerts": config.alerts,
        "runbook": config.alerts.runbook_url,
        "interfered_for": format_duration(config.alerts.node_interfered_for),
        "stale_after": config.report.stale_after,
        "m": selfmetrics,
    }


def _thresholds(config: DetectionRuleConfig, catalog: Catalog) -> list[dict[str, Any]]:
    """The ``series.THRESHOLD`` rules: (labels, value) of every threshold in force."""
    rows: list[dict[str, Any]] = []
    for spec in catalog.signals:
        t = config.threshold(spec.key)
        rows.append({"labels": {"signal": spec.label, "bound": "warn"}, "value": t.warn})
        rows.append({"labels": {"signal": spec.label, "bound": "critical"}, "value": t.critical})
    for c in catalog.constraints:
        rows.append(
            {
                "labels": {"constraint": c.label, "bound": "limit"},
                "value": config.hard_constraints[c.key],
            }
        )
    settings = {
        "nodeInterferedLevel": config.alerts.node_interfered_level,
        "evaluationInterval": config.evaluation_interval,
        "staleAfter": config.report.stale_after,
    }
    for key in series.THRESHOLD_SETTINGS:
        rows.append({"labels": {"setting": key, "bound": "limit"}, "value": float(settings[key])})
    return rows


def fresh_window_ms(evaluation_interval: int) -> int:
    """The window of a same-evaluation read: half the interval (see ``fresh_reads``)."""
    return evaluation_interval * 500


def fresh_reads(groups: str, evaluation_interval: int) -> str:
    """Prometheus only: the model group's instant reads of its own recorded series become
    ``last_over_time(x[interval/2])``; the values are the same and each read decodes only the
    newest chunk instead of the 5-minute lookback.

    Exact because Prometheus evaluates a group's rules in order at one timestamp ``t`` and
    appends each rule's result (or, for a series the rule no longer returns, a stale marker)
    at ``t`` before the next rule runs: a read at ``t`` finds the sample just written at ``t``,
    whatever happened to earlier evaluations (a missed or slow one changes nothing; the next
    one writes and reads at its own ``t``). The window must stay under one interval: range
    selectors skip stale markers, so a window reaching ``t - interval`` would return the
    previous evaluation's value of a series that just disappeared, where the instant read
    returns nothing. Reads over a range (``x[30s]``: hysteresis) are left alone, as are the
    other groups (the alerts group runs on its own interval). Where a rule fails, the
    instant read would return its last value up to 5 minutes old; this read returns none
    (no data, as for a missing signal).
    """
    window = f"{fresh_window_ms(evaluation_interval)}ms"

    def rewrite(body: list[str]) -> list[str]:
        # Only series whose every rule came earlier: a read of its own or a later rule's
        # series is of an earlier evaluation, and keeps the lookback.
        records = [
            (i, line.lstrip().removeprefix("- record: ").strip())
            for i, line in enumerate(body)
            if line.lstrip().startswith("- record: ")
        ]
        last = {name: i for i, name in records}
        out: list[str] = []
        written: list[str] = []
        for i, line in enumerate(body):
            stripped = line.lstrip()
            if stripped.startswith("- record: "):
                written = [name for name, j in last.items() if j < i]
                out.append(line)
            elif stripped.startswith("#") or not written:
                out.append(line)
            else:
                out.append(_fresh_line(line, written, window))
        return out

    return _in_group(groups, rewrite)


# An instant read of a raw exporter series (recorded names have a colon before ``mco_``), with
# or without label matchers: not followed by a range.
_RAW_INSTANT: Final = re.compile(r"(?<![\w:])(mco_[a-z0-9_]+)(\{[^{}]*\})?(?![\w:{]|\s*\[)")


def windowed_raw_reads(groups: str, window: str) -> str:
    """Prometheus only: the model group's instant reads of raw exporter series (gauges: the
    node set's ``mco_node_info``, ``mco_cpu_online``, ``mco_pressure_available``, the
    histogram's count, the pods' limits) become ``last_over_time(x[window])``, the rules'
    window; each decodes the newest chunk instead of the 5-minute lookback.

    While the series is scraped the value is the same: the newest sample, which a window of
    at least one scrape interval always holds (the window is 4 or more). Where the series
    stops (its target fails or the exporter drops it: a stale marker), the read keeps the last
    value for at most the window, as the rates over the same window keep theirs (range
    selectors skip stale markers), where the instant read dropped it at once; so a node's
    series all go about one window after its exporter. Where scrapes stop without a stale
    marker (Prometheus restarting), it drops it after the window, not 5 minutes.
    """

    def rewrite(body: list[str]) -> list[str]:
        return [
            line
            if line.lstrip().startswith(("#", "- record: "))
            else _RAW_INSTANT.sub(lambda m: f"last_over_time({m[1]}{m[2] or ''}[{window}])", line)
            for line in body
        ]

    return _in_group(groups, rewrite)


def explained_reads(groups: str, evaluation_interval: int) -> str:
    """Prometheus only: the explanation group's reads of recorded series become
    ``last_over_time(x[2 intervals])``: it runs on its own clock, and the newest sample the
    model wrote is at most one interval old (two: a late evaluation); its own, written earlier
    in the same evaluation, are at the same timestamp. Each read decodes the newest chunk
    instead of the 5-minute lookback."""
    window = f"{2 * evaluation_interval}s"
    # The model's series, and its own read in the evaluation that records them (its interval
    # is a window: two of the model's intervals never reach its previous evaluation).
    lines = _group_lines(groups, MODEL_GROUP) + _group_lines(groups, EXPLAIN_GROUP)
    names = sorted(
        {line.strip().removeprefix("- record: ") for line in lines if "- record: " in line}
    )

    def rewrite(body: list[str]) -> list[str]:
        skip = ("#", "- record: ")
        return [
            line if line.lstrip().startswith(skip) else _fresh_line(line, names, window)
            for line in body
        ]

    return _in_group(groups, rewrite, EXPLAIN_GROUP)


def _group_lines(groups: str, name: str) -> list[str]:
    lines = groups.splitlines(keepends=True)
    start, end = _group_span(lines, name)
    return lines[start:end]


def _group_span(lines: list[str], name: str) -> tuple[int, int]:
    """The line range of group ``name`` (from its ``- name:`` line to the next group's)."""
    start = next(i for i, line in enumerate(lines) if line.strip() == f"- name: {name}")
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("- name: ")),
        len(lines),
    )
    return start, end


def _in_group(
    groups: str, rewrite: Callable[[list[str]], list[str]], name: str = MODEL_GROUP
) -> str:
    """``groups`` with the lines of group ``name``'s rules passed through ``rewrite``."""
    lines = groups.splitlines(keepends=True)
    start, end = _group_span(lines, name)
    return "".join(lines[:start] + rewrite(lines[start:end]) + lines[end:])


def _fresh_line(line: str, names: list[str], window: str) -> str:
    """``line`` with each instant selector of ``names`` (with or without label matchers; not
    one followed by a range) read as ``last_over_time(selector[window])``."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w:])({alternatives})(\{{[^{{}}]*\}})?(?![\w:{{]|\s*\[)")
    return pattern.sub(lambda m: f"last_over_time({m[1]}{m[2] or ''}[{window}])", line)


def _groups(
    config: DetectionRuleConfig, generation: int, catalog: Catalog, engine: Engine
) -> tuple[str, dict[str, Any]]:
    if generation < 0:
        raise ValueError(f"generation must be >= 0, got {generation}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    context = _context(config, generation, catalog)
    text = _environment().get_template("groups.yaml.j2").render(context)
    if engine == "prometheus":
        text = fresh_reads(text, config.evaluation_interval)
        text = windowed_raw_reads(text, context["w"])
        text = explained_reads(text, config.evaluation_interval)
    return text.rstrip("\n") + "\n", context


def render_rules(
    config: DetectionRuleConfig,
    generation: int = 0,
    catalog: Catalog = CATALOG,
    engine: Engine = DEFAULT_ENGINE,
) -> str:
    """A Prometheus rule file (``rule_files:``) encoding ``config``.

    ``generation`` is the DetectionRuleConfig's metadata.generation (0: the built-in default);
    ``config`` must come from ``catalog`` (``from_spec(spec, catalog)``). ``engine``: the rule
    engine that evaluates it (``victoriametrics``: vmalert, or any ruler that reads its results
    back through a query API; ``fresh_reads``).
    """
    groups, context = _groups(config, generation, catalog, engine)
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
    catalog: Catalog = CATALOG,
    engine: Engine = DEFAULT_ENGINE,
) -> str:
    """A monitoring.coreos.com/v1 PrometheusRule holding the same groups as ``render_rules``."""
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        raise ValueError(f"PrometheusRule name {name!r} is not a DNS-1123 subdomain")
    if namespace is not None and (len(namespace) > 63 or not _DNS1123_LABEL.match(namespace)):
        raise ValueError(f"namespace {namespace!r} is not a DNS-1123 label")
    groups, context = _groups(config, generation, catalog, engine)
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
