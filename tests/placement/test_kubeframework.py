"""kube-scheduler's cycle as the benchmark models it, against hand-computed examples."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bench.placement import kubeframework as kf
from bench.placement.cluster import Cluster
from bench.placement.model import NODE_CPU, Demand
from bench.placement.scheduler import DefaultScheduler, KubeExtender
from bench.placement.trace import PodSpec
from tests.placement.served import served


def _pod(name: str, cpu: float = 0.5, memory: float = 1.0) -> PodSpec:
    return PodSpec(name, 0, 10, "latency-sensitive", "io", Demand(cpu=cpu, memory=memory))


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        (20, 20),  # under minFeasibleNodesToFind: every node
        (200, 100),  # 50 - 200/125 = 49 %: 98, raised to the minimum of 100
        (1000, 420),  # 50 - 8 = 42 %
        (5000, 500),  # 50 - 40 = 10 %
        (10000, 500),  # 50 - 80 < 5: the 5 % floor
    ],
)
def test_num_feasible_nodes_to_find(nodes: int, expected: int) -> None:
    assert kf.num_feasible_nodes_to_find(nodes) == expected


def test_search_stops_at_100_of_200_and_rotates_the_start_index() -> None:
    c = Cluster("c", "n", 200)
    for i in range(10):  # n-0000..n-0009 full: they fail resource fit
        c.bind(_pod(f"full{i}", cpu=NODE_CPU), f"n-{i:04d}", 0, 0)
    search, pod = kf.NodeSearch(), _pod("p")
    first = search.feasible(c, pod)
    # 10 failed, then 100 found (10..109); the 101st feasible node cancels the search.
    assert first == [f"n-{i:04d}" for i in range(10, 110)]
    assert search.next_start_node_index == 110
    second = search.feasible(c, pod)
    # From 110: 90 found (110..199), the 10 full nodes fail, 10 more found (10..19).
    assert second == [f"n-{i:04d}" for i in [*range(110, 200), *range(10, 20)]]
    assert search.next_start_node_index == (110 + 110) % 200


def test_search_below_100_nodes_sees_every_node_from_the_same_start() -> None:
    c = Cluster("c", "n", 20)
    search = kf.NodeSearch()
    for i in range(3):
        assert search.feasible(c, _pod(f"p{i}")) == list(c.nodes)
        assert search.next_start_node_index == 0


def test_balanced_allocation_breaks_a_least_allocated_tie() -> None:
    c = Cluster("c", "n", 2)
    for i in range(4):
        c.bind(_pod(f"cache{i}", cpu=2, memory=2), "n-0000", 0, 0)  # cpu-heavy node
        c.bind(_pod(f"mem{i}", cpu=1, memory=6), "n-0001", 0, 0)  # memory-heavy node
    pod = _pod("p")
    cpu_heavy, memory_heavy = c.nodes["n-0000"], c.nodes["n-0001"]
    # With the pod: 8500m of 16000m and 9 GiB of 64 on n-0000; 4500m and 25 GiB on n-0001.
    # LeastAllocated: (7500*100//16000 + 55*100//64) // 2 = (46 + 85) // 2 = 65 and
    #                 (11500*100//16000 + 39*100//64) // 2 = (71 + 60) // 2 = 65.
    req0, req1 = (8500, 9 * 2**30), (4500, 25 * 2**30)
    alloc = (16000, 64 * 2**30)
    assert kf.least_allocated(req0, alloc) == kf.least_allocated(req1, alloc) == 65
    # Balanced: std = |0.53125 - 0.140625| / 2 = 0.1953125 -> int(80.46875) = 80;
    #           std = |0.28125 - 0.390625| / 2 = 0.0546875 -> int(94.53125) = 94.
    assert kf.balanced_allocation(req0, alloc) == 80
    assert kf.balanced_allocation(req1, alloc) == 94
    assert kf.score(cpu_heavy, pod) == 145 and kf.score(memory_heavy, pod) == 159


async def test_default_scheduler_takes_the_balanced_node_whatever_the_seed() -> None:
    c = Cluster("c", "n", 2)
    for i in range(4):
        c.bind(_pod(f"cache{i}", cpu=2, memory=2), "n-0000", 0, 0)
        c.bind(_pod(f"mem{i}", cpu=1, memory=6), "n-0001", 0, 0)
    for seed in range(20):
        assert await DefaultScheduler().place(c, _pod("p"), random.Random(seed)) == "n-0001"


def test_an_empty_node_scores_hand_computed() -> None:
    c = Cluster("c", "n", 1)
    # 500m and 1 GiB: LeastAllocated (1550000//16000 + 6300//64) // 2 = (96 + 98) // 2 = 97;
    # fractions 0.03125 and 0.015625, std 0.0078125 -> int(99.21875) = 99.
    assert kf.score(c.nodes["n-0000"], _pod("p")) == 97 + 99


def test_tie_broken_by_seed_deterministically_and_uniformly() -> None:
    tied = [(f"n{i}", 150) for i in range(4)]

    def draws(seed: int) -> list[str]:
        rng = random.Random(seed)
        return [kf.select_host(tied, rng) for _ in range(20)]

    assert draws(1) == draws(1) and draws(2) == draws(2)
    assert draws(1) != draws(2)
    rng = random.Random(7)
    counts = Counter(kf.select_host(tied, rng) for _ in range(4000))
    assert set(counts) == {"n0", "n1", "n2", "n3"}
    assert all(850 < n < 1150 for n in counts.values()), counts


def test_select_host_takes_a_unique_best_and_restarts_the_draw_at_a_higher_score() -> None:
    rng = random.Random(0)
    assert kf.select_host([("a", 10), ("b", 30), ("c", 20)], rng) == "b"
    # Ties below a later, higher score never win.
    assert {kf.select_host([("a", 5), ("b", 5), ("c", 9)], rng) for _ in range(50)} == {"c"}
    with pytest.raises(ValueError):
        kf.select_host([], rng)


def test_extender_priority_scaled_to_node_scores() -> None:
    # MaxNodeScore / MaxExtenderPriority = 100 / 10.
    assert kf.extender_score(7, 1) == 70 and kf.extender_score(10, 2) == 200


@pytest.fixture
async def extender() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A stand-in extender that keeps every node, prefers the last one it is offered (10) and
    records what it was asked."""
    asked: list[dict[str, Any]] = []

    async def filter_(request: web.Request) -> web.Response:
        body = await request.json()
        asked.append({"verb": "filter", "nodes": body["NodeNames"]})
        return web.json_response({"NodeNames": body["NodeNames"]})

    async def prioritize(request: web.Request) -> web.Response:
        names = (await request.json())["NodeNames"]
        asked.append({"verb": "prioritize", "nodes": names})
        return web.json_response([{"Host": n, "Score": 10 if n == names[-1] else 0} for n in names])

    app = web.Application()
    app.router.add_post("/scheduler/filter", filter_)
    app.router.add_post("/scheduler/prioritize", prioritize)
    async with served(app) as url:
        yield url, asked


async def test_extender_filter_sees_only_the_nodes_found(
    extender: tuple[str, list[dict[str, Any]]],
) -> None:
    url, asked = extender
    c = Cluster("c", "n", 200)
    async with aiohttp.ClientSession() as session:
        kube = KubeExtender(session, url)
        first = await kube.place(c, _pod("a"), random.Random(1))
        c.bind(_pod("a"), first or "", 0, 0)
        second = await kube.place(c, _pod("b"), random.Random(1))
    filters = [a["nodes"] for a in asked if a["verb"] == "filter"]
    assert filters == [
        [f"n-{i:04d}" for i in range(100)],
        [f"n-{i:04d}" for i in range(100, 200)],
    ]
    # The extender's 10 (x weight 1 x 10 = 100) outweighs anything the score plugins give.
    assert (first, second) == ("n-0099", "n-0199")


def test_node_requests_are_the_sum_of_its_pods_requests() -> None:
    c = Cluster("c", "n", 1)
    pods = [_pod(f"p{i}", cpu=0.5 * (i % 4 + 1), memory=float(i % 6 + 1)) for i in range(30)]
    placements = [c.bind(p, "n-0000", 0, 0) for p in pods]
    for pl in placements[::3]:
        c.finish(pl)
    left = [pl.pod for pl in placements if pl.pod.name in c.nodes["n-0000"].placed]
    total = [sum(kf.pod_requests(p)[i] for p in left) for i in (0, 1)]
    assert kf.node_requested(c.nodes["n-0000"]) == tuple(total)


def _batch(name: str, burst: int | None = None, *, labelled: bool = True) -> PodSpec:
    demand = Demand(cpu=1.0, memory=2.0)
    return PodSpec(name, 0, 10, "batch", "io-heavy", demand, burst, labelled=labelled)


def test_inter_pod_affinity_counts_both_sides_terms_and_normalizes_min_max() -> None:
    c = Cluster("c", "n", 3)
    c.bind(_batch("b0"), "n-0000", 0, 0)
    c.bind(_batch("b1"), "n-0000", 0, 0)
    c.bind(_batch("b2"), "n-0001", 0, 0)
    c.bind(_pod("o0"), "n-0002", 0, 0)
    online = _pod("p")
    nodes = list(c.nodes.values())
    # The online pod's term matches each batch pod, each batch pod's term matches the online
    # pod: -200 per batch pod; an online neighbour matches neither.
    raw = {n.name: kf.inter_pod_affinity_raw(n, online) for n in nodes}
    assert raw == {"n-0000": -400, "n-0001": -200, "n-0002": 0}
    # (s - min) * 100 / (max - min): 0, 50, 100.
    assert kf.normalize_inter_pod_affinity(raw) == {"n-0000": 0, "n-0001": 50, "n-0002": 100}
    # No term matched anywhere: every node 0 (NormalizeScore returns early).
    assert kf.normalize_inter_pod_affinity(dict.fromkeys(raw, 0)) == dict.fromkeys(raw, 0)
    # A pod without a class label declares nothing and matches nobody's term.
    quiet = _batch("u", labelled=False)
    assert {kf.inter_pod_affinity_raw(n, quiet) for n in nodes} == {0}
    # The plugin's weight 2 on top of the default profile's score.
    totals = kf.native_scores(nodes, online)
    assert totals["n-0002"] - kf.score(c.nodes["n-0002"], online) == 200
    assert totals["n-0000"] == kf.score(c.nodes["n-0000"], online)


def test_topology_spread_scores_a_burst_pods_own_burst_only() -> None:
    c = Cluster("c", "n", 3)
    c.bind(_batch("a", burst=1), "n-0000", 0, 0)
    c.bind(_batch("b", burst=1), "n-0000", 0, 0)
    c.bind(_batch("c", burst=1), "n-0001", 0, 0)
    c.bind(_batch("x", burst=2), "n-0002", 0, 0)  # another burst: not counted
    pod = _batch("p", burst=1)
    nodes = list(c.nodes.values())
    # cnt * log(3 + 2) + (maxSkew - 1), rounded: 2 * 1.609 = 3.22 -> 3; 1.609 -> 2; 0.
    raw = {n.name: kf.spread_raw(n, pod, len(nodes)) for n in nodes}
    assert raw == {"n-0000": 3, "n-0001": 2, "n-0002": 0}
    # 100 * (max + min - s) // max: 0, 33, 100.
    assert kf.normalize_spread(raw) == {"n-0000": 0, "n-0001": 33, "n-0002": 100}
    assert kf.normalize_spread(dict.fromkeys(raw, 0)) == dict.fromkeys(raw, 100)


async def test_native_affinity_keeps_online_pods_off_batch_nodes() -> None:
    c = Cluster("c", "n", 2)
    for i in range(3):
        c.bind(_batch(f"b{i}"), "n-0000", 0, 0)
    c.bind(_pod("o0", cpu=4.0, memory=8.0), "n-0001", 0, 0)  # busier by requests
    default = {await DefaultScheduler().place(c, _pod("p"), random.Random(s)) for s in range(5)}
    assert default == {"n-0000"}  # LeastAllocated and balance prefer the batch node
    native = DefaultScheduler(native=True)
    assert {await native.place(c, _pod("p"), random.Random(s)) for s in range(5)} == {"n-0001"}


async def test_node_pool_keeps_batch_off_it_and_online_pods_on_it() -> None:
    c = Cluster("c", "n", 4)
    pool = frozenset({"n-0000"})
    scheduler = DefaultScheduler(pool=pool)
    for i in range(4):
        assert await scheduler.place(c, _batch(f"b{i}"), random.Random(i)) != "n-0000"
        assert await scheduler.place(c, _pod(f"o{i}"), random.Random(i)) == "n-0000"
    # A pod without a class label does not tolerate the pool's taint either.
    assert await scheduler.place(c, _batch("u", labelled=False), random.Random(0)) != "n-0000"
    c.nodes["n-0000"].cpu = NODE_CPU  # the pool is full: online pods wait
    assert await scheduler.place(c, _pod("late"), random.Random(0)) is None
