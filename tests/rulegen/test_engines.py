"""The generated rules in real PromQL engines, checked against the model in plain Python.

- A real Prometheus scrapes the real mco-exporter (under real I/O load) and evaluates the rules;
  the values it recorded at an evaluation time agree with tests/rulegen/reference.py computed
  from the raw samples Prometheus held for that window.
- A synthetic fleet (tests/rulegen/fleet.py, one node per profile, every branch of the model)
  is scraped by Prometheus and by VictoriaMetrics; vmalert evaluates the same rules against
  VictoriaMetrics. Both engines' recorded series equal the model's, series for series.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulegen import series as S
from rulegen.model import DetectionRuleConfig, load_config
from rulegen.render import render_rules
from scripts.procs import (
    Managed,
    Prometheus,
    ScrapeTarget,
    VictoriaMetrics,
    VMAlert,
    free_port,
    running,
    wait_until,
)
from tests.rulegen import fleet as F
from tests.rulegen.reference import RECORDED_NAMES, Obs, evaluate, extrapolated_rate, recorded

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

Key = tuple[str, str, tuple[tuple[str, str], ...]]  # node, name, extra labels
RECORDED_SELECTOR = '{__name__=~"' + "|".join(n.replace(":", ":") for n in RECORDED_NAMES) + '"}'


def engine_values(result: list[dict[str, Any]]) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for r in result:
        labels = dict(r["metric"])
        name, node = labels.pop("__name__"), labels.pop("node")
        out[(node, name, tuple(sorted(labels.items())))] = float(r["value"][1])
    return out


def expected_values(
    config: DetectionRuleConfig, per_node: dict[str, list[Obs]]
) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for node, obs in per_node.items():
        for (name, labels), value in recorded(evaluate(config, obs)).items():
            out[(node, name, tuple(sorted(labels)))] = value
    return out


def differences(got: dict[Key, float], want: dict[Key, float], rel: float) -> list[str]:
    problems = [f"missing {k} (want {want[k]!r})" for k in sorted(want.keys() - got.keys())]
    problems += [f"unexpected {k} = {got[k]!r}" for k in sorted(got.keys() - want.keys())]
    for k in sorted(want.keys() & got.keys()):
        if not math.isclose(got[k], want[k], rel_tol=rel, abs_tol=1e-12):
            problems.append(f"{k}: got {got[k]!r}, want {want[k]!r}")
    return problems


# --------------------------------------------------------------------------------------------
# Real exporter, real Prometheus


def raw_observations(prom: Prometheus, at: float, window: int) -> list[Obs]:
    """Every raw mco_ series Prometheus held in the window ending at ``at``, reduced like PromQL."""
    matrix = prom.query(f'{{__name__=~"mco_.*",node="local"}}[{window}s]', at=at)
    instant = {
        tuple(sorted(r["metric"].items())): float(r["value"][1])
        for r in prom.query('{__name__=~"mco_.*",node="local"}', at=at)
    }
    obs = []
    for r in matrix:
        labels = dict(r["metric"])
        name = labels.pop("__name__")
        points = [(float(t), float(v)) for t, v in r["values"]]
        counter = name.endswith(("_total", "_bucket", "_count", "_sum"))
        obs.append(
            Obs(
                name,
                labels,
                rate=extrapolated_rate(points, at - window, at, window) if counter else None,
                avg=None if counter else math.fsum(v for _, v in points) / len(points),
                last=instant.get(tuple(sorted(r["metric"].items()))),
            )
        )
    return obs


def recorded_at(prom: Prometheus, at: float) -> dict[Key, float]:
    """The samples the rule group recorded at exactly ``at``."""
    out: dict[Key, float] = {}
    for r in prom.query(RECORDED_SELECTOR[:-1] + ',node="local"}[500ms]', at=at):
        labels = dict(r["metric"])
        name, node = labels.pop("__name__"), labels.pop("node")
        for t, v in r["values"]:
            if abs(float(t) - at) < 1e-6:
                out[(node, name, tuple(sorted(labels.items())))] = float(v)
    return out


def test_prometheus_on_the_real_exporter_agrees_with_the_model(tmp_path):
    config = DetectionRuleConfig.default()
    rules = tmp_path / "rules.yaml"
    rules.write_text(render_rules(config, generation=5))
    port = free_port()
    exporter = Managed(
        [
            sys.executable,
            "-m",
            "exporter",
            f"--web.listen-address=127.0.0.1:{port}",
            "--no-collector.biolatency",
            "--node-name=local",
        ],
        name="mco-exporter",
        log_path=tmp_path / "exporter.log",
        cwd=ROOT,
    )
    prom = Prometheus(
        tmp_path / "prom",
        targets=[ScrapeTarget("mco-exporter", f"127.0.0.1:{port}", {"node": "local"})],
        rule_files=[rules],
    )
    # Real I/O load, so the I/O signals are not all zero.
    load = Managed(
        [
            "stress-ng",
            "--hdd",
            "1",
            "--hdd-bytes",
            "16M",
            "--timeout",
            "90s",
            "--temp-path",
            str(tmp_path),
        ],
        name="stress-ng",
        log_path=tmp_path / "stress.log",
    )
    with running(exporter):
        exporter.wait_http(f"http://127.0.0.1:{port}/metrics")
        with running(prom, load):
            prom.wait_for_series(S.INTERFERENCE_LEVEL, timeout=60)
            time.sleep(config.window + 2)  # a full window of samples behind the next evaluation
            info = prom.query(S.RULE_CONFIG_INFO)
            assert [r["metric"] for r in info] == [
                {"__name__": S.RULE_CONFIG_INFO, "generation": "5", "hash": config.config_hash()}
            ]
            latest = max(
                float(t) for r in prom.query(f"{S.INTERFERENCE_LEVEL}[3s]") for t, _ in r["values"]
            )
            attempts = []
            # A scrape still in flight when the group ran at T is in storage now but was not
            # seen by the rules; such a T is skipped (each attempt is a full comparison).
            for at in (
                latest,
                latest - 2 * config.evaluation_interval,
                latest - 4 * config.evaluation_interval,
            ):
                got = recorded_at(prom, at)
                want = expected_values(config, {"local": raw_observations(prom, at, config.window)})
                problems = differences(got, want, rel=1e-9)
                if not problems:
                    break
                attempts.append(problems)
            else:
                pytest.fail(
                    "no evaluation agreed with the model:\n" + "\n".join(map(str, attempts))
                )
    # This host: PSI, diskstats, vmstat by type, steal; no PMU, resctrl, schedstat, histogram.
    assert got[("local", S.MEMORY_PRESSURE_FALLBACK, ())] == 0
    assert ("local", S.SIGNAL_SERIES["psiIOSome"], ()) in got
    assert ("local", S.SIGNAL_SERIES["blockIOLatencyP95Seconds"], ()) in got
    assert ("local", S.SIGNAL_SERIES["llcMissRatio"], ()) not in got
    assert ("local", S.INTERFERENCE_LEVEL, ()) in got


# --------------------------------------------------------------------------------------------
# Synthetic fleet, Prometheus and VictoriaMetrics + vmalert


@pytest.fixture(scope="module")
def fleet_target(tmp_path_factory) -> Iterator[ScrapeTarget]:
    workdir = tmp_path_factory.mktemp("fleet")
    port = free_port()
    server = Managed(
        [
            sys.executable,
            "-m",
            "tests.rulegen.fleet",
            f"--port={port}",
            f"--nodes={len(F.PROFILES)}",
        ],
        name="fleet",
        log_path=workdir / "fleet.log",
        cwd=ROOT,
    )
    with running(server):
        server.wait_http(f"http://127.0.0.1:{port}/metrics")
        yield ScrapeTarget("mco-fleet", f"127.0.0.1:{port}")


def fleet_expected(config: DetectionRuleConfig) -> dict[Key, float]:
    """The model's values for the fleet: rates are the slopes, gauges their constant values."""
    per_node = {}
    for node, profile in F.assign(F.node_names(len(F.PROFILES)), list(F.PROFILES)).items():
        obs = [Obs("mco_node_info", {"nodename": node}, avg=1.0, last=1.0)]
        for s in profile.series:
            counter = s.name.endswith(("_total", "_bucket", "_count", "_sum"))
            obs.append(
                Obs(
                    s.name,
                    dict(s.labels),
                    rate=s.slope if counter else None,
                    avg=None if counter else s.base,
                    last=s.base,
                )
            )
        per_node[node] = obs
    return expected_values(config, per_node)


def test_vmalert_check_accepts_the_rule_file():
    result = VMAlert.check([ROOT / "charts/mco/files/mco-rules.yaml"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_and_vmalert_agree_with_the_model_on_every_branch(tmp_path, fleet_target):
    config = load_config(Path(__file__).with_name("promtool") / "config.yaml")
    full = tmp_path / "rules.yaml"
    full.write_text(render_rules(config, generation=7))
    # vmalert gets the recording group; it would need an Alertmanager for the alerts group.
    recording = tmp_path / "recording.yaml"
    groups = yaml.safe_load(full.read_text())["groups"]
    recording.write_text(
        yaml.safe_dump({"groups": [g for g in groups if g["name"] == "mco.rules"]})
    )
    want = fleet_expected(config)
    # Sanity of the fixture itself: every profile is scored differently from the others.
    assert (
        len({want.get((n, S.INTERFERENCE_LEVEL, ())) for n in F.node_names(len(F.PROFILES))}) >= 5
    )

    prom = Prometheus(tmp_path / "prom", targets=[fleet_target], rule_files=[full])
    vm = VictoriaMetrics(tmp_path / "vm", targets=[fleet_target])
    with running(prom, vm):
        vmalert = VMAlert(
            tmp_path / "vmalert",
            rule_files=[recording],
            datasource_url=vm.url,
            remote_write_url=vm.url,
        )
        with running(vmalert):
            results: dict[str, dict[Key, float]] = {}

            def converged(engine: Any, name: str) -> bool:
                results[name] = engine_values(engine.query(RECORDED_SELECTOR))
                return not differences(results[name], want, rel=1e-9)

            # Prometheus converges within one window; vmalert reads its own results back
            # through VictoriaMetrics, so each chained rule lags (new series become searchable
            # after a few seconds there).
            try:
                wait_until(
                    lambda: converged(prom, "prometheus"), timeout=60, interval=1, what="Prometheus"
                )
                wait_until(
                    lambda: converged(vm, "vmalert"), timeout=180, interval=2, what="vmalert"
                )
            except TimeoutError:
                report = {n: differences(v, want, rel=1e-9) for n, v in results.items()}
                pytest.fail(f"engines disagree with the model: {report}")
    assert results["prometheus"].keys() == results["vmalert"].keys() == want.keys()
    for key, value in results["prometheus"].items():
        assert math.isclose(value, results["vmalert"][key], rel_tol=1e-9, abs_tol=1e-12), key


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_fleet_profiles_are_valid_exposition(tmp_path):
    """promtool check metrics parses the synthetic exposition (no duplicate series etc.)."""
    text = F.Fleet(F.assign(F.node_names(len(F.PROFILES)), list(F.PROFILES)), start_ms=0).render(
        1000
    )
    # Timestamps are fine for Prometheus but promtool's linter only checks names and types.
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=text,
        capture_output=True,
        text=False,
        timeout=30,
        check=False,
    )
    assert result.returncode in (0, 3), result.stderr  # 3: lint findings (no HELP/TYPE lines)
    assert b"error" not in result.stderr.lower(), result.stderr
