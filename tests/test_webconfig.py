"""``mco.webconfig``: the exporter-toolkit web configuration file, validated as the toolkit
validates it, and served (TLS, basic auth, headers, both address families) by a real aiohttp
server to a real aiohttp client."""

from __future__ import annotations

import asyncio
import base64
import ssl
import threading
import time
from pathlib import Path

import aiohttp
import bcrypt
import pytest
import trustme
import yaml
from aiohttp import web

from mco import webconfig, webserver
from mco.webconfig import BasicAuth, WebConfigError, WebSettings
from scripts.procs import free_port
from tests.secured_web import PASSWORD, USER, hosts, secured_web


def write(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_paths_are_relative_to_the_file_and_the_context_is_built(tmp_path: Path) -> None:
    web = secured_web(tmp_path)
    config = webconfig.load(str(web.config_file))
    assert config.tls is not None
    assert config.tls.cert_file == str(tmp_path / "server.crt")
    assert config.tls.client_ca_file == str(tmp_path / "ca.crt")
    assert config.ssl_context is not None
    assert config.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert config.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert config.scheme == "https" and config.auth is not None
    assert config.headers == {"X-Frame-Options": "deny"}


def test_without_tls_server_config_it_is_plain_http_with_auth(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    config = webconfig.load(write(tmp_path, {"basic_auth_users": {"u": hashed}}))
    assert config.ssl_context is None and config.scheme == "http"
    assert config.auth is not None and not config.plain
    assert webconfig.load(write(tmp_path, {})).plain
    assert webconfig.load(write(tmp_path, {"tls_server_config": {}})).ssl_context is None


@pytest.mark.parametrize(
    "tls,reason",
    [({"key_file": None}, "tls_server_config.key_file is missing"),
     ({"client_ca_file": "ca.crt", "client_auth_type": "NoClientCert"},
      "client_ca_file is set but client_auth_type is NoClientCert"),
     ({"client_auth_type": "RequireAndVerifyClientCert"}, "needs client_ca_file"),
     ({"client_auth_type": "RequireAnyClientCert", "client_ca_file": "ca.crt"},
      "accepts unverified client certificates"),
     ({"client_auth_type": "Whatever"}, "client_auth_type must be one of"),
     ({"min_version": "TLS11"}, "min_version must be one of TLS12, TLS13"),
     ({"min_version": "TLS13", "max_version": "TLS12"}, "min_version is above max_version"),
     ({"cipher_suites": ["TLS_AES_128_GCM_SHA256"]}, "cipher_suites is not supported"),
     ({"key_file": "ca.crt"}, "cannot load cert_file")],
)  # fmt: skip
def test_bad_tls_server_configs_name_the_problem(tmp_path: Path, tls, reason) -> None:
    secured_web(tmp_path)  # the certificate files
    doc = {
        k: v for k, v in {"cert_file": "server.crt", "key_file": "server.key", **tls}.items() if v
    }
    path = write(tmp_path, {"tls_server_config": doc})
    with pytest.raises(WebConfigError) as exc:
        webconfig.load(path)
    assert str(exc.value).startswith(f"{path}: ") and reason in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "doc,reason",
    [({"tls_config": {}}, "unknown key 'tls_config' in the file"),
     ({"http_server_config": {"headers": {"X-Custom": "1"}}}, "'X-Custom' can not be configured"),
     ({"http_server_config": {"headers": {"X-Frame-Options": "allow"}}}, "must be one of deny"),
     ({"http_server_config": {"header": {}}}, "unknown key 'header' in http_server_config"),
     ({"basic_auth_users": {"u": "plaintext"}}, "basic_auth_users.u is not a bcrypt hash"),
     ({"basic_auth_users": ["u"]}, "basic_auth_users must be a mapping"),
     ({"auth_excluded_paths": "healthz"}, "auth_excluded_paths must be a list of paths"),
     ([1, 2], "the file must be a mapping")],
)  # fmt: skip
def test_unknown_keys_and_bad_values_are_refused(tmp_path: Path, doc, reason) -> None:
    with pytest.raises(WebConfigError, match=reason):
        webconfig.load(write(tmp_path, doc))


def test_a_missing_file_is_a_web_config_error(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="cannot read"):
        webconfig.load(str(tmp_path / "absent.yml"))


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_verifies_with_bcrypt_and_caches_per_password(monkeypatch) -> None:
    auth = BasicAuth({"u": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4)).decode()})
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    assert auth.cached(basic("u", "right")) is None
    assert auth.verify(basic("u", "right")) is True
    assert auth.verify(basic("u", "right")) is True and len(calls) == 1  # cached
    assert auth.cached(basic("u", "right")) is True
    assert auth.verify(basic("u", "wrong")) is False  # another password: bcrypt again
    assert auth.verify(basic("nobody", "right")) is False  # decoy hash, same cost
    assert calls == [b"right", b"wrong", b"right"]
    for header in (
        None,
        "",
        "Bearer x",
        "Basic !!!",
        "Basic " + base64.b64encode(b"nocolon").decode(),
    ):
        assert auth.verify(header) is False
    assert auth.verify(basic("u", "x" * 100)) is False  # bcrypt refuses > 72 bytes: no crash


async def serve(
    tmp_path: Path, config: webconfig.WebConfig, host: str = ""
) -> tuple[web.AppRunner, int]:
    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="hello")

    app = web.Application()
    app.router.add_get("/", hello)
    app.router.add_get("/healthz", hello)
    port = free_port()
    runner = await webserver.start(app, WebSettings(host, port, config))
    return runner, port


RIGHT = {"Authorization": basic(USER, PASSWORD)}
WRONG = {"Authorization": basic(USER, "no")}


async def test_an_aiohttp_server_with_tls_and_basic_auth(tmp_path: Path) -> None:
    web_ = secured_web(tmp_path, client_auth="NoClientCert")
    runner, port = await serve(tmp_path, webconfig.load(str(web_.config_file)))
    doc = yaml.safe_load(web_.config_file.read_text())
    probe_runner, probe_port = await serve(
        tmp_path, webconfig.load(write(tmp_path, {**doc, "auth_excluded_paths": ["/healthz"]}))
    )
    ctx = ssl.create_default_context(cafile=web_.ca_file)
    try:
        async with aiohttp.ClientSession() as session:
            for host in hosts():  # ':PORT': both address families
                url = f"https://{host}:{port}"
                async with session.get(url, ssl=ctx, headers=RIGHT) as r:
                    assert (r.status, await r.text()) == (200, "hello")
                    assert r.headers["X-Frame-Options"] == "deny"
                async with session.get(url, ssl=ctx, headers=WRONG) as r:
                    assert r.status == 401 and r.headers["WWW-Authenticate"] == "Basic"
                async with session.get(f"{url}/absent", ssl=ctx) as r:
                    assert r.status == 401  # auth before routing: no path is open
                async with session.get(f"{url}/absent", ssl=ctx, headers=RIGHT) as r:
                    assert r.status == 404 and r.headers["X-Frame-Options"] == "deny"
                with pytest.raises(aiohttp.ClientError):
                    async with session.get(f"http://{host}:{port}/") as r:
                        await r.read()
            # auth_excluded_paths: the probe path is open, nothing else is.
            url = f"https://127.0.0.1:{probe_port}"
            async with session.get(f"{url}/healthz", ssl=ctx) as r:
                assert r.status == 200 and r.headers["X-Frame-Options"] == "deny"
            async with session.get(f"{url}/", ssl=ctx) as r:
                assert r.status == 401
    finally:
        await runner.cleanup()
        await probe_runner.cleanup()


async def test_no_host_listens_on_ipv4_and_ipv6(tmp_path: Path) -> None:
    if len(hosts()) < 2:
        pytest.skip("no IPv6 loopback on this machine")
    runner, port = await serve(tmp_path, webconfig.WebConfig())
    try:
        async with aiohttp.ClientSession() as session:
            for host in ("127.0.0.1", "[::1]"):
                async with session.get(f"http://{host}:{port}/") as r:
                    assert r.status == 200
    finally:
        await runner.cleanup()


def test_htpasswd_style_2y_hashes_verify(tmp_path: Path) -> None:
    """`htpasswd -B` writes $2y$ hashes, as exporter-toolkit's docs suggest generating them."""
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$", 1)
    config = webconfig.load(write(tmp_path, {"basic_auth_users": {"u": hashed}}))
    assert config.auth is not None
    assert config.auth.verify(basic("u", "pw")) and not config.auth.verify(basic("u", "px"))


async def test_renewed_certificates_are_served_without_a_restart(tmp_path: Path, monkeypatch):
    """A Secret volume swaps the files; new connections get the new certificate, and a
    half-written set (a key that does not match) keeps the old one in service."""
    monkeypatch.setattr(webconfig, "RELOAD_SECONDS", 0.05)
    web_ = secured_web(tmp_path, client_auth="NoClientCert")
    runner, port = await serve(tmp_path, webconfig.load(str(web_.config_file)))
    url = f"https://127.0.0.1:{port}/"

    async def status(ca_file: str) -> int | str:
        ctx = ssl.create_default_context(cafile=ca_file)
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(url, ssl=ctx, headers=RIGHT) as r,
            ):
                return r.status
        except aiohttp.ClientError as exc:
            return type(exc).__name__

    async def eventually(ca_file: str, expected: int) -> None:
        for _ in range(100):
            if await status(ca_file) == expected:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(await status(ca_file))

    try:
        assert await status(web_.ca_file) == 200
        new_ca = trustme.CA()
        new_ca.cert_pem.write_to_path(str(tmp_path / "new-ca.crt"))
        renewed = new_ca.issue_cert("127.0.0.1")
        # Half-written: a new certificate with the old key. Not loaded; the old pair serves.
        renewed.cert_chain_pems[0].write_to_path(str(tmp_path / "server.crt"))
        await asyncio.sleep(0.3)
        assert await status(web_.ca_file) == 200
        renewed.private_key_pem.write_to_path(str(tmp_path / "server.key"))
        await eventually(str(tmp_path / "new-ca.crt"), 200)
        assert await status(web_.ca_file) == "ClientConnectorCertificateError"
    finally:
        await runner.cleanup()


def _cost(hashed: str, cost: int) -> str:
    """The same hash text with another cost field: a well-formed hash of that cost (its check
    fails, which is all a load-time test needs), without spending 2^cost rounds to make it."""
    return hashed[:4] + f"{cost:02d}" + hashed[6:]


def test_the_right_password_stays_fast_while_eight_clients_guess_wrong() -> None:
    """Issue 27 item 11: one lock held across every bcrypt check made a right password wait
    behind each wrong guess (2-3 s at cost 12 with 8 guessers, the scrape timeout is 1 s)."""
    auth = BasicAuth({"u": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=12)).decode()})
    assert auth.verify(basic("u", "right")) is True  # the first scrape pays bcrypt once
    stop, guessed = threading.Event(), [0] * 8

    def guess(i: int) -> None:
        while not stop.is_set():
            assert auth.verify(basic("u", f"wrong-{i}-{guessed[i]}")) is False
            guessed[i] += 1

    guessers = [threading.Thread(target=guess, args=(i,)) for i in range(8)]
    for t in guessers:
        t.start()
    took = []
    try:
        time.sleep(0.1)  # every guesser is inside bcrypt
        for _ in range(20):
            start = time.perf_counter()
            assert auth.verify(basic("u", "right")) is True
            took.append(time.perf_counter() - start)
            time.sleep(0.05)
    finally:
        stop.set()
        for t in guessers:
            t.join()
    assert sum(guessed) >= 2  # the guesses did run meanwhile
    assert max(took) < 0.05, f"right password took up to {max(took) * 1e3:.0f} ms"


def test_a_flood_of_wrong_passwords_does_not_evict_the_right_one(monkeypatch) -> None:
    auth = BasicAuth({"u": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4)).decode()})
    assert auth.verify(basic("u", "right")) is True
    for i in range(500):
        assert auth.verify(basic("u", f"wrong-{i}")) is False
    assert auth.cached(basic("u", "right")) is True  # no bcrypt for it, however many guesses


def test_bcrypt_costs_above_the_bound_are_refused_at_load(tmp_path: Path) -> None:
    """Issue 27 item 12: a cost-31 hash took minutes per check. exporter-toolkit's users use
    10-14; each step doubles the time, and 14 already takes about a second on one core."""
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    for cost in (15, 31):
        with pytest.raises(WebConfigError, match=rf"basic_auth_users.u: bcrypt cost {cost} .* 14"):
            webconfig.load(write(tmp_path, {"basic_auth_users": {"u": _cost(hashed, cost)}}))
    with pytest.raises(WebConfigError, match="cost 31"):
        BasicAuth({"u": _cost(hashed, 31)})
    config = webconfig.load(write(tmp_path, {"basic_auth_users": {"u": _cost(hashed, 14)}}))
    assert config.auth is not None


def test_an_unknown_user_never_costs_more_than_a_known_one() -> None:
    """The decoy hash for unknown users was made at the highest configured cost: with one
    cost-12 user beside cost-4 ones, every unknown name cost a cost-12 check."""
    cheap = bcrypt.hashpw(b"a", bcrypt.gensalt(rounds=4)).decode()
    dear = bcrypt.hashpw(b"b", bcrypt.gensalt(rounds=12)).decode()
    auth = BasicAuth({"cheap": cheap, "dear": dear})

    def seconds(header: str) -> float:
        start = time.perf_counter()
        assert auth.verify(header) is False
        return time.perf_counter() - start

    seconds(basic("nobody", "warm-up"))  # the decoy is made on first use
    unknown = min(seconds(basic(f"nobody-{i}", "x")) for i in range(3))
    known_dear = seconds(basic("dear", "x"))
    assert unknown * 8 < known_dear, (unknown, known_dear)
