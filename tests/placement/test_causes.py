"""The benchmark's attribution of exposed online pod-seconds to a cause (causes.py)."""

from __future__ import annotations

import pytest

from bench.placement.causes import Causes
from bench.placement.trace import BATCH_PROFILES, ONLINE_PROFILES, PodSpec


def pod(name: str, profile: str, cls: str = "batch") -> PodSpec:
    demand = ONLINE_PROFILES[profile] if cls == "latency-sensitive" else BATCH_PROFILES[profile]
    return PodSpec(name, 0.0, 100.0, cls, profile, demand)


def node(level: float, *triggered: str) -> dict[str, object]:
    return {"level": level, "detections": {d: {"triggered": True} for d in triggered}}


def test_each_exposed_second_goes_to_one_cause() -> None:
    c = Causes()
    web = pod("web", "io", "latency-sensitive")
    late = pod("late", "io", "latency-sensitive")
    quiet, busy, onto = pod("b1", "io-heavy"), pod("b2", "io-heavy"), pod("b3", "io-heavy")
    mem = pod("m", "memory-heavy")
    c.bound(web, node(0.0))
    c.bound(late, node(0.2, "io_congestion"))  # bound onto a node already triggered for io
    c.bound(quiet, node(0.0))
    c.bound(busy, node(0.1, "memory_pressure"))  # some pressure, not io's
    c.bound(onto, node(0.3, "io_congestion"))
    c.bound(mem, node(0.0))
    c.exposed(late, "io_congestion", [quiet], 1.0)
    c.exposed(web, "io_congestion", [quiet, mem], 2.0)
    c.exposed(web, "io_congestion", [quiet, busy], 3.0)
    c.exposed(web, "io_congestion", [quiet, busy, onto], 4.0)
    c.exposed(web, "io_congestion", [mem], 5.0)
    c.pending(6.0)
    assert c.seconds == {
        "online-late": 1,
        "unseen": 2,
        "seen": 3,
        "piled-on": 4,
        "other": 5,
        "pending": 6,
    }
    assert c.shares()["other"] == pytest.approx(5 / 21, abs=1e-3)
    assert Causes().shares() == dict.fromkeys(c.seconds, 0.0)
