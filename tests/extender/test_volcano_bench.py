"""``bench volcano``: the replay follows Volcano's scan rules, and its smoke run measures a real
extender that answered every call with 200."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import volcano
from bench.volcano_replay import REJECT_EVERY, nodes_to_find


@pytest.mark.parametrize(
    ("nodes", "expected"),
    # All nodes up to 100; then 50 % minus 1 % per 125 nodes, at least 5 % and 100 nodes.
    [(1, 1), (100, 100), (101, 100), (500, 230), (1000, 420), (3000, 780), (5000, 500),
     (10000, 500), (20000, 1000)],
)  # fmt: skip
def test_nodes_to_find_follows_volcanos_adaptive_percentage(nodes: int, expected: int) -> None:
    assert nodes_to_find(nodes) == expected


@pytest.mark.slow
def test_quick_run_replays_sessions_against_the_real_extender(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "volcano.json"
    code = volcano.main(["--quick", "--tasks", "1", "4", "--json", str(out)])
    printed = capsys.readouterr().out
    results = json.loads(out.read_text())
    assert results["grid"] == {"nodes": [100], "tasks": [1, 4], "workers": [1, 2]}
    runs = results["runs"]["100"]
    assert set(runs) == {"null", "workers=1", "workers=2"}

    # Every call of every cell was answered 200, and the exit code says what the checks found.
    for cells in runs.values():
        for cell in cells.values():
            assert cell["sessions"] >= 1
            for verb, calls in cell["calls"].items():
                count = round(calls["calls_per_session"] * cell["sessions"])
                assert calls["statuses"] == {"200": count}, verb
                assert calls["request_bytes_per_call"] > 0
                lat = calls["latency_ms"]
                assert 0 < lat["p50"] <= lat["p99"] <= lat["max"]
    ratio = results["summary"]["predicate_cpu_ratio_extender_over_null"]
    assert ratio > 0
    assert code == (0 if ratio <= volcano.TARGET_CPU_RATIO else 1)
    assert "every call answered 200" in printed

    # 100 nodes: the scan asks every node. The extender rejects every tenth (the report marks
    # them unschedulable), and a job's later tasks skip them (Volcano's predicate error cache);
    # prioritize gets the other 90, allocate one of them. The null handler passes all 100.
    for w in ("workers=1", "workers=2"):
        one, four = runs[w]["T=1"], runs[w]["T=4"]
        assert one["calls"]["predicate"]["calls_per_session"] == 100
        assert one["rejections_per_session"] == 100 // REJECT_EVERY
        assert four["calls"]["predicate"]["calls_per_session"] == 100 + 3 * 90
        assert four["prioritized_nodes_per_session"] == 4 * 90
        assert four["calls"]["allocate"]["calls_per_session"] == 4
        assert four["server_cpu_s_per_session"] > 0
        # A NodeInfo per predicate call: 100-300 KB each, as the reference sizes them.
        assert 100_000 < four["calls"]["predicate"]["request_bytes_per_call"] < 300_000
    assert runs["null"]["T=4"]["calls"]["predicate"]["calls_per_session"] == 400
    assert runs["null"]["T=4"]["rejections_per_session"] == 0

    # kube-scheduler: one filter and one prioritize per pod, node names only.
    kube = runs["workers=1"]["kube pods=4"]["calls"]
    assert kube["/scheduler/filter"]["calls_per_session"] == 4
    assert kube["/scheduler/prioritize"]["calls_per_session"] == 4
    assert kube["/scheduler/filter"]["request_bytes_per_call"] < 20_000
    # The fast path decodes a fraction of what the full decode does.
    for sizes in results["decode_us"].values():
        assert sizes["fast_path"] < sizes["full_decode"]
