"""The runtime package works with its runtime dependencies alone, as in the image.

The image installs MCO without the test and dev extras. A child interpreter that cannot import
any of those extras (a ``sys.meta_path`` finder refuses them) imports every module of every
package the wheel ships, and runs every console script's ``--help``.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import setuptools  # type: ignore[import-untyped,unused-ignore]

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

CHILD = r"""
import importlib, importlib.abc, importlib.metadata, json, pkgutil, sys

blocked, packages = set(json.loads(sys.argv[1])), json.loads(sys.argv[2])


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"{name} is not a runtime dependency", name=name)
        return None


sys.meta_path.insert(0, Refuse())
try:
    import grafana_foundation_sdk  # the finder itself must work
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("grafana_foundation_sdk was importable")
imported = []
for package in packages:
    module = importlib.import_module(package)
    imported.append(package)
    for info in pkgutil.iter_modules(module.__path__, package + "."):
        # Shipped subpackages are in the list themselves; __main__ would run the program.
        if not info.ispkg and not info.name.endswith(".__main__"):
            importlib.import_module(info.name)
            imported.append(info.name)
ran = []
for ep in importlib.metadata.entry_points(group="console_scripts"):
    if ep.value.partition(".")[0] in {p.partition(".")[0] for p in packages}:
        try:
            ep.load()(["--help"])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
        ran.append(ep.name)
print(json.dumps({"imported": imported, "ran": sorted(ran)}))
"""


def shipped_packages() -> list[str]:
    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    found = setuptools.find_packages(
        where=str(ROOT), include=find["include"], exclude=find.get("exclude", ())
    )
    return sorted(found)


def extra_import_names() -> list[str]:
    """Top-level import names of every distribution in the optional extras."""

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    extras = {
        norm(re.match(r"[A-Za-z0-9._-]+", req).group())  # type: ignore[union-attr]
        for reqs in PYPROJECT["project"]["optional-dependencies"].values()
        for req in reqs
    } - {"mco"}
    names = {
        top
        for top, dists in importlib.metadata.packages_distributions().items()
        if any(norm(d) in extras for d in dists)
    }
    assert "grafana_foundation_sdk" in names and "pytest" in names, names
    return sorted(names)


def test_the_dashboard_generator_is_left_out_of_the_runtime_package() -> None:
    packages = shipped_packages()
    assert {"mco", "exporter", "rulegen", "reporter", "extender"} <= set(packages)
    assert not [p for p in packages if p.startswith("rulegen.dashboards")], packages


def test_every_shipped_module_and_console_script_works_without_the_extras() -> None:
    packages = shipped_packages()
    result = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(extra_import_names()), json.dumps(packages)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert {"rulegen.cli", "rulegen.controller", "exporter.collectors.biolatency"} <= set(
        report["imported"]
    )
    assert report["ran"] == sorted(PYPROJECT["project"]["scripts"])
