"""Recorded /proc and /sys trees of several kernels give exactly the hand-computed samples."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.exporter.conftest import (
    FILE_COLLECTORS,
    FIXTURES,
    node_collector,
    samples_of,
    scrape,
    tree_paths,
)

TREES = ["linux-6.18-vm", "linux-6.1-metal", "linux-4.4-no-psi", "malformed"]


@pytest.mark.parametrize("tree", TREES)
def test_tree_gives_exact_samples(tree: str) -> None:
    root = FIXTURES / tree
    got = samples_of(
        scrape(node_collector(tree_paths(root))), skip=("mco_exporter_collector_duration_seconds",)
    )
    want = samples_of((root / "expected.prom").read_text())
    assert got == want


def test_every_collector_reports_its_duration() -> None:
    text = scrape(node_collector(tree_paths(FIXTURES / "linux-6.1-metal")))
    durations = {
        dict(labels)["collector"]: v
        for (name, labels), v in samples_of(text).items()
        if name == "mco_exporter_collector_duration_seconds"
    }
    assert set(durations) == set(FILE_COLLECTORS)
    assert all(0 <= v < 1 for v in durations.values())


def test_each_scrape_reads_sources_again(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "linux-6.18-vm", tree)
    collector = node_collector(tree_paths(tree), names=("pressure",))
    key = ("mco_pressure_stalled_seconds_total", frozenset({("resource", "io"), ("kind", "some")}))
    assert samples_of(scrape(collector))[key] == 2.526033
    (tree / "proc/pressure/io").write_text(
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=3000000\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=2000000\n"
    )
    assert samples_of(scrape(collector))[key] == 3.0


def test_diskstats_device_exclude_option() -> None:
    collector = node_collector(
        tree_paths(FIXTURES / "linux-6.1-metal"),
        names=("diskstats",),
        options={"diskstats.device-exclude": "^sda$"},
    )
    devices = {
        dict(labels)["device"]
        for (name, labels), _ in samples_of(scrape(collector)).items()
        if name == "mco_block_io_completed_total"
    }
    assert devices == {"nvme0n1", "nvme0n1p1"}


# node_exporter's --collector.diskstats.device-exclude default (collector/diskstats_linux.go).
NODE_EXPORTER_EXCLUDE = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$"


def test_default_device_filter_is_node_exporters_plus_mmc_partitions(tmp_path: Path) -> None:
    names = (
        "sda", "sda1", "vdb", "vdb2", "xvda", "xvda1", "hdc", "hdc3", "nvme0n1", "nvme0n1p1",
        "nvme1n2p10", "mmcblk0", "mmcblk0p1", "mmcblk1p12", "loop0", "loop12", "ram0", "zram0",
        "fd0", "dm-0", "md127", "sr0", "nbd0", "nbd0p1",
    )  # fmt: skip
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "diskstats").write_text(
        "".join(f"8 {i} {name} 1 0 0 10 2 0 0 20 0 0 0\n" for i, name in enumerate(names))
    )

    def kept(options: dict[str, str]) -> set[str]:
        collector = node_collector(tree_paths(tmp_path), names=("diskstats",), options=options)
        return {
            dict(labels)["device"]
            for (name, labels), _ in samples_of(scrape(collector)).items()
            if name == "mco_block_io_completed_total"
        }

    ours = kept({})
    node_exporters = kept({"diskstats.device-exclude": NODE_EXPORTER_EXCLUDE})
    whole = {"sda", "vdb", "xvda", "hdc", "nvme0n1", "mmcblk0", "dm-0", "md127", "sr0", "nbd0"}
    assert ours == whole | {"nbd0p1"}  # a pattern, not a partition table: nbd partitions stay
    assert node_exporters - ours == {"mmcblk0p1", "mmcblk1p12"}
    assert ours <= node_exporters
