"""MCO's whole data path on this machine, scraped the way the chart configures Prometheus.

Three mco-exporter processes are three nodes. ``host`` reads this machine's /proc and /sys.
``metal-6-1`` and ``legacy-4-4`` read the recorded kernel trees under tests/fixtures: a 6.1
bare-metal host with resctrl and schedstat, and a 4.4 kernel without PSI, so the memory-pressure
fallback runs. A real Prometheus loads the generated rules. Its scrape configs come from the
chart's own ServiceMonitors (tests/chart/operator.py), so ``node`` and ``job`` are set by the
chart's relabelings. It scrapes itself for the rule-evaluation metrics. Next to it run
mco-reporter (writing the report file), mco-extender (serving from that file, driven with
realistic scheduler requests) and the mco-rulegen controller (against kmock, the Kubernetes API
emulator). Every child is stopped on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kmock
import requests
import yaml

from scripts.procs import Managed, Prometheus, free_port, running, wait_until
from testkit import bodies
from tests.chart.helm import ROOT, merge, render, scenario_values
from tests.chart.operator import scrape_config

FIXTURES = ROOT / "tests" / "fixtures"
RULES = ROOT / "charts" / "mco" / "files" / "mco-rules.yaml"
HOST_NODE = "host"
FIXTURE_NODES = {"metal-6-1": "linux-6.1-metal", "legacy-4-4": "linux-4.4-no-psi"}
NODES = (HOST_NODE, *FIXTURE_NODES)


class ChartPrometheus(Prometheus):
    """Prometheus whose scrape configs are given whole (translated from ServiceMonitors)."""

    def __init__(self, workdir: Path, scrape_configs: list[dict[str, Any]], **kwargs: Any) -> None:
        self.scrape_configs = scrape_configs
        super().__init__(workdir, **kwargs)

    def write_config(self) -> None:
        config = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                *self.scrape_configs,
                {
                    "job_name": "prometheus",
                    "static_configs": [{"targets": [f"127.0.0.1:{self.port}"]}],
                },
            ],
        }
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def query_range(self, expr: str, seconds: float = 30.0) -> list[dict[str, Any]]:
        end = time.time()
        response = requests.get(
            f"{self.url}/api/v1/query_range",
            params={
                "query": expr,
                "start": f"{end - seconds:.3f}",
                "end": f"{end:.3f}",
                "step": "1",
            },
            timeout=10,
        )
        body = response.json()
        if body.get("status") != "success":
            raise RuntimeError(f"query {expr!r} failed: {body.get('error', response.text)}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def _python(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


@dataclass
class KubeEmulator:
    """kmock in a thread of its own, holding the default DetectionRuleConfig."""

    port: int = field(default_factory=free_port)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "kmock", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}
                    ],
                    "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "kmock", "user": "u"}}],
                    "current-context": "c",
                }
            )
        )
        return path

    def start(self) -> None:
        # Its server-side-apply emulation, and the resources the controller reads and writes.
        from testkit.kapi import DRC, LEASES, RULES, Cluster

        obj = render(scenario_values("full")).one("DetectionRuleConfig")
        obj["metadata"]["generation"] = 1

        async def serve() -> None:
            # Not strict: a missing object (the Lease before its first holder) is a 404.
            async with Cluster(strict=False) as cluster, kmock.Server(cluster, port=self.port):
                cluster.resources[DRC] = kmock.ResourceInfo(
                    kind="DetectionRuleConfig", namespaced=False
                )
                cluster.resources[RULES] = kmock.ResourceInfo(
                    kind="PrometheusRule", namespaced=True
                )
                # The controller applies only while it holds its Lease (leader election).
                cluster.resources[LEASES] = kmock.ResourceInfo(kind="Lease", namespaced=True)
                await cluster.post("/apis/mco.io/v1alpha1/detectionruleconfigs", json=obj)
                self._ready.set()
                while not self._stop.is_set():
                    await asyncio.sleep(0.1)

        self._thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("kmock did not start")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


@dataclass
class Stack:
    prometheus: ChartPrometheus
    extender_url: str


def _monitors() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, str]]]:
    """The chart's ServiceMonitors and the labels of the Services they select, by component."""
    fast = {"serviceMonitor": {"interval": "1s"}}
    values = merge(scenario_values("full"), {"reporter": fast, "rulegen": fast, "extender": fast})
    rendered = render(values)
    monitors, services = {}, {}
    for monitor in rendered.of_kind("ServiceMonitor"):
        component = monitor["metadata"]["labels"]["app.kubernetes.io/component"]
        monitors[component] = monitor
        selector = monitor["spec"]["selector"]["matchLabels"].items()
        (svc,) = [
            s for s in rendered.of_kind("Service") if selector <= s["metadata"]["labels"].items()
        ]
        services[component] = svc["metadata"]["labels"]
    return monitors, services


def _drive_extender(url: str, nodes: list[str]) -> None:
    """Scheduler traffic: Volcano predicates and prioritize, kube-scheduler filter/prioritize."""
    headers = {"Content-Type": "application/json"}
    for node in nodes:
        for runtime_class in (None, "kata-qemu"):
            body = bodies.volcano_predicate(node, tasks=3, runtime_class=runtime_class)
            requests.post(
                f"{url}/volcano/predicate", data=body, headers=headers, timeout=10
            ).raise_for_status()
    body = bodies.volcano_prioritize(nodes, tasks=3)
    requests.post(
        f"{url}/volcano/prioritize", data=body, headers=headers, timeout=10
    ).raise_for_status()
    for verb in ("filter", "prioritize"):
        body = bodies.kube_args(nodes)
        requests.post(
            f"{url}/scheduler/{verb}", data=body, headers=headers, timeout=10
        ).raise_for_status()


@contextlib.contextmanager
def stack(workdir: Path) -> Iterator[Stack]:
    monitors, services = _monitors()
    exporters: dict[str, tuple[Managed, int]] = {}
    for node in NODES:
        port = free_port()
        args = [f"--web.listen-address=127.0.0.1:{port}", f"--node-name={node}"]
        if node in FIXTURE_NODES:
            tree = FIXTURES / FIXTURE_NODES[node]
            args += [
                f"--path.procfs={tree / 'proc'}",
                f"--path.sysfs={tree / 'sys'}",
                f"--path.rootfs={tree}",
                "--no-collector.perf_llc",
                "--no-collector.biolatency",
            ]
        proc = Managed(
            _python("exporter", *args),
            name=f"exporter-{node}",
            log_path=workdir / f"exporter-{node}.log",
        )
        exporters[node] = (proc, port)
    reporter_port, extender_port, rulegen_port = free_port(), free_port(), free_port()
    scrape = [
        scrape_config(
            monitors["exporter"],
            services["exporter"],
            {f"127.0.0.1:{port}": node for node, (_, port) in exporters.items()},
        ),
        scrape_config(
            monitors["reporter"], services["reporter"], {f"127.0.0.1:{reporter_port}": "node-a"}
        ),
        scrape_config(
            monitors["extender"], services["extender"], {f"127.0.0.1:{extender_port}": "node-b"}
        ),
        scrape_config(
            monitors["rulegen"], services["rulegen"], {f"127.0.0.1:{rulegen_port}": "node-a"}
        ),
    ]
    prometheus = ChartPrometheus(
        workdir / "prometheus", scrape, rule_files=[RULES], port=free_port()
    )
    report = workdir / "report.json"
    reporter = Managed(
        _python(
            "reporter",
            f"--prometheus-url={prometheus.url}",
            f"--output={report}",
            "--interval=1s",
            f"--web.listen-address=127.0.0.1:{reporter_port}",
        ),
        name="reporter",
        log_path=workdir / "reporter.log",
    )
    extender_url = f"http://127.0.0.1:{extender_port}"
    extender = Managed(
        _python(
            "extender", f"--web.listen-address=127.0.0.1:{extender_port}", f"--report-file={report}"
        ),
        name="extender",
        log_path=workdir / "extender.log",
    )
    kube = KubeEmulator()
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    rulegen = Managed(
        _python(
            "rulegen",
            "controller",
            f"--kubeconfig={kube.kubeconfig(workdir / 'kubeconfig')}",
            f"--web.listen-address=127.0.0.1:{rulegen_port}",
            "--prometheusrule-namespace=mco-system",
        ),
        name="rulegen",
        log_path=workdir / "rulegen.log",
        env=env,
    )
    kube.start()
    try:
        with running(*(p for p, _ in exporters.values()), prometheus, reporter, rulegen):
            for proc, port in exporters.values():
                proc.wait_http(f"http://127.0.0.1:{port}/metrics")
            # The rules need a window of samples; the reporter needs the recorded series.
            prometheus.wait_for_series(
                'node:mco_interference_level:ratio{node="legacy-4-4"}', timeout=60
            )
            wait_until(report.exists, timeout=60, what="the reporter's report file")
            with running(extender):
                extender.wait_http(f"{extender_url}/readyz", timeout=30)
                rulegen.wait_http(f"http://127.0.0.1:{rulegen_port}/readyz", timeout=30)
                _drive_extender(extender_url, list(NODES))
                # Rates need two scrapes after the traffic; ranges a few more.
                time.sleep(5)
                _drive_extender(extender_url, list(NODES))
                for job in ("mco-extender", "mco-reporter", "mco-rulegen"):
                    prometheus.wait_for_series(f'up{{job="{job}"}} == 1', timeout=30)
                time.sleep(3)
                yield Stack(prometheus, extender_url)
    finally:
        kube.stop()
