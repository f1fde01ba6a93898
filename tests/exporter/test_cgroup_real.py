"""The cgroup collector on real pod cgroups of this machine, with real processes in them.

A kubelet-shaped tree (cgroupfs driver) is made in the v1 memory and blkio controllers and in
the unified v2 hierarchy (per-cgroup PSI), under a fresh ``--cgroup-root``; every cgroup made
is removed afterwards, whatever the outcome.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from exporter.paths import Paths
from scripts.kubepods import PodTree, pod_tree, why_not_here
from scripts.stress import StressUnavailableError, whole_disk
from tests.exporter.conftest import Samples, node_collector, samples_of, scrape
from tests.exporter.test_real_host import start_exporter

pytestmark = [
    pytest.mark.slow,
    pytest.mark.host_load,
    pytest.mark.skipif(why_not_here() is not None, reason=str(why_not_here())),
]

LIMIT = 64 << 20


@pytest.fixture
def tree() -> Iterator[PodTree]:
    with pod_tree() as made:
        yield made
    for root in made.roots:  # the finalizer left nothing behind
        assert not (root / made.cgroup_root.strip("/")).exists()


def pod_value(samples: Samples, name: str, uid: str, **labels: str) -> float:
    want = {("pod_uid", uid), *labels.items()}
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    assert len(found) == 1, (name, uid, labels, found)
    return found[0]


def test_a_pod_thrashing_in_its_own_limit_shows_its_own_pressure_and_limit_events(
    tree: PodTree, tmp_path: Path
) -> None:
    stress_ng = shutil.which("stress-ng")
    if stress_ng is None:
        pytest.skip("stress-ng is not installed (apt-get install stress-ng)")
    stressed = tree.add_pod("burstable")
    stressed.set_memory_limit(LIMIT)
    idle = tree.add_pod("besteffort")
    idle.start(["sleep", "120"], tmp_path / "idle.log")
    exporter, url = start_exporter(
        tmp_path,
        f"--collector.cgroup.cgroup-root={tree.cgroup_root}",
        *(f"--no-collector.{n}" for n in ("biolatency", "perf_llc")),
    )
    try:
        before = samples_of(requests.get(url, timeout=10).text)
        load = stressed.start(
            [stress_ng, "--vm", "1", "--vm-bytes", "200M", "--timeout", "8s", "--quiet"],
            tmp_path / "stress.log",
        )
        load.wait(timeout=60)
        text = requests.get(url, timeout=10).text
        after = samples_of(text)
    finally:
        exporter.stop()

    def delta(name: str, uid: str, **labels: str) -> float:
        return pod_value(after, name, uid, **labels) - pod_value(before, name, uid, **labels)

    stall = "mco_pod_pressure_stalled_seconds_total"
    events = "mco_pod_memory_events_total"
    # The stressed pod: its own limit, hit again and again, and its own memory stalls.
    assert pod_value(after, "mco_pod_memory_limit_bytes", stressed.uid) == LIMIT
    assert delta(events, stressed.uid, event="max") > 100
    assert delta(stall, stressed.uid, resource="memory", kind="some") > 0.01
    assert delta(stall, stressed.uid, resource="memory", kind="full") > 0.01
    # The pod beside it: no limit, no limit events, no memory stall of its own.
    assert not any(
        n == "mco_pod_memory_limit_bytes" and ("pod_uid", idle.uid) in ls for n, ls in after
    )
    assert delta(events, idle.uid, event="max") == 0
    assert delta(events, idle.uid, event="oom_kill") == 0
    assert delta(stall, idle.uid, resource="memory", kind="some") == 0
    assert pod_value(after, "mco_pod_memory_usage_bytes", idle.uid) > 0
    assert after[("mco_cgroup_pods", frozenset())] == 2
    success = ("mco_exporter_collector_success", frozenset({("collector", "cgroup")}))
    assert after[success] == 1
    if shutil.which("promtool") is not None:  # names, types and help as Prometheus expects
        check = subprocess.run(
            ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert check.returncode == 0 and not check.stdout + check.stderr, check.stderr


def test_pods_created_and_removed_while_scraping_never_fail_a_scrape(tree: PodTree) -> None:
    collector = node_collector(Paths(), ("cgroup",), {"cgroup.cgroup-root": tree.cgroup_root})
    stop = threading.Event()
    churned = 0

    def churn() -> None:
        nonlocal churned
        while not stop.is_set():
            pod = tree.add_pod("burstable")
            for d in pod.dirs("app"):
                d.mkdir()
            time.sleep(0.002)
            for d in [*pod.dirs("app"), *pod.dirs()]:
                d.rmdir()
            churned += 1

    steady = tree.add_pod("guaranteed")
    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 3
        scrapes = 0
        while time.monotonic() < deadline:
            samples = samples_of(scrape(collector))
            success = ("mco_exporter_collector_success", frozenset({("collector", "cgroup")}))
            assert samples[success] == 1
            uids = {dict(ls)["pod_uid"] for n, ls in samples if n == "mco_pod_memory_usage_bytes"}
            assert steady.uid in uids and len(uids) <= 2
            scrapes += 1
    finally:
        stop.set()
        thread.join(timeout=10)
    assert scrapes > 10 and churned > 10


def test_a_pod_at_its_own_io_limit_shows_the_limit_its_io_and_its_own_io_stall(
    tree: PodTree, tmp_path: Path
) -> None:
    """v1 blk-throttle binds the cgroup the processes are in: the limit goes on the container."""
    try:
        disk = whole_disk(tmp_path)
    except StressUnavailableError as exc:
        pytest.skip(str(exc))
    throttled, free = tree.add_pod("burstable"), tree.add_pod("burstable")
    blkio = tree.cgroupfs / "blkio"
    if blkio not in tree.roots:
        pytest.skip("no v1 blkio controller here")
    container = blkio / throttled.rel / "app"
    container.mkdir()
    (container / "blkio.throttle.write_bps_device").write_text(f"{disk} {4 << 20}")
    collector = node_collector(Paths(), ("cgroup",), {"cgroup.cgroup-root": tree.cgroup_root})
    before = samples_of(scrape(collector))
    start = time.monotonic()
    dd = ["dd", "if=/dev/zero", "bs=64k", "count=128", "oflag=direct"]  # 8 MiB
    throttled.start([*dd, f"of={tmp_path / 'a'}"], tmp_path / "a.log").wait(timeout=60)
    took = time.monotonic() - start
    free.start([*dd, f"of={tmp_path / 'b'}"], tmp_path / "b.log").wait(timeout=60)
    after = samples_of(scrape(collector))

    def delta(name: str, uid: str, **labels: str) -> float:
        return pod_value(after, name, uid, **labels) - pod_value(before, name, uid, **labels)

    limit = "mco_pod_io_limit_bytes_per_second"
    assert pod_value(after, limit, throttled.uid, operation="write") == 4 << 20
    assert not [ls for n, ls in after if n == limit and ("pod_uid", free.uid) in ls]
    written = delta("mco_pod_io_bytes_total", throttled.uid, operation="write")
    assert written == 8 << 20
    assert took > 1.2  # 8 MiB at 4 MiB/s (the first slice passes at once)
    assert delta("mco_pod_io_bytes_total", free.uid, operation="write") == 8 << 20
    stall = "mco_pod_pressure_stalled_seconds_total"
    assert delta(stall, throttled.uid, resource="io", kind="some") > 0.5
