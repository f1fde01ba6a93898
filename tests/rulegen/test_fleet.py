"""The synthetic fleet's fast renderer serves exactly what the plain line-by-line one would."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from tests.rulegen import fleet as F

START_MS = 1_700_000_000_000


@pytest.mark.parametrize("nodes", [0, 1, len(F.PROFILES), 3 * len(F.PROFILES) + 2])
@pytest.mark.parametrize("step", [1, 3])
def test_render_equals_the_plain_render(nodes, step):
    fleet = F.Fleet(F.assign(F.node_names(nodes), list(F.PROFILES)), START_MS, step)
    for elapsed_ms in (0, 1, 999, 1000, 61_234, 3_600_000):
        now = START_MS + elapsed_ms
        assert fleet.render(now) == fleet.render_plainly(now)


def test_counters_grow_by_their_slope_and_gauges_stay():
    fleet = F.Fleet(F.assign(F.node_names(1), ["typical"]), START_MS)
    at = {t: _values(fleet.render(START_MS + t * 1000)) for t in (0, 10)}
    steal = 'mco_cpu_steal_seconds_total{node="node-00000"}'
    assert at[10][steal] - at[0][steal] == pytest.approx(10 * 0.32)
    online = 'mco_cpu_online{node="node-00000"}'
    assert at[0][online] == at[10][online] == 64


def test_coarser_buckets_keep_a_valid_cumulative_histogram():
    fleet = F.Fleet(F.assign(F.node_names(2), ["typical"]), START_MS, bucket_step=2)
    values = _values(fleet.render(START_MS + 10_000))
    buckets: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key, value in values.items():
        if key.startswith("mco_block_io_latency_seconds_bucket{"):
            le = re.search(r'le="([^"]+)"', key)
            assert le is not None
            buckets[re.sub(r',le="[^"]+"', "", key)].append((float(le.group(1)), value))
    assert len(buckets) == 4  # 2 nodes x (read, write)
    for series in buckets.values():
        assert {str(b) for b, _ in series} == {
            str(float(le)) for le in F.kept_bounds(2)
        }  # 10 finite bounds and +Inf
        counts = [v for _, v in sorted(series)]
        assert counts == sorted(counts)  # cumulative
    assert fleet.series_count == 2 * (len(F.PROFILES["typical"].series) + 1 - 2 * 11)


def test_bucket_step_must_be_positive():
    with pytest.raises(ValueError, match="bucket step"):
        F.kept_bounds(0)


def _values(body: bytes) -> dict[str, float]:
    out = {}
    for line in body.decode().splitlines():
        key, value, _timestamp = line.rsplit(" ", 2)
        out[key] = float(value)
    return out
