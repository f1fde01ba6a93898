"""Real softirq load raises the exporter's IRQ counters and the IRQ signals; idle does not.

One measured run of bench/irq_detection.py: the exporter on this host, Prometheus with the
generated rules, an idle baseline, then `stress-ng --udp 1` over loopback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.irq_detection import STAGES, measure
from scripts.stress import StressUnavailableError, require_stress_ng

pytestmark = [pytest.mark.slow, pytest.mark.host_load]


def test_softirq_load_raises_the_irq_signals_and_idle_does_not(tmp_path: Path) -> None:
    try:
        require_stress_ng()
    except StressUnavailableError as exc:
        pytest.skip(str(exc))
    r = measure(tmp_path, runs=1, idle_seconds=15)
    # Idle: below warn on both signals, never triggered.
    assert r.idle["irqTimeRatio"] < r.warn_time, r.idle
    assert r.idle["irqMaxCPUShare"] < r.warn_share, r.idle
    assert r.idle["triggered"] == 0, r.idle
    # Loaded: the softirq counts by type moved (NET_RX, the loopback receive path), and the
    # busiest CPU's share reached warn within the end-to-end bound, triggering cpu_contention.
    assert r.loaded["netRxPerSecond"] > 10 * max(r.idle["netRxPerSecond"], 1.0), r
    assert r.loaded["irqTimeRatio"] > 10 * max(r.idle["irqTimeRatio"], 0.001), r
    assert r.loaded["irqMaxCPUShare"] >= r.warn_share, r.loaded
    (onset,) = r.onsets
    assert set(onset) == set(STAGES), onset
    assert max(onset.values()) <= r.window + 10, onset
