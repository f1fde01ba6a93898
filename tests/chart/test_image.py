"""The image the chart runs: the Dockerfile copies enough to build MCO, with every command.

These checks need no container engine: they build the wheel from exactly the paths the
Dockerfile copies and check what the chart needs. tests/image builds and runs the image itself.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from scripts.image import chart_image_ref, copied_sources
from tests.chart.helm import ROOT, merge, render, render_scenario, scenario_values

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_every_copied_path_exists_and_every_package_is_copied() -> None:
    sources = copied_sources()
    for src in sources:
        assert (ROOT / src).exists(), src
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]["find"]["include"]
    for pattern in packages:
        assert pattern.rstrip("*") in sources, f"package {pattern} not copied into the image"


def test_commands_the_chart_runs_are_console_scripts() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    values = merge(scenario_values("full"), {"kata": {"deploy": {"enabled": True}}})
    commands = {
        c["command"][0]
        for obj in render(values).objects
        if obj["kind"] in ("Deployment", "DaemonSet")
        and obj["metadata"]["name"] != "mco-kata-deploy"
        for c in obj["spec"]["template"]["spec"]["containers"]
    }
    assert commands == {"mco-exporter", "mco-reporter", "mco-rulegen", "mco-extender"}
    assert commands <= set(scripts)
    assert "ENV PATH=/opt/mco/bin" in DOCKERFILE


def test_image_defaults_to_non_root_and_ships_bcc_for_the_exporter() -> None:
    assert "USER 65532:65532" in DOCKERFILE
    assert "python3-bpfcc" in DOCKERFILE
    # The exporter keeps the image's user unless the eBPF/perf collectors need root.
    ds = render_scenario("collect-analyze").one("DaemonSet", "-exporter")
    assert ds["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 65532
    ds = render_scenario("full").one("DaemonSet", "-exporter")  # full has kernelEvents on
    assert ds["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 0


@pytest.mark.slow
def test_wheel_built_from_the_copied_paths_holds_everything(tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    for src in copied_sources():
        path = ROOT / src
        if path.is_dir():
            shutil.copytree(path, context / src, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, context / src)
    subprocess.run(
        # Build isolation fetches setuptools like the image build does.
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(context),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("mco-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "exporter/collectors/biolatency.bpf.c",
        "rulegen/templates/groups.yaml.j2",
        "reporter/cli.py",
        "extender/cli.py",
        "mco/webconfig.py",
    ):
        assert needed in names, needed
    assert not [n for n in names if n.startswith("rulegen/dashboards/")], "a dev-only generator"
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA")))
    assert "License-Expression: Apache-2.0" in metadata.decode().splitlines()
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    for command in ("mco-exporter", "mco-reporter", "mco-rulegen", "mco-extender"):
        assert f"{command} = " in text


def test_chart_pulls_what_make_image_archives() -> None:
    """`kind load image-archive .cache/image/mco.tar` gives the nodes the default reference."""
    rendered = render_scenario("full")
    images = {
        c["image"] for obj, c in rendered.containers() if "kata" not in obj["metadata"]["name"]
    }
    app_version = yaml.safe_load((ROOT / "charts/mco/Chart.yaml").read_text())["appVersion"]
    assert images == {chart_image_ref()} == {f"ghcr.io/mco-io/mco:{app_version}"}
    values = merge(
        scenario_values("full"),
        {"image": {"registry": "registry.example.com", "repository": "mco/mco", "tag": "dev"}},
    )
    pushed = {c["image"] for _, c in render(values).containers()}
    assert pushed == {"registry.example.com/mco/mco:dev"}
    bare = {
        c["image"]
        for _, c in render(merge(scenario_values("full"), {"image": {"registry": ""}})).containers()
    }
    assert bare == {f"mco-io/mco:{app_version}"}
