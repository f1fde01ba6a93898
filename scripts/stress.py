"""Real interference on this machine: stress-ng I/O, and memory pressure inside a
memory-limited cgroup (v2 where the memory controller is on the unified hierarchy, else v1).

Shared by `make run STRESS=...`, the end-to-end tests and the detection benchmark, so all three
produce load the same way. Everything started here is stopped, and the cgroup removed, on exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scripts.procs import Managed

CGROUP_ROOT = Path("/sys/fs/cgroup")


class StressUnavailableError(RuntimeError):
    """This machine cannot produce the requested load (no stress-ng, no memory cgroup, not root)."""


def require_stress_ng() -> str:
    path = shutil.which("stress-ng")
    if path is None:
        raise StressUnavailableError("stress-ng is not installed (apt-get install stress-ng)")
    return path


def io_stress(workdir: Path, *, workers: int = 2, bytes_per_worker: str = "128M") -> Managed:
    """Writers that keep the block device's queue full (`stress-ng --hdd`)."""
    stress_ng = require_stress_ng()
    workdir.mkdir(parents=True, exist_ok=True)
    return Managed(
        [
            stress_ng,
            "--hdd",
            str(workers),
            "--hdd-bytes",
            bytes_per_worker,
            "--temp-path",
            str(workdir),
            "--quiet",
        ],
        name="stress-io",
        log_path=workdir / "stress-io.log",
    )


@dataclass(frozen=True)
class MemoryCgroup:
    path: Path
    version: int

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"


def _memory_cgroup_parent() -> tuple[Path, int]:
    v2 = CGROUP_ROOT / "cgroup.controllers"
    if v2.exists() and "memory" in v2.read_text().split():
        return CGROUP_ROOT, 2
    unified = CGROUP_ROOT / "unified" / "cgroup.controllers"
    if unified.exists() and "memory" in unified.read_text().split():
        return CGROUP_ROOT / "unified", 2
    v1 = CGROUP_ROOT / "memory"
    if (v1 / "memory.limit_in_bytes").exists():
        return v1, 1
    raise StressUnavailableError("no memory cgroup controller (neither v2 nor v1) on this machine")


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int) -> Iterator[MemoryCgroup]:
    """A fresh memory-limited cgroup, removed afterwards (its processes must be gone by then)."""
    if os.geteuid() != 0:
        raise StressUnavailableError("creating a memory cgroup needs root")
    parent, version = _memory_cgroup_parent()
    path = parent / f"mco-stress-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        if version == 2:
            (path / "memory.max").write_text(str(limit_bytes))
            (path / "memory.swap.max").exists() and (path / "memory.swap.max").write_text("0")
        else:
            (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
        yield MemoryCgroup(path, version)
    finally:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                path.rmdir()
                break
            except OSError:
                for pid in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), 9)
                time.sleep(0.1)


def memory_stress(workdir: Path, cgroup: MemoryCgroup, *, vm_bytes: str = "200M") -> Managed:
    """Anonymous memory and page-cache churn inside ``cgroup``: reclaim, page scans, PSI memory.

    A shell puts itself into the cgroup, then execs stress-ng, so every worker is born inside.
    ``--vm`` touches more anonymous memory than the limit allows and ``--hdd`` streams file
    writes whose page cache the limit forces out again.
    """
    stress_ng = require_stress_ng()
    workdir.mkdir(parents=True, exist_ok=True)
    script = (
        f'echo $$ > "{cgroup.procs}" && exec "{stress_ng}" --vm 1 --vm-bytes {vm_bytes} '
        f'--vm-keep --hdd 1 --hdd-bytes 400M --temp-path "{workdir}" --quiet'
    )
    return Managed(
        ["/bin/sh", "-c", script], name="stress-memory", log_path=workdir / "stress-memory.log"
    )
