"""scripts/kind-e2e.sh cannot run here (no container engine); what can be checked is checked:
it is clean shell, and every chart object and key it relies on is one the chart renders."""

from __future__ import annotations

import re
import subprocess

from tests.chart.helm import ROOT, render, scenario_values

SCRIPT = ROOT / "scripts" / "kind-e2e.sh"


def test_shellcheck_clean() -> None:
    result = subprocess.run(
        ["shellcheck", str(SCRIPT)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_objects_the_script_uses_exist_in_the_scenario_it_installs() -> None:
    text = SCRIPT.read_text()
    (scenario,) = set(re.findall(r"scenarios/([a-z-]+)\.yaml", text))
    rendered = render(scenario_values(scenario), release="mco", namespace="mco")
    names = {(o["kind"].lower(), o["metadata"]["name"]) for o in rendered.objects}
    used = re.findall(r"\b(daemonset|deployment|configmap|prometheusrule)[/ ](mco-[a-z-]+)", text)
    assert len(used) >= 6
    for kind, name in used:
        assert (kind, name) in names, f"{kind}/{name}"
    for key in re.findall(r"\.data\.([a-z-]+)\\\.yaml", text):
        if "volcano-scheduler" in key:
            continue  # Volcano's own ConfigMap
        data = rendered.one("ConfigMap", "-volcano-scheduler")["data"]
        assert f"{key}.yaml" in data
    assert (
        "svc/mco-extender" in text
        and rendered.one("Service", "-extender")["spec"]["ports"][0]["port"] == 9848
    )
    dashboards = set(re.findall(r"for uid in ([a-z -]+);", text)[0].split())
    assert dashboards == {p.stem for p in (ROOT / "dashboards").glob("*.json")}
