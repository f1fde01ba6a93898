"""A real kubelet-shaped (cgroupfs driver) pod cgroup tree on this machine, removed afterwards.

Made under a fresh parent (the kubelet's ``--cgroup-root``) in each hierarchy that exists: the
v1 ``memory`` and ``blkio`` controllers and the v2 ``unified`` hierarchy (every cgroup there has
its own ``*.pressure``), or a pure v2 root. So tests running beside each other never share a
cgroup, and the collector reads it with ``--collector.cgroup.cgroup-root``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

CGROUPFS = Path("/sys/fs/cgroup")


def hierarchies(cgroupfs: Path = CGROUPFS) -> list[Path]:
    """The hierarchy roots a pod cgroup is made in (v2 alone, or v1 memory/blkio + unified)."""
    if (cgroupfs / "cgroup.controllers").exists():
        return [cgroupfs]
    found = [cgroupfs / c for c in ("memory", "blkio") if (cgroupfs / c / "tasks").exists()]
    if (cgroupfs / "unified" / "cgroup.controllers").exists():
        found.append(cgroupfs / "unified")
    return found


def why_not_here(cgroupfs: Path = CGROUPFS) -> str | None:
    """None when this machine can hold the tree, else why not (a skip reason)."""
    if os.geteuid() != 0:
        return "making cgroups needs root"
    found = hierarchies(cgroupfs)
    if found == [cgroupfs]:
        return None
    names = {p.name for p in found}
    if not {"memory", "unified"} <= names:
        return f"needs the v1 memory controller and a unified hierarchy under {cgroupfs}"
    return None


@dataclass
class Pod:
    uid: str
    qos: str
    rel: str  # below each hierarchy root
    tree: PodTree

    def dirs(self, container: str = "") -> list[Path]:
        return [h / self.rel / container for h in self.tree.roots]

    def set_memory_limit(self, limit_bytes: int) -> None:
        self.tree.set_memory_limit(self.rel, limit_bytes)

    def start(self, argv: list[str], log: Path, container: str = "app") -> subprocess.Popen[bytes]:
        """Run ``argv`` in a container cgroup of the pod, in every hierarchy, from its birth."""
        procs = [d / "cgroup.procs" for d in self.dirs(container)]
        for d in self.dirs(container):
            d.mkdir(exist_ok=True)
        joins = " && ".join(f'echo $$ > "{p}"' for p in procs)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", f'{joins} && exec "$0" "$@"', *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.tree.procs.append(proc)
        return proc


@dataclass
class PodTree:
    cgroupfs: Path
    roots: list[Path]
    cgroup_root: str  # the kubelet's --cgroup-root for this tree
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def set_memory_limit(self, rel: str, limit_bytes: int) -> None:
        """A memory limit on the cgroup ``rel`` (v1 ``memory.limit_in_bytes``, v2 ``memory.max``;
        on a pure v2 host the memory controller must already be delegated down to it)."""
        for root in self.roots:
            if root.name == "memory" or root == self.cgroupfs:
                for name in ("memory.limit_in_bytes", "memory.max"):
                    if (root / rel / name).exists():
                        (root / rel / name).write_text(str(limit_bytes))

    def limit_node_memory(self, limit_bytes: int) -> None:
        """A memory limit on the whole tree, standing in for the node's memory: pods that stay
        within their own limits still reclaim each other's pages under it."""
        self.set_memory_limit(self.cgroup_root.strip("/"), limit_bytes)

    def add_pod(self, qos: str = "burstable") -> Pod:
        uid = str(uuid.uuid4())
        parent = f"{self.cgroup_root.strip('/')}/kubepods"
        rel = f"{parent}/pod{uid}" if qos == "guaranteed" else f"{parent}/{qos}/pod{uid}"
        for root in self.roots:
            (root / rel).mkdir(parents=True)
        return Pod(uid, qos, rel, self)

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        for root in self.roots:
            _remove(root / self.cgroup_root.strip("/"))


def _remove(top: Path, timeout: float = 10.0) -> None:
    """rmdir every cgroup under ``top``, deepest first; kill what is still inside and retry."""
    deadline = time.monotonic() + timeout
    while top.exists():
        dirs = sorted((Path(d) for d, _, _ in os.walk(top)), key=lambda p: -len(p.parts))
        for d in dirs:
            with contextlib.suppress(OSError):
                for pid in (d / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            with contextlib.suppress(OSError):
                d.rmdir()
        if top.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not remove the test cgroups under {top}")
            time.sleep(0.1)


@contextlib.contextmanager
def pod_tree(cgroupfs: Path = CGROUPFS) -> Iterator[PodTree]:
    tree = PodTree(cgroupfs, hierarchies(cgroupfs), f"/mco-test-{uuid.uuid4().hex[:8]}")
    try:
        for root in tree.roots:
            (root / tree.cgroup_root.strip("/") / "kubepods").mkdir(parents=True)
        yield tree
    finally:
        tree.close()
