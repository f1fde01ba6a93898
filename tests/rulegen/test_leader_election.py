"""Leader election for the rulegen controller against kmock with resourceVersions.

Two controllers share one Lease (mco/leader.py's elector): only the holder lists, applies
the PrometheusRule and writes the DetectionRuleConfig status; the standby neither reads nor
writes. The replicas are told apart by their User-Agent, as in the reporter's HA test.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest
import yaml
from kubernetes_asyncio import client

from mco.leader import LeaseElector
from rulegen.controller import ControllerMetrics, RuleConfigController
from rulegen.model import config_from_object
from scripts.procs import free_port
from testkit.kapi import DRC, LEASES, RULES, Cluster
from tests.rulegen.test_controller import (
    BETTER,
    DRC_PATH,
    GOOD,
    RULE_PATH,
    SETTINGS,
    drc,
    eventually,
    expected_rule,
    rule,
    status,
)

ROOT = Path(__file__).resolve().parents[2]
LEASE_NAME = "mco-rulegen"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/monitoring/leases/{LEASE_NAME}"
# Short timings so that a takeover takes seconds (the chart keeps the 15s/10s/2s defaults).
DURATION, DEADLINE, RETRY = 2.0, 1.5, 0.25


@pytest.fixture
async def ha() -> AsyncIterator[tuple[Cluster, str]]:
    async with Cluster(strict=False) as k, kmock.Server(k) as server:
        k.resources[DRC] = kmock.ResourceInfo(kind="DetectionRuleConfig", namespaced=False)
        k.resources[RULES] = kmock.ResourceInfo(kind="PrometheusRule", namespaced=True)
        k.resources[LEASES] = kmock.ResourceInfo(kind="Lease", namespaced=True)
        yield k, str(server.url).rstrip("/")


@dataclasses.dataclass
class Replica:
    identity: str
    api: client.ApiClient
    controller: RuleConfigController
    task: asyncio.Task[None]

    @property
    def elector(self) -> LeaseElector:
        assert self.controller.elector is not None
        return self.controller.elector

    def gauge(self) -> float:
        value: float = self.controller.metrics.leader._value.get()
        return value

    async def stop(self) -> None:
        """A graceful stop (SIGTERM in the CLI): stop writing, then release the Lease."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.api.close()


def start(url: str, identity: str) -> Replica:
    api = client.ApiClient(client.Configuration(host=url))
    api.user_agent = f"mco-rulegen ({identity})"
    elector = LeaseElector(
        api,
        name=LEASE_NAME,
        namespace="monitoring",
        identity=identity,
        lease_duration=DURATION,
        renew_deadline=DEADLINE,
        retry_period=RETRY,
    )
    controller = RuleConfigController(api, SETTINGS, ControllerMetrics(), elector)
    return Replica(identity, api, controller, asyncio.create_task(controller.run()))


def agent(request: Any) -> str:
    """The replica a request came from ("" for the test's own requests)."""
    ua = request.headers.get("User-Agent", "")
    return ua.partition("(")[2].rstrip(")") if ua.startswith("mco-rulegen (") else ""


def controller_requests(k: Cluster, *, since: int = 0) -> list[Any]:
    """Requests (after the first ``since``) on the config or the rules, not the Lease."""
    return [r for r in list(k)[since:] if r.resource in (DRC, RULES) and agent(r)]


def writers(k: Cluster, *, since: int = 0) -> set[str]:
    return {agent(r) for r in controller_requests(k, since=since) if r.method.value != "GET"}


def readers(k: Cluster, *, since: int = 0) -> set[str]:
    return {agent(r) for r in controller_requests(k, since=since) if r.method.value == "GET"}


def rule_applies(k: Cluster, identity: str, *, since: int = 0) -> int:
    return sum(
        1
        for r in list(k)[since:]
        if r.url.path == RULE_PATH and r.method.value == "PATCH" and agent(r) == identity
    )


def lease_rounds(k: Cluster, identity: str) -> int:
    """Lease rounds of one replica as the API server saw them (each starts with a GET)."""
    return sum(
        1 for r in k if r.resource == LEASES and r.method.value == "GET" and agent(r) == identity
    )


async def rounds(k: Cluster, identity: str, more: int) -> None:
    """Wait until ``identity`` has made ``more`` further lease rounds (instead of sleeping)."""
    target = lease_rounds(k, identity) + more
    await eventually(lambda: lease_rounds(k, identity) >= target, what=f"{more} lease rounds")


def holder(k: Cluster) -> str | None:
    lease = k.lease(LEASE_NAME, "monitoring")
    return lease["spec"].get("holderIdentity") if lease else None


async def test_only_the_leader_applies_and_a_released_lease_hands_over_at_once(ha) -> None:
    k, url = ha
    await k.post(DRC_PATH, json=drc(GOOD))
    replicas = {name: start(url, name) for name in ("r1", "r2")}
    try:
        digest = config_from_object(drc(GOOD)).config_hash()
        await eventually(lambda: status(k).get("appliedRulesHash") == digest, what="applied")
        leader = replicas[holder(k) or ""]
        standby = next(r for r in replicas.values() if r is not leader)
        await k.patch(f"{DRC_PATH}/default", json={"metadata": {"generation": 2}, "spec": BETTER})
        await eventually(lambda: status(k).get("appliedGeneration") == 2, what="gen 2 applied")
        await rounds(k, standby.identity, 4)  # several lease rounds for the standby to misbehave in

        # The standby neither reads nor writes the config or the rules; it only follows the Lease.
        assert writers(k) == {leader.identity}
        assert readers(k) == {leader.identity}
        assert any(agent(r) == standby.identity for r in k if r.resource == LEASES)
        assert (leader.gauge(), standby.gauge()) == (1, 0)
        assert leader.controller.leading and not standby.controller.leading
        assert leader.controller.ready() and standby.controller.ready()  # 2 replicas available

        # A graceful stop releases the Lease: the standby takes it at its next round (waiting
        # the lease out would take DURATION / RETRY = 8 rounds) and applies at once, with no
        # edit to prompt it.
        mark = len(list(k))
        before = lease_rounds(k, standby.identity)
        await leader.stop()
        await eventually(
            lambda: rule_applies(k, standby.identity, since=mark) > 0, what="the standby applies"
        )
        assert lease_rounds(k, standby.identity) - before <= 2
        assert holder(k) == standby.identity and standby.gauge() == 1
        assert rule(k)["spec"] == expected_rule(status_spec(k), 2)["spec"]
        await k.patch(
            f"{DRC_PATH}/default",
            json={"metadata": {"generation": 3}, "spec": {"window": "40s"}},
        )
        await eventually(lambda: status(k).get("appliedGeneration") == 3, what="gen 3 applied")
        assert writers(k, since=mark) == {standby.identity}
        assert rule(k)["spec"] == expected_rule(status_spec(k), 3)["spec"]
    finally:
        for r in replicas.values():
            await r.stop()


def status_spec(k: Cluster) -> dict[str, Any]:
    spec: dict[str, Any] = k.objects[DRC, None, "default"].raw["spec"]
    return spec


def _lease_patch(holder_identity: str | None, seconds: int) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "spec": {
            "holderIdentity": holder_identity,
            "leaseDurationSeconds": seconds,
            "renewTime": now,
        }
    }


async def test_a_leader_that_loses_the_lease_stops_writing_until_it_wins_it_back(ha) -> None:
    k, url = ha
    await k.post(DRC_PATH, json=drc(GOOD))
    r1 = start(url, "r1")
    try:
        await eventually(lambda: status(k).get("appliedGeneration") == 1, what="applied")
        assert r1.gauge() == 1
        # Someone else takes the Lease (another replica that judged it expired): r1 stops at
        # the round that sees it, not at its renew deadline.
        before = lease_rounds(k, "r1")
        await k.patch(LEASE_PATH, json=_lease_patch("intruder", 60))
        await eventually(lambda: not r1.controller.leading, what="stop")
        assert lease_rounds(k, "r1") - before <= 2
        assert r1.gauge() == 0 and not r1.elector.is_leader()
        mark = len(list(k))
        await k.patch(f"{DRC_PATH}/default", json={"metadata": {"generation": 2}, "spec": BETTER})
        await rounds(k, "r1", 4)
        # No watch, no apply, no status: the edit waits for a leader.
        assert controller_requests(k, since=mark) == []
        assert status(k)["appliedGeneration"] == 1
        assert rule(k)["metadata"]["annotations"]["mco.io/rule-config-generation"] == "1"
        # The intruder releases the Lease: r1 takes it back and applies the pending edit.
        await k.patch(LEASE_PATH, json=_lease_patch(None, 1))
        await eventually(lambda: status(k).get("appliedGeneration") == 2, what="gen 2 applied")
        assert r1.gauge() == 1 and holder(k) == "r1"
        assert rule(k)["spec"] == expected_rule(status_spec(k), 2)["spec"]
    finally:
        await r1.stop()


async def test_writes_are_fenced_once_the_renew_deadline_passes(ha) -> None:
    """A leader whose renewals fail (a partitioned API) stops writing on its own clock, once
    the renew deadline passes: before any standby may judge the lease expired."""
    k, url = ha
    await k.post(DRC_PATH, json=drc(GOOD))
    r1 = start(url, "r1")
    try:
        await eventually(lambda: status(k).get("appliedGeneration") == 1, what="applied")
        k.fail("update", 503, times=1000, name=LEASE_NAME)  # renewals fail from now on
        # The elector's timer at the renew deadline ends the term (no round needs to succeed).
        await eventually(lambda: not r1.controller.leading, what="the term to end")
        assert r1.gauge() == 0 and not r1.elector.is_leader()
        mark = len(list(k))
        await k.patch(f"{DRC_PATH}/default", json={"metadata": {"generation": 2}, "spec": BETTER})
        await rounds(k, "r1", 4)
        assert writers(k, since=mark) == set()
        assert r1.elector.last_heard is not None
        assert not r1.controller.ready()  # the API no longer answers its lease checks
    finally:
        await r1.stop()


# -- two real processes -------------------------------------------------------------------------


def spawn(identity: str, kubeconfig: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env["POD_NAMESPACE"] = "monitoring"  # the Lease defaults to the pod's own namespace
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rulegen",
            "controller",
            f"--kubeconfig={kubeconfig}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--prometheusrule-namespace=monitoring",
            "--prometheusrule-label=release=kps",
            "--leader-elect",
            f"--leader-elect-identity={identity}",
            "--leader-elect-lease-duration=3s",
            "--leader-elect-renew-deadline=2s",
            "--leader-elect-retry-period=0.5s",
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def exited(p: subprocess.Popen[bytes]) -> Callable[[], bool]:
    return lambda: p.poll() is not None


async def scrape(port: int) -> dict[str, float]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as r,
    ):
        text = await r.text()
    return {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


async def ready(port: int) -> bool:
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/readyz") as r,
        ):
            return r.status == 200
    except aiohttp.ClientError:
        return False


@pytest.mark.slow
async def test_standby_process_takes_over_when_the_leader_is_killed(ha, tmp_path: Path) -> None:
    k, url = ha
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
                "contexts": [{"name": "c", "context": {"cluster": "kmock", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    await k.post(DRC_PATH, json=drc(GOOD))
    ports = {"p1": free_port(), "p2": free_port()}
    procs = {name: spawn(name, kubeconfig, ports[name], tmp_path / f"{name}.log") for name in ports}
    try:
        await eventually(lambda: holder(k) in procs, timeout=30, what="a leader")
        leader = holder(k) or ""
        standby = next(n for n in procs if n != leader)
        await eventually(lambda: status(k).get("appliedGeneration") == 1, what="applied")
        for name in procs:  # both replicas are Ready: the Deployment has 2 available
            for _ in range(100):
                if await ready(ports[name]):
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"{name} never became ready")
        assert (await scrape(ports[leader]))["mco_rulegen_leader"] == 1
        assert (await scrape(ports[standby]))["mco_rulegen_leader"] == 0
        assert writers(k) == {leader}

        mark = len(list(k))
        before = lease_rounds(k, standby)
        procs[leader].send_signal(signal.SIGKILL)  # no release: the lease must run out
        await eventually(
            lambda: rule_applies(k, standby, since=mark) > 0, timeout=15, what="takeover"
        )
        # The standby took it once the lease duration (3s: 6 rounds of 0.5s) had passed since
        # the last renewal it saw, at the round after that: counted in rounds, not seconds (a
        # loaded machine stretches each round, so fewer may fit in the duration).
        took = lease_rounds(k, standby) - before
        print(f"takeover after {took} lease rounds")
        assert 3 <= took <= 6 + 2, took
        assert holder(k) == standby
        assert (await scrape(ports[standby]))["mco_rulegen_leader"] == 1
        await k.patch(f"{DRC_PATH}/default", json={"metadata": {"generation": 2}, "spec": BETTER})
        await eventually(lambda: status(k).get("appliedGeneration") == 2, what="gen 2 applied")
        assert writers(k, since=mark) == {standby}
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs.values():
            # Wait without blocking the loop: kmock serves the lease release from it.
            with contextlib.suppress(AssertionError):
                await eventually(exited(p), timeout=10, what="exit")
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    for name in procs:
        assert "not-a-secret" not in (tmp_path / f"{name}.log").read_text()
