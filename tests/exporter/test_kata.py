"""kata: ready only with an executable shim under the rootfs and KVM: /dev/kvm a character
device under the rootfs, or the kvm misc device in sysfs (what the chart's pod sees)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from exporter.collectors.kata import KataCollector
from exporter.paths import Paths
from exporter.registry import CollectorConfig, specs


def ready(root: Path, shims: str | None = None) -> float:
    """The collector over ``root`` as rootfs and ``root/sys`` as sysfs (never this host's)."""
    default = next(o.default for o in specs()["kata"].options if o.name == "shim-paths")
    paths = Paths(sysfs=str(root / "sys"), rootfs=str(root))
    config = CollectorConfig(paths, {"shim-paths": shims or default})
    (family,) = KataCollector(config).update()
    return family.samples[0].value


def add_shim(
    root: Path, rel: str = "opt/kata/bin/containerd-shim-kata-v2", mode: int = 0o755
) -> None:
    shim = root / rel
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text("#!/bin/sh\n")
    shim.chmod(mode)


def add_kvm(root: Path) -> None:
    (root / "dev").mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(root / "dev/kvm", 0o600 | stat.S_IFCHR, os.makedev(10, 232))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")


def test_ready_with_shim_and_kvm(tmp_path: Path) -> None:
    add_shim(tmp_path)
    add_kvm(tmp_path)
    assert ready(tmp_path) == 1


def test_not_ready_without_kvm(tmp_path: Path) -> None:
    add_shim(tmp_path)
    assert ready(tmp_path) == 0


def test_not_ready_without_shim(tmp_path: Path) -> None:
    add_kvm(tmp_path)
    assert ready(tmp_path) == 0


def test_kvm_must_be_a_device_not_a_file(tmp_path: Path) -> None:
    add_shim(tmp_path)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/kvm").write_text("")
    assert ready(tmp_path) == 0


def test_shim_must_be_executable(tmp_path: Path) -> None:
    # Not executable for anyone: root too (root may execute a file only when some x bit is set).
    add_shim(tmp_path, mode=0o644)
    add_kvm(tmp_path)
    assert ready(tmp_path) == 0
    # The same file made executable: ready, so the 0 above came from the mode alone.
    (tmp_path / "opt/kata/bin/containerd-shim-kata-v2").chmod(0o755)
    assert ready(tmp_path) == 1


def test_shim_paths_option(tmp_path: Path) -> None:
    add_shim(tmp_path, "custom/kata-shim")
    add_kvm(tmp_path)
    assert ready(tmp_path) == 0
    assert ready(tmp_path, "/custom/kata-shim") == 1


def add_kvm_in_sysfs(root: Path) -> None:
    """As sysfs shows a loaded kvm module: class/misc/kvm links to the device directory."""
    device = root / "sys/devices/virtual/misc/kvm"
    device.mkdir(parents=True)
    (device / "dev").write_text("10:232\n")
    (root / "sys/class/misc").mkdir(parents=True)
    (root / "sys/class/misc/kvm").symlink_to("../../devices/virtual/misc/kvm")


def test_kvm_in_sysfs_is_enough_without_dev(tmp_path: Path) -> None:
    # The chart's pod: shim directories under the rootfs, the host's /sys, no /dev.
    add_shim(tmp_path)
    assert ready(tmp_path) == 0
    add_kvm_in_sysfs(tmp_path)
    assert ready(tmp_path) == 1


def test_kvm_in_sysfs_without_a_shim_is_not_ready(tmp_path: Path) -> None:
    add_kvm_in_sysfs(tmp_path)
    assert ready(tmp_path) == 0


def test_kvm_class_without_its_dev_attribute_is_not_kvm(tmp_path: Path) -> None:
    add_shim(tmp_path)
    (tmp_path / "sys/class/misc/kvm").mkdir(parents=True)
    assert ready(tmp_path) == 0
