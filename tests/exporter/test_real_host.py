"""The real mco-exporter on this machine: every signal whose source exists, real load moves it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from exporter.collectors.biolatency import BiolatencyCollector
from exporter.errors import UnavailableError
from exporter.paths import Paths
from exporter.registry import CollectorConfig, specs
from scripts.procs import Managed, free_port
from tests.exporter.conftest import samples_of

pytestmark = [pytest.mark.slow, pytest.mark.host_load]

EXPORTER = [sys.executable, "-m", "exporter"]


def start_exporter(tmp_path: Path, *args: str) -> tuple[Managed, str]:
    port = free_port()
    proc = Managed(
        [*EXPORTER, f"--web.listen-address=127.0.0.1:{port}", *args],
        name="mco-exporter",
        log_path=tmp_path / "exporter.log",
    )
    proc.start()
    url = f"http://127.0.0.1:{port}/metrics"
    proc.wait_http(url, timeout=30)
    return proc, url


@pytest.fixture(scope="module")
def exporter(tmp_path_factory) -> Iterator[str]:
    proc, url = start_exporter(tmp_path_factory.mktemp("exporter"))
    try:
        yield url
    finally:
        proc.stop()


def names_and_success(text: str) -> tuple[set[str], dict[str, float]]:
    samples = samples_of(text)
    names = {name for name, _ in samples}
    success = {
        dict(labels)["collector"]: v
        for (name, labels), v in samples.items()
        if name == "mco_exporter_collector_success"
    }
    return names, success


def test_scrape_shows_every_signal_whose_source_exists(exporter: str) -> None:
    names, success = names_and_success(requests.get(exporter, timeout=10).text)
    expected_present = {
        "mco_pressure_available",
        "mco_memory_available_bytes",
        "mco_memory_total_bytes",
        "mco_vmstat_pgscan_total",
        "mco_cpu_steal_seconds_total",
        "mco_cpu_online",
        "mco_cpu_irq_seconds_total",
        "mco_cpu_irq_busiest_ratio",
        "mco_softirqs_total",
        "mco_block_io_time_seconds_total",
        "mco_block_io_completed_total",
        "mco_kata_runtime_ready",
        "mco_node_info",
        "mco_exporter_collector_duration_seconds",
    }
    assert expected_present <= names
    host = {
        "pressure": Path("/proc/pressure/io").exists(),
        "schedstat": Path("/proc/schedstat").exists(),
        "perf_llc": Path("/sys/bus/event_source/devices/cpu").exists(),
        "resctrl": Path("/sys/fs/resctrl/mon_data").exists(),
        # Pod cgroups only on a Kubernetes node (v2, or a v1 controller).
        "cgroup": any(
            (Path("/sys/fs/cgroup") / h / k).is_dir()
            for h in ("", "memory", "blkio", "cpu")
            for k in ("kubepods", "kubepods.slice")
        ),
    }
    assert success["pressure"] == float(host["pressure"])
    assert ("mco_pressure_stalled_seconds_total" in names) == host["pressure"]
    assert success["schedstat"] == float(host["schedstat"])
    assert ("mco_runqueue_wait_seconds_total" in names) == host["schedstat"]
    assert ("mco_llc_references_total" in names) == bool(success["perf_llc"])
    if not host["perf_llc"]:
        assert success["perf_llc"] == 0
    assert success["resctrl"] == float(host["resctrl"])
    assert success["cgroup"] == float(host["cgroup"])
    assert ("mco_cgroup_pods" in names) and ("mco_cgroup_pods_skipped_total" in names)
    if Path("/proc/vmstat").read_text().find("pgscan_file") >= 0:
        assert "mco_vmstat_pgscan_by_type_total" in names
    for collector in ("meminfo", "vmstat", "cpu", "softirqs", "diskstats", "kata"):
        assert success[collector] == 1, collector
    # biolatency off here: no histogram, and diskstats (asserted above) carries the signal.
    # On: the histogram appears with the first block I/O (the stress test below checks it).
    if not success["biolatency"]:
        assert "mco_block_io_latency_seconds_bucket" not in names


def test_promtool_check_metrics_passes(exporter: str) -> None:
    if shutil.which("promtool") is None:
        pytest.fail("promtool missing: make test installs the prometheus package")
    text = requests.get(exporter, timeout=10).text
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == ""


def _io_totals(url: str) -> tuple[float, float, float]:
    samples = samples_of(requests.get(url, timeout=10).text)
    psi = samples.get(
        ("mco_pressure_stalled_seconds_total", frozenset({("resource", "io"), ("kind", "some")})), 0
    )
    completed = sum(v for (n, _), v in samples.items() if n == "mco_block_io_completed_total")
    histogram = sum(v for (n, _), v in samples.items() if n == "mco_block_io_latency_seconds_count")
    return psi, completed, histogram


STRESS_SECONDS = 6
SETTLE_SECONDS = 0.5
# What the stress run must add on top of an idle window of the same length (so also at least
# this much in absolute terms): on this VM stress adds 1.3-2.3 s of I/O stall and 1,000-1,500
# completions, an idle window a few ms and under 200. Steady I/O from elsewhere adds to both
# windows alike and cancels out.
FLOORS = {"psi": 0.5, "completed": 500, "histogram": 500}
KEYS = ("psi", "completed", "histogram")


@dataclass(frozen=True)
class IOStress:
    idle: dict[str, float]
    stressed: dict[str, float]
    biolatency_on: bool

    def check(self, signal: str, what: str) -> None:
        idle, stressed = self.idle[signal], self.stressed[signal]
        need = idle + FLOORS[signal]
        assert stressed >= need, (
            f"{what}: +{stressed:g} under stress, +{idle:g} idle over the same "
            f"{STRESS_SECONDS + SETTLE_SECONDS} s; need at least +{need:g} "
            f"(all signals idle {self.idle}, stressed {self.stressed})"
        )


def _increase(url: str, during: Callable[[], object]) -> dict[str, float]:
    before = _io_totals(url)
    during()
    time.sleep(SETTLE_SECONDS)
    after = _io_totals(url)
    return {k: a - b for k, a, b in zip(KEYS, after, before, strict=True)}


@pytest.fixture(scope="module")
def io_stress(exporter: str, tmp_path_factory) -> IOStress:
    """The same window measured idle, then under real stress-ng disk I/O."""
    if shutil.which("stress-ng") is None:
        pytest.fail("stress-ng missing: make test installs it")
    _, success = names_and_success(requests.get(exporter, timeout=10).text)
    idle = _increase(exporter, lambda: time.sleep(STRESS_SECONDS))
    temp = tmp_path_factory.mktemp("stress")
    command = [
        "stress-ng",
        "--hdd",
        "2",
        "--hdd-bytes",
        "64M",
        "--timeout",
        f"{STRESS_SECONDS}s",
        "--temp-path",
        str(temp),
        "--quiet",
    ]
    stressed = _increase(exporter, lambda: subprocess.run(command, check=True, timeout=60))
    return IOStress(idle, stressed, bool(success["biolatency"]))


@pytest.mark.exclusive  # idle and stressed windows: another test's disk I/O is neither
def test_real_io_stress_raises_diskstats_completions(io_stress: IOStress) -> None:
    io_stress.check("completed", "diskstats completed I/Os")


@pytest.mark.exclusive  # idle and stressed windows: another test's disk I/O is neither
def test_real_io_stress_raises_io_pressure(io_stress: IOStress) -> None:
    if not Path("/proc/pressure/io").exists():
        pytest.skip("this kernel has no PSI (/proc/pressure/io absent)")
    io_stress.check("psi", "PSI io some stall seconds")


@pytest.mark.exclusive  # idle and stressed windows: another test's disk I/O is neither
def test_real_io_stress_fills_the_ebpf_histogram(io_stress: IOStress) -> None:
    if not io_stress.biolatency_on:
        # Off in the exporter: fine only if it cannot load here either; then say why.
        try:
            _biolatency_collector().close()
        except UnavailableError as exc:
            pytest.skip(f"biolatency cannot load on this host: {exc}")
        pytest.fail("biolatency loads on this host but the exporter reported it off")
    io_stress.check("histogram", "eBPF block I/O latency histogram count")


def _biolatency_collector() -> BiolatencyCollector:
    spec = specs()["biolatency"]
    return BiolatencyCollector(CollectorConfig(Paths(), {o.name: o.default for o in spec.options}))
