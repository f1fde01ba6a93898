"""The scheduler routes on a port of their own (issue 27 item 5): anyone who reached the one port
could create reservations, and Prometheus must reach /metrics there, so a NetworkPolicy could
not keep anyone out. With ``--web.scheduler-listen-address`` the scheduler routes answer only on
their port and the rest only on the main one; a real extender process, real clients."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import requests

from extender.cli import parse_settings
from scripts.procs import Managed, free_port
from testkit import bodies
from tests.extender.conftest import cluster_report, entry, write_reports
from tests.secured_web import PASSWORD, USER, hosts, secured_web, wait_served

SCHEDULER_ROUTES = {
    "/scheduler/filter": bodies.kube_args(["a"]),
    "/scheduler/prioritize": bodies.kube_args(["a"]),
    "/volcano/predicate": bodies.volcano_predicate("a", tasks=1),
    "/volcano/allocate": b"{}",
    "/volcano/onSessionOpen": b"{}",
}
READ_ROUTES = ("/metrics", "/healthz", "/readyz", "/v1/nodes", "/v1/decisions")


def _report(tmp_path: Path) -> Path:
    report = tmp_path / "report.json"
    write_reports(report, [cluster_report({"a": entry(0.1)}, heartbeat=time.time())])
    return report


def _call(base: str, path: str, **kw: object) -> requests.Response:
    if path in SCHEDULER_ROUTES:
        return requests.post(base + path, data=SCHEDULER_ROUTES[path], timeout=10, **kw)  # type: ignore[arg-type]
    return requests.get(base + path, timeout=10, **kw)  # type: ignore[arg-type]


def _assert_split(main: str, sched: str, **kw: object) -> None:
    for path in SCHEDULER_ROUTES:
        assert _call(sched, path, **kw).status_code in (200, 400), path  # {}: a bad task
        assert _call(main, path, **kw).status_code == 404, path
    for path in READ_ROUTES:
        answer = _call(main, path, **kw).status_code
        assert answer == (400 if path == "/v1/decisions" else 200), path  # it needs ?pod=
        assert _call(sched, path, **kw).status_code == 404, path


@pytest.mark.slow
def test_scheduler_routes_answer_only_on_their_own_port(tmp_path: Path) -> None:
    port, sched_port = free_port(), free_port()
    with Managed(
        [sys.executable, "-m", "extender", f"--web.listen-address=127.0.0.1:{port}",
         f"--web.scheduler-listen-address=127.0.0.1:{sched_port}",
         f"--report-file={_report(tmp_path)}"],
        name="mco-extender",
        log_path=tmp_path / "extender.log",
    ) as proc:  # fmt: skip
        proc.wait_http(f"http://127.0.0.1:{port}/readyz")
        _assert_split(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{sched_port}")
        allocate = requests.post(
            f"http://127.0.0.1:{port}/volcano/allocate",
            data=bodies.volcano_predicate("a", tasks=1),
            timeout=10,
        )
        assert allocate.status_code == 404
        assert proc.alive


@pytest.mark.slow
def test_the_scheduler_port_has_the_same_tls_basic_auth_and_client_certificates(
    tmp_path: Path,
) -> None:
    """``:PORT`` on both (every interface, both address families), one web config for both:
    no certificate or no password gets nothing on the scheduler port either."""
    web = secured_web(tmp_path, client_auth="VerifyClientCertIfGiven")
    port, sched_port = free_port(), free_port()
    with Managed(
        [sys.executable, "-m", "extender", f"--web.listen-address=:{port}",
         f"--web.scheduler-listen-address=:{sched_port}", "--scheduler-auth=client-cert",
         f"--report-file={_report(tmp_path)}", f"--web.config.file={web.config_file}"],
        name="mco-extender",
        log_path=tmp_path / "extender.log",
    ) as proc:  # fmt: skip
        wait_served(proc, port, "/readyz", web)
        kw = {"verify": web.ca_file, "cert": web.client, "auth": (USER, PASSWORD)}
        for host in hosts():
            _assert_split(f"https://{host}:{port}", f"https://{host}:{sched_port}", **kw)
        sched = f"https://127.0.0.1:{sched_port}/scheduler/filter"
        body = SCHEDULER_ROUTES["/scheduler/filter"]
        no_password = requests.post(
            sched, data=body, verify=web.ca_file, cert=web.client, timeout=10
        )
        assert no_password.status_code == 401
        no_cert = requests.post(
            sched, data=body, verify=web.ca_file, auth=(USER, PASSWORD), timeout=10
        )
        assert no_cert.status_code == 403  # --scheduler-auth=client-cert holds there too
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.post(sched, data=body, verify=web.ca_file, cert=web.stranger, timeout=10)
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.post(f"http://127.0.0.1:{sched_port}/scheduler/filter", data=body, timeout=10)
        assert proc.alive


@pytest.mark.parametrize(
    "flags",
    [
        ["--web.listen-address=:9000", "--web.scheduler-listen-address=:9000"],
        ["--web.scheduler-listen-address=:0"],
        ["--web.scheduler-listen-address=nonsense"],
    ],
)
def test_a_scheduler_address_that_cannot_be_split_is_refused(flags: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_settings(flags)
    assert exited.value.code == 2


def test_without_the_flag_every_route_stays_on_the_one_port() -> None:
    assert parse_settings([]).config.scheduler_port is None
    assert parse_settings(["--web.scheduler-listen-address=:8443"]).config.scheduler_port == 8443
