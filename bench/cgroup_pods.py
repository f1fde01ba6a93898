"""CPU per scrape of the cgroup collector at 110 pods (Kubernetes' default pod limit), against
the node-level scrape measured in the same run.

Two trees: real pod cgroups made on this machine (v1 memory and blkio + the unified hierarchy's
PSI; needs root, removed afterwards), and a synthetic cgroup v2 systemd-driver tree on tmpfs
(the recorded fixture's files copied per pod), so a host without cgroups to spare still gets a
figure. Each is a whole scrape (collect and exposition, as Prometheus sees it) of the default
file collectors, with and without the cgroup collector; the ratio is what turning it on costs.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from exporter.paths import Paths
from exporter.registry import CollectorConfig, specs
from exporter.scrape import NodeCollector
from mco import selfmetrics
from scripts.kubepods import pod_tree, why_not_here

PODS = 110
CONTAINERS = 2  # per pod, as with a sidecar (the pause container has no cgroup of its own here)
# The node-level scrape: every default collector that only reads files, not the per-pod one.
NODE_COLLECTORS = (
    "cpu",
    "diskstats",
    "kata",
    "meminfo",
    "pressure",
    "resctrl",
    "schedstat",
    "softirqs",
    "vmstat",
)
# Per scrape at 110 pods, on top of the node-level scrape (at a 15 s scrape interval, 0.7 % of
# one core). Measured: see docs/benchmarks.md.
TARGET_SECONDS = 0.100
FIXTURE_POD = (
    Path(__file__).resolve().parent.parent
    / "tests/fixtures/cgroup-v2-systemd/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice"
    / "kubepods-burstable-pod2a7c9e10_3b4d_4e5f_8a6b_7c8d9e0f1a2b.slice"
)


def synthetic_tree(root: Path, pods: int) -> Path:
    """A cgroup v2 systemd-driver tree with ``pods`` copies of a recorded pod (and containers)."""
    cgroupfs = root / "cgroup"
    kubepods = cgroupfs / "kubepods.slice"
    (cgroupfs).mkdir()
    (cgroupfs / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    files = [p for p in FIXTURE_POD.iterdir() if p.is_file()]
    for i in range(pods):
        qos = ("burstable", "besteffort")[i % 2]
        uid = str(uuid.UUID(int=i)).replace("-", "_")
        pod = kubepods / f"kubepods-{qos}.slice" / f"kubepods-{qos}-pod{uid}.slice"
        for container in range(CONTAINERS):
            (pod / f"cri-containerd-{container:064x}.scope").mkdir(parents=True)
        for f in files:
            shutil.copy(f, pod / f.name)
    return cgroupfs


@contextlib.contextmanager
def real_tree(pods: int) -> Iterator[tuple[Paths, dict[str, str]]]:
    """Real pod cgroups (with container cgroups) under a fresh --cgroup-root, removed after."""
    with pod_tree() as tree:
        for i in range(pods):
            pod = tree.add_pod(("burstable", "besteffort")[i % 2])
            for container in range(CONTAINERS):
                for d in pod.dirs(f"c{container}"):
                    d.mkdir()
        yield Paths(), {"cgroup.cgroup-root": tree.cgroup_root}


def cpu_per_scrape(
    names: tuple[str, ...], paths: Paths, options: dict[str, str], scrapes: int
) -> tuple[float, int, float]:
    """(CPU seconds per whole scrape, series, cgroup success) of these collectors."""
    all_specs = specs()
    node = NodeCollector(
        [all_specs[n] for n in names],
        CollectorConfig(paths, options),
        node_name="bench",
        kernel="bench",
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(node)
    text = generate_latest(registry).decode()
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    ok = f'{selfmetrics.EXPORTER_COLLECTOR_SUCCESS}{{collector="cgroup"}} 1.0' in text
    start = time.process_time()
    for _ in range(scrapes):
        generate_latest(registry)
    return (time.process_time() - start) / scrapes, series, float(ok)


def against_reference(paths: Paths, options: dict[str, str], scrapes: int) -> tuple[float, float]:
    """(CPU seconds per scrape of the collector before issue 14, of today's), alternated in
    rounds so that a change in the machine's load falls on both alike."""
    from testkit.cgroup_reference import ReferenceCollector  # the pre-issue-14 copy

    config = CollectorConfig(
        paths,
        {"max-pods": "250", "cgroup-root": "/"}
        | {k.removeprefix("cgroup."): v for k, v in options.items()},
    )
    spent = [0.0, 0.0]
    collectors = (ReferenceCollector(config), specs()["cgroup"].factory(config))
    for _ in range(5):
        for i, collector in enumerate(collectors):
            registry = CollectorRegistry(auto_describe=False)
            registry.register(_Scraped(collector))
            start = time.process_time()
            for _ in range(max(1, scrapes // 5)):
                generate_latest(registry)
            spent[i] += time.process_time() - start
    rounds = 5 * max(1, scrapes // 5)
    return spent[0] / rounds, spent[1] / rounds


class _Scraped:
    """One collector's update() as a registry collector (collection and exposition)."""

    def __init__(self, collector: Any) -> None:
        self._collector = collector

    def collect(self) -> Any:
        return self._collector.update()


def report(label: str, paths: Paths, options: dict[str, str], scrapes: int) -> float:
    base, base_series, _ = cpu_per_scrape(NODE_COLLECTORS, paths, options, scrapes)
    cgroup, pod_series, ok = cpu_per_scrape(("cgroup",), paths, options, scrapes)
    both, _, _ = cpu_per_scrape((*NODE_COLLECTORS, "cgroup"), paths, options, scrapes)
    if not ok:
        raise SystemExit(f"{label}: the cgroup collector did not read the tree")
    before, now = against_reference(paths, options, scrapes)
    print(
        f"{label}: collector before issue 14 {before * 1e3:.2f} ms CPU per scrape, now "
        f"{now * 1e3:.2f} ms ({before / now:.2f}x less; alternated in the same run)"
    )
    print(
        f"{label}: node-level scrape {base * 1e3:.2f} ms CPU ({base_series} series); "
        f"cgroup collector alone {cgroup * 1e3:.2f} ms ({pod_series} series) = "
        f"{cgroup / base:.2f}x the node-level scrape; together {both * 1e3:.2f} ms "
        f"({both / base:.2f}x, +{(both - base) * 1e3:.2f} ms)"
    )
    return both - base


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cgroup_pods")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pods", type=int, default=PODS)
    args = parser.parse_args(argv)
    scrapes = 10 if args.quick else 100
    added: list[float] = []
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        cgroupfs = synthetic_tree(Path(tmp), args.pods)
        paths = Paths(cgroupfs=str(cgroupfs))
        added.append(report(f"synthetic v2 tree, {args.pods} pods", paths, {}, scrapes))
    why = why_not_here()
    if why is None:
        with real_tree(args.pods) as (paths, options):
            label = f"real v1+unified cgroups, {args.pods} pods"
            added.append(report(label, paths, options, scrapes))
    else:
        print(f"real cgroups: skipped ({why})")
    worst = max(added)
    target = TARGET_SECONDS * 1e3
    print(f"added per scrape: {worst * 1e3:.2f} ms at most (target <= {target:.0f} ms)")
    return 0 if worst <= TARGET_SECONDS else 1


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
