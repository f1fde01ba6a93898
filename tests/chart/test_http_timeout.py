"""The schedulers' extender timeouts have one source (``extender.print_config``): print-config's
defaults, the chart's values and scenarios, and every doc that quotes one agree with it. They
once said 500ms, 1s and "2s or more" for the same Volcano setting."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import yaml

from extender import print_config
from extender.print_config import KUBE_SCHEDULER_HTTP_TIMEOUT, VOLCANO_HTTP_TIMEOUT
from mco.flags import duration, go_duration
from tests.chart.helm import CHART, ROOT, SCENARIOS, render, scenario_values

TIMEOUTS = {"volcano": VOLCANO_HTTP_TIMEOUT, "kube-scheduler": KUBE_SCHEDULER_HTTP_TIMEOUT}
# docs/benchmarks.md records what each run measured against the chart of its day.
DOCS = [
    p for p in [ROOT / "README.md", CHART / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    if p.name != "benchmarks.md"
]  # fmt: skip
# `httpTimeout` (or a dotted value ending in it) and the duration quoted right after it:
# "`httpTimeout: 1s`", "httpTimeout` (4s;", "`scheduler.kubeScheduler.httpTimeout`, 1s".
QUOTED = re.compile(
    r"(?P<key>[\w.]*httpTimeout)[`'\"]?\s*[:(,]?\s*`?(?P<value>\d+(?:\.\d+)?\s?(?:ms|s))\b"
)
SCHEDULER = re.compile(r"(?P<volcano>volcano)|(?P<kube>kube-?scheduler)", re.I)


def _printed(*argv: str) -> object:
    out = io.StringIO()
    assert print_config.main(list(argv), out=out) == 0
    return yaml.safe_load(out.getvalue())


def test_print_config_defaults_are_the_constants() -> None:
    volcano = _printed("--volcano")
    assert volcano[0]["plugins"][0]["arguments"]["extender.httpTimeout"] == go_duration(  # type: ignore[index]
        VOLCANO_HTTP_TIMEOUT
    )
    kube = _printed("--kube-scheduler")
    assert kube["extenders"][0]["httpTimeout"] == go_duration(KUBE_SCHEDULER_HTTP_TIMEOUT)  # type: ignore[index]


def test_the_charts_defaults_are_the_constants() -> None:
    scheduler = yaml.safe_load((CHART / "values.yaml").read_text())["scheduler"]
    assert duration(scheduler["volcano"]["httpTimeout"]) == VOLCANO_HTTP_TIMEOUT
    assert duration(scheduler["kubeScheduler"]["httpTimeout"]) == KUBE_SCHEDULER_HTTP_TIMEOUT


@pytest.mark.parametrize("scenario", [None, *SCENARIOS])
def test_every_rendered_scheduler_config_carries_the_default(scenario: str | None) -> None:
    """What a user installs: no scenario overrides the timeout the chart documents."""
    rendered = render(scenario_values(scenario) if scenario else {})
    found = []
    for cm in rendered.of_kind("ConfigMap"):
        data = cm.get("data", {})
        if "extender-tier.yaml" in data:
            tier = yaml.safe_load(data["extender-tier.yaml"])
            arguments = tier[0]["plugins"][0]["arguments"]
            found.append(("volcano", duration(arguments["extender.httpTimeout"])))
        if "kube-scheduler-config.yaml" in data:
            extender = yaml.safe_load(data["kube-scheduler-config.yaml"])["extenders"][0]
            found.append(("kube-scheduler", duration(extender["httpTimeout"])))
    assert all(seconds == TIMEOUTS[which] for which, seconds in found), found
    if scenario in (None, "full", "existing-volcano"):
        assert found, "the scenario renders a scheduler configuration"


def quoted_timeouts(text: str) -> list[tuple[str, str, str]]:
    """(scheduler, key, value) for every duration a text quotes for an httpTimeout. The
    scheduler is the key's own prefix, else the one the paragraph named last before it."""
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        for match in QUOTED.finditer(paragraph):
            key = match["key"]
            if key.startswith(("scheduler.volcano.", "extender.")):
                which = "volcano"
            elif key.startswith("scheduler.kubeScheduler."):
                which = "kube-scheduler"
            else:
                named = list(SCHEDULER.finditer(paragraph, 0, match.start()))
                which = "" if not named else "volcano" if named[-1]["volcano"] else "kube-scheduler"
            found.append((which, key, match["value"]))
    return found


def test_the_doc_scanner_finds_the_quotes_it_must_check() -> None:
    text = (
        "Volcano: `extender.httpTimeout: 500ms`.\n\nkube-scheduler: `httpTimeout: 1s`, "
        "and `httpTimeout` (`scheduler.volcano.httpTimeout`, 2 s).\n\n`httpTimeout` (3s)"
    )
    assert quoted_timeouts(text) == [
        ("volcano", "extender.httpTimeout", "500ms"),
        ("kube-scheduler", "httpTimeout", "1s"),
        ("volcano", "scheduler.volcano.httpTimeout", "2 s"),
        ("", "httpTimeout", "3s"),
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_doc_quotes_the_defaults(doc: Path) -> None:
    wrong = [
        (which or "which scheduler?", key, value)
        for which, key, value in quoted_timeouts(doc.read_text())
        if not which or duration(value.replace(" ", "")) != TIMEOUTS[which]
    ]
    assert wrong == [], f"{doc.name}: {wrong}; the defaults are {TIMEOUTS}"
