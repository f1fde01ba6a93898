"""VictoriaMetrics sharding for real: two vmagents in one scraper cluster
(``-promscrape.cluster.membersCount=2``, ``memberNum`` 0 and 1) split a synthetic fleet's
targets, each remote-writing to its own single-node VictoriaMetrics, on which its own vmalert
evaluates the generated rules. The real ``mco-reporter --once``, given one ``--prometheus-url``
per VictoriaMetrics, reports every node, and every node's rules ran on the shard whose vmagent
scrapes it and on no other. When one VictoriaMetrics is killed, as the extender judges the
report, exactly that shard's nodes go stale after staleAfter (never dropped), the others stay
fresh, and all are fresh again once it is back."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from rulegen import series
from rulegen.model import from_spec
from rulegen.render import render_rules
from scripts.procs import (
    ScrapeTarget,
    VictoriaMetrics,
    VMAgent,
    VMAlert,
    running,
    wait_until,
)
from testkit.fleet import PROFILES, Fleet, assign, handler, node_names
from tests.chart.test_reporter_all_shards import Heartbeat
from tests.reporter.test_shard_faults import judged

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
STALE_AFTER = 10
MEMBERS = 2
# One node per target: vmagent shares out targets, and with 12 of them both members get some
# (all on one member: odds 2 in 2^12).
NODES = node_names(12)
# Every profile but cpuonly, which by design has no level.
LEVELLED = [p for p in PROFILES if p != "cpuonly"]


@pytest.fixture
def fleet() -> Iterator[dict[str, str]]:
    """One synthetic exporter per node, each on its own port: address -> node."""
    servers = []
    profiles = assign(NODES, LEVELLED)
    for node in NODES:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler(Fleet({node: profiles[node]})))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append((server, node))
    yield {f"127.0.0.1:{s.server_address[1]}": node for s, node in servers}
    for server, _ in servers:
        server.shutdown()
        server.server_close()


def once(urls: list[str], out: Path, config: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "reporter", "--once", f"--output={out}"]
    argv += [f"--rule-config={config}", "--log.level=warn"]
    argv += [f"--prometheus-url={u}" for u in urls]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)


def nodes_in(vm: VictoriaMetrics) -> set[str]:
    return {r["metric"]["node"] for r in vm.query(series.INTERFERENCE_LEVEL)}


@pytest.fixture
def heartbeat() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Heartbeat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_vmagent_shards_each_evaluate_their_own_nodes_and_a_dead_one_stales_exactly_them(
    tmp_path: Path, fleet: dict[str, str], heartbeat: ThreadingHTTPServer
) -> None:
    config = from_spec({"report": {"staleAfter": f"{STALE_AFTER}s"}})
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config.to_object()))
    rules = tmp_path / "rules.yaml"
    rules.write_text(render_rules(config, engine="victoriametrics"))
    targets = [ScrapeTarget("mco-exporter", address) for address in fleet]
    vms = [VictoriaMetrics(tmp_path / f"vm-{i}") for i in range(MEMBERS)]
    agents = [
        VMAgent(
            tmp_path / f"vmagent-{i}",
            targets=targets,
            remote_write_urls=[vm.url],
            members=MEMBERS,
            member=i,
        )
        for i, vm in enumerate(vms)
    ]
    alerts = [
        VMAlert(
            tmp_path / f"vmalert-{i}",
            rule_files=[rules],
            datasource_url=vm.url,
            remote_write_url=vm.url,
        )
        for i, vm in enumerate(vms)
    ]
    out = tmp_path / "report.json"
    urls = [vm.url for vm in vms]
    # The reporter's self-metrics go to every shard (one vmagent outside the cluster, writing
    # to each VictoriaMetrics), so each shard's MCOReporterAbsent sees its heartbeat.
    reporter_agent = VMAgent(
        tmp_path / "vmagent-reporter",
        targets=[ScrapeTarget("mco-reporter", f"127.0.0.1:{heartbeat.server_address[1]}")],
        remote_write_urls=urls,
    )
    absent = next(
        r["expr"]
        for g in yaml.safe_load(rules.read_text())["groups"]
        for r in g["rules"]
        if r.get("alert") == "MCOReporterAbsent"
    )
    with running(*vms, *agents, *alerts, reporter_agent):
        # Each member scrapes its share of the targets, together all of them, once.
        shares: list[set[str]] = []

        def shared_out() -> bool:
            shares[:] = [a.scraped() for a in agents]
            return sum(len(s) for s in shares) == len(fleet)

        wait_until(shared_out, timeout=30, what="the targets shared out")
        held = [{fleet[a] for a in share} for share in shares]
        assert set.union(*held) == set(NODES) and not set.intersection(*held), held
        assert all(held), f"one member has every target: {held}"

        # Each shard's vmalert evaluated exactly its member's nodes.
        for vm, nodes in zip(vms, held, strict=True):
            wait_until(
                functools.partial(lambda v, n: nodes_in(v) == n, vm, nodes),
                timeout=120,
                what=f"levels in {vm.url}",
            )

        wait_until(
            lambda: not any(vm.query(absent) for vm in vms),
            timeout=30,
            what="the reporter's heartbeat on every shard",
        )

        # The real reporter over both shards: every node, every one fresh.
        def all_fresh() -> bool:
            done = once(urls, out, config_file)
            assert done.returncode == 0, done.stderr
            return judged(out, time.time()) == dict.fromkeys(NODES, False)

        wait_until(all_fresh, timeout=60, interval=1, what="every node fresh in the report")

        # Shard 1's VictoriaMetrics dies: exactly its nodes go stale, none is dropped.
        dead = vms[1]
        os.killpg(dead.pid, signal.SIGKILL)
        assert dead.proc is not None
        dead.proc.wait(10)
        killed = time.time()
        saw_stale: set[str] = set()
        while time.time() - killed < STALE_AFTER + 4:
            done = once(urls, out, config_file)
            assert done.returncode == 1 and "1 of 2 PromQL sources failed" in done.stderr, (
                done.stderr
            )
            verdicts = judged(out, time.time())
            assert set(verdicts) == set(NODES)  # never dropped
            assert not any(verdicts[n] for n in held[0]), verdicts  # shard 0's stay fresh
            saw_stale |= {n for n, stale in verdicts.items() if stale}
        assert saw_stale == held[1]
        assert {n for n, stale in judged(out, time.time()).items() if stale} == held[1]

        # It comes back (same storage; its vmagent and vmalert kept running): fresh again.
        dead.start()
        wait_until(all_fresh, timeout=90, interval=1, what="every node fresh again")

        # The reporter goes away: every shard's MCOReporterAbsent expression turns true.
        heartbeat.shutdown()
        heartbeat.server_close()
        wait_until(
            lambda: all(vm.query(absent) for vm in vms),
            timeout=60,
            interval=1,
            what="MCOReporterAbsent true on every shard",
        )
