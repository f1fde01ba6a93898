"""Nodes without data under a policy with maxLevel, through kube-scheduler's cycle (the
benchmark's framework stand-in) and the real extender app: no pile-up onto the node MCO knows
nothing about, not even when every known node is over the limit, and no pod left pending,
whether MCO has data for no node or every node is over the limit."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from bench.placement.cluster import Cluster
from bench.placement.model import Demand
from bench.placement.scheduler import KubeExtender, uid
from bench.placement.trace import PodSpec
from extender.app import RESERVATIONS, STORE, make_app
from extender.reservation import POD_WATCH, Placement
from tests.extender.conftest import cluster_report, entry, file_config, wait_for, write_reports
from tests.placement.served import served

KNOWN = [f"n-{i:04d}" for i in range(4)]  # quiet, in the report
NO_REPORT = "n-0004"  # a node the report does not mention (new, or its exporter is down)


def _latency(name: str) -> PodSpec:
    return PodSpec(name, 0, 600, "latency-sensitive", "io", Demand(cpu=0.5, memory=1.0))


def _cluster() -> Cluster:
    """Known nodes busy with other pods, the node without a report empty: kube-scheduler's own
    scores (LeastAllocated, BalancedAllocation) favour the empty node by far more than the
    extender's neutral-against-quiet difference (5 against 9, x10)."""
    c = Cluster("c", "n", 5)
    for node in KNOWN:
        for i in range(5):
            filler = PodSpec(f"{node}-fill{i}", 0, 600, "batch", "cpu", Demand(cpu=2.0, memory=6.0))
            c.bind(filler, node, 0, 0)
    return c


async def _burst(tmp_path: Path, levels: dict[str, float], *, at_once: bool) -> list[str | None]:
    """8 latency-sensitive pods through filter and prioritize. One by one: each pod's placement
    is recorded as the pod watch records it before the next is scheduled; at once: none is."""
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report({n: entry(level) for n, level in levels.items()})])
    app = make_app(file_config(path))
    c, rng, placed = _cluster(), random.Random(7), []
    async with served(app) as url, aiohttp.ClientSession() as session:
        await wait_for(lambda: app[STORE].loaded, what="the report")
        kube = KubeExtender(session, url)
        for i in range(8):
            pod = _latency(f"ls{i}")
            node = await kube.place(c, pod, rng)
            placed.append(node)
            if node is None:
                continue
            c.bind(pod, node, 0, 0)
            if not at_once:
                amount = 0.02  # the latency-sensitive policy's reservationPerPod
                app[RESERVATIONS].place(
                    uid(c, pod), Placement(node, amount, time.time(), POD_WATCH)
                )
    return placed


@pytest.mark.parametrize("at_once", [False, True], ids=["one-by-one", "at-once"])
async def test_a_burst_does_not_pile_onto_the_node_without_a_report(
    tmp_path: Path, at_once: bool
) -> None:
    placed = await _burst(tmp_path, dict.fromkeys(KNOWN, 0.1), at_once=at_once)
    counts = Counter(placed)
    # Before "no data is no proof", all 8 went to the empty node without a report.
    assert NO_REPORT not in counts, counts
    assert None not in counts and set(counts) <= set(KNOWN)
    assert max(counts.values()) <= 3, counts  # spread over the quiet nodes


@pytest.mark.parametrize("at_once", [False, True], ids=["one-by-one", "at-once"])
async def test_every_pod_still_places_where_no_node_has_data(tmp_path: Path, at_once: bool) -> None:
    placed = await _burst(tmp_path, {}, at_once=at_once)
    assert None not in placed and len(placed) == 8


async def test_nodes_over_their_limit_do_not_make_the_node_without_data_the_fallback(
    tmp_path: Path,
) -> None:
    """Every node with data over the latency-sensitive maxLevel (0.3): the node without a report
    is not proven under it either, so it is no more of a fallback than they are (a real
    kube-scheduler once put 8 of 8 there when reservations pushed the known nodes over). No pod
    waits (extender.fallback: the least interfered pass), and the node without data, counted at
    the neutral level plus its own reservation, takes its share, not the burst."""
    placed = await _burst(tmp_path, dict.fromkeys(KNOWN, 0.5), at_once=False)
    assert None not in placed
    assert Counter(placed)[NO_REPORT] <= 4, placed  # 4 of 8 here: kube prefers it empty
    # Known nodes under the neutral level go first: the node without data takes none.
    placed = await _burst(tmp_path, dict.fromkeys(KNOWN, 0.4), at_once=False)
    assert None not in placed and NO_REPORT not in placed, placed
