"""A few nodes through the whole placement benchmark: real Prometheus, reporter, extender."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bench.placement import run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs prometheus"),
]


def test_smoke_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results.json"
    flags = ["--nodes", "3", "--duration", "40", "--burst-every", "15", "--seed", "5", "--quick"]
    code = run.main([*flags, "--workdir", str(tmp_path / "work"), "--json", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    last = re.fullmatch(
        r"placement: exposure mco/default = ([0-9.]+|inf|nan), herding max/even = ([0-9.]+|nan)",
        lines[-1],
    )
    assert last, lines[-1]
    ratio, herding = float(last[1]), float(last[2])
    # The exit rule: 2 exactly when the line before the last says why the run was invalid, else
    # the printed figures against the targets.
    invalid = lines[-2].startswith("invalid run: ")
    assert code == (2 if invalid else 0 if ratio <= 0.5 and herding <= 2 else 1), lines[-2:]
    rows = {r["run"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {
        "default/none",
        "mco-basic/kube",
        "mco-basic/volcano",
        "mco-full/kube",
        "mco-full/volcano",
    }
    for r in rows.values():
        assert r["placed"] > 0
        assert r["online_pod_seconds"] > 0
        assert 0 <= r["exposure"] <= 1
        assert 0 <= r["pending_online_share"] <= r["exposure"]
        assert r["slowdown_p99"] >= r["slowdown_mean"] >= 1
        assert 0 <= r["qos_kept"] <= 1
        assert r["lag_max_s"] >= r["lag_p95_s"] >= 0
        # Exposed seconds were put down to what MCO saw, not all to other pods' side effects.
        causes = r["exposed_by_cause"]
        assert r["exposure"] == 0 or causes["other"] < 1, (r["run"], causes)
        # Bindings and retries are consistent: every unschedulable attempt is an attempt of a
        # pod that was then retried or is still pending.
        assert r["unschedulable_attempts"] >= r["pending"] - r["untried"]
    # The yardstick reads the pipeline: the default scheduler's pods meet triggered detections.
    assert rows["default/none"]["exposure"] > 0
    assert (rows["default/none"]["exposure"] >= 0.05) == ("default exposure" not in lines[-2])
    # Every MCO run asked its own real extender (which took CPU for it); the default did not.
    assert rows["default/none"]["extender_cpu_ms"] is None
    assert all(rows[k]["extender_cpu_ms"] > 0 for k in rows if k.startswith("mco-"))
    assert all(rows[k]["extender_decisions"] > 0 for k in rows if k.startswith("mco-"))
    work = tmp_path / "work"
    for label in ("basic-kube", "basic-volcano", "full-kube", "full-volcano", "observer-view"):
        assert (work / label.partition("-")[0] / f"extender-{label}.log").exists()
    # Volcano sends allocate for every placement, whatever MCO's policy values.
    for k in ("mco-basic/volcano", "mco-full/volcano"):
        assert rows[k]["extender_requests"]["allocate"] == rows[k]["placed"]
    # The default cluster has a pipeline of its own; each reports how its rules kept up.
    assert {k: r["pipeline"] for k, r in rows.items()} == {
        "default/none": "observer",
        "mco-basic/kube": "basic",
        "mco-basic/volcano": "basic",
        "mco-full/kube": "full",
        "mco-full/volcano": "full",
    }
    for r in rows.values():
        assert r["rule_evaluation"]["groups"] > 0 and r["rule_evaluation"]["iterations"] > 0
    assert "rule evaluation per pipeline" in "\n".join(lines)
    # The pods API is the full pipeline's own (the only one whose kube extender watches).
    assert (work / "full" / "kubeconfig").exists() and not (work / "basic" / "kubeconfig").exists()
    # Each pipeline saw its nodes: the reporter wrote a report its extenders served.
    for name in ("observer", "basic", "full"):
        assert (work / name / "report.json").exists()
