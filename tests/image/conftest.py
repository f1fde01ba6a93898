"""The image under test: built from this tree by scripts/image.py (reused while the tree is
unchanged), or a skip that names exactly what this machine lacks."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts import image as image_build
from tests.chart.helm import merge, render, render_scenario, scenario_values
from tests.image.pod import PodRun, Sandbox, from_workload

NODE = "image-test-node"
POD_NAMESPACE = "mco-system"


@pytest.fixture(scope="session")
def image() -> str:
    reasons = image_build.missing()
    if reasons:
        pytest.skip("cannot build or run the image here: " + "; ".join(reasons))
    refusal = image_build.engine_refusal()
    if refusal:
        pytest.skip(refusal)
    try:
        built = image_build.build(log=False)
    except image_build.BaseUnavailableError as exc:
        pytest.skip(str(exc))
    return built.ref


@pytest.fixture(scope="session")
def session_box(image: str) -> Iterator[Sandbox]:
    box = Sandbox(image)
    try:
        probe = subprocess.run(
            ["buildah", "run", "--isolation", "chroot", box.name, "--", "true"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode != 0:
            pytest.skip(f"buildah run --isolation chroot fails here: {probe.stderr.strip()}")
        yield box
    finally:
        box.remove()


@pytest.fixture
def box(session_box: Sandbox) -> Iterator[Sandbox]:
    """The image's sandbox; after each test, nothing it started may still run."""
    yield session_box
    left = session_box.leftovers()
    assert not left, f"processes left running from the image: {left}"


@pytest.fixture(scope="session")
def full() -> dict[str, dict[str, Any]]:
    """The full scenario's workloads by component (what the chart installs). The exporter is
    the chart's default, least-privileged one: the eBPF test runs full's kernel-event one."""
    rendered = render_scenario("full")
    least = merge(scenario_values("full"), {"exporter": {"kernelEvents": {"enabled": False}}})
    workloads = {"exporter": render(least).one("DaemonSet", "-exporter")}
    for component in ("reporter", "rulegen", "extender"):
        workloads[component] = rendered.one("Deployment", f"-{component}")
    return workloads


def downward(component: str) -> dict[str, str]:
    """The downward-API values the kubelet would fill in for one pod of ``component``."""
    return {
        "metadata.name": f"mco-{component}-0",
        "metadata.namespace": POD_NAMESPACE,
        "spec.nodeName": NODE,
    }


def pod_of(workload: dict[str, Any], component: str, scratch: Path) -> PodRun:
    return from_workload(workload, scratch=scratch / component, downward=downward(component))
