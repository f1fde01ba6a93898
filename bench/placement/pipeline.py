"""One real MCO pipeline: Prometheus with the generated rules, mco-reporter, mco-extenders.

Started as processes with their public flags, as `make run` starts them; the rules are
rendered from the policy set's DetectionRuleConfig, which the reporter also reads
(`--rule-config`) and copies into the report's `status.config`, where the extender takes its
policies from.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.cpu import cpu_seconds
from rulegen.model import DetectionRuleConfig, from_spec
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


@functools.cache
def reporter_has_flag(flag: str) -> bool:
    """Whether this checkout's mco-reporter takes ``flag`` (its public --help)."""
    out = subprocess.run(
        [sys.executable, "-m", "reporter", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    return flag in out


def with_intervals(spec: dict[str, Any], scrape: float, evaluation: float) -> dict[str, Any]:
    """The spec for a Prometheus that scrapes every ``scrape`` and evaluates every
    ``evaluation`` seconds, as a real cluster's might (15 s is Prometheus's own default): the
    rules' window at least 4 scrapes (rate() needs two samples in it; four is the usual
    margin) and the report's staleAfter at least 4 of the longer interval, else as shipped.
    The shipped 1 s / 1 s leaves the spec as it is."""
    slow = max(scrape, evaluation)
    spec["evaluationInterval"] = f"{evaluation:g}s"
    spec["window"] = f"{max(_seconds(spec['window']), 4 * slow):g}s"
    stale = spec["report"]["staleAfter"]
    spec["report"]["staleAfter"] = f"{max(_seconds(stale), 4 * slow):g}s"
    return spec


def _seconds(duration: str) -> float:
    """A spec duration in seconds ("10s", "5m")."""
    units = {"s": 1, "m": 60, "h": 3600}
    return float(duration[:-1]) * units[duration[-1]]


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


class Extender:
    """One mco-extender process reading a pipeline's report file. Each (policy set, protocol)
    run has its own, so that its CPU is its decisions' alone (several read one report)."""

    def __init__(self, name: str, workdir: Path, report_path: Path, args: tuple[str, ...]) -> None:
        self.name = name
        self.port = free_port()
        self.process = Managed(
            [
                sys.executable,
                "-m",
                "extender",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--report-file={report_path}",
                "--report-poll-interval=250ms",
                *args,
            ],
            name=f"mco-extender-{name}",
            log_path=workdir / f"extender-{name}.log",
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process.start()
        self.process.wait_http(f"{self.url}/healthz", timeout=60)

    def nodes(self) -> list[dict[str, Any]]:
        response = requests.get(f"{self.url}/v1/nodes", timeout=10)
        response.raise_for_status()
        nodes: list[dict[str, Any]] = response.json()["nodes"]
        return nodes

    def fresh(self, count: int) -> bool:
        """Whether it holds fresh data for ``count`` nodes."""
        return sum(not n["stale"] and n["level"] is not None for n in self.nodes()) >= count

    def has_route(self, path: str) -> bool:
        """Whether the extender serves ``path`` (a POST of an empty object: 404 if not)."""
        response = requests.post(f"{self.url}{path}", json={}, timeout=5)
        return response.status_code != 404

    def cpu_seconds(self) -> float:
        """The extender's CPU time so far (user + system, from /proc)."""
        return cpu_seconds(self.process.pid)


class Pipeline:
    """Prometheus and mco-reporter for one DetectionRuleConfig, and the extenders that read
    its report (``add_extender``, before ``start``); the first one added serves the view."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        spec: dict[str, Any],
        target: str,
        path: str,
        scrape_interval: float = 1.0,
    ) -> None:
        self.name = name
        self.workdir = workdir
        self.config = from_spec(spec)
        self.config_path = workdir / "detectionruleconfig.yaml"
        self.rules_path = workdir / "rules.yaml"
        self.report_path = workdir / "report.json"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config.to_object(), sort_keys=False))
        # Rendered by the rulegen CLI from the file the reporter reads, as an operator would.
        render = ["render", "--config", str(self.config_path), "--output", str(self.rules_path)]
        subprocess.run([sys.executable, "-m", "rulegen", *render], check=True)
        self.prometheus = Prometheus(
            workdir / "prometheus",
            # The fleet target serves each pipeline's nodes at its own path.
            targets=[ScrapeTarget("mco-exporter", target, metrics_path=path)],
            rule_files=[self.rules_path],
            scrape_interval=f"{scrape_interval:g}s",
            evaluation_interval=f"{self.config.evaluation_interval}s",
        )
        self.reporter = Managed(
            [
                sys.executable,
                "-m",
                "reporter",
                f"--prometheus-url={self.prometheus.url}",
                f"--output={self.report_path}",
                f"--rule-config={self.config_path}",
                "--interval=1s",
                # A profile written every 5 s, not the shipped 30 s: the trace is minutes long,
                # as the reporter's 1 s interval is the bench's compression of time too.
                *(
                    ["--profile-publish-interval=5s"]
                    if reporter_has_flag("--profile-publish-interval")
                    else []
                ),
                f"--web.listen-address=127.0.0.1:{free_port()}",
            ],
            name=f"mco-reporter-{name}",
            log_path=workdir / "reporter.log",
        )
        self.extenders: dict[str, Extender] = {}

    def add_extender(self, name: str, args: tuple[str, ...] = ()) -> Extender:
        extender = Extender(f"{self.name}-{name}", self.workdir, self.report_path, args)
        self.extenders[name] = extender
        return extender

    def start(self) -> None:
        self.prometheus.start()
        self.reporter.start()
        for extender in self.extenders.values():
            extender.start()

    def stop(self) -> None:
        for extender in self.extenders.values():
            extender.process.stop()
        self.reporter.stop()
        self.prometheus.stop()

    def nodes(self) -> list[dict[str, Any]]:
        """/v1/nodes of the first extender: detections and `schedulable` come from the report,
        which every extender of the pipeline reads alike."""
        return next(iter(self.extenders.values())).nodes()

    def wait_fresh(self, count: int, timeout: float) -> None:
        """Until every extender holds fresh data for ``count`` nodes (a window must fill)."""
        for extender in self.extenders.values():
            wait_until(
                functools.partial(extender.fresh, count),
                timeout=timeout,
                what=f"fresh data for {count} nodes at extender {extender.name}",
            )

    def rule_evaluation(self) -> dict[str, Any]:
        """How Prometheus kept up with the rules (its public /metrics)."""
        response = requests.get(f"{self.prometheus.url}/metrics", timeout=10)
        response.raise_for_status()
        return rule_evaluation(response.text)


def rule_evaluation(exposition: str) -> dict[str, Any]:
    """From a Prometheus's own /metrics: the busiest rule group (the largest share of its
    interval its last evaluation took), that evaluation and the interval, the sum over groups,
    and iterations missed and run. A group whose evaluation takes longer than its interval
    misses iterations: its detections lag the data."""
    last: dict[str, float] = {}
    interval: dict[str, float] = {}
    missed = iterations = 0.0
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            group = sample.labels.get("rule_group", "")
            if sample.name == "prometheus_rule_group_last_duration_seconds":
                last[group] = sample.value
            elif sample.name == "prometheus_rule_group_interval_seconds":
                interval[group] = sample.value
            elif sample.name == "prometheus_rule_group_iterations_missed_total":
                missed += sample.value
            elif sample.name == "prometheus_rule_group_iterations_total":
                iterations += sample.value
    busiest = max(last, key=lambda g: last[g] / (interval.get(g) or 1.0), default="")
    return {
        "busiest_group": busiest.rpartition(";")[2],
        "last_duration_s": last.get(busiest, 0.0),
        "interval_s": interval.get(busiest, 0.0),
        "groups": len(last),
        "last_duration_sum_s": sum(last.values()),
        "iterations_missed": int(missed),
        "iterations": int(iterations),
    }
