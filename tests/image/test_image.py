"""The built image, run as the chart runs it (tests/image/pod.py): each console script, the
exporter on the host's /proc and /sys, the whole data path through a real Prometheus, and the
eBPF collector with the host's kernel headers mounted."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tomllib
from pathlib import Path

import pytest
import requests
import yaml

from rulegen.model import DetectionRuleConfig
from rulegen.render import render_rules
from scripts.procs import Managed, Prometheus, ScrapeTarget, free_port
from testkit import bodies
from tests.chart.helm import ROOT, merge, render, scenario_values
from tests.exporter.conftest import samples_of
from tests.image.conftest import NODE, pod_of
from tests.image.pod import PodRun, Sandbox, sandbox

pytestmark = [pytest.mark.slow, pytest.mark.image, pytest.mark.timeout(900)]

SCRIPTS = sorted(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


def served(box: Sandbox, pod: PodRun, name: str, log: Path) -> Managed:
    return Managed(box.argv(pod), name=name, log_path=log)


def test_every_console_script_answers_help_under_the_restricted_profile(box, full, tmp_path):
    # The controllers' profile: UID 65532, no capabilities, read-only root, /tmp an emptyDir.
    pod = pod_of(full["rulegen"], "rulegen", tmp_path)
    assert pod.user == "65532:65532" and pod.read_only_root and pod.cap_drop == ["ALL"]
    assert set(SCRIPTS) >= {"mco-exporter", "mco-rulegen", "mco-reporter", "mco-extender"}
    for script in SCRIPTS:
        result = box.run(pod.running(script, "--help"))
        # Every script names itself as its file is named (kubectl-mco too, as its errors do).
        assert result.stdout.startswith(f"usage: {script}"), result.stdout[:200]
        assert result.stderr == "", result.stderr


def test_root_file_system_is_read_only_and_only_tmp_is_written(box, full, tmp_path):
    pod = pod_of(full["rulegen"], "rulegen", tmp_path)
    probe = (
        "import os, sys\n"
        "print(os.getuid(), os.getgid(), sys.flags.dont_write_bytecode)\n"
        "for path in ('/opt/mco/x', '/etc/x', '/var/tmp/x', '/usr/x', '/x', '/tmp/x'):\n"
        "    try:\n"
        "        open(path, 'w').close(); print(path, 'written')\n"
        "    except OSError as exc:\n"
        "        print(path, exc.strerror)\n"
        "import exporter.cli, reporter.cli, rulegen.cli, extender.cli\n"
        "import importlib.util as u\n"
        "print('compiled', all(os.path.exists(u.cache_from_source(m.__file__))\n"
        "      for m in (exporter.cli, reporter.cli, rulegen.cli, extender.cli)))\n"
    )
    out = box.run(pod.running("python3", "-c", probe))
    lines = out.stdout.splitlines()
    assert lines[0] == "65532 65532 1"
    # Bytecode was compiled at build time: start-up never needs to write it.
    assert lines[-1] == "compiled True"
    verdicts = dict(line.split(" ", 1) for line in lines[1:-1])
    assert verdicts.pop("/tmp/x") == "written"
    for path, why in verdicts.items():
        assert why in ("Read-only file system", "Permission denied"), (path, why)
    # The read-only binds hold even for root (the exporter's kernelEvents mode).
    root = box.run(dataclasses.replace(pod.running("python3", "-c", probe), user="0:0"))
    assert "/opt/mco/x Read-only file system" in root.stdout
    assert "/etc/x Read-only file system" in root.stdout
    # Importing every command wrote nothing to /tmp either.
    (tmp,) = [host for host, target, _ in pod.binds if target == "/tmp"]
    assert sorted(p.name for p in tmp.iterdir()) == ["x"]


def test_rulegen_render_in_the_image_is_the_checked_in_model(box, full, tmp_path):
    pod = pod_of(full["rulegen"], "rulegen", tmp_path)
    out = box.run(pod.running("mco-rulegen", "render"))
    assert out.stdout == render_rules(DetectionRuleConfig.default())
    groups = yaml.safe_load(out.stdout)["groups"]
    assert any(r.get("record") == "node:mco_interference_level:ratio"
               for g in groups for r in g["rules"])  # fmt: skip


def host_meminfo_total() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return float(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


def exporter_pod(full, tmp_path: Path, port: int) -> PodRun:
    pod = pod_of(full["exporter"], "exporter", tmp_path)
    assert pod.command[0] == "mco-exporter"
    assert ("--path.procfs=/host/proc") in pod.command
    assert (Path("/proc"), "/host/proc", True) in pod.binds
    assert (Path("/sys"), "/host/sys", True) in pod.binds
    # The chart listens on :9847 in the pod's own network; here the network is the host's.
    return pod.with_args(f"--web.listen-address=127.0.0.1:{port}")


def test_exporter_reads_the_hosts_proc_and_sys_mounted_read_only(box, full, tmp_path):
    port = free_port()
    pod = exporter_pod(full, tmp_path, port)
    assert pod.user == "65532:65532" and pod.read_only_root
    with served(box, pod, "mco-exporter", tmp_path / "exporter.log") as proc:
        proc.wait_http(f"http://127.0.0.1:{port}/metrics", timeout=60)
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    samples = samples_of(text)

    def value(name: str, **labels: str) -> float:
        return samples[(name, frozenset(labels.items()))]

    for collector in ("cpu", "diskstats", "meminfo", "softirqs", "vmstat"):
        assert value("mco_exporter_collector_success", collector=collector) == 1, collector
    if Path("/proc/pressure/io").exists():
        assert value("mco_exporter_collector_success", collector="pressure") == 1
        assert value("mco_pressure_stalled_seconds_total", resource="io", kind="some") > 0
    # The host's values, read through the /host/proc mount (without it these collectors fail).
    assert value("mco_memory_total_bytes") == host_meminfo_total()
    cpus = sum(1 for line in Path("/proc/stat").read_text().splitlines()
               if re.match(r"cpu\d+ ", line))  # fmt: skip
    assert value("mco_cpu_online") == cpus
    assert value("mco_node_info", kernel=os.uname().release, nodename=NODE) == 1
    # The chart turns off what needs root: off, not failing.
    off = ("mco_exporter_collector_success", frozenset({("collector", "biolatency")}))
    assert samples.get(off, 0) == 0
    assert "Read-only file system" not in proc.log_tail(200)


def test_data_path_runs_through_the_image(box, full, tmp_path):
    """exporter (image) -> real Prometheus with the image's rules -> reporter --once (image)
    -> report file -> extender (image) answering Volcano predicates."""
    config = DetectionRuleConfig.default()
    rules_pod = pod_of(full["rulegen"], "rulegen", tmp_path)
    rules = box.run(rules_pod.running("mco-rulegen", "render")).stdout
    (tmp_path / "rules.yaml").write_text(rules)

    exporter_port = free_port()
    exporter = exporter_pod(full, tmp_path, exporter_port)
    prometheus = Prometheus(
        tmp_path / "prometheus",
        targets=[ScrapeTarget("mco-exporter", f"127.0.0.1:{exporter_port}", {"node": NODE})],
        rule_files=[tmp_path / "rules.yaml"],
        evaluation_interval=f"{config.evaluation_interval}s",
    )
    reports = tmp_path / "reports"
    reports.mkdir()
    reports.chmod(0o1777)
    reporter = pod_of(full["reporter"], "reporter", tmp_path)
    assert reporter.command[0] == "mco-reporter" and "--leader-elect" in reporter.command
    reporter.binds.append((reports, "/reports", False))
    reporter = reporter.with_args(
        f"--prometheus-url={prometheus.url}",
        f"--web.listen-address=127.0.0.1:{free_port()}",
        "--once",
        "--output=/reports/report.json",
    )
    extender_port = free_port()
    extender = pod_of(full["extender"], "extender", tmp_path)
    assert extender.command[0] == "mco-extender"
    # The chart's pod watch reads the API server with the pod's token; none runs here.
    assert "--watch-pods" in extender.command
    extender = extender.running(*(a for a in extender.command if a != "--watch-pods"))
    extender.binds.append((reports, "/reports", True))
    # The chart serves the scheduler routes on a port of their own (extender.schedulerPort).
    assert any(a.startswith("--web.scheduler-listen-address=") for a in extender.command)
    scheduler_port = free_port()
    extender = extender.with_args(
        "--report-file=/reports/report.json",
        f"--web.listen-address=127.0.0.1:{extender_port}",
        f"--web.scheduler-listen-address=127.0.0.1:{scheduler_port}",
    )

    with served(box, exporter, "mco-exporter", tmp_path / "exporter.log") as exp:
        exp.wait_http(f"http://127.0.0.1:{exporter_port}/metrics", timeout=60)
        with prometheus:
            prometheus.wait_for_series(
                f'node:mco_interference_level:ratio{{node="{NODE}"}}', timeout=config.window + 60
            )
            box.run(reporter, timeout=120)
    report = json.loads((reports / "report.json").read_text())
    assert NODE in json.dumps(report)

    url = f"http://127.0.0.1:{extender_port}"
    with served(box, extender, "mco-extender", tmp_path / "extender.log") as ext:
        ext.wait_http(f"{url}/readyz", timeout=60)
        (view,) = [n for n in requests.get(f"{url}/v1/nodes", timeout=10).json()["nodes"]
                   if n["name"] == NODE]  # fmt: skip
        # The verdict comes from the reporter's entry, not the missing-data fallback.
        assert not view["fallback"] and not view["stale"], view
        scheduler = f"http://127.0.0.1:{scheduler_port}"
        plain = requests.post(f"{scheduler}/volcano/predicate",
                              data=bodies.volcano_predicate(NODE), timeout=10)  # fmt: skip
        assert plain.status_code == 200
        assert (plain.json()["code"] == 0) == view["schedulable"], (plain.json(), view)
        # No Kata on this host: the exporter reported so, and a kata-* pod is kept off.
        assert view["kataReady"] is False
        kata = requests.post(
            f"{scheduler}/volcano/predicate",
            data=bodies.volcano_predicate(NODE, runtime_class="kata-qemu"),
            timeout=10,
        )
        assert kata.json()["code"] == 3, kata.json()
        assert "kata" in kata.json()["status"].lower(), kata.json()


CAPS = {"SYS_ADMIN": 21, "SYS_RESOURCE": 24, "PERFMON": 38, "BPF": 39}


def kernel_headers() -> Path | None:
    """The headers tree `make system` merged for bcc, when this host has one."""
    tree = Path(os.environ.get("BCC_KERNEL_SOURCE", ROOT / ".cache" / "kernel-headers"))
    return tree.resolve() if (tree / "include").is_dir() else None


def test_exporter_loads_its_ebpf_program_with_the_hosts_kernel_headers(image, tmp_path):
    headers = kernel_headers()
    if headers is None:
        pytest.skip("no kernel headers tree here (scripts/setup-system.sh makes one)")
    if not Path("/sys/kernel/tracing/events/block").is_dir():
        pytest.skip("no tracefs with block tracepoints mounted on this host")
    # The full scenario's exporter (exporter.kernelEvents): root with BPF/PERFMON, tracefs,
    # bpffs, /lib/modules and /usr/src mounted; the merged tree is a further read-only mount
    # named by kernelHeaders.source.
    # Debian 12's containers-common seccomp profile allows bpf() only with CAP_SYS_ADMIN: this
    # is the "runtime whose default profile predates CAP_BPF" case values.yaml names, so the
    # chart's answer for it, seccompProfile Unconfined, is what runs here.
    values = merge(
        scenario_values("full"),
        {"exporter": {"collectors": {"biolatency": True},
                      "kernelHeaders": {"source": "/kernel-headers"},
                      "seccompProfile": {"type": "Unconfined"}}},
    )  # fmt: skip
    ds = render(values).one("DaemonSet", "-exporter")
    port = free_port()
    pod = pod_of(ds, "exporter", tmp_path).with_args(f"--web.listen-address=127.0.0.1:{port}")
    assert pod.user == "0:0" and pod.env["BCC_KERNEL_SOURCE"] == "/kernel-headers"
    targets = {target for _, target, _ in pod.binds}
    assert {"/usr/src", "/lib/modules", "/sys/kernel/tracing"} <= targets
    pod.binds.append((headers, "/kernel-headers", True))
    # This sandbox's bounding set lacks CAP_SYS_RESOURCE (docs/helm.md): grant what it has.
    status = Path("/proc/self/status").read_text()
    bounding = int(status.split("CapBnd:")[1].split()[0], 16)
    pod.cap_add = [c for c in pod.cap_add if bounding >> CAPS[c] & 1]
    assert {"BPF", "PERFMON"} <= set(pod.cap_add)
    with (
        sandbox(image, seccomp_unconfined=True) as box,
        served(box, pod, "mco-exporter", tmp_path / "exporter.log") as proc,
    ):
        proc.wait_http(f"http://127.0.0.1:{port}/metrics", timeout=120)
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        log = proc.log_tail(200)
        proc.stop()
        assert not box.leftovers()
    samples = samples_of(text)
    success = samples[("mco_exporter_collector_success", frozenset({("collector", "biolatency")}))]
    assert success == 1, log
    assert any(name.startswith("mco_block_io_latency_seconds") for name, _ in samples), sorted(
        {name for name, _ in samples}
    )
