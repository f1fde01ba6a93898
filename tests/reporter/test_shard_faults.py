"""Two real Prometheus shards, each scraping one real mco-exporter and evaluating the rules;
shard b answers garbage, answers beyond the timeout, or dies (SIGKILL) and is restarted. Each
time, as the extender judges the written report: b's node goes stale after staleAfter, never
dropped nor zeroed, while a's node stays fresh; b's node is fresh again once b answers."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from extender.config import VerdictConfig
from extender.reports import ReportStore
from extender.verdict import is_stale
from mco.promql import PromQLClient, SourceConfig
from reporter.engine import Reporter
from reporter.entries import Epsilon
from reporter.filesink import FileSink
from reporter.layout import LayoutChooser
from reporter.metrics import ReporterMetrics
from reporter.query import Plan
from reporter.ruleconfig import RuleConfigSource
from reporter.schema import decode_reports
from rulegen import series
from rulegen.model import from_spec
from rulegen.render import render_rules
from scripts.procs import Prometheus, ScrapeTarget, free_port, wait_until
from tests.reporter.test_engines import NO_PSI, exporter

pytestmark = pytest.mark.slow
STALE_AFTER = 6
TIMEOUT = 1.0


@dataclass
class Shard:
    """What stands at shard b's URL: a proxy to the real Prometheus, or a fault."""

    upstream: str
    mode: str = "pass"  # pass | garbage | slow

    async def handle(self, request: web.Request) -> web.Response:
        if self.mode == "garbage":
            return web.Response(body=b'{"status":"success","data":{"resultType":"vec', status=200)
        if self.mode == "slow":
            await asyncio.sleep(3 * TIMEOUT)
        form = await request.post()
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.upstream}/api/v1/query", data=dict(form)) as r,
        ):
            return web.Response(
                body=await r.read(), status=r.status, content_type="application/json"
            )


@asynccontextmanager
async def proxy(shard: Shard) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/api/v1/query", shard.handle)
    server = TestServer(app, host="127.0.0.1", port=free_port())
    await server.start_server()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


def judged(out: Path, now: float) -> dict[str, bool]:
    """Node -> stale, as the extender judges the written report at ``now``."""
    store = ReportStore()
    store.replace_all(decode_reports(out.read_bytes()))
    config = VerdictConfig(stale_after=STALE_AFTER)
    return {n: is_stale(store.held_until(k), now, config) for n, k in store.nodes.items()}


async def test_a_failing_shard_stales_exactly_its_nodes_and_they_come_back(
    tmp_path: Path,
) -> None:
    config = from_spec({"report": {"staleAfter": f"{STALE_AFTER}s"}})
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config.to_object()))
    rules = tmp_path / "rules.yaml"
    rules.write_text(render_rules(config))
    host, addr_host = exporter("host", tmp_path)
    old, addr_old = exporter(
        "old", tmp_path, f"--path.procfs={NO_PSI / 'proc'}", f"--path.sysfs={NO_PSI / 'sys'}"
    )
    prom_a = Prometheus(
        tmp_path / "a",
        targets=[ScrapeTarget("mco-exporter", addr_host, {"node": "host"})],
        rule_files=[rules],
    )
    prom_b = Prometheus(
        tmp_path / "b",
        targets=[ScrapeTarget("mco-exporter", addr_old, {"node": "old"})],
        rule_files=[rules],
    )
    out = tmp_path / "report.json"
    started = [host, old, prom_a, prom_b]
    try:
        for proc in started:
            proc.start()
        for prom in (prom_a, prom_b):
            wait_until(
                lambda p=prom: len(p.query(series.INTERFERENCE_LEVEL)) == 1,  # type: ignore[misc]
                timeout=90,
                what="the rules",
            )
        shard = Shard(prom_b.url)
        source = RuleConfigSource(path=str(config_file))
        source.load_initial()
        async with (
            proxy(shard) as b_url,
            PromQLClient(SourceConfig(prom_a.url, timeout=TIMEOUT)) as a,
            PromQLClient(SourceConfig(b_url, timeout=TIMEOUT)) as b,
        ):
            reporter = Reporter(
                source=[a, b],
                rules=source,
                plan=Plan(compact=False),
                epsilon=Epsilon(),
                metrics=ReporterMetrics(),
                sink=FileSink(str(out), LayoutChooser("cluster")),
            )

            async def until_both_fresh() -> None:
                deadline = time.monotonic() + 90
                while True:
                    outcome = await reporter.cycle()
                    now = time.time()
                    if outcome.ok and judged(out, now) == {"host": False, "old": False}:
                        entries = reporter.tracker.entries
                        assert entries["host"].live and entries["old"].live
                        return
                    assert time.monotonic() < deadline, outcome.message
                    await asyncio.sleep(0.5)

            await until_both_fresh()
            for fault in ("garbage", "slow", "killed"):
                before = reporter.tracker.entries["old"]
                if fault == "killed":
                    os.killpg(prom_b.pid, signal.SIGKILL)
                    assert prom_b.proc is not None
                    prom_b.proc.wait(10)
                else:
                    shard.mode = fault
                start = time.time()
                saw_stale = False
                while time.time() - start < STALE_AFTER + 3:
                    outcome = await reporter.cycle()
                    assert not outcome.ok and "1 of 2 PromQL sources failed" in outcome.message
                    verdicts = judged(out, time.time())
                    assert set(verdicts) == {"host", "old"}, fault  # never dropped
                    assert not verdicts["host"], fault  # the other shard's node stays fresh
                    saw_stale = saw_stale or verdicts["old"]
                    entry = reporter.tracker.entries["old"]
                    assert not entry.live and entry.level == before.level  # not zeroed
                    await asyncio.sleep(0.5)
                assert saw_stale and judged(out, time.time())["old"], fault
                up = reporter.metrics.registry.get_sample_value(
                    "mco_reporter_source_up", {"source": b.where}
                )
                assert up == 0
                # b answers again.
                if fault == "killed":
                    prom_b.start()
                else:
                    shard.mode = "pass"
                await until_both_fresh()
    finally:
        for proc in reversed(started):
            proc.stop()
