"""scripts/image.py without building: the skip reasons, the pins and the cache key."""

from __future__ import annotations

import re
import tomllib

from scripts import image
from tests.chart.helm import ROOT


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]).lower()


def test_missing_tools_are_named_one_by_one(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no tool at all
    reasons = image.missing()
    for tool in ("buildah", "mmdebstrap"):
        assert any(r.startswith(f"{tool} is not installed") for r in reasons), reasons


def test_pins_are_every_runtime_dependency_as_installed_and_nothing_else() -> None:
    pins = dict(pin.split("==") for pin in image.runtime_pins())
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in declared["dependencies"]:
        assert _name(requirement) in pins, requirement
    for requirement in declared["optional-dependencies"]["test"]:
        assert _name(requirement) not in pins, requirement  # the image has no test extras
    assert pins["aiohttp"] == __import__("aiohttp").__version__
    assert "pytest" not in pins and "mco" not in pins


def test_cache_key_follows_the_pins_and_the_base() -> None:
    pins = image.runtime_pins()
    key = image.source_key(pins, "localhost/mco-base:a")
    assert key == image.source_key(pins, "localhost/mco-base:a")
    assert key != image.source_key(pins, "localhost/mco-base:b")
    assert key != image.source_key([*pins, "extra==1"], "localhost/mco-base:a")
    assert {"pyproject.toml", "mco", "exporter", "rulegen", "reporter", "extender"} <= set(
        image.copied_sources()
    )
