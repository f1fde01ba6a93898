"""``mco-rulegen render``: the checked-in rules, both formats, clear errors."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rulegen.cli import main
from rulegen.generate import RULES_PATH, VM_RULES_PATH
from scripts.procs import Managed, free_port
from tests.reporter.conftest import write_kubeconfig
from tests.secured_web import assert_secured, hosts, secured_web, wait_served

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).with_name("promtool") / "config.yaml"


def test_render_defaults_is_the_checked_in_rule_file(capsys):
    assert main(["render"]) == 0
    assert capsys.readouterr().out == (ROOT / RULES_PATH).read_text()


def test_render_for_victoriametrics_is_its_checked_in_rule_file(capsys):
    assert main(["render", "--engine=victoriametrics"]) == 0
    assert capsys.readouterr().out == (ROOT / VM_RULES_PATH).read_text()
    assert main(["render", "--engine=prometheus"]) == 0
    assert capsys.readouterr().out == (ROOT / RULES_PATH).read_text()


def test_render_prometheusrule_to_a_file(tmp_path):
    out = tmp_path / "rule.yaml"
    code = main(
        [
            "render",
            f"--config={CONFIG}",
            "--format=prometheusrule",
            f"-o={out}",
            "--generation=7",
            "--name=mco",
            "--namespace=obs",
            "--label=release=kps",
        ]
    )
    assert code == 0
    rule = yaml.safe_load(out.read_text())
    assert rule["metadata"] == {
        "name": "mco",
        "namespace": "obs",
        "labels": {"release": "kps"},
        "annotations": {
            "mco.io/rule-config-generation": "7",
            "mco.io/rule-config-hash": rule["spec"]["groups"][0]["rules"][0]["labels"]["hash"],
        },
    }
    info = rule["spec"]["groups"][0]["rules"][0]
    assert info["record"] == "mco:rule_config:info" and info["labels"]["generation"] == "7"


def test_render_rejects_a_bad_config_with_its_path(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        CONFIG.read_text().replace("warn: 0.25, critical: 0.75}", "warn: 0.9, critical: 0.75}", 1)
    )
    assert main(["render", f"--config={bad}"]) == 1
    err = capsys.readouterr().err
    path = "spec.detections.cachePollution.signals.llcMissRatio"
    assert f"{bad}: {path}: warn (0.9) must be below critical (0.75)" in err


def test_render_reports_unwritable_output(capsys):
    assert main(["render", "-o=/nonexistent-dir/rules.yaml"]) == 1
    assert "cannot write /nonexistent-dir/rules.yaml" in capsys.readouterr().err


def test_render_rejects_bad_names_and_labels(capsys):
    assert main(["render", "--format=prometheusrule", "--name=Not_Valid"]) == 1
    assert "DNS-1123" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # a bad flag: exit 2, one line
        main(["render", "--format=prometheusrule", "--label=novalue"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == "mco-rulegen: error: expected key=value, got 'novalue'\n"


def test_console_script_entry_point_runs():
    result = subprocess.run(
        [sys.executable, "-m", "rulegen", "render", "--format=rules"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["groups"][0]["name"] == "mco.rules"


HEADER = "apiVersion: mco.io/v1alpha1\nkind: DetectionRuleConfig\nmetadata: {name: default}\n"
BOMB = (
    "  a0: &a0 [x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9))
    + "  window: *a8\n"
)


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("  detections: {ioCongestion: {weight: " + "9" * 401 + "}}\n", "expected a finite number"),
        ("  detections: {ioCongestion: {weight: " + "9" * 5000 + "}}\n", "integer of 5000"),
        ("  report: {neutralScore: .nan}\n", "expected a finite number, got nan"),
        ("  alerts: {nodeInterferedLevel: -.inf}\n", "expected a finite number, got -inf"),
        ("  detections: {ioCongestion: {weight: [1]}}\n", "expected a number, got [1]"),
        ("  detections: {ioCongestion: {weight: 1.0e+308}}\n", "must be <= 1000"),
        ("  window: 9999999999s\n", "spec.window: '9999999999s' is out of range"),
        ("  evaluationInterval: 9999999999s\n", "is out of range"),
        ("  alerts: {nodeInterferedFor: 9999999999s}\n", "is out of range"),
        (BOMB, "aliases (*a0) are not allowed"),
    ],
)
def test_render_refuses_hostile_configs_with_one_line_and_exit_1(tmp_path, capsys, spec, reason):
    path = tmp_path / "hostile.yaml"
    path.write_text(HEADER + "spec:\n" + spec)
    start = time.perf_counter()
    assert main(["render", f"--config={path}"]) == 1
    assert time.perf_counter() - start < 1
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"mco-rulegen: invalid DetectionRuleConfig: {path}: ")
    assert reason in line and len(line) < 400


@pytest.mark.slow
def test_controller_metrics_and_health_serve_the_web_config_file(tmp_path: Path) -> None:
    """The controller's /metrics and /healthz behind --web.config.file on ':PORT' (IPv4 and
    IPv6); the API server may be unreachable, the server is up regardless."""
    web = secured_web(tmp_path)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1")
    port = free_port()
    with Managed(
        [sys.executable, "-m", "rulegen", "controller", f"--kubeconfig={kubeconfig}",
         "--no-leader-elect", f"--web.listen-address=:{port}",
         f"--web.config.file={web.config_file}"],
        name="mco-rulegen",
        log_path=tmp_path / "rulegen.log",
    ) as proc:  # fmt: skip
        wait_served(proc, port, "/healthz", web)
        for host in hosts():
            assert_secured(port, "/metrics", web, host=host)
            assert_secured(port, "/healthz", web, host=host)
        assert proc.alive
