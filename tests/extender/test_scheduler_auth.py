"""What a scheduler may call apart from what a scraper may read (issue 27 item 5): anyone who
reached the port could create reservations (25 allocate calls left no node a latency-sensitive
pod could pass), and Prometheus must reach /metrics on the same port. With
``--scheduler-auth=client-cert`` the scheduler routes need a verified client certificate (what
kube-scheduler's ``tlsConfig`` sends), the other routes do not; a real TLS server, real clients."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import requests
import yaml

from extender.app import make_app
from extender.cli import parse_settings
from extender.config import ExtenderConfig
from mco import webserver
from mco.webconfig import WebSettings
from scripts.procs import free_port
from testkit import bodies
from tests.extender.conftest import cluster_report, entry, write_reports
from tests.secured_web import PASSWORD, USER, secured_web

ALLOCATE = "/volcano/allocate"


@pytest.mark.parametrize("client_auth", ["VerifyClientCertIfGiven", "RequireAndVerifyClientCert"])
async def test_scheduler_routes_need_a_client_certificate_and_metrics_do_not(
    tmp_path: Path, client_auth: str
) -> None:
    report = tmp_path / "report.json"
    write_reports(report, [cluster_report({"a": entry(0.1)}, heartbeat=time.time())])
    web = secured_web(tmp_path, client_auth=client_auth)
    settings = parse_settings([
        f"--report-file={report}", f"--web.config.file={web.config_file}",
        "--scheduler-auth=client-cert",
    ])  # fmt: skip
    assert settings.config.scheduler_auth == "client-cert"
    port = free_port()
    runner = await webserver.start(
        make_app(settings.config), WebSettings("127.0.0.1", port, settings.web.config)
    )
    url = f"https://127.0.0.1:{port}"
    auth = (USER, PASSWORD)
    routes = {
        "/scheduler/filter": bodies.kube_args(["a"]),
        "/volcano/predicate": bodies.volcano_predicate("a", tasks=1),
        ALLOCATE: b"{}",
        "/volcano/onSessionOpen": b"{}",
    }

    def call(path: str, cert: tuple[str, str] | None) -> requests.Response:
        kw = {"verify": web.ca_file, "cert": cert, "auth": auth, "timeout": 10}
        if path in routes:
            return requests.post(url + path, data=routes[path], **kw)  # type: ignore[arg-type]
        return requests.get(url + path, **kw)  # type: ignore[arg-type]

    def check() -> None:
        for path in routes:
            assert call(path, web.client).status_code in (200, 400), path  # {}: a bad task
        if client_auth == "VerifyClientCertIfGiven":
            for path in routes:
                denied = call(path, None)
                assert denied.status_code == 403, (path, denied.status_code)
                assert "client certificate" in denied.json()["error"]
            for path in ("/metrics", "/healthz", "/readyz", "/v1/nodes"):
                assert call(path, None).status_code == 200, path  # a scraper, a probe
        with pytest.raises(requests.exceptions.ConnectionError):
            call(ALLOCATE, web.stranger)  # a certificate the CA did not sign: no handshake

    try:
        await asyncio.get_running_loop().run_in_executor(None, check)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    "tls",
    [
        None,  # no TLS at all
        {"cert_file": "server.crt", "key_file": "server.key"},  # no client CA
    ],
)
def test_client_cert_auth_without_a_client_ca_is_refused_at_start(tmp_path: Path, tls) -> None:
    secured_web(tmp_path, client_auth="NoClientCert")
    doc = {"tls_server_config": tls} if tls else {}
    config = tmp_path / "plain.yml"
    config.write_text(yaml.safe_dump(doc))
    with pytest.raises(SystemExit) as exited:
        parse_settings([f"--web.config.file={config}", "--scheduler-auth=client-cert"])
    assert exited.value.code == 2


def test_the_default_leaves_the_routes_as_they_were() -> None:
    assert parse_settings([]).config.scheduler_auth == "none"
    assert ExtenderConfig().scheduler_auth == "none"
