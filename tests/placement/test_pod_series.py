"""The fleet's per-pod series and the pods API's owners: what the real reporter learns
workload profiles from (reporter/culprits.py) and what the extender's pod watch names
residents' workloads by (extender/wire.py), for the bench's bound pods."""

from __future__ import annotations

import json
from dataclasses import replace

import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.placement import kubeapi, target
from bench.placement.cluster import Cluster
from bench.placement.run import residents
from bench.placement.scheduler import uid
from bench.placement.trace import BATCH_PROFILES, ONLINE_PROFILES, PodSpec
from extender.wire import Pod
from mco.workload import workload_key

IO_HEAVY = PodSpec("batch-1", 0.0, 60.0, "batch", "io-heavy", BATCH_PROFILES["io-heavy"])
ONLINE_IO = PodSpec("online-0", 0.0, 600.0, "latency-sensitive", "io", ONLINE_PROFILES["io"])


def _samples(fleet: target.LiveFleet) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = fleet.render(now=1_000.0).decode()
    # The exposition carries timestamps; the parser wants them gone for plain values.
    plain = "\n".join(line.rsplit(" ", 1)[0] for line in text.splitlines())
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(plain + "\n")
        for s in family.samples
    }


def _bound(*pods: PodSpec) -> Cluster:
    cluster = Cluster("c0", "full-kube", 1)
    for pod in pods:
        cluster.start(cluster.bind(pod, "full-kube-0000", now=0.0, startup=0.0))
    return cluster


def _slopes(cluster: Cluster) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Each series' rate, from two renders 10 s apart (a counter's slope)."""
    fleet = target.LiveFleet(pods=True)
    node = "full-kube-0000"
    fleet.set(node, cluster.nodes[node].signals(), 990.0, residents(cluster, node))
    before = _samples(fleet)
    fleet._nodes[node] = (fleet._nodes[node][0], 980.0)  # the same rates, 10 s later
    after = _samples(fleet)
    return {key: (after[key] - v) / 10 for key, v in before.items()}


def test_a_bound_pod_is_served_with_the_per_pod_series_and_owner_the_reporter_joins() -> None:
    cluster = _bound(IO_HEAVY, ONLINE_IO)
    fleet = target.LiveFleet(pods=True)
    node = "full-kube-0000"
    s = cluster.nodes[node].signals()
    assert s.psi_io_some > 0.1  # one io-heavy writer: the disk is contended
    fleet.set(node, s, 990.0, residents(cluster, node))
    samples = _samples(fleet)
    online, batch = uid(cluster, ONLINE_IO), uid(cluster, IO_HEAVY)

    def value(name: str, **labels: str) -> float:
        return samples[(name, frozenset({"node": node, **labels}.items()))]

    info = {
        "namespace": "bench",
        "pod": "online-0",
        "uid": online,
        "created_by_kind": "ReplicaSet",
        "created_by_name": "online-io-5d8f7c6b9",
    }
    assert value("kube_pod_info", **info) == 1
    assert value("kube_pod_info", **{**info, "pod": "batch-1", "uid": batch,
                 "created_by_kind": "Job", "created_by_name": "batch-io-heavy"}) == 1  # fmt: skip
    # Memory held and LLC occupancy from each pod's own demand (gauges).
    gib = 2**30
    assert value("mco_pod_memory_usage_bytes", pod_uid=batch, qos="burstable") == 2 * gib
    assert value("mco_pod_memory_usage_bytes", pod_uid=online, qos="guaranteed") == 1 * gib
    assert value("mco_llc_occupancy_bytes", group=f"/pod{batch}", domain="0") == 2 * 2**20
    # Rates: both stall on the disk as the node's PSI says tasks wait on it; the writer writes
    # 100x the online pod's bytes; neither stalls on memory (no page cache wanted).
    slopes = _slopes(cluster)

    def rate(name: str, **labels: str) -> float:
        return slopes[(name, frozenset({"node": node, **labels}.items()))]

    stalled = "mco_pod_pressure_stalled_seconds_total"
    for pod_uid, qos in ((online, "guaranteed"), (batch, "burstable")):
        io = rate(stalled, pod_uid=pod_uid, qos=qos, resource="io", kind="some")
        assert io == pytest.approx(s.psi_io_some)
        assert rate(stalled, pod_uid=pod_uid, qos=qos, resource="memory", kind="some") == 0
    written = [
        rate("mco_pod_io_bytes_total", pod_uid=u, qos=q, operation="write")
        for u, q in ((batch, "burstable"), (online, "guaranteed"))
    ]
    assert written[0] / written[1] == pytest.approx(100)


def test_llc_occupancy_is_shared_out_by_footprint_when_the_cache_overflows() -> None:
    cache = replace(IO_HEAVY, name="batch-2", profile="cache-heavy",
                    demand=BATCH_PROFILES["cache-heavy"])  # fmt: skip
    cluster = _bound(cache, replace(cache, name="batch-3"))  # 40 MB of footprint in 32 MB
    series = target.pod_series(
        residents(cluster, "full-kube-0000"), cluster.nodes["full-kube-0000"].signals()
    )
    occupancy = [s.base for s in series if s.name == "mco_llc_occupancy_bytes"]
    assert occupancy == [16 * 2**20, 16 * 2**20]


def test_a_fleet_without_pods_serves_node_series_only() -> None:
    cluster = _bound(IO_HEAVY)
    fleet = target.LiveFleet()
    fleet.set("full-kube-0000", cluster.nodes["full-kube-0000"].signals(), 990.0,
              residents(cluster, "full-kube-0000"))  # fmt: skip
    names = {name for name, _ in _samples(fleet)}
    assert not {n for n in names if n.startswith("mco_pod_") or n == "kube_pod_info"}
    assert "mco_pressure_stalled_seconds_total" in names


@pytest.mark.parametrize("pod", [ONLINE_IO, IO_HEAVY, replace(IO_HEAVY, burst=3, labelled=False)])
def test_the_pods_api_owner_names_the_workload_the_reporter_names(tmp_path, pod: PodSpec) -> None:
    """The extender's pod watch and the reporter's kube_pod_info join key one workload alike."""
    store = kubeapi.PodStore()
    store.bind(pod, "c0-x", "n-0000", at=1_764_600_000.0)
    listed = store.listing()["items"][0]
    watched = msgspec.json.decode(json.dumps(listed), type=Pod)
    assert watched.metadata is not None
    kind, owner = pod.owner
    assert watched.metadata.workload() == workload_key("bench", kind, owner, pod.name)
    assert watched.metadata.workload().startswith(
        "bench/Deployment/online-io" if pod.online else "bench/Job/"
    )
