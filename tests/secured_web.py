"""A ``--web.config.file`` with TLS, client certificates, basic auth and a header, and the
checks every MCO server must pass with it, made with a real client (requests) over both
address families."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest
import requests
import trustme
import yaml

from scripts.procs import Managed

USER = "prometheus"
PASSWORD = "correct horse battery staple"


@dataclass(frozen=True)
class SecuredWeb:
    config_file: Path
    ca_file: str
    client: tuple[str, str]  # a certificate the server's client CA signed
    stranger: tuple[str, str]  # one it did not


def wait_served(proc: Managed, port: int, path: str, web: SecuredWeb) -> None:
    """Wait until ``proc`` answers ``path`` over HTTPS to a client that passes ``web``'s checks
    (the CA, a client certificate, basic auth)."""
    url = f"https://127.0.0.1:{port}{path}"
    proc.wait_http(url, verify=web.ca_file, cert=web.client, auth=(USER, PASSWORD))


def _write_pair(cert: trustme.LeafCert, directory: Path, name: str) -> tuple[str, str]:
    crt, key = directory / f"{name}.crt", directory / f"{name}.key"
    cert.cert_chain_pems[0].write_to_path(str(crt))
    cert.private_key_pem.write_to_path(str(key))
    return str(crt), str(key)


def secured_web(
    directory: Path, *, client_auth: str = "RequireAndVerifyClientCert", **extra: object
) -> SecuredWeb:
    """Certificates and a web config in ``directory``; its paths are relative to the file, as
    the exporter-toolkit format says."""
    ca, other = trustme.CA(), trustme.CA()
    _write_pair(ca.issue_cert("127.0.0.1", "::1", "localhost"), directory, "server")
    ca.cert_pem.write_to_path(str(directory / "ca.crt"))
    tls: dict[str, object] = {"cert_file": "server.crt", "key_file": "server.key"}
    if client_auth != "NoClientCert":
        tls.update(client_auth_type=client_auth, client_ca_file="ca.crt")
    doc = {
        "tls_server_config": tls,
        "basic_auth_users": {
            USER: bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
        },
        "http_server_config": {"headers": {"X-Frame-Options": "deny"}},
        **extra,
    }
    config = directory / "web-config.yml"
    config.write_text(yaml.safe_dump(doc))
    return SecuredWeb(
        config_file=config,
        ca_file=str(directory / "ca.crt"),
        client=_write_pair(ca.issue_cert("client@mco"), directory, "client"),
        stranger=_write_pair(other.issue_cert("stranger@mco"), directory, "stranger"),
    )


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def hosts() -> list[str]:
    """127.0.0.1, and ::1 where the machine has IPv6: a ':PORT' server answers both."""
    return ["127.0.0.1", "[::1]"] if ipv6_loopback() else ["127.0.0.1"]


def assert_secured(port: int, path: str, web: SecuredWeb, *, host: str = "127.0.0.1") -> None:
    """Right password 200; wrong or none 401 with a Basic challenge; the configured header on
    both; no client certificate, a stranger's, or plain HTTP: no answer at all."""
    url = f"https://{host}:{port}{path}"
    kw = {"verify": web.ca_file, "cert": web.client, "timeout": 10}
    ok = requests.get(url, auth=(USER, PASSWORD), **kw)  # type: ignore[arg-type]
    assert ok.status_code == 200, ok.text
    assert ok.headers["X-Frame-Options"] == "deny"
    for auth in ((USER, "wrong"), ("nobody", PASSWORD), None):
        denied = requests.get(url, auth=auth, **kw)  # type: ignore[arg-type]
        assert denied.status_code == 401, (auth, denied.status_code)
        assert denied.headers["WWW-Authenticate"] == "Basic"
        assert denied.headers["X-Frame-Options"] == "deny"
    for cert in (None, web.stranger):
        with pytest.raises(requests.exceptions.ConnectionError):  # SSLError is one
            requests.get(url, auth=(USER, PASSWORD), verify=web.ca_file, cert=cert, timeout=10)
    with pytest.raises(requests.exceptions.ConnectionError):
        # No plain HTTP on the TLS port: the server drops the connection, no 200, no 401.
        requests.get(f"http://{host}:{port}{path}", auth=(USER, PASSWORD), timeout=10)
