"""Lease-based leader election against kmock (with resourceVersion conflicts, see kapi.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from mco.leader import LeaseElector

FAST: dict[str, Any] = {"lease_duration": 2.0, "renew_deadline": 1.2, "retry_period": 0.2}


def elector(api_client: Any, identity: str, changes: list[tuple[str, bool]]) -> LeaseElector:
    return LeaseElector(
        api_client,
        name="mco-reporter",
        namespace="mco",
        identity=identity,
        on_change=lambda leading: changes.append((identity, leading)),
        **FAST,
    )


async def wait_for(check: Any, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        await asyncio.sleep(0.02)
    raise TimeoutError("condition not met")


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_one_leader_and_the_standby_takes_over_after_a_crash(kapi, api_client) -> None:
    changes: list[tuple[str, bool]] = []
    a, b = elector(api_client, "a", changes), elector(api_client, "b", changes)
    ta = asyncio.create_task(a.run())
    await wait_for(a.is_leader, 5)
    tb = asyncio.create_task(b.run())
    await asyncio.sleep(1.0)  # several renewals of a, several tries of b
    assert a.is_leader() and not b.is_leader()
    assert kapi.lease("mco-reporter", "mco")["spec"]["holderIdentity"] == "a"
    # a crashes: no release, its renewals just stop.
    a.release = _noop  # type: ignore[method-assign]
    crashed_at = time.monotonic()
    await stop(ta)
    took = await wait_for(b.is_leader, 5)
    assert time.monotonic() - crashed_at <= FAST["lease_duration"] + FAST["retry_period"] + 0.5
    assert took >= FAST["lease_duration"] - 0.5  # b waited for the lease to expire
    spec = kapi.lease("mco-reporter", "mco")["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    await stop(tb)
    assert ("b", True) in changes


async def _noop() -> None:
    return None


async def test_graceful_stop_releases_the_lease_for_a_fast_takeover(kapi, api_client) -> None:
    changes: list[tuple[str, bool]] = []
    a, b = elector(api_client, "a", changes), elector(api_client, "b", changes)
    ta = asyncio.create_task(a.run())
    await wait_for(a.is_leader, 5)
    tb = asyncio.create_task(b.run())
    await asyncio.sleep(0.5)
    await stop(ta)
    assert ("a", False) in changes
    took = await wait_for(b.is_leader, 5)
    assert took < FAST["lease_duration"]  # no need to wait the lease out
    await stop(tb)


async def test_racing_candidates_get_exactly_one_leader(kapi, api_client) -> None:
    changes: list[tuple[str, bool]] = []
    electors = [elector(api_client, name, changes) for name in ("a", "b", "c")]
    tasks = [asyncio.create_task(e.run()) for e in electors]
    await wait_for(lambda: any(e.is_leader() for e in electors), 5)
    for _ in range(10):
        assert sum(e.is_leader() for e in electors) == 1
        await asyncio.sleep(0.1)
    for t in tasks:
        await stop(t)


async def test_leader_that_cannot_renew_stops_leading_before_the_lease_expires(
    kapi, api_client
) -> None:
    changes: list[tuple[str, bool]] = []
    a = elector(api_client, "a", changes)
    ta = asyncio.create_task(a.run())
    await wait_for(a.is_leader, 5)
    kapi.fail("fetch", 503, times=1000)  # the API server is unreachable for a
    lost = await wait_for(lambda: not a.is_leader(), 5)
    assert lost <= FAST["renew_deadline"] + 0.3
    await wait_for(lambda: ("a", False) in changes, FAST["retry_period"] + 0.5)  # metric updated
    kapi._faults.clear()
    await wait_for(a.is_leader, 5)
    await stop(ta)
