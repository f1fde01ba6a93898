"""``mco-reporter``: flags, --once exit codes and messages, both sinks, the metrics endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import kmock
import pytest
import requests
import trustme
from kubernetes_asyncio import client

from reporter.cli import parse_settings, run
from reporter.engine import Reporter
from reporter.kubeapi import call
from reporter.query import Kind, Plan
from reporter.taints import TAINT
from rulegen import series
from scripts.procs import Managed, free_port
from testkit.answers import quiet_values
from testkit.fakeprom import fake_prometheus
from tests.reporter.conftest import validate_object, write_kubeconfig
from tests.secured_web import assert_secured, hosts, secured_web, wait_served

PLAN = Plan(compact=False)
NODES = kmock.resource("", "v1", "nodes")


async def once(*argv: str) -> int:
    """One cycle as ``mco-reporter --once`` runs it; a bad flag exits 2 as SystemExit does."""
    try:
        settings = parse_settings(["--once", *argv])
    except SystemExit as exc:
        return int(exc.code or 0)
    return await run(settings)


@pytest.mark.parametrize(
    "argv,text",
    [
        (["--prometheus-url=ftp://x", "--output=-"], "http(s) URL"),
        (["--prometheus-url=http://x", "--prometheus-cert-file=c", "--output=-"], "cert and a key"),
        (
            [
                "--prometheus-url=http://x",
                "--prometheus-bearer-token-file=t",
                "--prometheus-basic-auth-user=u",
                "--output=-",
            ],
            "either a bearer token or basic auth",
        ),
        (
            ["--prometheus-url=http://x", "--web.tls-cert-file=c", "--output=-"],
            "both a certificate and a key",
        ),
        (
            ["--prometheus-url=http://x", "--rule-config=/nonexistent.yaml", "--output=-"],
            "--rule-config",
        ),
        (["--prometheus-url=http://x", "--taint-nodes", "--output=-"], "not with --output"),
        (["--prometheus-url=http://x", "--taint-nodes", "--taint-qps=0"], "--taint-qps"),
        (["--prometheus-url=http://x", "--taint-nodes", "--taint-resync=-1"], "--taint-resync"),
        (["--prometheus-url=http://x", "--taint-nodes", "--taint-max-share=0"], "--taint-max-s"),
        (["--prometheus-url=http://x", "--taint-nodes", "--taint-max-share=1.5"], "--taint-max-"),
    ],
)
async def test_bad_flags_exit_2_with_the_reason(argv, text, capsys) -> None:
    assert await once(*argv) == 2
    err = capsys.readouterr().err
    assert text in err
    assert err.startswith("mco-reporter: error: ") and err.count("\n") == 1, err


async def test_once_writes_the_report_file(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    async with fake_prometheus() as prom:
        prom.nodes = {"a": quiet_values(PLAN), "b": quiet_values(PLAN)}
        assert await once(f"--prometheus-url={prom.url}", f"--output={out}") == 0
        assert prom.queries == 3  # one cycle: three queries
    obj = json.loads(out.read_text())
    validate_object(obj)
    assert set(obj["status"]["nodes"]) == {"a", "b"}
    assert {c["type"]: c["status"] for c in obj["status"]["conditions"]} == {
        "SourceReachable": "True",
        "Synced": "True",
    }


async def test_once_fails_clearly_and_keeps_the_entries_when_the_source_is_down(
    tmp_path: Path, capsys
) -> None:
    out = tmp_path / "report.json"
    async with fake_prometheus() as prom:
        values = quiet_values(PLAN)
        values[(Kind.LEVEL, "")] = 0.42
        prom.nodes = {"a": values}
        assert await once(f"--prometheus-url={prom.url}", f"--output={out}") == 0
        before = json.loads(out.read_text())["status"]["nodes"]["a"]
        prom.down = True
        assert await once(f"--prometheus-url={prom.url}", f"--output={out}") == 1
    err = capsys.readouterr().err
    assert "PromQL source failed (source_error)" in err and "fake outage" in err
    obj = json.loads(out.read_text())
    validate_object(obj)
    after = obj["status"]["nodes"]["a"]
    assert after == before  # same values, same sample time: it ages, never zeros
    reachable = next(c for c in obj["status"]["conditions"] if c["type"] == "SourceReachable")
    assert reachable["status"] == "False" and "fake outage" in reachable["message"]
    port = free_port()
    assert (
        await once(
            f"--prometheus-url=http://127.0.0.1:{port}", "--output=-", "--prometheus-timeout=2s"
        )
        == 1
    )
    assert "source_unreachable" in capsys.readouterr().err


async def test_once_writes_to_the_kubernetes_api(kapi, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(kapi.url).rstrip("/"))
    async with fake_prometheus() as prom:
        prom.nodes = {"a": quiet_values(PLAN)}
        code = await once(f"--prometheus-url={prom.url}", f"--kubeconfig={kubeconfig}", "--compact")
    assert code == 0
    report = kapi.reports()["cluster"]
    validate_object(report)
    assert "signals" not in report["status"]["nodes"]["a"]
    # The API token from the kubeconfig reached the API server, and nowhere else.
    auth = {r.headers.get("Authorization") for r in kapi}
    assert auth == {"Bearer secret-token-do-not-log"}


async def test_taint_nodes_is_off_by_default_and_taints_once_on(kapi, tmp_path: Path) -> None:
    """``--taint-nodes`` (reporter.taints): off, no Node request at all; on, the violated
    node gets MCO's taint (tests/reporter/test_taints.py covers the rest)."""
    kapi.resources[NODES] = kmock.ResourceInfo(kind="Node", namespaced=False)
    api = client.ApiClient(client.Configuration(host=str(kapi.url).rstrip("/")))
    async with api:
        await call(client.CoreV1Api(api).create_node, {"metadata": {"name": "a"}}, timeout=5)
    assert parse_settings(["--prometheus-url=http://x"]).taint is None
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(kapi.url).rstrip("/"))
    hot = quiet_values(PLAN)
    hot[(Kind.VIOLATED, "psi_io_some")] = 1.0
    async with fake_prometheus() as prom:
        prom.nodes = {"a": hot}
        assert await once(f"--prometheus-url={prom.url}", f"--kubeconfig={kubeconfig}") == 0
        assert [r.method.value for r in kapi if r.resource == NODES] == ["POST"]
        argv = (f"--prometheus-url={prom.url}", f"--kubeconfig={kubeconfig}", "--taint-nodes")
        # The only Node is all of the cluster: past the default --taint-max-share (0.5).
        assert await once(*argv) == 0
        assert "spec" not in kapi.objects[NODES, None, "a"].raw
        assert await once(*argv, "--taint-max-share=1") == 0
    taints = kapi.objects[NODES, None, "a"].raw["spec"]["taints"]
    assert taints == [TAINT]


async def test_once_fails_when_the_api_refuses(kapi, tmp_path: Path, capsys) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(kapi.url).rstrip("/"))
    kapi.fail("update", 403, times=10)
    async with fake_prometheus() as prom:
        prom.nodes = {"a": quiet_values(PLAN)}
        code = await once(f"--prometheus-url={prom.url}", f"--kubeconfig={kubeconfig}")
    assert code == 1
    assert "Kubernetes API write failed: forbidden" in capsys.readouterr().err


@pytest.mark.slow
async def test_service_mode_serves_metrics_over_tls_and_logs_no_secret(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file, ca_file = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    token = tmp_path / "token"
    token.write_text("prom-token-SECRET")
    out = tmp_path / "report.json"
    port = free_port()
    async with fake_prometheus() as prom:
        prom.nodes = {"a": quiet_values(PLAN), "b": quiet_values(PLAN)}
        log = tmp_path / "reporter.log"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reporter",
                f"--prometheus-url={prom.url}",
                f"--prometheus-bearer-token-file={token}",
                "--prometheus-header=X-Scope-OrgID: team-a",
                f"--output={out}",
                "--interval=200ms",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--web.tls-cert-file={cert_file}",
                f"--web.tls-key-file={key_file}",
                "--log.level=debug",
            ],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            text = ""
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                with contextlib.suppress(requests.RequestException):
                    text = await asyncio.to_thread(
                        lambda: (
                            requests.get(
                                f"https://127.0.0.1:{port}/metrics", verify=str(ca_file), timeout=2
                            ).text
                        )
                    )
                    if "mco_reporter_nodes 2.0" in text:
                        break
            for needed in (
                "mco_reporter_cycle_duration_seconds_bucket",
                "mco_reporter_nodes 2.0",
                "mco_reporter_stale_nodes 0.0",
                "mco_reporter_leader 1.0",
                'mco_reporter_errors_total{kind="source_unreachable"} 0.0',
                "mco_reporter_file_write_bytes_total",
                f"{series.REPORTER_LAST_SYNC} ",
                'mco_reporter_layout{layout="cluster"} 1.0',
            ):
                assert needed in text, needed
            await asyncio.sleep(0.8)
            text = await asyncio.to_thread(
                lambda: (
                    requests.get(
                        f"https://127.0.0.1:{port}/metrics", verify=str(ca_file), timeout=2
                    ).text
                )
            )
            match = re.search(r"^mco_reporter_queries_total (\S+)$", text, re.M)
            assert match is not None
            queries = float(match.group(1))
            assert queries >= 6 and queries % 3 == 0  # it keeps cycling, three queries a cycle
            with pytest.raises(requests.exceptions.SSLError):
                requests.get(f"https://127.0.0.1:{port}/metrics", timeout=2)  # not our CA
            prom.down = True
            await asyncio.sleep(1.0)
            text = await asyncio.to_thread(
                lambda: (
                    requests.get(
                        f"https://127.0.0.1:{port}/metrics", verify=str(ca_file), timeout=2
                    ).text
                )
            )
            assert 'mco_reporter_errors_total{kind="source_error"}' in text
            assert 'mco_reporter_errors_total{kind="source_error"} 0.0' not in text
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 10)
    assert proc.returncode == 0
    logged = log.read_text()
    assert "prom-token-SECRET" not in logged and "team-a" not in logged


async def test_a_new_rule_config_applies_its_limits_after_a_restart(tmp_path: Path) -> None:
    import yaml

    from rulegen.model import DetectionRuleConfig

    def config(io_max: float) -> str:
        obj = DetectionRuleConfig.default().to_object()
        obj["spec"]["hardConstraints"]["psiIOSomeMax"] = io_max
        return yaml.safe_dump(obj)

    rules = tmp_path / "rules.yaml"
    rules.write_text(config(0.7))
    out = tmp_path / "report.json"
    values = quiet_values(PLAN)
    values[(Kind.VIOLATED, "psi_io_some")] = 1.0
    values[(Kind.SIGNAL, "psiIOSome")] = 0.75
    async with fake_prometheus() as prom:
        prom.nodes = {"a": values}
        argv = [f"--prometheus-url={prom.url}", f"--output={out}", f"--rule-config={rules}"]
        assert await once(*argv) == 0
        (violation,) = json.loads(out.read_text())["status"]["nodes"]["a"]["violations"]
        assert violation == {"constraint": "psi_io_some", "value": 0.75, "limit": 0.7}
        # A restart under a new config: the entry read back from the file is rebuilt.
        rules.write_text(config(0.6))
        os.utime(rules, ns=(1, 10**18))
        assert await once(*argv) == 0
        (violation,) = json.loads(out.read_text())["status"]["nodes"]["a"]["violations"]
        assert violation["limit"] == 0.6


async def test_the_heartbeat_gauge_moves_only_when_the_report_was_written(
    kapi, api_client, tmp_path: Path
) -> None:
    """mco_reporter_last_sync_timestamp_seconds feeds MCOReportStale: a cycle whose query
    worked but whose write failed (or was skipped while backing off) must not move it, else
    the alert stays silent while every reader sees an old report."""
    from mco.promql import PromQLClient, SourceConfig
    from reporter.entries import Epsilon
    from reporter.filesink import FileSink
    from reporter.kubeapi import ReportApi
    from reporter.kubesink import KubeSink
    from reporter.layout import LayoutChooser
    from reporter.metrics import ReporterMetrics
    from reporter.ruleconfig import RuleConfigSource
    from reporter.sink import Sink

    def gauge(metrics: ReporterMetrics) -> float:
        value = metrics.registry.get_sample_value(series.REPORTER_LAST_SYNC)
        assert value is not None
        return value

    async with fake_prometheus() as prom, PromQLClient(SourceConfig(prom.url)) as source:
        prom.nodes = {"a": quiet_values(PLAN)}

        def reporter(sink: Sink) -> Reporter:
            return Reporter(
                source=source,
                rules=RuleConfigSource(),
                plan=PLAN,
                epsilon=Epsilon(),
                metrics=ReporterMetrics(),
                sink=sink,
            )

        sink = KubeSink(ReportApi(api_client), LayoutChooser("cluster"), backoff_base=60.0)
        kube = reporter(sink=sink)
        kapi.fail("update", 403, times=1)
        assert not (await kube.cycle(at=time.time())).ok
        assert gauge(kube.metrics) == 0  # the query worked; the write did not
        assert (await kube.cycle(at=time.time())).ok  # backing off: nothing is written
        assert gauge(kube.metrics) == 0
        sink.retry_at = 0.0
        at = time.time()
        assert (await kube.cycle(at=at)).ok
        assert gauge(kube.metrics) == at
        assert kapi.reports()["cluster"]["status"]["lastSyncTime"]

        blocked = tmp_path / "not-a-directory"
        blocked.write_text("")
        file = reporter(sink=FileSink(str(blocked / "report.json"), LayoutChooser("cluster")))
        assert not (await file.cycle(at=time.time())).ok
        assert gauge(file.metrics) == 0
        writable = reporter(sink=FileSink(str(tmp_path / "r.json"), LayoutChooser("cluster")))
        at = time.time()
        assert (await writable.cycle(at=at)).ok
        assert gauge(writable.metrics) == at


@pytest.mark.slow
def test_self_metrics_serve_the_web_config_file(tmp_path: Path) -> None:
    """TLS, client certificates, basic auth and headers from --web.config.file, on ':PORT'
    (IPv4 and IPv6); the PromQL source may be down, the server is up regardless."""
    web = secured_web(tmp_path)
    port = free_port()
    with Managed(
        [sys.executable, "-m", "reporter", "--prometheus-url=http://127.0.0.1:1",
         f"--output={tmp_path / 'report.json'}", f"--web.listen-address=:{port}",
         f"--web.config.file={web.config_file}"],
        name="mco-reporter",
        log_path=tmp_path / "reporter.log",
    ) as proc:  # fmt: skip
        wait_served(proc, port, "/metrics", web)
        for host in hosts():
            assert_secured(port, "/metrics", web, host=host)
        assert proc.alive


@pytest.mark.slow
def test_deprecated_tls_flags_still_serve_and_warn(tmp_path: Path) -> None:
    web = secured_web(tmp_path)  # its certificates, without the file
    cert, key = str(tmp_path / "server.crt"), str(tmp_path / "server.key")
    port = free_port()
    with Managed(
        [sys.executable, "-m", "reporter", "--prometheus-url=http://127.0.0.1:1",
         f"--output={tmp_path / 'report.json'}", f"--web.listen-address=127.0.0.1:{port}",
         f"--web.tls-cert-file={cert}", f"--web.tls-key-file={key}"],
        name="mco-reporter",
        log_path=tmp_path / "reporter.log",
    ) as proc:  # fmt: skip
        proc.wait_http(f"https://127.0.0.1:{port}/metrics", verify=web.ca_file)
    logged = proc.log_tail(100)
    for old in ("--web.tls-cert-file", "--web.tls-key-file"):
        assert logged.count(f"{old} is deprecated") == 1, logged


async def test_once_with_one_url_per_shard_merges_and_a_failed_shard_fails_the_run(
    tmp_path: Path, capsys
) -> None:
    out = tmp_path / "report.json"
    async with fake_prometheus() as a, fake_prometheus() as b:
        a.nodes = {"a1": quiet_values(PLAN)}
        b.nodes = {"b1": quiet_values(PLAN), "b2": quiet_values(PLAN)}
        urls = [f"--prometheus-url={a.url}", f"--prometheus-url={b.url}", f"--output={out}"]
        assert await once(*urls) == 0
        obj = json.loads(out.read_text())
        assert set(obj["status"]["nodes"]) == {"a1", "b1", "b2"}
        assert all(e["live"] for e in obj["status"]["nodes"].values())
        b.down = True
        assert await once(*urls) == 1
    err = capsys.readouterr().err
    assert "1 of 2 PromQL sources failed (source_error)" in err and b.url in err
    obj = json.loads(out.read_text())
    validate_object(obj)
    nodes = obj["status"]["nodes"]
    assert set(nodes) == {"a1", "b1", "b2"}  # b's nodes kept, not live: they age
    assert nodes["a1"]["live"] and not nodes["b1"].get("live") and not nodes["b2"].get("live")
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conditions["Synced"]["reason"] == "SourcePartiallyUnavailable"
    assert b.url in conditions["SourceReachable"]["message"]


def test_the_same_url_twice_is_refused(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_settings(
            ["--prometheus-url=http://p:9090/", "--prometheus-url=http://u@p:9090/", "--output=-"]
        )
    assert caught.value.code == 2
    assert "--prometheus-url given twice: http://p:9090/" in capsys.readouterr().err
