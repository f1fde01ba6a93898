"""Real interference on this machine: stress-ng I/O and softirq (loopback UDP) load, and memory
pressure inside a memory-limited cgroup (v2 where the memory controller is on the unified
hierarchy, else v1).

And the same loads in real pods (``scripts.kubepods``), where the exporter's cgroup collector sees
them per pod: one pod thrashing in its own memory limit (self-inflicted), and one pod whose page
cache another pod's allocation pushes out (cross-pod interference).

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

from scripts.kubepods import CGROUPFS, Pod, PodTree, hierarchies, why_not_here
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


def softirq_stress(workdir: Path, *, workers: int = 1) -> Managed:
    """UDP over loopback (`stress-ng --udp`): every datagram is NET_RX softirq work.

    One worker pair keeps the receive path on one CPU busy, the case a node-wide IRQ average
    understates (measured in docs/detection-model.md and docs/benchmarks.md).
    """
    stress_ng = require_stress_ng()
    workdir.mkdir(parents=True, exist_ok=True)
    return Managed(
        [stress_ng, "--udp", str(workers), "--udp-domain", "ipv4", "--quiet"],
        name="stress-softirq",
        log_path=workdir / "stress-softirq.log",
    )


@dataclass(frozen=True)
class MemoryCgroup:
    path: Path
    version: int

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"


def _has_memory(controllers: Path) -> bool:
    try:
        return "memory" in controllers.read_text().split()
    except OSError:
        return False


def _memory_cgroup_parent(root: Path) -> tuple[Path, int]:
    """Where to create the cgroup: the v2 hierarchy if it has the memory controller, else v1."""
    for v2 in (root, root / "unified"):
        if _has_memory(v2 / "cgroup.controllers"):
            return v2, 2
    v1 = root / "memory"
    if (v1 / "memory.limit_in_bytes").exists():
        return v1, 1
    raise StressUnavailableError(
        f"no memory cgroup controller under {root} (neither v2 cgroup.controllers listing "
        "memory nor a v1 memory hierarchy)"
    )


def _enable_memory_controller(parent: Path) -> None:
    """A v2 child gets memory.max only if its parent delegates the controller to children.

    Left enabled afterwards: other cgroups may have come to rely on it meanwhile.
    """
    control = parent / "cgroup.subtree_control"
    try:
        if "memory" in control.read_text().split():
            return
        control.write_text("+memory")
    except OSError as exc:
        raise StressUnavailableError(
            f"cannot enable the memory controller for children of {parent} "
            f"(writing +memory to {control}: {exc.strerror or exc}); a cgroup v2 parent that "
            "holds processes itself cannot delegate controllers (the no-internal-process rule)"
        ) from exc


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise StressUnavailableError(
            f"cannot write {value!r} to {path}: {exc.strerror or exc}"
        ) from exc


def _new_cgroup_name() -> str:
    return f"mco-stress-{uuid.uuid4().hex[:8]}"


def _create_memory_cgroup(root: Path, limit_bytes: int) -> MemoryCgroup:
    parent, version = _memory_cgroup_parent(root)
    if version == 2:
        _enable_memory_controller(parent)
    path = parent / _new_cgroup_name()
    try:
        path.mkdir()
    except OSError as exc:
        raise StressUnavailableError(
            f"cannot create the cgroup {path}: {exc.strerror or exc}"
        ) from exc
    try:
        if version == 2:
            _write(path / "memory.max", str(limit_bytes))
            if (path / "memory.swap.max").exists():
                _write(path / "memory.swap.max", "0")
        else:
            _write(path / "memory.limit_in_bytes", str(limit_bytes))
    except BaseException:
        _remove_cgroup(path)
        raise
    return MemoryCgroup(path, version)


def _remove_cgroup(path: Path, timeout: float = 10.0) -> None:
    """rmdir succeeds only once the cgroup is empty: kill what is still inside, then retry."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
        with contextlib.suppress(OSError):
            for pid in (path / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), 9)
        time.sleep(0.1)


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int, *, root: Path = CGROUP_ROOT) -> Iterator[MemoryCgroup]:
    """A fresh memory-limited cgroup, removed afterwards (what is still inside is killed).

    Anything that keeps it from being made (no controller, no root, a parent that cannot
    delegate the controller, a refused write) is a StressUnavailableError naming the reason.
    """
    if os.geteuid() != 0:
        raise StressUnavailableError("creating a memory cgroup needs root")
    cgroup = _create_memory_cgroup(root, limit_bytes)
    try:
        yield cgroup
    finally:
        _remove_cgroup(cgroup.path)


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


@contextlib.contextmanager
def stack_pods(cgroup_root: str, cgroupfs: Path = CGROUPFS) -> Iterator[PodTree]:
    """``scripts.kubepods.pod_tree`` under a ``cgroup_root`` chosen in advance (the exporter is
    pointed at it before any pod exists). StressUnavailableError where pods cannot be made."""
    why = why_not_here(cgroupfs)
    if why is not None:
        raise StressUnavailableError(f"no pod cgroups here: {why}")
    tree = PodTree(cgroupfs, hierarchies(cgroupfs), cgroup_root)
    try:
        for root in tree.roots:
            (root / cgroup_root.strip("/") / "kubepods").mkdir(parents=True)
        yield tree
    finally:
        tree.close()


def new_cgroup_root() -> str:
    return f"/mco-pods-{uuid.uuid4().hex[:8]}"


class InPod(Managed):
    """A Managed process in a pod: ``cgroups`` are the pod's and its container's directories
    in every hierarchy, where the kernel counts the OOM kills in it (scripts/loadwatch.py)."""

    def __init__(self, argv: list[str], *, name: str, log_path: Path, cgroups: list[Path]) -> None:
        super().__init__(argv, name=name, log_path=log_path)
        self.cgroups = cgroups


def in_pod(pod: Pod, argv: list[str], workdir: Path, name: str) -> InPod:
    """``argv`` in the pod's container cgroup ``app``, in every hierarchy, from its birth (a
    Managed process, so the caller's stop and leftover checks cover it)."""
    for d in pod.dirs("app"):
        d.mkdir(exist_ok=True)
    joins = " && ".join(f'echo $$ > "{d / "cgroup.procs"}"' for d in pod.dirs("app"))
    return InPod(
        ["/bin/sh", "-c", f'{joins} && exec "$0" "$@"', *argv],
        name=name,
        log_path=workdir / f"{name}.log",
        cgroups=[*pod.dirs(), *pod.dirs("app")],
    )


POD_MEMORY_LIMIT = 64 << 20  # the self-limited pod's own limit
NODE_MEMORY = 256 << 20  # cross-pod: the kubepods limit standing in for the node's memory
AGGRESSOR_BYTES = "192M"  # anonymous memory the aggressor holds (no swap: never reclaimed)
WORKING_SET_BYTES = 160 << 20  # the victim's file, read over and over


@dataclass(frozen=True)
class PodLoad:
    """Pods with processes in them: what a stress mode ran, and who is who."""

    processes: list[Managed]
    stressed: Pod  # the pod doing the damage (to itself, or to the other)
    other: Pod  # the pod beside it: idle, or the victim


def self_limited_pods(tree: PodTree, workdir: Path) -> PodLoad:
    """`make run STRESS=memory` in pods: ``memory_stress`` in a pod with its own 64 MiB limit,
    and an idle pod beside it. Only the stressed pod stalls, inside its own limit."""
    stress_ng = require_stress_ng()
    workdir.mkdir(parents=True, exist_ok=True)
    stressed = tree.add_pod("burstable")
    stressed.set_memory_limit(POD_MEMORY_LIMIT)
    idle = tree.add_pod("besteffort")
    argv = [stress_ng, "--vm", "1", "--vm-bytes", "200M", "--vm-keep", "--hdd", "1",
            "--hdd-bytes", "400M", "--temp-path", str(workdir), "--quiet"]  # fmt: skip
    return PodLoad(
        [
            in_pod(stressed, argv, workdir, "pod-stressed"),
            in_pod(idle, ["sleep", "infinity"], workdir, "pod-idle"),
        ],
        stressed,
        idle,
    )


def cross_pod(tree: PodTree, workdir: Path) -> PodLoad:
    """`make run STRESS=cross-pod`: two pods without limits of their own in a tree
    limited to 256 MiB (the node's memory). The victim reads a 160 MiB file over and over (its
    working set, in page cache); the aggressor holds 192 MiB of anonymous memory, which without
    swap cannot be reclaimed, so the victim's cache is, and it stalls re-reading it, at no limit
    of its own."""
    stress_ng = require_stress_ng()
    workdir.mkdir(parents=True, exist_ok=True)
    tree.limit_node_memory(NODE_MEMORY)
    victim = tree.add_pod("besteffort")  # no limits: BestEffort, as Kubernetes classes them
    aggressor = tree.add_pod("besteffort")
    data = workdir / "working-set"
    mib = WORKING_SET_BYTES >> 20
    loop = (
        f'dd if=/dev/zero of="{data}" bs=1M count={mib} status=none && '
        f'while :; do dd if="{data}" of=/dev/null bs=1M status=none; done'
    )
    return PodLoad(
        [
            in_pod(victim, ["/bin/sh", "-c", loop], workdir, "pod-victim"),
            in_pod(
                aggressor,
                [stress_ng, "--vm", "1", "--vm-bytes", AGGRESSOR_BYTES, "--vm-keep", "--quiet"],
                workdir,
                "pod-aggressor",
            ),
        ],
        aggressor,
        victim,
    )


def whole_disk(path: Path) -> str:
    """MAJ:MIN of the disk holding ``path`` (blk-throttle takes whole disks, not partitions)."""
    dev = os.stat(path).st_dev
    sysfs = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if not sysfs.exists():
        raise StressUnavailableError(f"{path} is not on a block device")
    if (sysfs / "partition").exists():
        sysfs = sysfs.resolve().parent
    return (sysfs / "dev").read_text().strip()


IO_LIMIT = 4 << 20  # bytes/s: the self-limited I/O pod's own write limit (v1 blk-throttle)


def io_limited_pods(tree: PodTree, workdir: Path) -> PodLoad:
    """`make run STRESS=io-limited`: a pod writing (direct I/O) as fast as its own 4 MiB/s
    blk-throttle limit lets it, and an idle pod beside it. Only the limited pod stalls, held
    back by its own limit. v1 blk-throttle binds the cgroup the process is in, so the limit is
    on the container, as the kubelet's would be."""
    workdir.mkdir(parents=True, exist_ok=True)
    blkio = tree.cgroupfs / "blkio"
    if blkio not in tree.roots:
        raise StressUnavailableError("no v1 blkio controller here")
    disk = whole_disk(workdir)
    stressed = tree.add_pod("burstable")
    idle = tree.add_pod("besteffort")
    container = blkio / stressed.rel / "app"
    container.mkdir(exist_ok=True)
    (container / "blkio.throttle.write_bps_device").write_text(f"{disk} {IO_LIMIT}")
    data = workdir / "limited"
    # One long dd (1 GiB at 4 MiB/s): a restart between short ones leaves gaps in the rate.
    loop = (
        f'while :; do dd if=/dev/zero of="{data}" bs=64k count=16384 oflag=direct status=none; done'
    )
    return PodLoad(
        [
            in_pod(stressed, ["/bin/sh", "-c", loop], workdir, "pod-io-limited"),
            in_pod(idle, ["sleep", "infinity"], workdir, "pod-idle"),
        ],
        stressed,
        idle,
    )


def io_cross_pods(tree: PodTree, workdir: Path) -> PodLoad:
    """`make run STRESS=io-cross-pod`: a pod without limits writing as fast as the disk takes
    (`stress-ng --hdd`), and a pod reading 256 KiB (direct) every 10 ms, which alone waits
    little; behind the writer's queue it waits much of the time, at no limit of its own (every
    50 ms left it at 8 % stall, under the victims' 10 %, on a CI machine's faster disk). Its
    few bytes keep the writer first among the I/O aggressors."""
    stress_ng = require_stress_ng()
    workdir.mkdir(parents=True, exist_ok=True)
    victim = tree.add_pod("besteffort")
    aggressor = tree.add_pod("besteffort")
    data = workdir / "reads"
    loop = (
        f'dd if=/dev/zero of="{data}" bs=1M count=64 status=none && sync && '
        f'while :; do dd if="{data}" of=/dev/null bs=256k count=1 iflag=direct status=none; '
        "sleep 0.01; done"
    )
    writer = [stress_ng, "--hdd", "4", "--hdd-bytes", "256M", "--temp-path", str(workdir),
              "--quiet"]  # fmt: skip
    return PodLoad(
        [
            in_pod(victim, ["/bin/sh", "-c", loop], workdir, "pod-reader"),
            in_pod(aggressor, writer, workdir, "pod-writer"),
        ],
        aggressor,
        victim,
    )
