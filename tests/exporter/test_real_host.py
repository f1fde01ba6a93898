"""The real mco-exporter on this machine: every signal whose source exists, real load moves it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from scripts.procs import Managed, free_port
from tests.exporter.conftest import samples_of

pytestmark = pytest.mark.slow

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
    }
    assert success["pressure"] == float(host["pressure"])
    assert ("mco_pressure_stalled_seconds_total" in names) == host["pressure"]
    assert success["schedstat"] == float(host["schedstat"])
    assert ("mco_runqueue_wait_seconds_total" in names) == host["schedstat"]
    assert ("mco_llc_references_total" in names) == bool(success["perf_llc"])
    if not host["perf_llc"]:
        assert success["perf_llc"] == 0
    assert success["resctrl"] == float(host["resctrl"])
    if Path("/proc/vmstat").read_text().find("pgscan_file") >= 0:
        assert "mco_vmstat_pgscan_by_type_total" in names
    for collector in ("meminfo", "vmstat", "cpu", "diskstats", "kata"):
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


def test_real_io_stress_raises_io_pressure_and_block_signals(exporter: str, tmp_path: Path) -> None:
    if shutil.which("stress-ng") is None:
        pytest.fail("stress-ng missing: make test installs it")
    _, success = names_and_success(requests.get(exporter, timeout=10).text)
    psi0, completed0, hist0 = _io_totals(exporter)
    subprocess.run(
        [
            "stress-ng",
            "--hdd",
            "2",
            "--hdd-bytes",
            "64M",
            "--timeout",
            "6s",
            "--temp-path",
            str(tmp_path),
            "--quiet",
        ],
        check=True,
        timeout=60,
    )
    time.sleep(0.5)
    psi1, completed1, hist1 = _io_totals(exporter)
    assert psi1 > psi0, "PSI io some did not rise under real I/O stress"
    assert completed1 > completed0 + 100, "diskstats saw no block I/O"
    if success.get("biolatency"):
        assert hist1 > hist0 + 100, "eBPF histogram saw no block I/O"
