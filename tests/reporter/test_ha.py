"""Two real ``mco-reporter`` processes against kmock: only the leader writes, and only its
``mco_reporter_leader`` gauge is 1; killing it (SIGKILL, no release) hands the report to the
standby within the lease duration plus one retry period (the standby notices an expired lease
at its next retry)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from reporter.query import Plan
from reporter.schema import parse_time
from scripts.procs import free_port
from testkit.answers import quiet_values
from testkit.fakeprom import fake_prometheus
from testkit.kapi import REPORTS
from tests.reporter.conftest import validate_object, write_kubeconfig

LEASE = [
    "--leader-elect-lease-duration=3s",
    "--leader-elect-renew-deadline=2s",
    "--leader-elect-retry-period=0.5s",
]


def start(
    identity: str, prom_url: str, kubeconfig: Path, log: Path, metrics_port: int
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reporter",
            f"--prometheus-url={prom_url}",
            f"--kubeconfig={kubeconfig}",
            "--interval=0.25s",
            f"--leader-elect-identity={identity}",
            "--leader-elect-namespace=mco",
            f"--web.listen-address=127.0.0.1:{metrics_port}",
            *LEASE,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


async def until(check: Any, timeout: float, what: str) -> float:
    start_at = time.monotonic()
    while time.monotonic() - start_at < timeout:
        if check():
            return time.monotonic() - start_at
        await asyncio.sleep(0.05)
    raise TimeoutError(what)


def writers(kapi: Any) -> set[str]:
    """Identities (from the User-Agent) of the processes that wrote reports."""
    agents = {
        r.headers.get("User-Agent", "")
        for r in kapi
        if r.resource == REPORTS and r.method.value in ("POST", "PATCH", "DELETE")
    }
    return {a.partition("(")[2].rstrip(")") for a in agents}


async def leader_gauge(port: int) -> float | None:
    """``mco_reporter_leader`` as the replica's /metrics serves it (None: not served yet)."""

    def get() -> float | None:
        try:
            text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        except requests.RequestException:
            return None
        for line in text.splitlines():
            if line.startswith("mco_reporter_leader "):
                return float(line.split()[1])
        return None

    return await asyncio.to_thread(get)


def holder(kapi: Any) -> str | None:
    lease = kapi.lease("mco-reporter", "mco")
    return lease["spec"].get("holderIdentity") if lease else None


@pytest.mark.slow
async def test_standby_takes_over_when_the_leader_is_killed(kapi, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(kapi.url).rstrip("/"))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    async with fake_prometheus() as prom:
        prom.nodes = {
            "a": quiet_values(Plan(compact=False)),
            "b": quiet_values(Plan(compact=False)),
        }
        try:
            ports = {name: free_port() for name in ("r1", "r2")}
            for name in ("r1", "r2"):
                procs[name] = start(
                    name, prom.url, kubeconfig, tmp_path / f"{name}.log", ports[name]
                )
            await until(lambda: holder(kapi) in procs, 20, "a leader")
            leader = holder(kapi)
            assert leader is not None
            standby = next(n for n in procs if n != leader)
            await until(lambda: "cluster" in kapi.reports(), 10, "the report")
            seen = kapi.lease_reads(standby)
            await until(lambda: kapi.lease_reads(standby) >= seen + 2, 10, "standby rounds")
            assert writers(kapi) == {leader}  # the standby wrote nothing
            assert await leader_gauge(ports[leader]) == 1
            assert await leader_gauge(ports[standby]) == 0
            before = kapi.reports()["cluster"]["status"]["lastSyncTime"]
            procs[leader].send_signal(signal.SIGKILL)
            await until(lambda: procs[leader].poll() is not None, 5, "the kill")
            rounds_before = kapi.lease_reads(standby)
            await until(lambda: holder(kapi) == standby, 10, "the standby to take the lease")
            # The bound is the lease duration (3s: 6 rounds of 0.5s) and the round that sees
            # it expired, counted in the standby's rounds rather than in seconds.
            assert kapi.lease_reads(standby) - rounds_before <= 6 + 2
            # The new leader writes: the heartbeat moves again.
            await until(
                lambda: (
                    parse_time(kapi.reports()["cluster"]["status"]["lastSyncTime"])
                    > parse_time(before) + 1
                ),
                10,
                "a heartbeat from the new leader",
            )
            for obj in kapi.reports().values():
                validate_object(obj)
            assert writers(kapi) == {leader, standby}
            assert await leader_gauge(ports[standby]) == 1
        finally:
            # Wait without blocking the loop: kmock serves from it, and a stopping reporter
            # releases its lease through it.
            for p in procs.values():
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            for p in procs.values():
                with contextlib.suppress(TimeoutError):
                    await until(lambda p=p: p.poll() is not None, 10, "exit")
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
    for name in procs:
        log = (tmp_path / f"{name}.log").read_text()
        assert "secret-token-do-not-log" not in log
