"""The synthetic fleet's fast renderer serves exactly what the plain line-by-line one would."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from exporter.collectors.biolatency import DEFAULT_BUCKETS
from testkit import fleet as F

START_MS = 1_700_000_000_000


@pytest.mark.parametrize("nodes", [0, 1, len(F.PROFILES), 3 * len(F.PROFILES) + 2])
@pytest.mark.parametrize("buckets", ["all", DEFAULT_BUCKETS])
def test_render_equals_the_plain_render(nodes, buckets):
    fleet = F.Fleet(F.assign(F.node_names(nodes), list(F.PROFILES)), START_MS, buckets)
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


@pytest.mark.parametrize("by_operation", [False, True])
@pytest.mark.parametrize("buckets", ["all", DEFAULT_BUCKETS, "1.6e-05,0.524288"])
def test_fewer_buckets_keep_a_valid_cumulative_histogram(buckets, by_operation):
    fleet = F.Fleet(F.assign(F.node_names(2), ["typical"]), START_MS, buckets, by_operation)
    values = _values(fleet.render(START_MS + 10_000))
    histograms: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key, value in values.items():
        if key.startswith("mco_block_io_latency_seconds_bucket{"):
            le = re.search(r'le="([^"]+)"', key)
            assert le is not None
            histograms[re.sub(r',le="[^"]+"', "", key)].append((float(le.group(1)), value))
    per_node = 2 if by_operation else 1  # nvme0n1 (read, write), or nvme0n1
    assert len(histograms) == 2 * per_node
    for series in histograms.values():
        assert {str(b) for b, _ in series} == {str(float(le)) for le in F.kept_bounds(buckets)}
        counts = [v for _, v in sorted(series)]
        assert counts == sorted(counts)  # cumulative
    dropped = len(F.BUCKETS) + 1 - len(F.kept_bounds(buckets))
    served = F.served(F.PROFILES["typical"], by_operation)
    assert fleet.series_count == 2 * (len(served) + 1 - per_node * dropped)


@pytest.mark.parametrize("profile", ["typical", "busy", "idle"])
def test_by_default_each_device_has_one_histogram_the_operations_summed(profile):
    """As the exporter serves it by default: every histogram series is the sum of the
    profile's per-operation ones (at any time: counters grow linearly), labels {device}."""
    split = F.Fleet(F.assign(["n"], [profile]), START_MS, "all", by_operation=True)
    summed = F.Fleet(F.assign(["n"], [profile]), START_MS, "all")
    for elapsed_ms in (0, 10_000):
        want: dict[str, float] = defaultdict(float)
        for key, value in _values(split.render(START_MS + elapsed_ms)).items():
            if key.startswith(F.HISTOGRAM):
                assert 'operation="' in key
                want[re.sub(r',?operation="[^"]+"', "", key)] += value
        got = {
            key: value
            for key, value in _values(summed.render(START_MS + elapsed_ms)).items()
            if key.startswith(F.HISTOGRAM)
        }
        assert got == pytest.approx(want)
        assert want and "operation=" not in "".join(got)
    # Everything else is served alike.
    assert {line for line in split.lines if not line[0].startswith(F.HISTOGRAM)} == {
        line for line in summed.lines if not line[0].startswith(F.HISTOGRAM)
    }


def test_the_default_is_the_exporters_default_and_a_wrong_bound_is_refused():
    assert F.kept_bounds() == {"0.016384", "0.032768", "0.065536", "0.131072", "0.262144", "+Inf"}
    with pytest.raises(ValueError, match="not a bucket bound"):
        F.kept_bounds("0.01")


def _values(body: bytes) -> dict[str, float]:
    out = {}
    for line in body.decode().splitlines():
        key, value, _timestamp = line.rsplit(" ", 2)
        out[key] = float(value)
    return out
