"""The cgroup collector on recorded pod cgroup trees: exact samples per layout, and bad input
(vanished, unreadable, truncated, malformed) skipping only that pod, counted."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from exporter.cli import parse_settings
from exporter.collectors import cgroup as cgroup_module
from exporter.paths import Paths, read_listed
from tests.exporter.conftest import FIXTURES, Samples, node_collector, samples_of, scrape

TREES = ["cgroup-v2-systemd", "cgroup-v2-cgroupfs", "cgroup-v1-hybrid"]
DURATION = ("mco_exporter_collector_duration_seconds",)
SUCCESS = "mco_exporter_collector_success"
SYSTEMD_BURSTABLE = "kubepods.slice/kubepods-burstable.slice"
POD = "2a7c9e10-3b4d-4e5f-8a6b-7c8d9e0f1a2b"
POD_DIR = f"{SYSTEMD_BURSTABLE}/kubepods-burstable-pod{POD.replace('-', '_')}.slice"


def cgroup_paths(tree: Path) -> Paths:
    return Paths(
        procfs=str(tree / "proc"), sysfs=str(tree / "sys"), cgroupfs=str(tree / "sys/fs/cgroup")
    )


def scrape_tree(
    tree: Path, names: tuple[str, ...] = ("cgroup",), options: dict[str, str] | None = None
) -> Samples:
    collector = node_collector(cgroup_paths(tree), names, options)
    return samples_of(scrape(collector), skip=DURATION)


def by_pod(samples: Samples) -> dict[str, Samples]:
    pods: dict[str, Samples] = {}
    for (name, labels), value in samples.items():
        uid = dict(labels).get("pod_uid")
        if uid is not None:
            pods.setdefault(uid, {})[(name, labels)] = value
    return pods


def skipped(samples: Samples) -> dict[str, float]:
    return {
        dict(labels)["reason"]: v
        for (name, labels), v in samples.items()
        if name == "mco_cgroup_pods_skipped_total"
    }


def pods_gauge(samples: Samples) -> float:
    return samples[("mco_cgroup_pods", frozenset())]


@pytest.fixture
def systemd_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "cgroup-v2-systemd", tree)
    return tree


@pytest.mark.parametrize("tree", TREES)
def test_tree_gives_exact_samples(tree: str) -> None:
    root = FIXTURES / tree
    assert scrape_tree(root) == samples_of((root / "expected.prom").read_text())


def test_v1_without_a_unified_hierarchy_has_everything_but_psi(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "cgroup-v1-hybrid", tree)
    shutil.rmtree(tree / "sys/fs/cgroup/unified")
    want = samples_of((FIXTURES / "cgroup-v1-hybrid/expected.prom").read_text())
    got = scrape_tree(tree)
    assert got == {
        k: v for k, v in want.items() if k[0] != "mco_pod_pressure_stalled_seconds_total"
    }
    assert pods_gauge(got) == 3


def test_v1_blkio_without_recursive_files_sums_the_pods_subtree(tmp_path: Path) -> None:
    """Kernels before 4.16 count I/O only in the container's own cgroup: summed into the pod."""
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "cgroup-v1-hybrid", tree)
    removed = list((tree / "sys/fs/cgroup/blkio").rglob("*_recursive"))
    assert removed
    for path in removed:
        path.unlink()
    assert scrape_tree(tree) == scrape_tree(FIXTURES / "cgroup-v1-hybrid")


def test_the_same_pods_under_the_kubelets_cgroup_root(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "cgroup-v2-systemd", tree / "nested")
    cgroupfs = tree / "sys/fs/cgroup"
    cgroupfs.mkdir(parents=True)
    shutil.copy(tree / "nested/sys/fs/cgroup/cgroup.controllers", cgroupfs)
    (cgroupfs / "custom").mkdir()
    shutil.move(tree / "nested/sys/fs/cgroup/kubepods.slice", cgroupfs / "custom")
    assert pods_gauge(scrape_tree(tree)) == 0  # not at the default root
    got = scrape_tree(tree, options={"cgroup.cgroup-root": "/custom"})
    assert got == samples_of((FIXTURES / "cgroup-v2-systemd/expected.prom").read_text())


def test_a_host_without_kubepods_reports_no_data_not_a_failure(tmp_path: Path, caplog) -> None:
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cgroup.controllers").write_text("cpu io memory\n")
    collector = node_collector(cgroup_paths(tmp_path), ("cgroup",))
    with caplog.at_level(logging.DEBUG, logger="mco.exporter"):
        for _ in range(2):
            samples = samples_of(scrape(collector), skip=DURATION)
    assert samples[(SUCCESS, frozenset({("collector", "cgroup")}))] == 0
    assert pods_gauge(samples) == 0
    assert not by_pod(samples)
    absent = [r for r in caplog.records if hasattr(r, "reason")]
    assert len(absent) == 1 and "no kubepods cgroup" in absent[0].reason  # logged once


BAD_FILES = {
    # file -> (what is written, reason)
    "memory.current": ("", "malformed"),  # truncated to nothing
    "memory.events": ("low 0\nhigh 1\nmax", "malformed"),  # truncated mid-line
    "io.stat": ("8:0 rbytes=12 wbytes=-1 rios=1 wios=1\n", "malformed"),
    "memory.pressure": ("some avg10=0.00 avg60=0.00 avg300=0.00 total=\n", "malformed"),
    "io.max": ("8:0 rbps=max wbps=10485760 bogus=1\n", "malformed"),
}


@pytest.mark.parametrize("filename", BAD_FILES)
def test_a_malformed_file_skips_only_its_pod(systemd_tree: Path, filename: str) -> None:
    content, reason = BAD_FILES[filename]
    (systemd_tree / "sys/fs/cgroup" / POD_DIR / filename).write_text(content)
    clean = by_pod(scrape_tree(FIXTURES / "cgroup-v2-systemd"))
    got = scrape_tree(systemd_tree)
    assert POD not in by_pod(got)
    assert by_pod(got) == {uid: s for uid, s in clean.items() if uid != POD}
    assert pods_gauge(got) == len(clean) - 1
    assert skipped(got) == {"vanished": 0, "unreadable": 0, "malformed": 0, "max_pods": 0} | {
        reason: 1
    }
    assert got[(SUCCESS, frozenset({("collector", "cgroup")}))] == 1


def test_unreadable_files_skip_their_pod_and_the_other_collectors_keep_working(
    systemd_tree: Path,
) -> None:
    shutil.copytree(FIXTURES / "linux-6.1-metal/proc", systemd_tree / "proc")
    pod = systemd_tree / "sys/fs/cgroup" / POD_DIR
    (pod / "memory.stat").unlink()
    os.mkfifo(pod / "memory.stat")  # would block a reader forever
    other = next((systemd_tree / "sys/fs/cgroup/kubepods.slice").glob("kubepods-pod*.slice"))
    with open(other / "memory.events", "r+b") as f:
        f.truncate(100 << 20)  # over the read cap
    got = scrape_tree(systemd_tree, names=("cgroup", "pressure"))
    assert skipped(got)["unreadable"] == 2
    assert pods_gauge(got) == 2
    assert got[(SUCCESS, frozenset({("collector", "pressure")}))] == 1
    assert got[(SUCCESS, frozenset({("collector", "cgroup")}))] == 1


def test_a_pod_that_vanishes_mid_scrape_is_skipped_and_counted(
    systemd_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet removes a pod cgroup between the listing and the reads, or during them."""
    pod = systemd_tree / "sys/fs/cgroup" / POD_DIR
    real_read = read_listed

    def read_then_delete(path: str) -> str:
        text = real_read(path)
        if path == str(pod / "memory.current"):
            shutil.rmtree(pod)  # the files that follow are gone
        return text

    monkeypatch.setattr("exporter.collectors.cgroup.read_listed", read_then_delete)
    collector = node_collector(cgroup_paths(systemd_tree), ("cgroup",))
    got = samples_of(scrape(collector), skip=DURATION)
    assert POD not in by_pod(got)
    assert len(by_pod(got)) == 3
    assert skipped(got)["vanished"] == 1
    assert got[(SUCCESS, frozenset({("collector", "cgroup")}))] == 1
    again = samples_of(scrape(collector), skip=DURATION)
    assert skipped(again)["vanished"] == 1  # gone for good now: no longer listed, not counted
    assert by_pod(again) == by_pod(got)


def test_a_pod_without_a_controllers_files_is_reported_with_what_it_has(
    systemd_tree: Path,
) -> None:
    """No io controller for the pod (io.* absent): its I/O series are absent, not a skip."""
    pod = systemd_tree / "sys/fs/cgroup" / POD_DIR
    (pod / "io.stat").unlink()
    (pod / "io.max").unlink()
    got = by_pod(scrape_tree(systemd_tree))[POD]
    names = {name for name, _ in got}
    assert not any(n.startswith("mco_pod_io_") for n in names)
    assert "mco_pod_memory_events_total" in names


def test_max_pods_caps_the_series_and_counts_the_rest(systemd_tree: Path) -> None:
    collector = node_collector(cgroup_paths(systemd_tree), ("cgroup",), {"cgroup.max-pods": "3"})
    first = samples_of(scrape(collector), skip=DURATION)
    second = samples_of(scrape(collector), skip=DURATION)
    assert pods_gauge(first) == 3 and len(by_pod(first)) == 3
    assert skipped(first)["max_pods"] == 1
    assert skipped(second)["max_pods"] == 2  # a counter: one more per scrape over the cap
    assert by_pod(first) == by_pod(second)


def test_non_pod_directories_are_ignored(systemd_tree: Path) -> None:
    kubepods = systemd_tree / "sys/fs/cgroup/kubepods.slice"
    for name in (
        "kubepods-burstable-pod../../etc.slice",  # not a UID
        "kubepods-besteffort-pod1234.slice",  # a pod of the wrong QoS directory
        "system.slice",
    ):
        (kubepods / "kubepods-burstable.slice" / name.replace("/", "_")).mkdir()
    (kubepods / "kubepods-burstable.slice/kubepods-burstable-podabcd.slice").write_text("")
    assert scrape_tree(systemd_tree) == scrape_tree(FIXTURES / "cgroup-v2-systemd")


@pytest.mark.parametrize(
    "flag",
    [
        "--collector.cgroup.max-pods=0",
        "--collector.cgroup.max-pods=many",
        "--collector.cgroup.cgroup-root=kubelet",
        "--collector.cgroup.cgroup-root=/a/../b",
    ],
)
def test_bad_options_stop_the_start(flag: str) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_settings([flag])
    assert exited.value.code == 2


def test_path_cgroupfs_flag() -> None:
    assert parse_settings([]).paths.cgroupfs == "/sys/fs/cgroup"
    assert parse_settings(["--path.cgroupfs=/host/cgroup"]).paths.cgroupfs == "/host/cgroup"


def io_limits(samples: Samples, uid: str) -> dict[tuple[str, str], float]:
    kinds = {
        "mco_pod_io_limit_bytes_per_second": "bytes",
        "mco_pod_io_limit_operations_per_second": "operations",
    }
    return {
        (kinds[name], dict(labels)["operation"]): v
        for (name, labels), v in samples.items()
        if name in kinds and dict(labels)["pod_uid"] == uid
    }


def test_v2_container_io_limits_bind_the_pod_when_every_container_has_one(
    systemd_tree: Path,
) -> None:
    """io.max holds a whole subtree: the pod's own limit, or its containers' together."""
    pod = systemd_tree / "sys/fs/cgroup" / POD_DIR
    own = {("bytes", "write"): 15728640.0, ("operations", "write"): 200.0}
    assert io_limits(scrape_tree(systemd_tree), POD) == own
    (container,) = [d for d in pod.iterdir() if d.is_dir()]
    (container / "io.max").write_text("8:0 rbps=max wbps=1048576 riops=50 wiops=max\n")
    tighter = {("bytes", "write"): 1048576.0, ("operations", "write"): 200.0}
    assert io_limits(scrape_tree(systemd_tree), POD) == tighter | {("operations", "read"): 50.0}
    (pod / "sidecar.scope").mkdir()  # a container without a limit: the containers are not bound
    assert io_limits(scrape_tree(systemd_tree), POD) == own
    (pod / "sidecar.scope/io.max").write_text("8:0 rbps=max wbps=2097152 riops=10 wiops=max\n")
    both = {("bytes", "write"): 3145728.0, ("operations", "write"): 200.0}
    assert io_limits(scrape_tree(systemd_tree), POD) == both | {("operations", "read"): 60.0}


def test_v1_io_limits_are_the_containers_not_the_pods() -> None:
    """v1 blk-throttle is flat: a pod cgroup's own limit binds none of its containers'
    processes (recorded: the limit on the pod's container throttled dd to 4.3 MB/s; the one on
    the other pod's own cgroup is not reported)."""
    samples = scrape_tree(FIXTURES / "cgroup-v1-hybrid")
    limited = {dict(labels)["pod_uid"] for (name, labels) in samples if "io_limit" in name}
    assert limited == {"d4fa5049-04a8-419a-88ff-651f28a6a393"}
    assert io_limits(samples, "d4fa5049-04a8-419a-88ff-651f28a6a393") == {
        ("bytes", "write"): 4194304.0
    }


def test_a_deeply_nested_pod_is_read_to_a_bounded_depth(tmp_path: Path) -> None:
    """A tree nested deeper than the cap neither fails the scrape nor is read below it."""
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "cgroup-v1-hybrid", tree)
    uid = "d4fa5049-04a8-419a-88ff-651f28a6a393"
    pod = tree / f"sys/fs/cgroup/memory/kubepods/besteffort/pod{uid}"
    fd = os.open(pod, os.O_RDONLY)
    try:
        # Three times the cap; not much deeper: pytest's clean-up of old temporary trees
        # recurses per level and hit Python's recursion limit on a 100-level tree.
        for _ in range(3 * cgroup_module.MAX_DEPTH):
            os.mkdir("d", dir_fd=fd)
            with open(os.open("memory.failcnt", os.O_CREAT | os.O_WRONLY, dir_fd=fd), "w") as f:
                f.write("1\n")
            child = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    samples = scrape_tree(tree)
    assert samples[(SUCCESS, frozenset({("collector", "cgroup")}))] == 1
    events = (
        "mco_pod_memory_events_total",
        frozenset({("pod_uid", uid), ("qos", "besteffort"), ("event", "max")}),
    )
    # The pod and every level below it count 1 each: the pod and MAX_DEPTH levels are read.
    assert samples[events] == 1 + cgroup_module.MAX_DEPTH
    shutil.rmtree(tree)


# The walk's budget (the literal where the module predates it, so that the counts fail there).
BUDGET = getattr(cgroup_module, "MAX_CHILD_CGROUPS", 64)


def test_a_pod_with_many_child_cgroups_is_walked_within_a_budget(tmp_path: Path) -> None:
    """Issue 27: the walk below a pod was bounded in depth only (~10 µs a child cgroup; 80,000
    made a scrape take 0.75 s). Thousands of children: the pod is still reported, the walk
    lists ``MAX_CHILD_CGROUPS`` of them (the sums cover those) and the cut is counted."""
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "cgroup-v1-hybrid", tree)
    uid = "d4fa5049-04a8-419a-88ff-651f28a6a393"
    pod = tree / f"sys/fs/cgroup/memory/kubepods/besteffort/pod{uid}"
    children = 20 * BUDGET
    existing = sum(1 for p in pod.iterdir() if p.is_dir())  # the fixture's own containers
    for i in range(children):
        child = pod / f"c{i:05d}"
        child.mkdir()
        (child / "memory.failcnt").write_text("1\n")
    (pod / "memory.failcnt").write_text("0\n")
    samples = scrape_tree(tree)
    assert samples[(SUCCESS, frozenset({("collector", "cgroup")}))] == 1
    events = (
        "mco_pod_memory_events_total",
        frozenset({("pod_uid", uid), ("qos", "besteffort"), ("event", "max")}),
    )
    # One limit hit per child listed: the budget's worth, less the fixture's own containers.
    assert BUDGET - existing <= samples[events] <= BUDGET
    assert samples[("mco_cgroup_pod_walks_truncated_total", frozenset())] == 1
    assert skipped(samples)["unreadable"] == 0 and uid in by_pod(samples)


def test_io_limits_that_need_every_child_are_not_claimed_past_the_budget(tmp_path: Path) -> None:
    """A v2 pod's limit is the tighter of its own io.max and its children's sum; with more
    children than the walk lists, their sum is unknown and only the pod's own limit binds."""
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "cgroup-v2-systemd", tree)
    pod = tree / "sys/fs/cgroup" / POD_DIR
    for name in os.listdir(pod):
        if (pod / name).is_dir():
            shutil.rmtree(pod / name)
    (pod / "io.max").write_text("8:0 rbps=max wbps=1000000 riops=max wiops=max\n")
    for i in range(2 * BUDGET):
        child = pod / f"c{i:05d}"
        child.mkdir()
        (child / "io.max").write_text("8:0 rbps=max wbps=1000 riops=max wiops=max\n")
    samples = scrape_tree(tree)
    # Not 128 x 1000: unknown once half the children are not listed.
    assert io_limits(samples, POD) == {("bytes", "write"): 1000000.0}
    assert samples[("mco_cgroup_pod_walks_truncated_total", frozenset())] == 1
