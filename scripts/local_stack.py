"""`make run`: MCO's whole data path on this host, with a live view.

mco-exporter reads this machine; a real Prometheus scrapes it every second and evaluates the
generated rules; mco-reporter writes the NodeInterferenceReport to a file (the embedded default
instead of the Kubernetes API); mco-extender serves Volcano and kube-scheduler from that file.
Every second the terminal shows what the scheduler would see. `--stress MODE` adds real load so
detection can be watched happening: `io` on the host; `memory`, `cross-pod`, `io-limited` and
`io-cross-pod` in real pod cgroups (``scripts.kubepods``) that the exporter's cgroup collector
reads: a pod thrashing in its own memory or I/O limit (self-inflicted: the node stays
schedulable) and a pod whose memory or disk another pod takes (interference: the node is marked,
the report names both). Ctrl-C stops everything; nothing is
left running.

The same `LocalStack` runs the end-to-end tests and the detection-latency benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import requests

from kubectl_mco.render import NODES_LEGEND, nodes_table
from mco.flags import duration
from rulegen import series
from rulegen.latency import buckets_flag
from rulegen.model import DetectionRuleConfig, load_config
from rulegen.render import render_rules
from scripts.kubepods import PodTree
from scripts.loadwatch import LoadWatch
from scripts.procs import Managed, Prometheus, ScrapeTarget, free_port, wait_until
from scripts.stress import (
    InPod,
    PodLoad,
    StressUnavailableError,
    cross_pod,
    io_cross_pods,
    io_limited_pods,
    io_stress,
    new_cgroup_root,
    self_limited_pods,
    stack_pods,
)

ROOT = Path(__file__).resolve().parent.parent
# `--stress` modes that run in the stack's own pods (scripts/stress.py).
POD_LOADS: Final = {
    "memory": self_limited_pods,
    "cross-pod": cross_pod,
    "io-limited": io_limited_pods,
    "io-cross-pod": io_cross_pods,
}
DEFAULT_WORKDIR = ROOT / ".cache" / "local-stack"
# Every child carries this variable, so a leftover process can be found by it (tests do).
MARKER_ENV = "MCO_LOCAL_STACK"


@dataclass
class Ports:
    """0 picks a free port (tests); `make run` uses MCO's defaults."""

    exporter: int = 9847
    extender: int = 9848
    reporter: int = 9849
    prometheus: int = 19090

    def resolved(self) -> Ports:
        return Ports(
            *(
                p or free_port()
                for p in (self.exporter, self.extender, self.reporter, self.prometheus)
            )
        )


@dataclass
class StackSettings:
    workdir: Path = DEFAULT_WORKDIR
    ports: Ports = field(default_factory=Ports)
    node: str = field(default_factory=socket.gethostname)
    rule_config: Path | None = None
    exporter_args: tuple[str, ...] = ()
    # The kubelet's --cgroup-root of the stack's own pods (`--stress memory|cross-pod`): the
    # exporter reads only these, never the host's other pod cgroups.
    cgroup_root: str = field(default_factory=new_cgroup_root)


class LocalStack:
    """Exporter, Prometheus with the generated rules, reporter (file sink) and extender."""

    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings
        self.ports = settings.ports.resolved()
        self.workdir = settings.workdir
        self.marker = uuid.uuid4().hex
        self.config = (
            load_config(settings.rule_config)
            if settings.rule_config
            else DetectionRuleConfig.default()
        )
        self.report_path = self.workdir / "report.json"
        self.rules_path = self.workdir / "rules.yaml"
        env = {MARKER_ENV: self.marker}
        python = sys.executable
        self.exporter = Managed(
            [
                python,
                "-m",
                "exporter",
                f"--web.listen-address=127.0.0.1:{self.ports.exporter}",
                f"--node-name={settings.node}",
                # The latency buckets the rules' thresholds need (one source: the config).
                f"--collector.biolatency.buckets={buckets_flag(self.config)}",
                f"--collector.cgroup.cgroup-root={settings.cgroup_root}",
                *settings.exporter_args,
            ],
            name="mco-exporter",
            log_path=self.workdir / "exporter.log",
            env=env,
        )
        self.prometheus = Prometheus(
            self.workdir / "prometheus",
            targets=[
                ScrapeTarget(
                    "mco-exporter", f"127.0.0.1:{self.ports.exporter}", {"node": settings.node}
                ),
                ScrapeTarget("mco-reporter", f"127.0.0.1:{self.ports.reporter}"),
                ScrapeTarget("mco-extender", f"127.0.0.1:{self.ports.extender}"),
            ],
            rule_files=[self.rules_path],
            scrape_interval="1s",
            evaluation_interval=f"{self.config.evaluation_interval}s",
            port=self.ports.prometheus,
        )
        self.prometheus.env[MARKER_ENV] = self.marker
        rule_config_args = [f"--rule-config={settings.rule_config}"] if settings.rule_config else []
        self.reporter = Managed(
            [
                python,
                "-m",
                "reporter",
                f"--prometheus-url={self.prometheus.url}",
                f"--output={self.report_path}",
                "--interval=1s",
                f"--web.listen-address=127.0.0.1:{self.ports.reporter}",
                *rule_config_args,
            ],
            name="mco-reporter",
            log_path=self.workdir / "reporter.log",
            env=env,
        )
        self.extender = Managed(
            [
                python,
                "-m",
                "extender",
                f"--web.listen-address=127.0.0.1:{self.ports.extender}",
                f"--report-file={self.report_path}",
                f"--stale-after={self.config.report.stale_after}s",
                f"--neutral-score={self.config.report.neutral_score}",
            ],
            name="mco-extender",
            log_path=self.workdir / "extender.log",
            env=env,
        )
        self.loads: list[LoadWatch] = []  # the load processes, restarted when they die
        self._cgroups = contextlib.ExitStack()
        self._tree: PodTree | None = None
        self.pods: list[PodLoad] = []  # what `memory` and `cross-pod` run, and who is who

    # --- URLs ----------------------------------------------------------------------------
    @property
    def extender_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.extender}"

    def urls(self) -> dict[str, str]:
        return {
            "Prometheus": self.prometheus.url,
            "extender /v1/nodes": f"{self.extender_url}/v1/nodes",
            "exporter /metrics": f"http://127.0.0.1:{self.ports.exporter}/metrics",
            "reporter /metrics": f"http://127.0.0.1:{self.ports.reporter}/metrics",
            "extender /metrics": f"{self.extender_url}/metrics",
            "report file": str(self.report_path),
        }

    # --- lifecycle ---------------------------------------------------------------------
    def start(self, *, wait: bool = True) -> None:
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True)
        self.rules_path.write_text(render_rules(self.config))
        self.prometheus.write_config()
        try:
            self.exporter.start()
            self.exporter.wait_http(f"http://127.0.0.1:{self.ports.exporter}/metrics", timeout=60)
            self.prometheus.start()
            self.reporter.start()
            self.extender.start()
            self.extender.wait_http(f"{self.extender_url}/healthz", timeout=30)
            if wait:
                self.wait_fresh(timeout=self.config.window + 30)
        except BaseException:
            self.stop()
            raise

    def wait_fresh(self, timeout: float) -> None:
        """Until the extender holds fresh data for this node (a window of samples is needed)."""
        wait_until(
            lambda: (n := self.node_view()) is not None and not n["stale"],
            timeout=timeout,
            what="fresh data for this node at the extender",
        )

    def stop(self) -> None:
        self.stop_load()
        for proc in (self.extender, self.reporter, self.prometheus, self.exporter):
            proc.stop()

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- load --------------------------------------------------------------------------
    def start_load(self, kind: str) -> None:
        """Real interference: `io` (stress-ng --hdd); in pods, `memory` (one pod thrashing in
        its own 64 MiB limit, one idle), `cross-pod` (one pod's allocation pushes the other's
        working set out of the pods' shared memory), `io-limited` (one pod held back by its own
        write limit) or `io-cross-pod` (one pod's writes queue up another's reads)."""
        workdir = self.workdir / f"stress-{kind}"
        if kind == "io":
            loads = [io_stress(workdir)]
        elif kind in POD_LOADS:
            pods = POD_LOADS[kind](self._pod_tree(), workdir)
            self.pods.append(pods)
            loads = pods.processes
        else:
            raise ValueError(f"unknown load {kind!r}")
        for load in loads:
            load.env[MARKER_ENV] = self.marker
            watch = LoadWatch(load, load.cgroups if isinstance(load, InPod) else ())
            watch.start()
            self.loads.append(watch)

    def check_load(self) -> list[str]:
        """Notice loads that died since the last call (each restarted, or given up): one line
        each, saying how it ended."""
        return [f"{w.name} {ended.describe()}" for w in self.loads if (ended := w.check())]

    def load_gone(self, pod_uid: str) -> bool:
        """Whether the load that ran in this pod died and was given up."""
        pod = f"pod{pod_uid}"
        return any(w.gone and any(pod in d.parts for d in w.cgroups) for w in self.loads)

    def _pod_tree(self) -> PodTree:
        if self._tree is None:
            self._tree = self._cgroups.enter_context(stack_pods(self.settings.cgroup_root))
        return self._tree

    def stop_load(self) -> None:
        for watch in self.loads:
            watch.load.stop()
        self.loads.clear()
        self.pods.clear()
        self._tree = None
        self._cgroups.close()

    def pod_states(self) -> list[dict[str, Any]]:
        """The stack's pods as the rules see them: stall (PSI some, max of memory and io) and
        whether each hit its own limit in the window (self-limited) or not."""
        node = f'node="{self.settings.node}"'
        # `or` matches label sets without the name: each flag gets its own label first.
        flags = (
            "max by (pod_uid, qos) ("
            f'label_replace({series.POD_MEMORY_SELF_LIMITED}{{{node}}}, "limit", "memory", "", "")'
            f' or label_replace({series.POD_IO_SELF_LIMITED}{{{node}}}, "limit", "io", "", ""))'
        )
        stall = f'max by (pod_uid, qos, resource) ({series.POD_PRESSURE}{{{node},kind="some"}})'
        out: dict[str, dict[str, Any]] = {}
        for r in self.prometheus.query(flags):
            uid = r["metric"]["pod_uid"]
            out[uid] = {"uid": uid, "qos": r["metric"].get("qos", ""),
                        "selfLimited": float(r["value"][1]) == 1, "stall": {}}  # fmt: skip
        for r in self.prometheus.query(stall):
            pod = out.get(r["metric"]["pod_uid"])
            if pod is not None:
                pod["stall"][r["metric"]["resource"]] = float(r["value"][1])
        return sorted(out.values(), key=lambda p: str(p["uid"]))

    def report_entry(self) -> dict[str, Any] | None:
        """This node's entry in the report file (victims and aggressors are only there)."""
        try:
            obj = json.loads(self.report_path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        items = obj["items"] if obj.get("kind") == "List" else [obj]
        for item in items:
            entry = (item.get("status") or {}).get("nodes", {}).get(self.settings.node)
            if entry is not None:
                found: dict[str, Any] = entry
                return found
        return None

    # --- what the scheduler sees -----------------------------------------------------------
    def nodes(self) -> dict[str, Any]:
        response = requests.get(f"{self.extender_url}/v1/nodes", timeout=5)
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def node_view(self) -> dict[str, Any] | None:
        """This node's entry in the extender's /v1/nodes, or None before it knows the node."""
        for node in self.nodes()["nodes"]:
            if node["name"] == self.settings.node:
                view: dict[str, Any] = node
                return view
        return None


def render_view(stack: LocalStack, body: dict[str, Any] | None, error: str | None) -> str:
    lines = [f"MCO local stack — {time.strftime('%H:%M:%S')}   (Ctrl-C stops everything)", ""]
    table = nodes_table(body or {"nodes": []})  # the same table as `kubectl mco nodes`
    lines.append(table[0])
    if error is not None:
        lines.append(f"(extender not answering: {error})")
    elif body is not None:
        lines += table[1:]
    lines += _pod_lines(stack)
    lines += [w.status() for w in stack.loads if w.exits]
    lines += ["", NODES_LEGEND, ""]
    lines += [f"{name:20} {url}" for name, url in stack.urls().items()]
    return "\n".join(lines)


def _pod_lines(stack: LocalStack) -> list[str]:
    """The stack's pods (`--stress memory|cross-pod`): who stalls, who hit its own limit, and
    the report's victims and aggressors."""
    if not stack.pods:
        return []
    roles = {}
    for load in stack.pods:
        # A load the kernel killed, and that stayed dead, stresses nothing: no claim of it.
        gone = stack.load_gone(load.stressed.uid)
        roles[load.stressed.uid] = "load gone" if gone else "stressed"
        roles[load.other.uid] = "other"
    lines = ["", f"{'pod':10} {'role':9} {'qos':10} {'memory':>7} {'io':>7}  own limit hit"]
    try:
        pods = stack.pod_states()
    except (requests.RequestException, RuntimeError) as exc:
        return [*lines, f"(Prometheus not answering: {type(exc).__name__})"]
    for pod in pods:
        stall = pod["stall"]
        lines.append(
            f"{pod['uid'][:8]:10} {roles.get(pod['uid'], '-'):9} {pod['qos']:10} "
            f"{stall.get('memory', 0):7.3f} {stall.get('io', 0):7.3f}  "
            + ("yes: self-limited, not counted" if pod["selfLimited"] else "no")
        )
    entry = stack.report_entry() or {}
    for key in ("victims", "aggressors"):
        named = [
            f"{p['podUid'][:8]} ({p['resource']} {p['value']:.3g})" for p in entry.get(key, [])
        ]
        lines.append(f"report {key}: {', '.join(named) or '-'}")
    return lines


def live_view(stack: LocalStack, stop: threading.Event, duration: float | None) -> None:
    """Refresh every second until ``stop`` is set (or ``duration`` passes)."""
    tty = sys.stdout.isatty()
    deadline = None if duration is None else time.monotonic() + duration
    while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
        stack.check_load()  # a load that died is restarted, or given up, and the view says so
        body, error = None, None
        try:
            body = stack.nodes()
        except requests.RequestException as exc:
            error = type(exc).__name__
        frame = render_view(stack, body, error)
        sys.stdout.write(("\x1b[H\x1b[2J" if tty else "\n") + frame + "\n")
        sys.stdout.flush()
        stop.wait(1.0)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stress", choices=["io", *POD_LOADS], help="also drive real load")
    parser.add_argument("--rule-config", type=Path, help="DetectionRuleConfig YAML")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--duration", type=duration, help="stop after this long (90, 500ms, 1m30s)")
    parser.add_argument("--free-ports", action="store_true", help="pick free ports")
    for name, default in vars(Ports()).items():
        parser.add_argument(f"--{name}-port", type=int, default=default)
    parser.add_argument(
        "--exporter-arg", action="append", default=[], help="extra mco-exporter flag (repeatable)"
    )
    args = parser.parse_args(argv)
    ports = (
        Ports(0, 0, 0, 0)
        if args.free_ports
        else Ports(args.exporter_port, args.extender_port, args.reporter_port, args.prometheus_port)
    )
    stack = LocalStack(
        StackSettings(
            workdir=args.workdir,
            ports=ports,
            rule_config=args.rule_config,
            exporter_args=tuple(args.exporter_arg),
        )
    )
    with _stop_on_signals() as stop:
        print(f"starting MCO on this host in {stack.workdir} ...", flush=True)
        try:
            stack.start(wait=False)
            if args.stress:
                print(f"driving real {args.stress} load with stress-ng", flush=True)
                stack.start_load(args.stress)
            live_view(stack, stop, args.duration)
        except StressUnavailableError as exc:
            print(f"make run: cannot drive {args.stress} load here: {exc}", file=sys.stderr)
            return 1
        except Exception as exc:
            print(f"make run failed: {exc}", file=sys.stderr)
            for proc in (stack.exporter, stack.prometheus, stack.reporter, stack.extender):
                tail = proc.log_tail(5)
                if tail:
                    print(f"--- {proc.name} ({proc.log_path}) ---\n{tail}", file=sys.stderr)
            return 1
        finally:
            print("\nstopping ...", flush=True)
            stack.stop()
    print("stopped; nothing left running", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
