"""Lease-based leader election (``coordination.k8s.io/v1``), the algorithm of client-go.

kubernetes-asyncio ships a port of the Python client's elector; it is not used because it
replaces the Lease with PUT (which the test API server, kmock, does not serve), logs every lost
race as an exception, never releases the lease on shutdown, and keeps no fencing time. This one:

* A candidate takes the Lease when it does not exist, has no holder, or its holder has not
  renewed it for ``lease_duration`` *as observed by this candidate* (when its read first
  returned the record as it is now, on its own monotonic clock, so clock skew between nodes
  does not matter; timed after the answer, as client-go does, so never before the write).
* A standby's next round comes after the retry period, or sooner: the moment the holder's
  lease runs out on its clock. A holder killed at K, whose last renewal landed at W <= K, is
  seen at most one retry period (plus a round trip) after W, and its lease is taken at
  W + lease duration as seen, plus the taking round's read and write: takeover within lease
  duration + retry period + round trips of K, never before W + lease duration. (Waiting a
  whole retry period past the expiry, as this module did, added up to one more period.)
* Every update is a merge patch carrying the ``resourceVersion`` it read: of two candidates
  racing for an expired lease, one gets 409 and stays a follower.
* The leader renews every ``retry_period``; ``is_leader()`` turns false once ``renew_deadline``
  has passed since the last successful renewal was *sent*. The deadline is shorter than the
  lease duration, so the old leader stops writing before any standby may take over.
* On shutdown the leader releases the Lease (holder cleared), so a standby takes over at its
  next retry instead of after a whole lease duration.

Work that may run only while holding the Lease goes through ``run_while_leading``: it waits
on the elector's leadership events (set by the same transitions that call ``on_change``, and by
a timer at the renew deadline), not on a polling loop, and cancels the work the moment the
term ends, as kopf's ``ToggleSet.wait_for`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client

from mco.flags import duration

log = logging.getLogger("mco.leader")


def _now_micro() -> datetime:
    """A MicroTime for the Lease fields (the client writes it as RFC 3339 with microseconds)."""
    return datetime.now(UTC)


class LeaseElector:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_change: Callable[[bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease duration > renew deadline > retry period > 0")
        self._api = client.CoordinationV1Api(api_client)
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_change = on_change
        self.clock = clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._expires_at: float | None = None  # another holder's lease runs out (our clock)
        self._renewed_at: float | None = None  # when the last successful renewal was sent
        self._leading = False
        self.transitions_seen = 0
        self.last_heard: float | None = None  # when the API last answered a lease check
        self._leading_event = asyncio.Event()  # set while leading
        self._following_event = asyncio.Event()  # set while not leading
        self._following_event.set()
        self._deadline: asyncio.TimerHandle | None = None

    def is_leader(self) -> bool:
        return (
            self._leading
            and self._renewed_at is not None
            and self.clock() - self._renewed_at < self.renew_deadline
        )

    async def wait_leading(self, leading: bool = True) -> None:
        """Return once this replica leads (``leading``) or follows (not ``leading``)."""
        await (self._leading_event if leading else self._following_event).wait()

    async def run(self) -> None:
        """Campaign and renew until cancelled; releases the lease on the way out."""
        try:
            while True:
                try:
                    await self.try_acquire_or_renew()
                    self.last_heard = self.clock()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the API may fail in any way; keep campaigning
                    log.warning("lease check failed", extra={"lease": self.name, "err": str(exc)})
                self._update_leading()
                await asyncio.sleep(self.next_round_in())
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.release())

    def next_round_in(self) -> float:
        """Seconds to the next round: the retry period, or less when another holder's lease
        runs out sooner on this replica's clock (then it is taken at once, not up to a retry
        period late)."""
        if self._expires_at is None:
            return self.retry_period
        return min(self.retry_period, max(self._expires_at - self.clock(), 0.0))

    def _update_leading(self) -> None:
        if self._leading and not self.is_leader():
            self._set_leading(False)  # could not renew within the deadline

    def _renewed(self, sent: float) -> None:
        """A renewal sent at ``sent`` succeeded: lead until its deadline, when a timer ends the
        term unless another renewal moved it (fencing on this replica's own clock)."""
        self._renewed_at = sent
        self._set_leading(True)
        if self._deadline is not None:
            self._deadline.cancel()
        self._arm_deadline()

    def _arm_deadline(self) -> None:
        if self._renewed_at is None:
            return
        left = self._renewed_at + self.renew_deadline - self.clock()
        self._deadline = asyncio.get_running_loop().call_later(max(left, 0.001), self._at_deadline)

    def _at_deadline(self) -> None:
        self._deadline = None
        if self.is_leader():
            self._arm_deadline()  # the loop's timer fired a little early
        else:
            self._update_leading()

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        if leading:
            self._following_event.clear()
            self._leading_event.set()
        else:
            self._renewed_at = None
            self._leading_event.clear()
            self._following_event.set()
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
        log.info(
            "leadership changed",
            extra={"lease": self.name, "identity": self.identity, "leader": leading},
        )
        if self.on_change is not None:
            self.on_change(leading)

    async def try_acquire_or_renew(self) -> bool:
        sent = self.clock()
        self._expires_at = None
        try:
            lease = await self._api.read_namespaced_lease(self.name, self.namespace)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            return await self._create(sent)
        read = self.clock()
        spec = lease.spec or client.V1LeaseSpec()
        record = (
            spec.holder_identity,
            spec.lease_duration_seconds,
            spec.renew_time,
            spec.acquire_time,
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = read
        holder = spec.holder_identity or ""
        duration = float(spec.lease_duration_seconds or self.lease_duration)
        if holder and holder != self.identity and read < self._observed_at + duration:
            if self._leading:
                self._set_leading(False)
            self._expires_at = self._observed_at + duration
            return False
        now = _now_micro()
        patch: dict[str, Any] = {
            "metadata": _precondition(lease),
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.lease_duration),
                "renewTime": now,
            },
        }
        if holder != self.identity:
            patch["spec"]["acquireTime"] = now
            patch["spec"]["leaseTransitions"] = (spec.lease_transitions or 0) + 1
        try:
            # A dict body goes as a strategic merge patch, which for a Lease merges like a
            # JSON merge patch; the resourceVersion in it is the precondition.
            await self._api.patch_namespaced_lease(self.name, self.namespace, patch)
        except client.ApiException as exc:
            if exc.status in (404, 409):
                return False  # someone else renewed or took it first
            raise
        if holder != self.identity:
            self.transitions_seen += 1
        self._renewed(sent)
        return True

    async def _create(self, sent: float) -> bool:
        now = _now_micro()
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=round(self.lease_duration),
                acquire_time=now,
                renew_time=now,
                lease_transitions=0,
            ),
        )
        try:
            await self._api.create_namespaced_lease(self.namespace, body)
        except client.ApiException as exc:
            if exc.status == 409:
                return False
            raise
        self._renewed(sent)
        return True

    async def release(self) -> None:
        """Give the lease up (only if we hold it), so a standby need not wait it out."""
        if not self._leading:
            return
        self._set_leading(False)
        lease = await self._api.read_namespaced_lease(self.name, self.namespace)
        spec = lease.spec or client.V1LeaseSpec()
        if spec.holder_identity != self.identity:
            return
        patch = {
            "metadata": _precondition(lease),
            "spec": {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _now_micro()},
        }
        await self._api.patch_namespaced_lease(self.name, self.namespace, patch)
        log.info("lease released", extra={"lease": self.name, "identity": self.identity})


async def run_while_leading(
    elector: LeaseElector | None, work: Callable[[], Coroutine[Any, Any, None]]
) -> None:
    """Campaign for the Lease and run ``work()`` during each term, until cancelled.

    ``work`` starts when leadership is gained and is cancelled as soon as it is lost (a lost
    race, or the renew deadline passing without a renewal); a new term calls it again. A
    ``work`` that returns early waits for the end of its term. Without an elector (leader
    election off) ``work`` just runs. On the way out the work is stopped before the Lease is
    released, so no write can follow the release.
    """
    if elector is None:
        await work()
        return
    campaign = asyncio.create_task(elector.run(), name=f"lease {elector.name}")
    try:
        while True:
            await _first(campaign, elector.wait_leading(True))
            term = asyncio.create_task(work(), name=f"term {elector.name}")
            try:
                await _first(campaign, term, elector.wait_leading(False))
            finally:
                if not term.done():
                    term.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await term
            if not term.cancelled():
                error = term.exception()
                if error is not None:
                    raise error
                await _first(campaign, elector.wait_leading(False))
    finally:
        campaign.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await campaign


async def _first(campaign: asyncio.Task[None], *waits: Awaitable[None]) -> None:
    """Wait until one of ``waits`` completes; the campaign ending (it never does on its own)
    re-raises its error."""
    tasks = [w if isinstance(w, asyncio.Task) else asyncio.ensure_future(w) for w in waits]
    try:
        done, _ = await asyncio.wait([campaign, *tasks], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t, w in zip(tasks, waits, strict=True):
            if t is not w:
                t.cancel()
    if campaign in done:
        campaign.result()
        raise RuntimeError("the lease campaign ended")


def _precondition(lease: client.V1Lease) -> dict[str, str]:
    rv = lease.metadata.resource_version if lease.metadata else None
    return {"resourceVersion": rv} if rv else {}


# --- Command-line wiring shared by mco-reporter and mco-rulegen controller ----------------------


def add_leader_flags(
    group: argparse._ArgumentGroup | argparse.ArgumentParser,
    *,
    lease_name: str,
    what: str,
) -> None:
    """The ``--leader-elect*`` flags, spelled and defaulted the same in every controller."""
    group.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"{what} only while holding the Lease (default on)",
    )
    group.add_argument("--leader-elect-lease-name", default=lease_name)
    group.add_argument(
        "--leader-elect-namespace",
        default=None,
        help="namespace of the Lease (default: the pod's own, else default)",
    )
    group.add_argument(
        "--leader-elect-identity", default=None, help="default: hostname and a random suffix"
    )
    group.add_argument("--leader-elect-lease-duration", type=duration, default=15.0)
    group.add_argument("--leader-elect-renew-deadline", type=duration, default=10.0)
    group.add_argument("--leader-elect-retry-period", type=duration, default=2.0)
