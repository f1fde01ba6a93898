"""The placement benchmark's contention model against the points measured on this machine."""

from __future__ import annotations

import json
import math

import pytest

from bench.placement import model
from bench.placement.model import Demand, llc_miss_ratio, signals, working_set_ratio

DATA = json.loads(model.MEASURED.read_text())
IO = DATA["io"]
MEMORY = DATA["memory"]["points"]


def test_measured_file_has_the_sweeps_the_model_reads() -> None:
    assert sorted(p["hdd_workers"] for p in IO)[0] == 0
    assert len(IO) >= 3 and len(MEMORY) >= 3
    for p in [*IO, *MEMORY]:
        for key in ("psi_io_some", "psi_memory_some", "psi_memory_full", "loadavg1"):
            assert 0 <= p[key] <= max(1.0, p["loadavg1"]), key


@pytest.mark.parametrize("point", IO, ids=lambda p: f"hdd{p['hdd_workers']}")
def test_io_curve_passes_through_each_measured_point_or_above(point: dict[str, float]) -> None:
    """At a measured load the model gives that point's value, unless a lower load measured
    more (the curve never falls as load grows: noise must not make more load look quieter)."""
    m = model.load()
    x = point["hdd_workers"]
    at = m.psi_io_some(x)
    assert at >= point["psi_io_some"] - 1e-12
    lower = [p["psi_io_some"] for p in IO if p["hdd_workers"] <= x]
    assert at == pytest.approx(max(lower))
    assert signals([Demand(io=x)], m).psi_io_some == pytest.approx(at)


@pytest.mark.parametrize("point", MEMORY, ids=lambda p: f"ws{p['working_set_over_limit']}")
def test_memory_curve_passes_through_the_measured_points(point: dict[str, float]) -> None:
    m = model.load()
    x = point["working_set_over_limit"]
    lower = [p for p in MEMORY if p["working_set_over_limit"] <= x]
    assert m.psi_memory_some(x) == pytest.approx(max(p["psi_memory_some"] for p in lower))
    assert m.psi_memory_full(x) == pytest.approx(max(p["psi_memory_full"] for p in lower))


def test_curve_interpolates_between_points_and_is_flat_beyond() -> None:
    m = model.load()
    xs = sorted(p["hdd_workers"] for p in IO)
    lo, hi = xs[1], xs[2]
    mid = m.psi_io_some((lo + hi) / 2)
    assert m.psi_io_some(lo) <= mid <= m.psi_io_some(hi)
    assert mid == pytest.approx((m.psi_io_some(lo) + m.psi_io_some(hi)) / 2)
    assert m.psi_io_some(xs[-1] * 10) == m.psi_io_some(xs[-1])


def test_llc_miss_ratio_model() -> None:
    """Footprints within the cache: the base ratio; beyond, 1 - C/F of the rest misses."""
    assert llc_miss_ratio(10, 32) == model.LLC_BASE_MISS
    assert llc_miss_ratio(64, 32) == pytest.approx(0.1 + 0.9 * 0.5)
    assert llc_miss_ratio(1e9, 32) == pytest.approx(1.0, abs=1e-6)


def test_working_set_ratio_counts_memory_left_by_requests() -> None:
    pods = [Demand(memory=16, page_cache_gib=12), Demand(memory=16, page_cache_gib=12)]
    assert working_set_ratio(pods, memory_gib=64) == pytest.approx(24 / 32)
    assert working_set_ratio([Demand(memory=4)], memory_gib=64) == 0


def test_node_signals_grow_with_aggressors() -> None:
    quiet = signals([])
    io = signals([Demand(io=1.0)] * 4)
    cache = signals([Demand(cache_mb=20)] * 3)
    assert io.psi_io_some > quiet.psi_io_some
    assert cache.llc_miss_ratio > 0.5 > quiet.llc_miss_ratio


def test_inflation() -> None:
    quiet = signals([])
    assert model.inflation("cache", quiet) == 1.0
    busy = signals([Demand(io=4.0)])
    assert model.inflation("io", busy) == pytest.approx(1 / (1 - busy.psi_io_some))
    thrash = signals([Demand(cache_mb=1e6)])
    assert model.inflation("cache", thrash) == pytest.approx(1 + model.CACHE_PENALTY, rel=1e-3)
    with pytest.raises(ValueError, match="unknown"):
        model.inflation("gpu", quiet)
    assert not math.isnan(model.inflation("memory", quiet))
