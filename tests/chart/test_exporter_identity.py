"""The real mco-exporter under the identity the chart gives it, on this machine.

The DaemonSet's user, group and added capabilities are read from the rendered chart and applied
with setpriv the way the kubelet does: a non-root process gets no ambient capabilities (the
added ones reach only its bounding set); root gets exactly the added ones. The exporter then
runs with the chart's collector flags, and its `mco_exporter_collector_success` is compared with
an unrestricted root run of the same flags.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from scripts.kubepods import pod_tree, why_not_here
from scripts.procs import Managed, free_port
from tests.chart.helm import render
from tests.exporter.conftest import samples_of

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
KERNEL_EVENTS = {"exporter": {"kernelEvents": {"enabled": True}}}
# The collectors that read files only: they must work under the chart's default identity.
FILE_COLLECTORS = (
    "pressure",
    "meminfo",
    "vmstat",
    "diskstats",
    "cpu",
    "schedstat",
    "softirqs",
    "resctrl",
    "cgroup",
)


def chart_identity(values: dict[str, Any]) -> tuple[int, int, list[str], list[str]]:
    """(uid, gid, added capabilities, collector flags) of the rendered exporter."""
    pod = render(values).one("DaemonSet", "-exporter")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    caps = container["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"]
    flags = [a for a in container["args"] if a.startswith(("--collector.", "--no-collector."))]
    sc = pod["securityContext"]
    return sc["runAsUser"], sc["runAsGroup"], list(caps.get("add", [])), flags


def setpriv(uid: int, gid: int, caps: list[str]) -> list[str]:
    """As the kubelet starts the container: bounding set = the added capabilities, nothing
    inherited or ambient, so a non-root user ends with no effective capability at all."""
    bounding = ",".join(["-all", *(f"+{c.lower()}" for c in caps)])
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        f"--bounding-set={bounding}",
        "--inh-caps=-all",
    ]


@pytest.fixture(scope="module", autouse=True)
def can_switch_user() -> Iterator[None]:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is missing: cannot run the exporter as another user")
    if os.geteuid() != 0:
        pytest.skip("not root: setpriv cannot switch to the chart's user and capabilities")
    probe = subprocess.run(
        [*setpriv(65532, 65532, []), sys.executable, "-c", "import exporter"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"UID 65532 cannot run this checkout's interpreter: {probe.stderr[-300:]}")
    yield


Samples = dict[tuple[str, Any], float]


def scrape(tmp_path: Path, prefix: list[str], flags: list[str]) -> Samples:
    return scrape_and_log(tmp_path, prefix, flags)[0]


def scrape_and_log(tmp_path: Path, prefix: list[str], flags: list[str]) -> tuple[Samples, str]:
    port = free_port()
    argv = [
        *prefix,
        sys.executable,
        "-m",
        "exporter",
        f"--web.listen-address=127.0.0.1:{port}",
        # The chart mounts the host's /proc, /sys and the shim directories at these paths.
        "--path.procfs=/proc",
        "--path.sysfs=/sys",
        "--path.rootfs=/",
        *flags,
    ]
    proc = Managed(argv, name="mco-exporter", log_path=tmp_path / f"exporter-{port}.log", cwd=REPO)
    proc.start()
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        proc.wait_http(url, timeout=60)
        requests.get(url, timeout=10)  # the first scrape primes the counters
        samples = dict(samples_of(requests.get(url, timeout=10).text))
    finally:
        proc.stop()
    return samples, proc.log_tail(200)


def success(samples: dict[tuple[str, Any], float]) -> dict[str, float]:
    return {
        dict(labels)["collector"]: v
        for (name, labels), v in samples.items()
        if name == "mco_exporter_collector_success"
    }


def families(samples: dict[tuple[str, Any], float]) -> set[str]:
    return {name for name, _ in samples}


def test_default_identity_runs_every_file_collector_as_root_would(tmp_path: Path) -> None:
    uid, gid, caps, flags = chart_identity({})
    assert (uid, gid, caps) == (65532, 65532, [])
    with contextlib.ExitStack() as stack:
        if why_not_here() is None:  # real pod cgroups, with a process in one, for the cgroup one
            tree = stack.enter_context(pod_tree())
            tree.add_pod("burstable").start(["sleep", "60"], tmp_path / "sleep.log")
            flags = [*flags, f"--collector.cgroup.cgroup-root={tree.cgroup_root}"]
        chart = scrape(tmp_path, setpriv(uid, gid, caps), flags)
        root = scrape(tmp_path, [], flags)
    got = success(chart)
    # The chart turns off the two collectors that need root with capabilities.
    assert set(got) == {*FILE_COLLECTORS, "kata"}
    assert got == success(root)
    assert families(chart) == families(root)
    for collector in ("meminfo", "vmstat", "diskstats", "cpu", "softirqs", "kata"):
        assert got[collector] == 1, collector
    assert got["pressure"] == float(Path("/proc/pressure/io").exists())
    assert got["schedstat"] == float(Path("/proc/schedstat").exists())
    assert got["resctrl"] == float(Path("/sys/fs/resctrl/mon_data").exists())
    # Pod cgroup files are world-readable: per-pod series need no root either.
    assert got["cgroup"] == float(why_not_here() is None)
    # Kata readiness needs no root: the shim's mode and KVM in sysfs are world-readable.
    assert (
        chart[("mco_kata_runtime_ready", frozenset())]
        == root[("mco_kata_runtime_ready", frozenset())]
    )


def test_ebpf_and_perf_fail_under_the_default_identity(tmp_path: Path) -> None:
    """Why the chart turns them off by default: without root they cannot work."""
    uid, gid, caps, _ = chart_identity({})
    flags = ["--collector.biolatency", "--collector.perf_llc"]
    samples, log = scrape_and_log(tmp_path, setpriv(uid, gid, caps), flags)
    got = success(samples)
    assert got["biolatency"] == 0
    if Path("/sys/kernel/tracing/events/block").is_dir():  # root sees it: mounted, root-only
        assert "not readable by UID 65532 (root-only)" in log
    if int(Path("/proc/sys/kernel/perf_event_paranoid").read_text()) > 0:
        assert got["perf_llc"] == 0


def test_kernel_events_identity_runs_what_unrestricted_root_runs(tmp_path: Path) -> None:
    uid, gid, caps, flags = chart_identity(KERNEL_EVENTS)
    assert (uid, gid) == (0, 0)
    assert sorted(caps) == ["BPF", "PERFMON", "SYS_RESOURCE"]
    chart = success(scrape(tmp_path, setpriv(uid, gid, caps), flags))
    root = success(scrape(tmp_path, [], flags))
    assert {"biolatency", "perf_llc"} <= set(chart)
    assert chart == root
    if not root["biolatency"]:
        pytest.skip("biolatency does not load here even as root (no bcc or kernel headers)")
    # And the capabilities are needed, not just root: without BPF the program does not load.
    without_bpf = [c for c in caps if c != "BPF"]
    assert success(scrape(tmp_path, setpriv(uid, gid, without_bpf), flags))["biolatency"] == 0
