"""Every panel's PromQL returns data from a real Prometheus holding real MCO data.

The stack (tests/dashboards/stack.py) runs the real exporter on this host and on two recorded
kernel trees, the generated rules, the reporter, the extender under scheduler traffic and the
rulegen controller. Each panel query is sent the way Grafana sends it: ``$node`` filled in
("All" is ``.*``), ``$__rate_interval`` as 30s; range queries for graphs, instant queries for
tables and bar gauges.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rulegen import series
from tests.dashboards.boards import Target, targets
from tests.dashboards.stack import NODES, Stack, stack

pytestmark = pytest.mark.slow

# Series nothing on this machine can produce, and why. Their panels must still be valid PromQL.
UNAVAILABLE_HERE = {
    series.SIGNAL_SERIES["llcMissRatio"]: "LLC misses come from the CPU's PMU (perf_event_open); "
    "this VM has none and the recorded kernel trees cannot replay hardware counters",
    **dict.fromkeys(
        (series.POD_PRESSURE, series.POD_MEMORY_USAGE, series.POD_IO_BYTES),
        "per-pod series come from the exporter's cgroup collector reading kubepods cgroups; "
        "this stack runs no pod (the real cgroup tests build their own)",
    ),
    f'group=~"{series.POD_LLC_GROUP}"': "resctrl monitoring groups named after pods: this VM "
    "has no resctrl, and the recorded tree with resctrl (metal-6-1) has no pod's group",
}


@pytest.fixture(scope="module")
def running_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir: Path = tmp_path_factory.mktemp("dashboards")
    with stack(workdir) as s:
        # The explanation group runs every window, on its own clock: its first evaluation
        # may come before the signals it reads exist, and its context series rate the raw
        # counters over one window, empty until that window holds two scrapes.
        s.prometheus.wait_for_series(series.SIGNAL_INDEX, timeout=60)
        s.prometheus.wait_for_series(series.CONTEXT_SERIES["psiCPUSome"], timeout=60)
        yield s


def _query(s: Stack, target: Target, expr: str) -> list[dict[str, Any]]:
    return s.prometheus.query(expr) if target.instant else s.prometheus.query_range(expr)


def _results(s: Stack, target: Target, node: str) -> list[dict[str, Any]]:
    """What the panel draws, judged without its ``or vector(0)`` tail and filters.

    The query Grafana sends must run; the data it stands on (the query without the zero
    fallback and its comparison filters) must be what comes back, or the panel would show a
    reassuring 0 from series that do not exist.
    """
    sent = _query(s, target, target.promql(node))
    data = target.data_promql(node)
    return sent if data == target.promql(node) else _query(s, target, data)


def _needs_pmu(target: Target) -> str | None:
    for name, why in UNAVAILABLE_HERE.items():
        if name in target.expr:
            return why
    return None


ALL_TARGETS = targets()
SINGLE_NODE = [t for t in ALL_TARGETS if t.dashboard == "mco-node-detail"]
MULTI_NODE = [t for t in ALL_TARGETS if t.dashboard != "mco-node-detail"]


def _id(t: Target) -> str:
    return f"{t.dashboard}:{t.panel}:{t.expr[:40]}"


@pytest.mark.parametrize("target", MULTI_NODE, ids=_id)
def test_multi_node_panel_returns_data(running_stack: Stack, target: Target) -> None:
    result = _results(running_stack, target, ".*")
    assert result, f"{target.panel}: {target.data_promql('.*')} returned nothing"
    # The node variable filters: one node's worth is a subset (and never an error).
    _results(running_stack, target, NODES[0])


@pytest.mark.parametrize("target", SINGLE_NODE, ids=_id)
def test_node_detail_panel_returns_data_for_a_node(running_stack: Stack, target: Target) -> None:
    found = {node: bool(_results(running_stack, target, node)) for node in NODES}
    why = _needs_pmu(target)
    if why:
        assert not any(found.values()), "an unavailable series appeared: update UNAVAILABLE_HERE"
        pytest.xfail(why)
    assert any(found.values()), f"{target.panel}: no node has {target.expr}"


def test_signals_the_host_lacks_come_from_the_recorded_nodes(running_stack: Stack) -> None:
    """Which node feeds which panel is a property of the kernels, checked here explicitly."""
    q = running_stack.prometheus.query
    fallback = series.MEMORY_PRESSURE_FALLBACK
    assert q(f'{fallback}{{node="legacy-4-4"}} == 1'), "the 4.4 kernel has no PSI"
    assert q(f'{fallback}{{node="{NODES[0]}"}} == 0')
    assert q(f'{series.SIGNAL_SERIES["memoryAvailableRatio"]}{{node="legacy-4-4"}}')
    assert q(f'{series.CONTEXT_SERIES["llcOccupancyBytes"]}{{node="metal-6-1"}}')
    assert q(f'{series.SIGNAL_SERIES["runqueueWaitRatio"]}{{node="metal-6-1"}}')


def test_node_label_and_job_come_from_the_charts_service_monitor(running_stack: Stack) -> None:
    info = running_stack.prometheus.query(series.NODE_INFO)
    assert {r["metric"]["node"] for r in info} == set(NODES)
    assert {r["metric"]["job"] for r in info} == {"mco-exporter"}
    assert running_stack.prometheus.query('up{job="mco-extender"} == 1')
