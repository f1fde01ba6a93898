"""The chart README's values table, generated from values.yaml as helm-docs does.

Each row is a key of values.yaml with its type, its default (the value itself, as JSON) and the
description written above it as a ``# --`` comment (continued on the following ``#`` lines).
A key with a description is one row, its content included (``resources``); a mapping without
one is described key by key. ``# @section -- Title`` at the top level starts a sub-table. So a
default in the README can never differ from the chart's, and a value nobody described shows as
an empty description, which tests/chart/test_values.py refuses.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
VALUES = "charts/mco/values.yaml"
README = "charts/mco/README.md"
BEGIN = "<!-- generated from values.yaml by `make generate`: edit the comments there -->"
END = "<!-- end of the generated values table -->"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.-]*|\"[^\"]+\"): ?(?P<rest>.*)$")
_SECTION = re.compile(r"^# @section -- (?P<title>.+)$")
_DESCRIPTION = re.compile(r"^ *# -- ?(?P<text>.*)$")
_CONTINUED = re.compile(r"^ *#(?: (?P<text>.*))?$")


@dataclass(frozen=True, slots=True)
class Row:
    section: str
    key: str  # dotted path
    type: str
    default: str
    description: str


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "object"


def _lookup(values: dict[str, Any], path: list[str]) -> Any:
    node: Any = values
    for part in path:
        node = node[part]
    return node


def rows(text: str) -> list[Row]:
    """values.yaml's documented keys, in file order."""
    values = yaml.safe_load(text)
    out: list[Row] = []
    section = ""
    comment: list[str] = []  # the comment lines right above the current line
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing mappings
    skip_deeper: int | None = None  # inside a documented key's content or a list
    for line in text.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if skip_deeper is not None:
            if not stripped or indent > skip_deeper:
                continue
            skip_deeper = None
        if not stripped:
            comment = []
            continue
        if stripped.startswith("#"):
            if found := _SECTION.match(line):
                section, comment = found["title"].strip(), []
            else:
                comment.append(line)
            continue
        match = _KEY.match(line)
        if match is None:  # a list item of a key that was not documented: its content
            comment = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = match["key"].strip('"')
        path = [k for _, k in stack] + [key]
        value = _lookup(values, path)
        description = _description(comment)
        comment = []
        if description is not None or not isinstance(value, dict) or not value:
            out.append(
                Row(
                    section=section,
                    key=".".join(path),
                    type=_type(value),
                    default=json.dumps(value, ensure_ascii=False, separators=(", ", ": ")),
                    description=description or "",
                )
            )
            if isinstance(value, dict | list) and value:
                skip_deeper = indent
        else:
            stack.append((indent, key))
    return out


def _description(comment: list[str]) -> str | None:
    """The ``# --`` comment closest above a key and its ``#`` continuation lines."""
    starts = [i for i, line in enumerate(comment) if _DESCRIPTION.match(line)]
    if not starts:
        return None
    start = starts[-1]
    first = _DESCRIPTION.match(comment[start])
    assert first is not None
    parts = [first["text"]]
    for line in comment[start + 1 :]:
        continued = _CONTINUED.match(line)
        parts.append((continued["text"] or "") if continued else "")
    return " ".join(p.strip() for p in parts if p.strip())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(text: str) -> str:
    """The Markdown between the README's markers: one table per section."""
    lines: list[str] = []
    section: str | None = None
    for row in rows(text):
        if row.section != section:
            section = row.section
            if lines:
                lines.append("")
            if section:
                lines += [f"### {section}", ""]
            lines += ["| key | type | default | description |", "|---|---|---|---|"]
        lines.append(
            f"| `{row.key}` | {row.type} | `{_cell(row.default)}` | {_cell(row.description)} |"
        )
    return "\n".join(lines) + "\n"


def splice(document: str, block: str) -> str:
    """``document`` with the text between BEGIN and END replaced by ``block``."""
    head, begin, rest = document.partition(BEGIN + "\n")
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"{README}: the markers {BEGIN!r} and {END!r} are missing")
    return head + begin + "\n" + block + "\n" + end + tail


def spliced_files(root: Path = ROOT) -> dict[str, str]:
    """Repo-relative path -> content, for files whose marked part only is generated."""
    readme = root / README
    if not readme.exists():
        return {}
    block = table((root / VALUES).read_text())
    return {README: splice(readme.read_text(), block)}
