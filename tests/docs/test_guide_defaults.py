"""The user guide's extender table quotes real defaults: a documented default of a flag is right
when passing that value parses to the same settings as passing nothing, for mco-extender run
by hand and for the arguments the chart renders. It once gave 64Mi/128Mi as the defaults of
values whose chart defaults are 256Mi/384Mi."""

from __future__ import annotations

import re
from typing import Any

import pytest

from extender.cli import build_parser, parse_settings
from tests.chart.helm import ROOT, render

GUIDE = ROOT / "docs" / "user-guide.md"

HEADER = "| flag (chart value) | `mco-extender` default | chart default | what it changes |"
OFF = {"off", "none"}


def table_rows() -> list[tuple[str, str, str]]:
    """(flag, extender default, chart default) per row of section 7's table."""
    lines = GUIDE.read_text().split(HEADER + "\n", 1)[1].splitlines()[1:]
    rows = []
    for line in lines:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        flag = re.match(r"`(--[\w.-]+)`", cells[0])
        assert flag, line
        rows.append((flag[1], cells[1].split(" (")[0].strip("`"), cells[2].strip("`")))
    return rows


def extender_args() -> list[str]:
    """The arguments of the extender container the chart renders with its defaults."""
    deployment = render({}).one("Deployment", "-extender")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args: list[str] = container["args"]
    return args


def with_value(base: list[str], flag: str, value: str) -> Any:
    """``base`` plus ``flag value``; an "off"/"none" default means the flag is absent, "on"
    that a switch is given."""
    if value in OFF:
        action = next(a for a in build_parser()._actions if flag in a.option_strings)
        assert action.default in (False, None, ""), f"{flag} is not off by default"
        return parse_settings(base)
    if value == "on":
        return parse_settings([*base, flag])
    return parse_settings([*base, f"{flag}={value}"])


def test_the_table_is_found() -> None:
    assert len(table_rows()) >= 10


@pytest.mark.parametrize(("flag", "own", "chart"), table_rows())
def test_each_documented_default_is_the_binarys_and_the_charts(
    flag: str, own: str, chart: str
) -> None:
    assert with_value([], flag, own) == parse_settings([]), f"{flag}: mco-extender's default"
    args = extender_args()
    assert with_value(args, flag, chart) == parse_settings(args), f"{flag}: the chart's"
