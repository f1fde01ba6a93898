"""One real MCO pipeline: Prometheus with the generated rules, mco-reporter, mco-extender.

Started as processes with their public flags, as `make run` starts them; the rules are
rendered from the policy set's DetectionRuleConfig, which the reporter also reads
(`--rule-config`) and copies into the report's `status.config`, where the extender takes its
policies from.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests
import yaml

from rulegen.model import DetectionRuleConfig, from_spec
from rulegen.render import render_rules
from scripts.procs import Managed, Prometheus, ScrapeTarget, free_port, wait_until


def default_spec() -> dict[str, Any]:
    return DetectionRuleConfig.default().to_spec()


def hysteresis_available() -> bool:
    """Whether this checkout's hard constraints take `holdFor`/`clearAfter` (issue 12)."""
    return "holdFor" in default_spec()["hardConstraints"]


def extender_has_flag(flag: str) -> bool:
    """Whether this checkout's mco-extender takes ``flag`` (its public --help)."""
    out = subprocess.run(
        [sys.executable, "-m", "extender", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    return flag in out


def config_spec(
    *,
    reservation: bool,
    hysteresis: bool,
    avoid_per_pod: float | None = None,
    triggered_level: float | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The shipped config, with reservation and hysteresis switched off where asked. Without
    reservation, the pod watch does not run either, so ``avoidPolicies`` is off as well.
    ``overrides``: policy name -> fields set on that policy last (a tuning run's ``--set``)."""
    spec = default_spec()
    if not reservation:
        for policy in spec["policies"]:
            policy["reservationPerPod"] = 0.0
            policy["avoidPerPod"] = 0.0
    elif avoid_per_pod is not None:  # a tuning run: every policy that avoids others, this much
        for policy in spec["policies"]:
            if policy.get("avoidPolicies"):
                policy["avoidPerPod"] = avoid_per_pod
    if triggered_level is not None:  # a tuning run: every policy that has one, this one
        for policy in spec["policies"]:
            if policy.get("triggeredLevel"):
                policy["triggeredLevel"] = triggered_level
    by_name = {policy["name"]: policy for policy in spec["policies"]}
    for name, fields in (overrides or {}).items():
        if name not in by_name:
            raise ValueError(
                f"--set: no shipped policy is named {name!r} (known: {sorted(by_name)})"
            )
        for key, value in fields.items():
            if key == "name" or key not in by_name[name]:
                raise ValueError(f"--set: policy field {key!r} is not one the spec writes")
            by_name[name][key] = value
    hard = spec["hardConstraints"]
    if "holdFor" in hard and not hysteresis:
        # The shortest hold there is: one evaluation, i.e. the raw comparison.
        hard["holdFor"] = hard["clearAfter"] = spec["evaluationInterval"]
    return spec


class Pipeline:
    def __init__(
        self,
        name: str,
        workdir: Path,
        spec: dict[str, Any],
        target: str,
        path: str,
        extender_args: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.workdir = workdir
        self.config = from_spec(spec)
        self.config_path = workdir / "detectionruleconfig.yaml"
        self.rules_path = workdir / "rules.yaml"
        self.report_path = workdir / "report.json"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config.to_object(), sort_keys=False))
        self.rules_path.write_text(render_rules(self.config))
        self.prometheus = Prometheus(
            workdir / "prometheus",
            # The fleet target serves each pipeline's nodes at its own path.
            targets=[ScrapeTarget("mco-exporter", target, metrics_path=path)],
            rule_files=[self.rules_path],
            evaluation_interval=f"{self.config.evaluation_interval}s",
        )
        python = sys.executable
        self.reporter = Managed(
            [
                python,
                "-m",
                "reporter",
                f"--prometheus-url={self.prometheus.url}",
                f"--output={self.report_path}",
                f"--rule-config={self.config_path}",
                "--interval=1s",
                f"--web.listen-address=127.0.0.1:{free_port()}",
            ],
            name=f"mco-reporter-{name}",
            log_path=workdir / "reporter.log",
        )
        self.extender_port = free_port()
        self.extender = Managed(
            [
                python,
                "-m",
                "extender",
                f"--web.listen-address=127.0.0.1:{self.extender_port}",
                f"--report-file={self.report_path}",
                "--report-poll-interval=250ms",
                *extender_args,
            ],
            name=f"mco-extender-{name}",
            log_path=workdir / "extender.log",
        )

    @property
    def extender_url(self) -> str:
        return f"http://127.0.0.1:{self.extender_port}"

    def start(self) -> None:
        self.prometheus.start()
        self.reporter.start()
        self.extender.start()
        self.extender.wait_http(f"{self.extender_url}/healthz", timeout=60)

    def stop(self) -> None:
        for proc in (self.extender, self.reporter, self.prometheus):
            proc.stop()

    def nodes(self) -> list[dict[str, Any]]:
        response = requests.get(f"{self.extender_url}/v1/nodes", timeout=10)
        response.raise_for_status()
        nodes: list[dict[str, Any]] = response.json()["nodes"]
        return nodes

    def wait_fresh(self, count: int, timeout: float) -> None:
        """Until the extender holds fresh data for ``count`` nodes (a window must fill)."""
        wait_until(
            lambda: sum(not n["stale"] and n["level"] is not None for n in self.nodes()) >= count,
            timeout=timeout,
            what=f"fresh data for {count} nodes at {self.name}'s extender",
        )

    def has_route(self, path: str) -> bool:
        """Whether the extender serves ``path`` (a POST of an empty object: 404 if not)."""
        response = requests.post(f"{self.extender_url}{path}", json={}, timeout=5)
        return response.status_code != 404

    def cpu_seconds(self) -> float:
        """The extender's CPU time so far (user + system, from /proc)."""
        fields = Path(f"/proc/{self.extender.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = float(fields[11]) + float(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")
