"""The read-only routes never starve the scheduler routes (issue 27 item 4): at 5,000 nodes and
16 policies one ``GET /v1/nodes`` held the event loop 0.5 s idle (1.2-3.4 s loaded), and while
one client looped it, filter calls waited 1.2-4.1 s against the schedulers' 1 s timeout. A real
extender process here, a real client looping ``/v1/nodes`` and the answer read whole."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import msgspec
import pytest
import requests

from bench.extender import write_report
from extender import node_view as node_view_module
from extender.app import JUDGE
from scripts.procs import Managed, free_port
from testkit import bodies
from tests.extender.conftest import file_config, wait_for

NODES = [f"node-{i:04d}" for i in range(5000)]
BOUND = 0.2  # seconds: a fifth of the schedulers' 1 s timeout, under one /v1/nodes pass (0.5 s)


@pytest.mark.slow
def test_filter_stays_fast_while_a_client_loops_v1_nodes(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    write_report(report, NODES, policies=16)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = Managed(
        [sys.executable, "-m", "extender", f"--web.listen-address=127.0.0.1:{port}",
         f"--report-file={report}", "--log.level=warn"],
        name="mco-extender", log_path=tmp_path / "extender.log",
    )  # fmt: skip
    body = bodies.kube_args(NODES[:100], labels={"app": "p3"})
    with proc:
        proc.wait_http(f"{url}/readyz")
        start = time.perf_counter()
        view = requests.get(f"{url}/v1/nodes", timeout=60).json()
        whole = time.perf_counter() - start
        assert len(view["nodes"]) == 5000 and len(view["nodes"][0]["policyVerdicts"]) == 16
        assert view["nodes"][4999]["name"] == "node-4999" and view["policies"][0]["name"] == "p0"
        stop, reads = threading.Event(), [0]

        def loop() -> None:
            with requests.Session() as session:
                while not stop.is_set():
                    answer = session.get(f"{url}/v1/nodes", timeout=60)
                    assert len(json.loads(answer.content)["nodes"]) == 5000
                    reads[0] += 1

        reader = threading.Thread(target=loop)
        reader.start()
        took = []
        try:
            time.sleep(0.3)
            with requests.Session() as session:
                for _ in range(30):
                    start = time.perf_counter()
                    answer = session.post(f"{url}/scheduler/filter", data=body, timeout=10)
                    took.append(time.perf_counter() - start)
                    assert answer.status_code == 200 and len(answer.json()["NodeNames"]) == 60
                    time.sleep(0.05)
        finally:
            stop.set()
            reader.join()
    assert reads[0] >= 1
    took.sort()
    p90 = took[int(0.9 * len(took))]
    print(f"/v1/nodes alone {whole:.2f} s; filter p90 {p90 * 1e3:.0f} ms, worst "
          f"{took[-1] * 1e3:.0f} ms over {len(took)}, {reads[0]} /v1/nodes read")  # fmt: skip
    # A loop starved by the read waits a whole /v1/nodes pass on most calls; on a loaded machine
    # (CI runs tests side by side) that pass and a lone stall both grow, so the bound is the
    # larger of BOUND and half a pass measured in this run, and one late call is let through.
    bound = max(BOUND, whole / 2)
    assert p90 < bound, f"filter p90 {p90:.2f} s over {bound:.2f} s (one /v1/nodes: {whole:.2f} s)"


async def test_the_chunks_make_the_same_document_as_the_whole_view(serve, tmp_path, monkeypatch):
    monkeypatch.setattr(node_view_module, "CHUNK", 7)
    report = tmp_path / "report.json"
    write_report(report, NODES[:50], policies=3)
    client = await serve(file_config(report, stale_after=86400.0))
    judge = client.server.app[JUDGE]
    await wait_for(lambda: len(judge.store.nodes) == 50, what="the report")
    now = time.time()
    whole = msgspec.json.encode(node_view_module.node_view(judge, now))
    assert b"".join(node_view_module.node_view_chunks(judge, now)) == whole
    served = json.loads(await (await client.get("/v1/nodes")).read())
    assert [n["name"] for n in served["nodes"]] == NODES[:50]
    assert served["nodes"][0]["policyVerdicts"].keys() == {"p0", "p1", "p2"}
