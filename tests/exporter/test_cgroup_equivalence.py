"""The cheaper cgroup collector (issue 14) against the one it replaced (its listing and reading
kept in testkit/cgroup_reference.py): the same exposition, byte for byte (series, values, order,
and the skipped counters), on the recorded trees and on random trees with absent, malformed and
hostile files, over several scrapes."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from exporter.collectors.cgroup import DEFAULT_MAX_PODS, MAX_DEPTH, CgroupCollector
from exporter.errors import NoDataError
from exporter.paths import Paths
from exporter.registry import CollectorConfig
from testkit.cgroup_reference import ReferenceCollector
from tests.exporter.conftest import FIXTURES

TREES = ["cgroup-v2-systemd", "cgroup-v2-cgroupfs", "cgroup-v1-hybrid"]


class _Once:
    def __init__(self, metrics: Sequence[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Sequence[Metric]:
        return self._metrics


def exposition(collector: CgroupCollector | ReferenceCollector) -> str:
    metrics: Sequence[Metric]
    try:
        metrics = collector.update()
    except NoDataError as exc:
        metrics = exc.metrics
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Once(metrics))
    return generate_latest(registry).decode()


def both(cgroupfs: Path, max_pods: int = DEFAULT_MAX_PODS, root: str = "/") -> tuple[str, str]:
    config = CollectorConfig(
        Paths(cgroupfs=str(cgroupfs)), {"max-pods": str(max_pods), "cgroup-root": root}
    )
    old, new = ReferenceCollector(config), CgroupCollector(config)
    got = [(exposition(old), exposition(new)) for _ in range(2)]  # counters carry over
    return "".join(o for o, _ in got), "".join(n for _, n in got)


@pytest.mark.parametrize("tree", TREES)
def test_recorded_trees_give_the_same_exposition(tree: str) -> None:
    old, new = both(FIXTURES / tree / "sys/fs/cgroup")
    assert "mco_pod_" in new
    assert new == old


# ---- random trees -------------------------------------------------------------------------

count = st.integers(0, 2**40).map(str)
device = st.sampled_from(["8:0", "8:16", "259:0", "253:1"])


def lines(line: st.SearchStrategy[str], most: int = 3) -> st.SearchStrategy[str]:
    return st.lists(line, max_size=most).map(lambda ls: "".join(f"{x}\n" for x in ls))


psi = st.lists(st.sampled_from(["some", "full"]), max_size=2, unique=True).flatmap(
    lambda kinds: st.tuples(*(count for _ in kinds)).map(
        lambda totals: "".join(
            f"{k} avg10=0.00 avg60=1.50 avg300=0.00 total={t}\n"
            for k, t in zip(kinds, totals, strict=True)
        )
    )
)
keyed = lines(
    st.tuples(st.sampled_from(["low", "high", "max", "oom_kill", "oom"]), count).map(" ".join), 5
)
memory_stat = lines(
    st.tuples(st.sampled_from(["anon", "file", "pgsteal", "pgscan"]), count).map(" ".join), 4
)
io_stat = lines(
    st.tuples(device, count, count, count, count).map(
        lambda t: f"{t[0]} rbytes={t[1]} wbytes={t[2]} rios={t[3]} wios={t[4]} dbytes=0 dios=0"
    )
)
limit = st.one_of(st.just("max"), count)
io_max = lines(
    st.tuples(device, limit, limit, limit, limit).map(
        lambda t: f"{t[0]} rbps={t[1]} wbps={t[2]} riops={t[3]} wiops={t[4]}"
    )
)
blkio_stat = lines(
    st.tuples(device, st.sampled_from(["Read", "Write", "Sync", "Async"]), count).map(" ".join), 4
).map(lambda text: text + "Total 7\n")
blkio_limit = lines(st.tuples(device, count).map(" ".join), 2)
VALID: dict[str, st.SearchStrategy[str]] = {
    "cpu.pressure": psi,
    "io.pressure": psi,
    "memory.pressure": psi,
    "memory.current": count.map(lambda n: n + "\n"),
    "memory.max": limit.map(lambda n: n + "\n"),
    "memory.events": keyed,
    "memory.stat": memory_stat,
    "io.stat": io_stat,
    "io.max": io_max,
    "memory.usage_in_bytes": count.map(lambda n: n + "\n"),
    "memory.limit_in_bytes": st.sampled_from(["9223372036854771712\n", "104857600\n"]),
    "memory.failcnt": count.map(lambda n: n + "\n"),
    "memory.oom_control": count.map(lambda n: f"oom_kill_disable 0\nunder_oom 0\noom_kill {n}\n"),
    "blkio.throttle.io_service_bytes": blkio_stat,
    "blkio.throttle.io_serviced": blkio_stat,
    "blkio.throttle.io_service_bytes_recursive": blkio_stat,
    "blkio.throttle.io_serviced_recursive": blkio_stat,
    "blkio.throttle.read_bps_device": blkio_limit,
    "blkio.throttle.write_bps_device": blkio_limit,
    "blkio.throttle.read_iops_device": blkio_limit,
    "blkio.throttle.write_iops_device": blkio_limit,
}
# A file a cgroup does not have, and what a hostile tree holds instead of a file.
ABSENT, FIFO, DIRECTORY, DANGLING = object(), object(), object(), object()


hostile = st.one_of(
    st.text(max_size=40),  # malformed (or, by chance, valid)
    st.sampled_from([FIFO, DIRECTORY, DANGLING]),
)
cgroup_files = st.fixed_dictionaries(
    {name: st.one_of(st.just(ABSENT), valid, valid) for name, valid in VALID.items()}
)


@st.composite
def cgroup(draw: st.DrawFn, depth: int = 0) -> dict[str, object]:
    files = draw(cgroup_files)
    # Mostly clean cgroups (a pod is reported only when every file of it is good), some with
    # a file or two of anything.
    for name in draw(st.lists(st.sampled_from(sorted(VALID)), max_size=2)):
        files[name] = draw(hostile)
    node: dict[str, object] = {"files": files}
    if depth <= MAX_DEPTH:  # one level more than is read: containers, rarely deeper
        most = 2 if depth == 0 else draw(st.sampled_from([0, 0, 0, 1]))
        node["children"] = draw(st.lists(cgroup(depth + 1), max_size=most))
    return node


def write(directory: Path, node: dict[str, object]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    files = node["files"]
    assert isinstance(files, dict)
    for name, value in files.items():
        path = directory / name
        if value is ABSENT:
            continue
        if value is FIFO:
            os.mkfifo(path)
        elif value is DIRECTORY:
            path.mkdir()
        elif value is DANGLING:
            path.symlink_to(directory / "nowhere")
        else:
            path.write_text(str(value))
    children = node.get("children", [])
    assert isinstance(children, list)
    for i, child in enumerate(children):
        write(directory / f"c{i}.scope", child)


qos = st.sampled_from(["guaranteed", "burstable", "besteffort"])
pods = st.lists(st.tuples(qos, st.uuids().map(str), cgroup()), max_size=5, unique_by=lambda p: p[1])


def build(root: Path, layout: str, drawn: list[tuple[str, str, dict[str, object]]]) -> None:
    systemd = layout == "v2-systemd"
    hierarchies = {"v2-systemd": [""], "v2-cgroupfs": [""], "v1": ["memory", "blkio", "cpu"]}
    hierarchies["v1-hybrid"] = [*hierarchies["v1"], "unified"]
    for hierarchy in hierarchies[layout]:
        base = root / hierarchy
        base.mkdir(parents=True, exist_ok=True)
        if hierarchy in ("", "unified"):
            (base / "cgroup.controllers").write_text("cpu io memory pids\n")
        top = base / ("kubepods.slice" if systemd else "kubepods")
        top.mkdir(exist_ok=True)
        (top / "not-a-pod").mkdir(exist_ok=True)
        for klass, uid, node in drawn:
            if systemd:
                parent = top if klass == "guaranteed" else top / f"kubepods-{klass}.slice"
                prefix = "kubepods" if klass == "guaranteed" else f"kubepods-{klass}"
                name = f"{prefix}-pod{uid.replace('-', '_')}.slice"
            else:
                parent = top if klass == "guaranteed" else top / klass
                name = f"pod{uid}"
            write(parent / name, node)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layout=st.sampled_from(["v2-systemd", "v2-cgroupfs", "v1", "v1-hybrid"]),
    drawn=pods,
    max_pods=st.integers(1, 6),
)
def test_random_trees_give_the_same_exposition(
    layout: str, drawn: list[tuple[str, str, dict[str, object]]], max_pods: int
) -> None:
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        root = Path(tmp) / "cgroup"
        build(root, layout, drawn)
        old, new = both(root, max_pods)
        assert new == old
        shutil.rmtree(root)
