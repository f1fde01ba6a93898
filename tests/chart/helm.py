"""Render charts/mco offline with Helm's own engine (helm-python-sdk) and index the objects.

``Chart.render`` has no ``api_versions`` argument, but the library's render call accepts the
same option as ``helm template --api-versions``; the tests need it to render the Prometheus
Operator objects, which the chart gates on ``monitoring.coreos.com/v1`` being served.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml
from helm_python import _native

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "mco"
SCENARIOS = ("full", "kata-only", "collect-analyze", "existing-volcano")
MONITORING_API = "monitoring.coreos.com/v1"
# A few of the entries Helm discovers on any cluster (group/version/Kind).
CLUSTER_APIS = ["v1/Namespace", "v1/Pod", "apps/v1/Deployment", "apps/v1/DaemonSet"]
RELEASE = "mco"
NAMESPACE = "mco-system"


@cache
def chart() -> helm.Chart:
    return helm.Chart.load(CHART)


# What the documented install commands pass: `--set monitoring.prometheusRelease=...`.
PROMETHEUS_RELEASE = "kube-prometheus-stack"


def scenario_file(name: str) -> dict[str, Any]:
    """The scenario file alone (``-f charts/mco/scenarios/NAME.yaml``)."""
    values: dict[str, Any] = yaml.safe_load((CHART / "scenarios" / f"{name}.yaml").read_text())
    return values


def scenario_values(name: str) -> dict[str, Any]:
    """The values of the documented install command: the file plus the release it requires."""
    values = scenario_file(name)
    if values.get("monitoring", {}).get("requirePrometheusRelease"):
        values = merge(values, {"monitoring": {"prometheusRelease": PROMETHEUS_RELEASE}})
    return values


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def render_files(
    values: dict[str, Any] | None = None,
    *,
    monitoring: bool = True,
    cluster: bool = False,
    kube_version: str | None = None,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    apis: tuple[str, ...] = (),
) -> dict[str, str]:
    """Template path -> rendered text, as ``helm template`` would print it.

    ``cluster`` renders as ``helm install`` does: Helm then knows the cluster's APIs, and its
    discovered set holds kind-qualified entries (``v1/Namespace``) the offline set never has.
    ``apis``: more entries the cluster serves (``group/version/Kind``).
    """
    options: dict[str, Any] = {"name": release, "namespace": namespace}
    api_versions = [MONITORING_API] if monitoring else []
    if cluster:
        api_versions += CLUSTER_APIS
    api_versions += apis
    if api_versions:
        options["api_versions"] = api_versions
    if kube_version:
        options["kube_version"] = kube_version
    files: dict[str, str] = json.loads(
        _render_cached(json.dumps(values or {}, sort_keys=True), json.dumps(options))
    )
    return files


@cache
def _render_cached(values: str, options: str) -> str:
    """Rendering is deterministic: many tests look at the same scenario."""
    result: str = _native.call_string("helm_render", chart()._raw(), values, options)
    return result


@dataclass(frozen=True)
class Rendered:
    objects: list[dict[str, Any]]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name_suffix: str = "") -> dict[str, Any]:
        found = [o for o in self.of_kind(kind) if o["metadata"]["name"].endswith(name_suffix)]
        assert len(found) == 1, (
            f"expected one {kind} *{name_suffix}, got {[_name(o) for o in found]}"
        )
        return found[0]

    def kinds(self) -> set[str]:
        return {o["kind"] for o in self.objects}

    def names(self, kind: str) -> set[str]:
        return {o["metadata"]["name"] for o in self.of_kind(kind)}

    def containers(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        for o in self.objects:
            if o["kind"] in ("Deployment", "DaemonSet"):
                for c in o["spec"]["template"]["spec"]["containers"]:
                    yield o, c


def _name(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def render(values: dict[str, Any] | None = None, **kwargs: Any) -> Rendered:
    files = render_files(values, **kwargs)
    objects: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(files.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        objects += [d for d in yaml.safe_load_all(text) if d]
    return Rendered(objects, notes)


def render_scenario(name: str, **kwargs: Any) -> Rendered:
    return render(scenario_values(name), **kwargs)


def crds() -> dict[str, dict[str, Any]]:
    """The chart's CRDs (what Helm installs from crds/), by kind."""
    out: dict[str, dict[str, Any]] = {}
    for entry in chart().crds:
        crd = yaml.safe_load(entry["data"])
        out[crd["spec"]["names"]["kind"]] = crd
    return out
