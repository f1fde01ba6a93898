"""Several PromQL sources (shards): the merge takes a node from its freshest sample, and a shard
that fails, answers garbage or answers too slowly makes exactly its own nodes age (never
dropped, never zeroed) while the other shards' nodes stay live; they come back with it."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from mco.promql import (
    TIMEOUT,
    UNREACHABLE,
    AnswerBudget,
    PromQLClient,
    SourceConfig,
    SourceError,
)
from reporter.engine import Reporter
from reporter.entries import EntryBuilder, Epsilon
from reporter.filesink import FileSink
from reporter.layout import LayoutChooser
from reporter.metrics import ReporterMetrics
from reporter.query import MISSING, Kind, Plan
from reporter.ruleconfig import RuleConfigSource
from reporter.schema import entry_time, parse_time
from reporter.shards import merge
from reporter.tracker import Tracker
from rulegen.model import DetectionRuleConfig
from scripts.procs import free_port
from testkit.answers import T0, quiet_values, snapshot
from testkit.fakeprom import FakeProm, fake_prometheus

CONFIG = DetectionRuleConfig.default()
PLAN = Plan(compact=False)
STALE_AFTER = float(CONFIG.report.stale_after)


def node(level: float) -> dict[tuple[Kind, str], float]:
    values = quiet_values(PLAN)
    values[(Kind.LEVEL, "")] = level
    values[(Kind.SCORE, "")] = 100 * (1 - level)
    return values


def tracker() -> Tracker:
    return Tracker(EntryBuilder(PLAN, CONFIG, Epsilon()), stale_after=STALE_AFTER, live_within=5.0)


def condition(t: Tracker, kind: str) -> tuple[str, str, str]:
    c = next(c for c in t.view().conditions if c.type == kind)
    return c.status, c.reason, c.message


def test_a_node_two_shards_know_is_taken_from_the_freshest_sample() -> None:
    a = snapshot(PLAN, {"n": node(0.2), "x": node(0.1)}, T0, {"n": T0 - 3, "x": T0 - 1})
    b = snapshot(PLAN, {"n": node(0.7), "y": node(0.1)}, T0, {"n": T0 - 1, "y": T0 - 1})
    merged = merge(PLAN, [("http://a", a), ("http://b", b)], {})
    assert merged.snapshot is not None
    level = next(i for i, s in enumerate(PLAN.slots) if s.kind is Kind.LEVEL)
    assert set(merged.snapshot.vectors) == {"n", "x", "y"}
    assert merged.snapshot.vectors["n"][level] == 0.7  # b's sample is newer
    assert merged.nodes == {"http://a": 1, "http://b": 2}
    # Both shards' rule-config info is kept (a mismatch on either is reported).
    assert len(merged.snapshot.rules) == 2
    # Order does not matter.
    again = merge(PLAN, [("http://b", b), ("http://a", a)], {})
    assert again.snapshot is not None and again.snapshot.vectors["n"][level] == 0.7


@pytest.mark.parametrize("bad", [MISSING, math.nan, T0 + 3600])
def test_an_unusable_sample_time_never_wins_the_merge(bad: float) -> None:
    good = snapshot(PLAN, {"n": node(0.2)}, T0, {"n": T0 - 20})
    broken = snapshot(PLAN, {"n": node(0.9)}, T0, {"n": T0})
    broken.vectors["n"][PLAN.time_slot] = bad
    for order in ([("g", good), ("b", broken)], [("b", broken), ("g", good)]):
        merged = merge(PLAN, order, {})
        assert merged.snapshot is not None
        assert merged.snapshot.vectors["n"][PLAN.time_slot] == T0 - 20


def test_a_shard_whose_clock_runs_ahead_never_wins_the_merge() -> None:
    """Issue 27: a shard 30 s fast (inside the tracker's clock-skew allowance) decided the
    nodes it shared with an honest one. A time ahead of the reporter's own evaluation time
    cannot come from an honest engine, so it loses to any time that is not; alone, it is
    still the node's only answer (the tracker judges it)."""
    level = next(i for i, s in enumerate(PLAN.slots) if s.kind is Kind.LEVEL)
    honest = snapshot(PLAN, {"n": node(0.2)}, T0, {"n": T0 - 15})
    fast = snapshot(PLAN, {"n": node(0.99), "m": node(0.5)}, T0, {"n": T0 + 30, "m": T0 + 30})
    for order in ([("h", honest), ("f", fast)], [("f", fast), ("h", honest)]):
        merged = merge(PLAN, order, {})
        assert merged.snapshot is not None
        assert merged.snapshot.vectors["n"][level] == 0.2
        assert merged.snapshot.vectors["n"][PLAN.time_slot] == T0 - 15
        assert merged.snapshot.vectors["m"][level] == 0.5  # only the fast shard knows m
        assert merged.nodes == {"h": 1, "f": 1}
    # Two shards both ahead: the one nearer the reporter's clock.
    faster = snapshot(PLAN, {"n": node(0.7)}, T0, {"n": T0 + 50})
    for order in ([("f", fast), ("x", faster)], [("x", faster), ("f", fast)]):
        merged = merge(PLAN, order, {})
        assert merged.snapshot is not None
        assert merged.snapshot.vectors["n"][level] == 0.99


def test_a_failed_shard_ages_only_its_own_nodes_and_never_drops_them() -> None:
    t = tracker()
    down = {"http://b:9090": SourceError(UNREACHABLE, "cannot reach http://b:9090: refused")}
    t.apply(snapshot(PLAN, {"a1": node(0.1), "b1": node(0.6)}, T0))
    b1 = t.entries["b1"]
    assert b1.live
    # Shard b fails for longer than staleAfter; shard a keeps answering.
    for i in range(1, int(STALE_AFTER) + 30, 5):
        at = T0 + i
        result = t.apply(snapshot(PLAN, {"a1": node(0.1)}, at), down)
        heartbeat = parse_time(t.view().last_sync_time)
        assert heartbeat == at  # the heartbeat moves on for a's nodes
        assert t.entries["a1"].live and entry_time(t.entries["a1"], heartbeat) == at
        entry = t.entries["b1"]
        assert not entry.live and entry.level == b1.level  # its last values, not zeros
        assert entry_time(entry, heartbeat) == T0 - 0.5  # ages from its last sample
        assert result.stale == (1 if at - (T0 - 0.5) > STALE_AFTER else 0)
    status, reason, message = condition(t, "SourceReachable")
    assert (status, reason) == ("False", "Unreachable") and "http://b:9090" in message
    status, reason, message = condition(t, "Synced")
    assert (status, reason) == ("False", "SourcePartiallyUnavailable")
    assert "http://b:9090" in message
    # b answers again: its node is live, its entry fresh, the conditions clear.
    at = T0 + STALE_AFTER + 40
    t.apply(snapshot(PLAN, {"a1": node(0.1), "b1": node(0.6)}, at))
    assert t.entries["b1"].live and entry_time(t.entries["b1"], at) == at
    assert condition(t, "SourceReachable")[:2] == ("True", "QuerySucceeded")
    assert condition(t, "Synced")[:2] == ("True", "UpToDate")


def test_with_every_shard_answering_a_vanished_node_is_removed_as_before() -> None:
    t = tracker()
    t.apply(snapshot(PLAN, {"a1": node(0.1), "gone": node(0.1)}, T0))
    t.apply(snapshot(PLAN, {"a1": node(0.1)}, T0 + STALE_AFTER + 1))
    assert "gone" not in t.entries


# ---------------------------------------------------------------------------------------------
# The engine against real HTTP sources: two fake shards, and shards that misbehave.


async def _garbage(_: web.Request) -> web.Response:
    return web.Response(body=b'{"status":"success","data":{"resultType":"vector","result":[{"me')


@asynccontextmanager
async def serving(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/api/v1/query", handler)
    server = TestServer(app, host="127.0.0.1", port=free_port())
    await server.start_server()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


def reporter(clients: list[PromQLClient], out: Path) -> Reporter:
    return Reporter(
        source=clients,
        rules=RuleConfigSource(),
        plan=PLAN,
        epsilon=Epsilon(),
        metrics=ReporterMetrics(),
        sink=FileSink(str(out), LayoutChooser("cluster")),
    )


def metric(r: Reporter, name: str, source: str) -> float:
    value = r.metrics.registry.get_sample_value(name, {"source": source})
    assert value is not None
    return value


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(5)
    return web.Response(text="{}")


@pytest.mark.parametrize("fault", ["down", "garbage", "slow", "gone"])
async def test_a_misbehaving_shard_stales_exactly_its_nodes(fault: str, tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        good: FakeProm = await stack.enter_async_context(fake_prometheus())
        bad: FakeProm = await stack.enter_async_context(fake_prometheus())
        good.nodes = {"a1": node(0.1), "a2": node(0.2)}
        bad.nodes = {"b1": node(0.6)}
        budget = AnswerBudget(48 << 20)
        clients = [
            await stack.enter_async_context(PromQLClient(SourceConfig(url, timeout=0.5), budget))
            for url in (good.url, bad.url)
        ]
        r = reporter(clients, tmp_path / "report.json")
        outcome = await r.cycle(T0)
        assert outcome.ok, outcome.message
        assert all(e.live for e in r.tracker.entries.values())
        assert metric(r, "mco_reporter_source_nodes", bad.url) == 1
        before = r.tracker.entries["b1"]

        # The fault: shard b answers an error, garbage, too late, or nothing at all.
        if fault == "down":
            bad.down = True
        else:
            handler = {"garbage": _garbage, "slow": _slow}.get(fault)
            if handler is None:  # gone: a port nothing listens on
                replaced = f"http://127.0.0.1:{free_port()}"
            else:
                replaced = await stack.enter_async_context(serving(handler))
            clients[1] = await stack.enter_async_context(
                PromQLClient(SourceConfig(replaced, timeout=0.5), budget)
            )
            r.sources = tuple(clients)
        for at in (T0 + 1, T0 + STALE_AFTER + 5):
            outcome = await r.cycle(at)
            assert not outcome.ok and "1 of 2 PromQL sources failed" in outcome.message
            view = r.tracker.view()
            heartbeat = parse_time(view.last_sync_time)
            assert heartbeat == at
            assert {"a1", "a2", "b1"} == set(view.entries)  # never dropped
            for name in ("a1", "a2"):
                assert view.entries[name].live and entry_time(view.entries[name], heartbeat) == at
            b1 = view.entries["b1"]
            assert not b1.live and b1.level == before.level  # not zeroed
            assert entry_time(b1, heartbeat) == parse_time(before.sample_time)
        assert r.tracker.view().summary.stale == 1  # b1 only, after staleAfter
        assert metric(r, "mco_reporter_source_up", good.url) == 1
        assert metric(r, "mco_reporter_source_up", clients[1].where) == 0
        kind = {"down": "source_error", "garbage": "source_bad_answer", "slow": TIMEOUT}
        errors = r.metrics.registry.get_sample_value(
            "mco_reporter_errors_total", {"kind": kind.get(fault, UNREACHABLE)}
        )
        assert errors == 2

        # Shard b is back: b1 is live again.
        bad.down = False
        clients[1] = await stack.enter_async_context(
            PromQLClient(SourceConfig(bad.url, timeout=0.5), budget)
        )
        r.sources = tuple(clients)
        at = T0 + STALE_AFTER + 10
        outcome = await r.cycle(at)
        assert outcome.ok, outcome.message
        assert all(e.live for e in r.tracker.entries.values())
        assert r.tracker.view().summary.stale == 0
        assert metric(r, "mco_reporter_source_up", bad.url) == 1


async def test_every_shard_down_is_a_source_failure_like_one_source(tmp_path: Path) -> None:
    async with fake_prometheus() as a, fake_prometheus() as b:
        a.nodes, b.nodes = {"a1": node(0.1)}, {"b1": node(0.5)}
        async with (
            PromQLClient(SourceConfig(a.url, timeout=0.5)) as ca,
            PromQLClient(SourceConfig(b.url, timeout=0.5)) as cb,
        ):
            r = reporter([ca, cb], tmp_path / "report.json")
            assert (await r.cycle(T0)).ok
            before = dict(r.tracker.entries)
            a.down = b.down = True
            outcome = await r.cycle(T0 + 1)
            assert not outcome.ok and a.url in outcome.message and b.url in outcome.message
            view = r.tracker.view()
            assert parse_time(view.last_sync_time) == T0  # the heartbeat stopped
            assert all(view.entries[n] is before[n] for n in before)  # untouched, still live
            assert condition(r.tracker, "Synced")[:2] == ("False", "SourceUnavailable")
