"""The taint mode end to end on the rule side: a real Prometheus evaluates the generated held
rule (``node:mco_hard_constraint_violated:bool``, holdFor/clearAfter) over an exceeded series it
scrapes, and a whole Reporter with ``--taint-nodes``' tainter reads it and taints the Node on
the API stand-in: after holdFor, and away again clearAfter after the excess ends."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import kmock
import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio import client

from mco.promql import PromQLClient, SourceConfig
from reporter.engine import Reporter
from reporter.entries import Epsilon
from reporter.kubeapi import ReportApi, call
from reporter.kubesink import KubeSink
from reporter.layout import LayoutChooser
from reporter.metrics import ReporterMetrics
from reporter.nodeapi import NodeApi
from reporter.query import Plan
from reporter.ruleconfig import RuleConfigSource
from reporter.taints import TAINT, NodeTainter
from rulegen import series as S
from rulegen.model import from_spec
from scripts.procs import Prometheus, ScrapeTarget, free_port
from testkit.kapi import VersionedKubernetes
from tests.rulegen.test_hysteresis import violated_rule

pytestmark = pytest.mark.slow
NODES = kmock.resource("", "v1", "nodes")
HOLD, CLEAR = 3, 6  # seconds (holdFor, clearAfter)
SCRAPED = "mco_test_exceeded"  # recorded as exceeded in the held rule's group, as in the product


async def test_taint_follows_prometheus_held_flag(
    kapi: VersionedKubernetes, api_client: client.ApiClient, tmp_path: Path
) -> None:
    kapi.resources[NODES] = kmock.ResourceInfo(kind="Node", namespaced=False)
    await call(client.CoreV1Api(api_client).create_node, {"metadata": {"name": "a"}}, timeout=5)
    exceeded = {"value": 0}

    async def metrics(_: web.Request) -> web.Response:
        body = (
            f'{SCRAPED}{{node="a",constraint="psi_memory_full"}} '
            f"{exceeded['value']}\n"
            f'{S.DETECTION_TRIGGERED}{{node="a",detection="memory_pressure"}} 0\n'
        )
        return web.Response(text=body)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    config = from_spec({"hardConstraints": {"holdFor": f"{HOLD}s", "clearAfter": f"{CLEAR}s"}})
    rules = tmp_path / "rules.yaml"
    # The held rule reads exceeded as recorded earlier in its own evaluation (over half an
    # interval): a scraped exceeded would be seen only when a scrape lands that close.
    held_rules = violated_rule(config)
    held_rules["groups"][0]["rules"].insert(
        0, {"record": S.HARD_CONSTRAINT_EXCEEDED, "expr": f"last_over_time({SCRAPED}[10s])"}
    )
    rules.write_text(yaml.safe_dump(held_rules))
    prom = Prometheus(
        tmp_path, targets=[ScrapeTarget("fleet", f"127.0.0.1:{port}")], rule_files=[rules]
    )
    tainted_at: list[tuple[float, bool]] = []  # (time, has the taint) after each cycle

    def has_taint() -> bool:
        spec = kapi.objects[NODES, None, "a"].raw.get("spec", {})
        return TAINT in (spec.get("taints") or [])

    try:
        with prom:
            # In a thread: the target Prometheus scrapes is served by this event loop.
            await asyncio.to_thread(prom.wait_http, f"{prom.url}/-/ready")
            await asyncio.to_thread(prom.wait_for_series, S.HARD_CONSTRAINT_VIOLATED)
            m = ReporterMetrics()
            async with PromQLClient(SourceConfig(prom.url)) as source:
                reporter = Reporter(
                    source=source,
                    rules=RuleConfigSource(),
                    plan=Plan(compact=True),
                    epsilon=Epsilon(),
                    metrics=m,
                    sink=KubeSink(ReportApi(api_client), LayoutChooser("cluster", 1 << 20)),
                    tainter=NodeTainter(NodeApi(api_client), m, max_share=1.0),  # one Node
                )

                async def run_for(seconds: float) -> None:
                    end = time.monotonic() + seconds
                    while time.monotonic() < end:
                        await reporter.cycle()
                        tainted_at.append((time.monotonic(), has_taint()))
                        await asyncio.sleep(0.5)

                await run_for(3)
                assert not any(t for _, t in tainted_at)
                exceeded["value"] = 1
                on = time.monotonic()
                await run_for(HOLD + 6)
                first = next(at for at, t in tainted_at if t)
                # Not before holdFor of excess (less one scrape and one evaluation of slack),
                # and within a few seconds after it.
                assert HOLD - 1 <= first - on <= HOLD + 5, first - on
                exceeded["value"] = 0
                off = time.monotonic()
                await run_for(CLEAR + 8)
                cleared = next(at for at, t in tainted_at if at > off and not t)
                assert CLEAR - 1 <= cleared - off <= CLEAR + 6, cleared - off
                assert not has_taint()
                added = m.registry.get_sample_value("mco_reporter_taints_added_total")
                removed = m.registry.get_sample_value("mco_reporter_taints_removed_total")
                assert (added, removed) == (1, 1)  # the hysteresis: one change each way
    finally:
        await runner.cleanup()
