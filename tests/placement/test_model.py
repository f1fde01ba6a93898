"""The placement benchmark's contention model: its curve mechanics against hand-computed values,
and the measured points against the figures docs/placement-model.md states for them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.placement import model
from bench.placement.cluster import Cluster, node_kinds
from bench.placement.model import (
    FAST_DISK,
    LARGE_CACHE,
    STANDARD,
    Demand,
    Model,
    Signals,
    inflation,
    llc_miss_ratio,
    signals,
    working_set_ratio,
)
from bench.placement.trace import BATCH_PROFILES

DATA = json.loads(model.MEASURED.read_text())
IO = DATA["io"]
MEMORY = DATA["memory"]["points"]
PSI_KEYS = ("psi_io_some", "psi_io_full", "psi_memory_some", "psi_memory_full")


def test_measured_file_holds_shares_and_seconds() -> None:
    """PSI figures are shares of time (0..1), latency is seconds: a µs/s or ms units error fails."""
    assert sorted(p["hdd_workers"] for p in IO) == [0, 1, 2, 4, 6, 8]
    assert len(MEMORY) >= 3
    for p in [*IO, *MEMORY]:
        for key in PSI_KEYS:
            assert 0 <= p[key] <= 1, key
        assert 0 < p["block_latency_mean_seconds"] < 0.5
        assert p["loadavg1"] >= 0


def test_measured_io_points_match_the_documented_figures() -> None:
    """One writer: PSI io some 27 % (documented), eight: 82 %; nothing here is placed against
    MCO's thresholds (the yardstick is the model, not MCO's detection)."""
    m = model.load()
    assert m.psi_io_some(1) == pytest.approx(0.27, abs=0.03)
    assert m.psi_io_some(0) < 0.01
    assert m.psi_io_some(1) < m.psi_io_some(8) == pytest.approx(0.82, abs=0.03)
    # Latency stays in the milliseconds (documented 13-17 ms under load).
    assert 0.005 <= m.block_latency(1) <= 0.05


def test_measured_memory_points_match_the_documented_figures() -> None:
    """Memory some ~40 % and full ~35 % at 1x (documented), none at half the memory left."""
    m = model.load()
    assert 0.1 <= m.psi_memory_some(1.0) <= 0.8
    assert 0 < m.psi_memory_full(1.0) <= m.psi_memory_some(1.0)
    assert m.psi_memory_some(0.5) < 0.05


def test_no_mco_threshold_is_an_input_of_the_yardstick() -> None:
    """The model, the trace and the harm figure read nothing of MCO's detection config: a
    module that imported it could place a workload or a tolerance against a threshold."""
    for module in ("model.py", "trace.py", "cluster.py", "kubeframework.py"):
        source = (Path(model.__file__).parent / module).read_text()
        assert "rulegen" not in source and "DetectionRuleConfig" not in source, module


def _synthetic(tmp_path: Path) -> Model:
    """A model from hand-chosen points, listed out of order."""
    io = [
        (2, 0.4, 0.1, 0.010),
        (0, 0.0, 0.0, 0.001),
        (4, 0.6, 0.2, 0.030),
        (1, 0.3, 0.25, 0.020),
    ]
    memory = [(2.0, 0.3, 0.5), (0.5, 0.0, 0.0), (1.0, 0.4, 0.35)]
    data = {
        "io": [
            {
                "hdd_workers": k,
                "psi_io_some": some,
                "psi_io_full": full,
                "block_latency_mean_seconds": lat,
            }
            for k, some, full, lat in io
        ],
        "memory": {
            "points": [
                {"working_set_over_limit": r, "psi_memory_some": some, "psi_memory_full": full}
                for r, some, full in memory
            ]
        },
    }
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(data))
    return model.load(path)


def test_curves_against_hand_computed_values(tmp_path: Path) -> None:
    m = _synthetic(tmp_path)
    # Interpolated between points, flat before the first and beyond the last.
    assert m.psi_io_some(1.5) == pytest.approx(0.35)
    assert m.psi_io_some(3) == pytest.approx(0.5)
    assert m.psi_io_some(-1) == 0.0
    assert m.psi_io_some(40) == pytest.approx(0.6)
    # io full fell after one writer (0.25, 0.1, 0.2): the running maximum keeps 0.25.
    assert m.psi_io_full(0.5) == pytest.approx(0.125)
    assert m.psi_io_full(2) == pytest.approx(0.25)
    assert m.psi_io_full(3) == pytest.approx(0.25)
    # Latency fell at two writers (20 ms, 10 ms): kept at 20 ms, then up to 30 ms at four.
    assert m.block_latency(0.5) == pytest.approx(0.0105)
    assert m.block_latency(2) == pytest.approx(0.020)
    assert m.block_latency(3) == pytest.approx(0.025)
    assert m.block_latency(9) == pytest.approx(0.030)
    # Memory: some fell at 2x (0.4 -> 0.3) and is kept; full interpolates upward.
    assert m.psi_memory_some(0.75) == pytest.approx(0.2)
    assert m.psi_memory_some(2) == pytest.approx(0.4)
    assert m.psi_memory_full(1.5) == pytest.approx(0.425)
    # A node's signals read the curves at its summed demand.
    s = signals([Demand(io=1.0), Demand(io=0.5)], m)
    assert (s.psi_io_some, s.psi_io_full, s.block_latency_seconds) == pytest.approx(
        (0.35, 0.25, 0.020)
    )


def test_llc_miss_ratio_model() -> None:
    """Footprints within the cache: the base ratio; beyond, 1 - C/F of the rest misses."""
    assert llc_miss_ratio(10, 32) == pytest.approx(0.1)
    assert llc_miss_ratio(64, 32) == pytest.approx(0.1 + 0.9 * 0.5)
    assert llc_miss_ratio(1e9, 32) == pytest.approx(1.0, abs=1e-6)


def test_working_set_ratio_counts_memory_left_by_requests() -> None:
    pods = [Demand(memory=16, page_cache_gib=12), Demand(memory=16, page_cache_gib=12)]
    assert working_set_ratio(pods, memory_gib=64) == pytest.approx(24 / 32)
    assert working_set_ratio([Demand(memory=4)], memory_gib=64) == 0


def _signals(**kw: float) -> Signals:
    base = dict.fromkeys(Signals.__dataclass_fields__, 0.0)
    base.update(llc_miss_ratio=0.1, memory_available_ratio=1.0)
    base.update(kw)
    return Signals(**base)


@pytest.mark.parametrize(
    ("miss", "expected"),
    # (1 + 10 m) / (1 + 10 * 0.1) with P = 11, m0 = 0.1.
    [(0.05, 1.0), (0.1, 1.0), (0.5, 3.0), (0.8, 4.5), (1.0, 5.5)],
)
def test_cache_slowdown_follows_hit_and_miss_costs(miss: float, expected: float) -> None:
    assert model.MISS_COST == 11 and model.LLC_BASE_MISS == 0.1
    assert inflation("cache", _signals(llc_miss_ratio=miss)) == pytest.approx(expected)


def test_stall_slowdown_and_cap() -> None:
    assert inflation("io", _signals(psi_io_some=0.5)) == pytest.approx(2.0)
    assert inflation("io", _signals(psi_io_some=0.8)) == pytest.approx(5.0)
    assert inflation("memory", _signals(psi_memory_some=0.0)) == 1.0
    assert inflation("memory", _signals(psi_memory_some=0.75)) == pytest.approx(4.0)
    # Past a stalled share of 0.9 the model has no measurement: capped at 10.
    assert inflation("io", _signals(psi_io_some=0.95)) == model.INFLATION_CAP == 10
    assert inflation("io", _signals(psi_io_some=1.0)) == 10
    with pytest.raises(ValueError, match="unknown"):
        inflation("gpu", _signals())
    assert not math.isnan(inflation("memory", signals([])))


def test_node_kinds_change_the_llc_and_the_disk_as_their_sources_say() -> None:
    """``mixed-nodes``: the large-LLC type (64 MB) holds two cache-heavy pods' 40 MB that the
    fast-disk type's 22 MB does not; the fast disk (4x) is as busy with four writers as the
    measured one with one."""
    cache = [BATCH_PROFILES["cache-heavy"]] * 2
    large, small = signals(cache, kind=LARGE_CACHE), signals(cache, kind=FAST_DISK)
    assert large.llc_miss_ratio == model.LLC_BASE_MISS
    assert small.llc_miss_ratio == pytest.approx(0.1 + 0.9 * (1 - 22.0 / 40.0))
    assert inflation("cache", large) == 1.0 < 1.2 < inflation("cache", small)
    one, four = Demand(io=1.0), [Demand(io=1.0)] * 4
    assert signals(four, kind=FAST_DISK).psi_io_some == signals([one]).psi_io_some
    assert signals([one], kind=LARGE_CACHE) == signals([one], kind=STANDARD)
    assert node_kinds("mixed-nodes", 4) == [LARGE_CACHE, FAST_DISK, LARGE_CACHE, FAST_DISK]
    assert set(node_kinds("labelled", 3)) == {STANDARD}
    c = Cluster("c", "n", 2, node_kinds("mixed-nodes", 2))
    assert [n.kind for n in c.nodes.values()] == [LARGE_CACHE, FAST_DISK]
