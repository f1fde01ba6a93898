"""mco-exporter's flags: version, collector switches, bad flags, TLS and client certificates."""

from __future__ import annotations

import socket
import ssl
import subprocess
import warnings
from pathlib import Path

import pytest
import requests
import trustme

from scripts.procs import Managed, free_port
from tests.exporter.conftest import FILE_COLLECTORS, FIXTURES, samples_of
from tests.exporter.test_real_host import EXPORTER, start_exporter
from tests.secured_web import PASSWORD, USER, assert_secured, hosts, secured_web, wait_served


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EXPORTER, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("mco-exporter ")


def test_help_lists_every_collector_flag() -> None:
    out = run("--help").stdout
    for name in (
        "pressure",
        "meminfo",
        "vmstat",
        "perf_llc",
        "resctrl",
        "biolatency",
        "diskstats",
        "cpu",
        "schedstat",
        "softirqs",
        "kata",
    ):
        assert f"--collector.{name}" in out and f"--no-collector.{name}" in out


def test_bad_listen_address_is_a_clear_error() -> None:
    result = run("--web.listen-address", "nonsense")
    assert result.returncode == 2
    assert result.stderr.startswith("mco-exporter: error: listen address must be [host]:port")
    assert result.stderr.count("\n") == 1


def test_key_without_cert_is_refused(tmp_path: Path) -> None:
    result = run("--web.tls-key-file", str(tmp_path / "k"))
    assert result.returncode == 2
    assert "both a certificate and a key" in result.stderr


def test_a_bad_web_config_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: x.crt\n  key_file: x.key\n  bogus: 1\n")
    result = run(f"--web.config.file={config}")
    assert result.returncode == 2
    assert result.stderr == (
        f"mco-exporter: error: {config}: unknown key 'bogus' in tls_server_config\n"
    )


def test_port_in_use_exits_non_zero() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = run(f"--web.listen-address=127.0.0.1:{port}", "--no-collector.biolatency")
    assert result.returncode == 1
    assert "cannot serve" in result.stderr


@pytest.mark.slow
def test_collector_switches_and_recorded_tree(tmp_path: Path) -> None:
    tree = FIXTURES / "linux-6.1-metal"
    proc, url = start_exporter(
        tmp_path,
        f"--path.procfs={tree / 'proc'}",
        f"--path.sysfs={tree / 'sys'}",
        f"--path.rootfs={tree}",
        "--no-collector.perf_llc",
        "--no-collector.biolatency",
        "--no-collector.vmstat",
        "--collector.diskstats.device-exclude=^nvme",
        "--node-name=worker-7",
        "--log.format=json",
    )
    try:
        samples = samples_of(requests.get(url, timeout=10).text)
    finally:
        proc.stop()
    collectors = {
        dict(labels)["collector"]
        for (n, labels) in samples
        if n == "mco_exporter_collector_success"
    }
    assert collectors == set(FILE_COLLECTORS) - {"vmstat"} | {"cgroup"}  # cgroup: on by default
    assert not any(n == "mco_vmstat_pgscan_total" for n, _ in samples)
    devices = {
        dict(labels)["device"] for (n, labels) in samples if n == "mco_block_io_completed_total"
    }
    assert devices == {"sda"}
    assert (
        samples[
            ("mco_node_info", frozenset({("nodename", "worker-7"), ("kernel", "6.1.0-57-amd64")}))
        ]
        == 1
    )
    assert samples[("mco_runqueue_wait_seconds_total", frozenset())] == 7
    assert '"msg": "serving metrics"' in proc.log_path.read_text()


@pytest.mark.slow
def test_web_config_file_tls_basic_auth_and_client_certificates(tmp_path: Path) -> None:
    """The exporter-toolkit web config, on ':PORT': every check over IPv4 and IPv6."""
    web = secured_web(tmp_path)
    port = free_port()
    proc = Managed(
        [*EXPORTER, f"--web.listen-address=:{port}", "--no-collector.biolatency",
         f"--web.config.file={web.config_file}"],
        name="mco-exporter",
        log_path=tmp_path / "exporter.log",
    )  # fmt: skip
    with proc:
        wait_served(proc, port, "/metrics", web)
        for host in hosts():
            assert_secured(port, "/metrics", web, host=host)
        ok = requests.get(f"https://127.0.0.1:{port}/metrics", auth=(USER, PASSWORD),
                          verify=web.ca_file, cert=web.client, timeout=10)  # fmt: skip
        assert "mco_node_info" in ok.text
        assert proc.alive
    assert "deprecated" not in proc.log_path.read_text()


@pytest.mark.slow
def test_deprecated_tls_flags_still_work_and_warn(tmp_path: Path) -> None:
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1")
    cert, key, ca_file = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt"
    server_cert.cert_chain_pems[0].write_to_path(str(cert))
    server_cert.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_file))
    client = ca.issue_cert("prometheus")
    client_pem = tmp_path / "client.pem"
    client.private_key_and_cert_chain_pem.write_to_path(str(client_pem))

    port = free_port()
    proc = Managed(
        [
            *EXPORTER,
            f"--web.listen-address=127.0.0.1:{port}",
            "--no-collector.biolatency",
            f"--web.tls-cert-file={cert}",
            f"--web.tls-key-file={key}",
            f"--web.tls-client-ca-file={ca_file}",
        ],
        name="mco-exporter",
        log_path=tmp_path / "exporter.log",
    )
    url = f"https://127.0.0.1:{port}/metrics"
    with proc:
        proc.wait_http(url, timeout=30, verify=str(ca_file), cert=str(client_pem))
        ok = requests.get(url, verify=str(ca_file), cert=str(client_pem), timeout=10)
        assert ok.status_code == 200 and "mco_node_info" in ok.text
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(url, verify=str(ca_file), timeout=10)  # no client certificate
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10)  # plain HTTP refused
        ctx = ssl.create_default_context(cafile=str(ca_file))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.maximum_version = ssl.TLSVersion.TLSv1_1  # below the server's TLS 1.2 floor
        with (
            pytest.raises((ssl.SSLError, OSError)),
            socket.create_connection(("127.0.0.1", port)) as raw,
        ):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")


@pytest.mark.slow
def test_no_host_serves_ipv4_and_ipv6(tmp_path: Path) -> None:
    """`:PORT` listens on every interface of both families (IPv6-only clusters exist)."""
    if not socket.has_ipv6 or not Path("/proc/net/if_inet6").exists():
        pytest.skip("this kernel has IPv6 disabled; the IPv4 fallback is what runs")
    port = free_port()
    proc = Managed(
        [*EXPORTER, f"--web.listen-address=:{port}", "--no-collector.biolatency"],
        name="mco-exporter",
        log_path=tmp_path / "exporter.log",
    )
    with proc:
        proc.wait_http(f"http://127.0.0.1:{port}/metrics", timeout=30)
        assert "mco_node_info" in requests.get(f"http://[::1]:{port}/metrics", timeout=10).text


def test_the_exporter_does_not_load_the_event_loop_stack() -> None:
    """The exporter runs on every node and serves with prometheus_client's threaded server:
    importing aiohttp (through the shared web configuration) once cost it 13 MiB of RSS."""
    code = (
        "import sys, exporter.cli\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'aiohttp', 'asyncio',"
        " 'kubernetes_asyncio', 'jinja2', 'msgspec'})\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([EXPORTER[0], "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
