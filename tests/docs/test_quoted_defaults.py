"""Defaults the docs quote in prose are the real ones: a chart value written as "`key` (VALUE"
is values.yaml's default, and the user guide's table of shipped policies is the generated
default DetectionRuleConfig. The values table itself is generated (scripts/values_table.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from mco.flags import duration, size
from tests.chart.helm import CHART, ROOT
from tests.chart.test_values import defaults, leaves

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# "`extender.maxBodySize` (256Mi; ..." -- a value right after the key, in parentheses.
QUOTED = re.compile(r"`(?P<key>[a-zA-Z]\w*(?:\.\w+)+)`\s*\(`?(?P<value>[\w.]+)`?[;,)\s]")
LITERAL = re.compile(r"^(\d[\w.]*|true|false)$")


def _default(path: str) -> Any:
    node: Any = defaults()
    for part in path.split("."):
        node = node[part]
    return node


def _same(quoted: str, default: Any) -> bool:
    if isinstance(default, bool):
        return quoted == str(default).lower()
    if str(default) == quoted:
        return True
    for parse in (duration, size, float):
        try:
            return bool(parse(quoted) == parse(str(default)))
        except ValueError:
            continue
    return False


def quoted_defaults(text: str, known: set[str]) -> list[tuple[str, str]]:
    return [
        (m["key"], m["value"])
        for m in QUOTED.finditer(text)
        if m["key"] in known and LITERAL.match(m["value"])
    ]


def test_the_scanner_reads_the_forms_the_docs_use() -> None:
    text = "`extender.maxBodySize` (256Mi; it was 64Mi), `exporter.port` (`9847`), `a.b` (3)"
    assert quoted_defaults(text, {"extender.maxBodySize", "exporter.port"}) == [
        ("extender.maxBodySize", "256Mi"),
        ("exporter.port", "9847"),
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_quoted_chart_defaults_are_values_yaml(doc: Path) -> None:
    known = set(leaves(defaults()))
    wrong = [
        (key, value, _default(key))
        for key, value in quoted_defaults(doc.read_text(), known)
        if not _same(value, _default(key))
    ]
    assert wrong == [], f"{doc.name} quotes defaults the chart does not have: {wrong}"


def _cell(text: str) -> Any:
    text = text.strip().strip("`")
    if text == "none":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def test_the_guides_shipped_policies_are_the_default_config() -> None:
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    lines = guide.split("The shipped policies:\n", 1)[1].strip().splitlines()
    header = [c.strip().strip("`") for c in lines[0].strip("|").split("|")]
    assert header[:2] == ["policy", "selects"]
    config = yaml.safe_load((CHART / "files" / "detectionruleconfig-default.yaml").read_text())
    policies = {p["name"]: p for p in config["spec"]["policies"]}
    rows = []
    for line in lines[2:]:
        if not line.startswith("| `"):
            break
        rows.append(line)
    assert [r.split("`")[1] for r in rows] == list(policies)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        policy = policies[cells[0].strip("`")]
        avoid, per_pod = cells[7].split(" / ") if " / " in cells[7] else ("none", "0")
        assert {
            "maxLevel": _cell(cells[2]),
            "hardConstraints": _cell(cells[3]),
            "scoreWeight": _cell(cells[4]),
            "reservationPerPod": _cell(cells[5]),
            "triggeredLevel": _cell(cells[6]),
            "avoidPolicies": [] if avoid == "none" else [avoid.strip("`")],
            "avoidPerPod": float(per_pod),
        } == {
            "maxLevel": policy.get("maxLevel"),
            "hardConstraints": policy["hardConstraints"],
            "scoreWeight": policy["scoreWeight"],
            "reservationPerPod": policy["reservationPerPod"],
            "triggeredLevel": policy["triggeredLevel"],
            "avoidPolicies": policy["avoidPolicies"],
            "avoidPerPod": policy["avoidPerPod"],
        }, cells[0]
