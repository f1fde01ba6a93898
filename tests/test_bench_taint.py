"""bench/taint.py counts what the taint mode saves against the real extender: the counts follow
from the session's shape, and the extender rejects exactly the nodes the taint filters."""

from __future__ import annotations

import pytest

from bench.taint import measure, nodes_to_find

pytestmark = pytest.mark.slow


def test_the_calls_saved_are_the_tainted_pairs() -> None:
    # 40 nodes (all scanned: at most 100), every 4th tainted; 3 tasks, the first tolerating.
    out, same = measure(40, 3, 0.25, 1, 1)
    assert same, "the extender must reject exactly the tainted nodes"
    assert out["tainted_nodes"] == 10
    independent = out["independent"]
    assert independent["without_taint"]["calls"] == 3 * 40
    # The tolerating task still asks about every node; the two others skip the 10 tainted.
    assert independent["with_taint"]["calls"] == 40 + 2 * 30
    assert independent["calls_saved"] == 20
    assert independent["bytes_ratio"] == independent["calls_ratio"] == round(100 / 120, 3)
    # One job: Volcano's error cache already skips a failed node for the later tasks; the
    # tolerating first task fails the 10, so the taint saves nothing more.
    one_job = out["one_job"]
    assert one_job["without_taint"]["calls"] == one_job["with_taint"]["calls"] == 40 + 2 * 30


def test_volcano_scan_budget() -> None:
    assert [nodes_to_find(n) for n in (50, 100, 200, 1000, 5000)] == [50, 100, 100, 420, 500]
