"""Hostile answer sizes against a real ``mco-reporter`` process (issue 19, item 8): a gzip bomb
and a 200 MB plain answer must not take its resident memory past the chart's 256Mi limit; the
report says why the source is unusable."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from scripts.generate import ROOT
from scripts.procs import free_port
from testkit.fakeprom import Hostile, gzip_bomb

CHART_LIMIT = 256 << 20  # charts/mco/values.yaml: reporter.resources.limits.memory
BUDGET = 48 << 20  # the --prometheus-max-answer-bytes default
MIB = 1 << 20


@asynccontextmanager
async def hostile_prometheus() -> AsyncIterator[tuple[Hostile, str]]:
    hostile = Hostile()
    app = web.Application()
    app.router.add_post("/api/v1/query", hostile.handle)
    server = TestServer(app, host="127.0.0.1", port=free_port())
    await server.start_server()
    try:
        yield hostile, f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak resident set) of ``pid`` in bytes."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


async def _until_condition(out: Path, status: str, reason: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads(out.read_text())
            for c in doc["status"].get("conditions", []):
                if c["type"] == "SourceReachable" and (c["status"], c["reason"]) == (
                    status,
                    reason,
                ):
                    return dict(c)
        await asyncio.sleep(0.2)
    raise TimeoutError(f"no SourceReachable={status}/{reason} in {out} within {timeout}s")


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["gzip-bomb", "200MB"])
async def test_hostile_answers_keep_the_reporter_under_the_chart_limit(
    tmp_path: Path, attack: str
) -> None:
    out = tmp_path / "report.json"
    log = tmp_path / "reporter.log"
    async with hostile_prometheus() as (hostile, url):
        if attack == "gzip-bomb":
            hostile.bomb = await asyncio.to_thread(gzip_bomb, 512 * MIB)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reporter",
                f"--prometheus-url={url}",
                f"--output={out}",
                "--interval=500ms",
                "--prometheus-timeout=20s",
                "--web.listen-address=",
            ],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
        try:
            await _until_condition(out, "True", "QuerySucceeded", 30)
            before = _status(proc.pid)
            hostile.attack = attack
            condition = await _until_condition(out, "False", "AnswerTooLarge", 60)
            await asyncio.sleep(2)  # a few more cycles of the same answer
            after = _status(proc.pid)
            assert proc.poll() is None, log.read_text()[-2000:]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 10)
    assert "48 MiB" in condition["message"]
    assert "--prometheus-max-answer-bytes" in condition["message"]
    growth = after["VmHWM"] - before["VmHWM"]
    print(f"{attack}: VmHWM {before['VmHWM'] / MIB:.0f} -> {after['VmHWM'] / MIB:.0f} MiB")
    assert after["VmHWM"] < CHART_LIMIT
    assert growth < BUDGET + 24 * MIB, (before, after)  # slack: buffers, isal, the raw bombs
