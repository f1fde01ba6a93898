"""Filesystem roots, so every collector can run against a recorded tree instead of the host."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Paths:
    """Where the host's /proc, /sys and / are mounted (node_exporter's --path.* flags)."""

    procfs: str = "/proc"
    sysfs: str = "/sys"
    rootfs: str = "/"

    def proc(self, *parts: str) -> str:
        return os.path.join(self.procfs, *parts)

    def sys(self, *parts: str) -> str:
        return os.path.join(self.sysfs, *parts)

    def root(self, path: str) -> str:
        """Map an absolute host path (``/dev/kvm``) under the configured rootfs."""
        return os.path.join(self.rootfs, path.lstrip("/"))


def read_text(path: str) -> str:
    """Read a small kernel file in one call; procfs files must not be read piecemeal."""
    with open(path, encoding="ascii", errors="strict") as f:
        return f.read()
