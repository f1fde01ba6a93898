"""``mco-extender`` as users run it: print-config, flags, TLS with client certificates, workers."""

from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
import trustme
import yaml

from extender import print_config
from extender.cli import build_parser, main, parse_settings
from scripts.procs import Managed, free_port, wait_until
from testkit import bodies
from tests.extender.conftest import cluster_report, entry, metric, write_reports
from tests.extender.kube_scheduler_v1 import problems
from tests.secured_web import PASSWORD, USER, assert_secured, hosts, secured_web, wait_served


def printed(*argv: str) -> tuple[str, Any]:
    out = io.StringIO()
    assert print_config.main(list(argv), out) == 0
    text = out.getvalue()
    return text, yaml.safe_load(text)


def test_print_config_volcano_tier():
    text, tier = printed("--volcano", "--url", "http://mco-extender.mco.svc:9848/")
    assert text.startswith("# mco-extender for Volcano")
    assert tier == [
        {
            "plugins": [
                {
                    "name": "extender",
                    "arguments": {
                        "extender.urlPrefix": "http://mco-extender.mco.svc:9848/volcano",
                        "extender.httpTimeout": "4s",  # print_config.VOLCANO_HTTP_TIMEOUT
                        "extender.ignorable": True,
                        "extender.predicateVerb": "predicate",
                        "extender.prioritizeVerb": "prioritize",
                        "extender.allocateFuncVerb": "allocate",
                        "extender.deallocateFuncVerb": "deallocate",
                    },
                }
            ]
        }
    ]
    # It drops into a volcano-scheduler.conf as one more tier.
    conf = yaml.safe_load(
        "actions: enqueue, allocate, backfill\ntiers:\n- plugins:\n  - name: gang\n"
    )
    conf["tiers"] += tier
    reparsed = yaml.safe_load(yaml.safe_dump(conf))
    args = reparsed["tiers"][-1]["plugins"][0]["arguments"]
    assert all(
        isinstance(v, str) for k, v in args.items() if k.endswith("Verb")
    )  # Go asserts string


def test_print_config_kube_scheduler():
    _, doc = printed("--kube-scheduler", "--weight", "3", "--http-timeout", "2000ms")
    assert doc["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert doc["kind"] == "KubeSchedulerConfiguration"
    assert doc["extenders"] == [
        {
            "urlPrefix": "http://mco-extender.mco-system.svc:9848/scheduler",
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "weight": 3,
            "nodeCacheCapable": True,
            "ignorable": True,
            "httpTimeout": "2s",
        }
    ]


@pytest.mark.parametrize(
    ("argv", "name", "elect", "namespace"),
    [
        ([], "mco-kube-scheduler", False, "kube-system"),
        (["--scheduler-name", "batch.example.com", "--leader-elect", "--lease-namespace", "s"],
         "batch.example.com", True, "s"),
    ],
)  # fmt: skip
def test_print_config_kube_scheduler_runs_as_a_second_scheduler(argv, name, elect, namespace):
    """Issue 26: without a profile the file is `default-scheduler`, and with the default Lease
    kube-system/kube-scheduler a second scheduler waits for the cluster scheduler's lease
    forever. The printed file names its own profile and Lease, and is strictly valid v1."""
    _, doc = printed("--kube-scheduler", *argv)
    assert problems(doc) == []
    assert doc["profiles"] == [{"schedulerName": name}]
    assert doc["leaderElection"] == {
        "leaderElect": elect,
        "resourceName": name,
        "resourceNamespace": namespace,
    }


def test_the_v1_checks_catch_what_issue_26_found():
    """The checker the tests rely on refuses the shape main printed before (no profile, the
    default Lease) and a misspelt field, as kube-scheduler's strict decoding does."""
    old = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "extenders": [{"urlPrefix": "http://e/scheduler", "prioritizeVerb": "p", "weight": 1}],
    }
    found = problems(old)
    assert any("Lease" in p for p in found) and any("schedulerName" in p for p in found)
    _, doc = printed("--kube-scheduler")
    doc["extenders"][0]["nodeCacheable"] = True
    assert problems(doc) == [".extenders[0].nodeCacheable: unknown field"]


def test_print_config_https_names_a_ca_and_a_client_certificate():
    _, doc = printed("--kube-scheduler", "--url", "https://ext:9848", "--ca-file", "/ca.crt",
                     "--client-cert-file", "/c.crt", "--client-key-file", "/c.key")  # fmt: skip
    extender = doc["extenders"][0]
    assert extender["enableHTTPS"] is True
    assert extender["tlsConfig"] == {"caFile": "/ca.crt", "certFile": "/c.crt", "keyFile": "/c.key"}
    _, doc = printed("--kube-scheduler", "--url", "https://ext:9848")
    assert doc["extenders"][0]["tlsConfig"]["caFile"]  # never an unverified server
    text, _ = printed("--volcano", "--url", "https://ext:9848")
    assert "no client certificate" in text


@pytest.mark.parametrize(
    "argv",
    [[], ["--volcano", "--kube-scheduler"], ["--volcano", "--url", "ftp://x"],
     ["--kube-scheduler", "--weight", "0"], ["--kube-scheduler", "--scheduler-name", "A"],
     ["--kube-scheduler", "--scheduler-name", ""],
     ["--kube-scheduler", "--lease-namespace", "a.b"]],
)  # fmt: skip
def test_print_config_rejects_bad_flags(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        print_config.main(argv)
    assert exc.value.code == 2


def test_print_config_through_main(capsys):
    assert main(["print-config", "--volcano"]) == 0
    assert "extender.predicateVerb" in capsys.readouterr().out


def test_flags_become_the_config():
    settings = parse_settings(
        [
            "--stale-after",
            "45s",
            "--neutral-score",
            "40",
            "--fail-closed",
            "--kata-runtime-class",
            "kata-*",
            "--kata-runtime-class",
            "secure-*",
            "--reject-code",
            "2",
            "--volcano-weight",
            "2",
            "--max-body-size",
            "128MiB",
            "--max-body-memory",
            "256MiB",
            "--report-file",
            "r.json",
            "--report-poll-interval",
            "250ms",
            "--reservation-span",
            "20s",
            "--volcano-placements",
            "verbs",
            "--watch-pods",
        ]
    )
    config = settings.config
    v = config.verdict
    assert (v.stale_after, v.neutral_score, v.fail_closed) == (45.0, 40.0, True)
    assert v.kata_globs == ("kata-*", "secure-*") and v.reject_code == 2 and v.volcano_weight == 2.0
    assert config.max_body_bytes == 128 << 20 and config.max_body_memory == 256 << 20
    assert config.source.report_file == "r.json" and config.source.poll_interval == 0.25
    r = config.reservation
    assert (r.span, r.volcano_placements, r.watch_pods) == (20.0, "verbs", True)
    assert parse_settings([]).config.verdict.kata_globs == ("kata-*",)
    r = parse_settings([]).config.reservation
    assert (r.span, r.volcano_placements, r.watch_pods) == (15.0, "auto", False)


@pytest.mark.parametrize(
    "argv",
    [
        ["--listen", "nope"],
        ["--listen", ":99999"],
        ["--tls-cert", "c.pem"],
        ["--client-ca", "ca.pem"],
        ["--neutral-score", "150"],
        ["--stale-after", "0s"],
        ["--workers", "0"],
        ["--max-body-size", "0"],
        ["--max-body-memory", "1MiB"],  # less than one body of the largest size
        ["--reservation-span", "-1s"],
        ["--volcano-placements", "sometimes"],
        ["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"],
    ],
)
def test_bad_flags_exit_2_with_a_message(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("mco-extender: error: ") and err.count("\n") == 1, err


@pytest.mark.parametrize("value", ["5x", "", "-1s"])
def test_bad_durations_are_argparse_errors(value):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--stale-after", value])


# --- real processes ------------------------------------------------------------------------


@pytest.fixture
def report(tmp_path: Path) -> Path:
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report({"n1": entry(0.3), "n2": entry(0.0)}, "cluster")])
    return path


def extender(tmp_path: Path, port: int, *args: str) -> Managed:
    return Managed(
        [sys.executable, "-m", "extender", f"--web.listen-address=127.0.0.1:{port}", *args],
        name="mco-extender",
        log_path=tmp_path / "extender.log",
    )


@pytest.mark.slow
def test_web_config_file_tls_basic_auth_and_client_certificates(tmp_path, report):
    """The exporter-toolkit web config on ':PORT' (both address families): every route,
    health included, needs the client certificate and the password."""
    web = secured_web(tmp_path)
    port = free_port()
    with Managed(
        [sys.executable, "-m", "extender", "serve", f"--web.listen-address=:{port}",
         f"--report-file={report}", f"--web.config.file={web.config_file}"],
        name="mco-extender",
        log_path=tmp_path / "extender.log",
    ) as proc:  # fmt: skip
        wait_served(proc, port, "/readyz", web)
        for host in hosts():
            assert_secured(port, "/healthz", web, host=host)
        url = f"https://127.0.0.1:{port}/volcano/predicate"
        body = bodies.volcano_predicate("n1")
        unauthorized = requests.post(
            url, data=body, verify=web.ca_file, cert=web.client, timeout=10
        )
        assert unauthorized.status_code == 401
        answer = requests.post(url, data=body, auth=(USER, PASSWORD), verify=web.ca_file,
                               cert=web.client, timeout=10)  # fmt: skip
        assert answer.json() == {"status": "", "code": 0}
        assert proc.alive
    assert PASSWORD not in proc.log_tail(200)


@pytest.mark.slow
def test_deprecated_tls_flags_still_serve_with_client_certificates(tmp_path, report):
    ca, other_ca = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    server.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    for name, authority in (("client", ca), ("stranger", other_ca)):
        cert = authority.issue_cert(f"{name}@scheduler")
        cert.cert_chain_pems[0].write_to_path(str(tmp_path / f"{name}.crt"))
        cert.private_key_pem.write_to_path(str(tmp_path / f"{name}.key"))
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    ca_file = str(tmp_path / "ca.crt")
    client = (str(tmp_path / "client.crt"), str(tmp_path / "client.key"))
    tls = [f"--tls-cert={tmp_path / 'tls.crt'}", f"--tls-key={tmp_path / 'tls.key'}"]
    with Managed(
        [sys.executable, "-m", "extender", f"--listen=127.0.0.1:{port}", f"--report-file={report}",
         *tls, f"--client-ca={ca_file}"],
        name="mco-extender",
        log_path=tmp_path / "extender.log",
    ) as proc:  # fmt: skip
        proc.wait_http(f"{url}/readyz", verify=ca_file, cert=client)
        answer = requests.post(f"{url}/volcano/predicate", data=bodies.volcano_predicate("n1"),
                               verify=ca_file, cert=client, timeout=10)  # fmt: skip
        assert answer.status_code == 200 and answer.json() == {"status": "", "code": 0}
        stranger = (str(tmp_path / "stranger.crt"), str(tmp_path / "stranger.key"))
        for wrong in (None, stranger):
            with pytest.raises(requests.exceptions.ConnectionError):  # SSLError is one
                requests.get(f"{url}/healthz", verify=ca_file, cert=wrong, timeout=10)
        with pytest.raises(requests.exceptions.SSLError):  # the server's cert is checked too
            requests.get(f"{url}/healthz", verify=True, cert=client, timeout=10)
        with pytest.raises(requests.exceptions.ConnectionError):  # no plain HTTP on that port
            requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
        assert proc.alive
    logged = proc.log_tail(200)
    assert "not-a-secret" not in logged
    for old in ("--listen", "--tls-cert", "--tls-key", "--client-ca"):
        assert logged.count(f"{old} is deprecated") == 1, logged


@pytest.mark.slow
def test_tls_without_client_ca_serves_any_client(tmp_path, report):
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    server.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    server.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    port = free_port()
    with extender(tmp_path, port, f"--report-file={report}", f"--tls-cert={tmp_path / 'tls.crt'}",
                  f"--tls-key={tmp_path / 'tls.key'}") as proc:  # fmt: skip
        proc.wait_http(f"https://127.0.0.1:{port}/readyz", verify=str(tmp_path / "ca.crt"))


def _children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid``."""
    found = []
    for entry_ in os.listdir("/proc"):
        if entry_.isdigit():
            try:
                fields = Path(f"/proc/{entry_}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry_))
    return found


@pytest.mark.slow
def test_workers_share_one_port_and_their_metrics(tmp_path, report):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = Managed(  # the deprecated --listen: warned about once, not once per worker
        [sys.executable, "-m", "extender", f"--listen=127.0.0.1:{port}",
         f"--report-file={report}", "--workers=2"],
        name="mco-extender",
        log_path=tmp_path / "extender.log",
    )  # fmt: skip
    with proc:
        proc.wait_http(f"{url}/readyz", timeout=60)
        wait_until(lambda: len(_children(proc.pid)) == 2, timeout=30, what="two workers")
        # Each worker loads the report on its own; /readyz answers for the one it reached.
        # 20 ready answers in a row over new connections: both workers (2**-20 to miss one).
        streak = 0

        def both_ready() -> bool:
            nonlocal streak
            ok = requests.get(f"{url}/readyz", timeout=10, headers={"Connection": "close"}).ok
            streak = streak + 1 if ok else 0
            return streak >= 20

        wait_until(both_ready, timeout=30, interval=0.01, what="both workers ready")
        body = bodies.kube_args(["n1", "n2"])
        for _ in range(40):  # a new connection each time: the kernel spreads them
            answer = requests.post(f"{url}/scheduler/prioritize", data=body, timeout=10,
                                   headers={"Connection": "close"})  # fmt: skip
            assert answer.json() == [{"Host": "n1", "Score": 7}, {"Host": "n2", "Score": 10}]
        text = requests.get(f"{url}/metrics", timeout=10).text
        route = "scheduler_prioritize"
        assert metric(text, "mco_extender_requests_total", code="200", route=route) == 40, text
        assert (
            metric(text, "mco_extender_verdicts_total", reason="ok", route=route, verdict="pass")
            == 80
        )
        workers = _children(proc.pid)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.proc is not None and proc.proc.wait(20) == 0
    assert len(workers) == 2
    assert proc.log_tail(500).count("--listen is deprecated") == 1
    for pid in workers:  # the workers went with the parent
        assert not Path(f"/proc/{pid}").exists()


@pytest.mark.slow
def test_the_server_keeps_serving_after_bad_input(tmp_path, report):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with extender(tmp_path, port, f"--report-file={report}") as proc:
        proc.wait_http(f"{url}/readyz")
        for junk in (b"", b"{", b"\x00" * 1000, b'{"node":' * 5000):
            assert (
                requests.post(f"{url}/volcano/predicate", data=junk, timeout=10).status_code == 400
            )
        answer = requests.post(
            f"{url}/volcano/predicate", data=bodies.volcano_predicate("n2"), timeout=10
        )
        assert answer.json() == {"status": "", "code": 0}
        nodes = requests.get(f"{url}/v1/nodes", timeout=10).json()
        assert [n["name"] for n in nodes["nodes"]] == ["n1", "n2"]
        assert proc.alive
    assert all("level=" in line for line in proc.log_tail(50).splitlines() if line.strip())


def test_no_credentials_and_no_report_file_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config, not in a cluster
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    port = free_port()
    argv = [f"--web.listen-address=127.0.0.1:{port}", f"--kubeconfig={tmp_path / 'missing'}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    # One line: no "serving" line before it, for a server that never served.
    assert err.startswith("mco-extender: error: no Kubernetes credentials"), err
    assert err.count("\n") == 1, err


def test_a_pod_watch_without_credentials_says_so(tmp_path, capsys, monkeypatch, report):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    port = free_port()
    argv = [
        f"--web.listen-address=127.0.0.1:{port}",
        f"--report-file={report}",
        "--watch-pods",
        f"--kubeconfig={tmp_path / 'missing'}",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error: no Kubernetes credentials for the pod watch of --watch-pods" in err, err
