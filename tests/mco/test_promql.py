"""The PromQL client against a real HTTP(S) server: auth, headers, TLS, and every failure kind.
Secrets must never appear in an error message (they end up in logs and in the report)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import json
import logging
import ssl
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import trustme
from aiohttp import web
from aiohttp.test_utils import TestServer

from mco.logs import LogfmtFormatter
from mco.promql import (
    BAD_ANSWER,
    QUERY_FAILED,
    TIMEOUT,
    TOO_LARGE,
    UNREACHABLE,
    PromQLClient,
    SourceConfig,
    SourceError,
    safe_url,
)
from reporter import culprits as culprit_lists
from reporter.cli import parse_settings, run
from reporter.entries import EntryBuilder, Epsilon
from reporter.query import Kind, Plan, TaggedSample, fetch
from reporter.schema import PodRef
from reporter.tracker import Tracker
from rulegen.model import DetectionRuleConfig
from scripts.procs import free_port
from testkit.answers import T0, answers, ok, quiet_values, slot_of
from testkit.fakeprom import gzip_bomb

Handler = Callable[[web.Request], Any]


@pytest_asyncio.fixture
async def server() -> AsyncIterator[Callable[..., Any]]:
    servers: list[TestServer] = []

    async def start(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> TestServer:
        app = web.Application()
        app.router.add_route("*", "/prom/api/v1/query", handler)
        srv = TestServer(
            app, host="127.0.0.1", port=free_port(), scheme="https" if ssl_context else "http"
        )
        await srv.start_server(ssl=ssl_context)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        await srv.close()


def url_of(srv: TestServer) -> str:
    return f"{srv.scheme}://127.0.0.1:{srv.port}/prom"


async def test_posts_the_query_at_the_given_time_with_auth_and_headers(
    server, tmp_path: Path
) -> None:
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        form = await request.post()
        seen.append(
            {"headers": dict(request.headers), "form": dict(form), "method": request.method}
        )
        return web.json_response(ok([]))

    srv = await server(handler)
    token = tmp_path / "token"
    token.write_text("first-token\n")
    cfg = SourceConfig(
        url_of(srv), bearer_token_file=str(token), headers={"X-Scope-OrgID": "team-a"}
    )
    async with PromQLClient(cfg) as client:
        await client.query("up", T0, dict)
        token.write_text("rotated-token-longer\n")  # a projected token is rotated in place
        await client.query("up", T0 + 1, dict)
    assert seen[0]["method"] == "POST"
    assert seen[0]["form"] == {"query": "up", "time": f"{T0:.3f}"}
    assert seen[0]["headers"]["Authorization"] == "Bearer first-token"
    assert seen[1]["headers"]["Authorization"] == "Bearer rotated-token-longer"
    assert seen[0]["headers"]["X-Scope-OrgID"] == "team-a"


async def test_basic_auth_from_a_password_file_and_from_the_url(server, tmp_path: Path) -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response(ok([]))

    srv = await server(handler)
    password = tmp_path / "password"
    password.write_text("s3cret")
    cfg = SourceConfig(url_of(srv), basic_auth_user="mco", basic_auth_password_file=str(password))
    async with PromQLClient(cfg) as client:
        await client.query("up", T0, dict)
    in_url = url_of(srv).replace("http://", "http://viewer:pa55@")
    async with PromQLClient(SourceConfig(in_url)) as client:
        await client.query("up", T0, dict)
        assert "pa55" not in client.where
    import base64

    assert seen == [
        "Basic " + base64.b64encode(b"mco:s3cret").decode(),
        "Basic " + base64.b64encode(b"viewer:pa55").decode(),
    ]


async def test_tls_with_a_private_ca_and_a_client_certificate(server, tmp_path: Path) -> None:
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1")
    client_cert = ca.issue_cert("mco-reporter")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(ctx)
    ca.configure_trust(ctx)
    ctx.verify_mode = ssl.CERT_REQUIRED
    seen: list[Any] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.transport.get_extra_info("peercert") if request.transport else None)
        return web.json_response(ok([]))

    srv = await server(handler, ctx)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    client_cert.cert_chain_pems[0].write_to_path(str(cert))
    client_cert.private_key_pem.write_to_path(str(key))
    cfg = SourceConfig(url_of(srv), ca_file=str(ca_file), cert_file=str(cert), key_file=str(key))
    async with PromQLClient(cfg) as client:
        await client.query("up", T0, dict)
    assert seen and seen[0] is not None  # the server saw our certificate
    # Without the CA the server is not trusted: a clear "unreachable" with the reason.
    async with PromQLClient(SourceConfig(url_of(srv))) as client:
        with pytest.raises(SourceError) as err:
            await client.query("up", T0, dict)
    assert err.value.kind == UNREACHABLE and "certificate" in err.value.message.lower()


async def test_timeout_refused_error_answers_and_garbage(server) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.json_response(ok([]))

    async def error(request: web.Request) -> web.Response:
        return web.json_response(
            {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
            status=400,
        )

    async def bad_gateway(request: web.Request) -> web.Response:
        return web.Response(status=502, text="<html>Bad Gateway</html>")

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text="{not json")

    async def matrix(request: web.Request) -> web.Response:
        return web.json_response(
            {"status": "success", "data": {"resultType": "matrix", "result": []}}
        )

    cases = [
        (slow, TIMEOUT, "within 0.3s"),
        (error, QUERY_FAILED, "bad_data: parse error at char 3"),
        (bad_gateway, QUERY_FAILED, "HTTP 502: <html>Bad Gateway</html>"),
        (garbage, BAD_ANSWER, "invalid answer"),
        (matrix, BAD_ANSWER, "matrix"),
    ]
    for handler, kind, text in cases:
        srv = await server(handler)
        async with PromQLClient(SourceConfig(url_of(srv), timeout=0.3)) as client:
            with pytest.raises(SourceError) as err:
                await client.query("up", T0, dict)
        assert err.value.kind == kind, handler
        assert text in err.value.message
    async with PromQLClient(SourceConfig(f"http://127.0.0.1:{free_port()}", timeout=2)) as client:
        with pytest.raises(SourceError) as err:
            await client.query("up", T0, dict)
    assert err.value.kind == UNREACHABLE


async def test_secrets_never_reach_messages(server, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok-SECRET-123")

    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=401, text=f"denied for {request.headers['Authorization'][:3]}")

    srv = await server(handler)
    url = url_of(srv).replace("http://", "http://user:PASS-SECRET@") + "?apikey=QUERY-SECRET"
    for cfg in (SourceConfig(url_of(srv), bearer_token_file=str(token)), SourceConfig(url)):
        async with PromQLClient(cfg) as client:
            with pytest.raises(SourceError) as err:
                await client.query("up", T0, dict)
        for secret in ("tok-SECRET-123", "PASS-SECRET", "QUERY-SECRET"):
            assert secret not in err.value.message
            assert secret not in client.where
    assert safe_url("https://u:p@prom.example:9090/x?token=t#f") == "https://prom.example:9090/x"
    missing = SourceConfig(url_of(srv), bearer_token_file=str(tmp_path / "nope"))
    async with PromQLClient(missing) as client:
        with pytest.raises(SourceError, match=r"cannot read .*nope"):
            await client.query("up", T0, dict)


def test_bad_configs_are_refused() -> None:
    for cfg, text in (
        (SourceConfig("ftp://x"), "http"),
        (SourceConfig("http://x", bearer_token_file="t", basic_auth_user="u"), "either"),
        (SourceConfig("http://x", cert_file="c"), "both"),
        (SourceConfig("http://x", headers={"Authorization": "x"}), "set by the reporter"),
        (SourceConfig("http://x", headers={"host": "x"}), "set by the reporter"),
        (SourceConfig("http://x", headers={"Accept-Encoding": "x"}), "set by the reporter"),
        (SourceConfig("http://x", headers={"Content-Type": "x"}), "set by the reporter"),
        (SourceConfig("http://x", headers={"content-length": "x"}), "set by the reporter"),
        (SourceConfig("http://x", headers={"Content-Encoding": "x"}), "set by the reporter"),
        (SourceConfig("http://x", timeout=0), "positive"),
    ):
        with pytest.raises(ValueError, match=text):
            cfg.validate()
    SourceConfig("http://x", headers={"X-Scope-OrgID": "a", "X-Content": "b"}).validate()


async def test_fetch_runs_three_queries_at_one_time_and_reads_infinities(server) -> None:
    """Go spells +Inf "+Inf", which msgspec's float parser does not take: still decoded."""
    plan = Plan(compact=False)
    values = quiet_values(plan)
    values[(Kind.SIGNAL, "blockIOLatencyP99Seconds")] = float("inf")
    recorded, extra, info = answers(plan, {"a": values}, {"a": T0 - 1})
    by_query = dict(zip(plan.exprs, (recorded, extra, info), strict=True))
    seen: list[tuple[str, str]] = []

    async def handler(request: web.Request) -> web.Response:
        form = await request.post()
        seen.append((str(form["query"]), str(form["time"])))
        return web.json_response(ok(by_query[str(form["query"])]))

    srv = await server(handler)
    async with PromQLClient(SourceConfig(url_of(srv))) as client:
        snap = await fetch(client, plan, T0)
    assert sorted(q for q, _ in seen) == sorted(plan.exprs)
    assert {t for _, t in seen} == {f"{T0:.3f}"}
    v = snap.vectors["a"]
    assert v[slot_of(plan, Kind.SIGNAL, "blockIOLatencyP99Seconds")] == float("inf")
    assert v[slot_of(plan, Kind.LEVEL)] == 0.1 and v[plan.time_slot] == T0 - 1
    assert snap.rules[0].generation == 3


async def test_one_failing_query_fails_the_cycle(server) -> None:
    plan = Plan(compact=False)

    async def handler(request: web.Request) -> web.Response:
        form = await request.post()
        if form["query"] == plan.info_expr:
            return web.json_response(
                {"status": "error", "errorType": "timeout", "error": "query timed out"}, status=503
            )
        return web.json_response(ok([]))

    srv = await server(handler)
    async with PromQLClient(SourceConfig(url_of(srv))) as client:
        with pytest.raises(SourceError, match="query timed out"):
            await fetch(client, plan, T0)


@pytest.mark.parametrize("compression", [True, False])
async def test_gzip_answers_are_asked_for_and_inflated(server, compression: bool) -> None:
    """The client asks for gzip (by default) and inflates the answer itself; the answer size
    it reports is the inflated one."""
    body = json.dumps(ok([{"metric": {"node": "n1"}, "value": [T0, "0.25"]}])).encode()
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Accept-Encoding", ""))
        if "gzip" in seen[-1]:
            return web.Response(
                body=gzip.compress(body),
                content_type="application/json",
                headers={"Content-Encoding": "gzip"},
            )
        return web.Response(body=body, content_type="application/json")

    srv = await server(handler)
    async with PromQLClient(SourceConfig(url_of(srv), compression=compression)) as client:
        result, size = await client.query("up", T0, dict)
    assert seen == ["gzip" if compression else "identity"]
    assert result == [{"metric": {"node": "n1"}, "value": [T0, "0.25"]}]
    assert size == len(body)


@pytest.mark.parametrize(
    "payload,encoding,match",
    [
        (b"not gzip at all", "gzip", "invalid gzip answer"),
        (None, "gzip", "truncated gzip answer"),
        (b"{}", "br", "unknown encoding"),
    ],
)
async def test_bad_compressed_answers_are_bad_answers(server, payload, encoding, match) -> None:
    if payload is None:  # a gzip stream cut short
        payload = gzip.compress(b'{"status":"success"}' * 100)[:30]

    async def handler(request: web.Request) -> web.Response:
        return web.Response(
            body=payload, content_type="application/json", headers={"Content-Encoding": encoding}
        )

    srv = await server(handler)
    async with PromQLClient(SourceConfig(url_of(srv))) as client:
        with pytest.raises(SourceError, match=match) as caught:
            await client.query("up", T0, dict)
    assert caught.value.kind == BAD_ANSWER


TOKEN = "tok-SECRET-1234567890"
PASSWORD = "PASS-SECRET-pa55"


def _echo(kind: str) -> Handler:
    """A Prometheus (or a proxy) that refuses with 401 and echoes the credentials it got, in
    the shapes servers do: the header line, JSON, Go's map printing, the decoded pair, a URL
    with user info, and a credential it was not sent (a cached one)."""

    async def handler(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        scheme, _, credential = auth.partition(" ")
        decoded = base64.b64decode(credential).decode() if scheme == "Basic" else credential
        user, _, password = decoded.partition(":")
        echo = (
            f"denied: Authorization: {auth}\n"
            f"headers map[Accept:[*/*] Authorization:[{auth}]]\n"
            f"credential {credential} decoded {decoded}, password {password or decoded}\n"
            f"upstream http://{user or 'x'}:{password or decoded}@prom.internal:9090/api\n"
            f"cached Bearer someone-elses-token-0123456789"
        )
        if kind == "text":
            return web.Response(status=401, text=echo)
        body = {"status": "error", "errorType": "unauthorized", "error": echo}
        return web.json_response(body, status=401)

    return handler


@pytest.mark.parametrize("kind", ["text", "json"])
@pytest.mark.parametrize("auth", ["bearer", "basic-file", "basic-url"])
async def test_echoed_credentials_reach_neither_logs_nor_the_report(
    server, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys, kind: str, auth: str
) -> None:
    """The real reporter, one cycle against an engine that echoes what it was sent: neither
    the log records (with their structured fields), stderr nor the written condition hold the
    token, the password, the basic-auth pair (plain or base64) or any Authorization value."""
    srv = await server(_echo(kind))
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "password").write_text(PASSWORD)
    url = url_of(srv)
    flags = {
        "bearer": [f"--prometheus-bearer-token-file={tmp_path / 'token'}"],
        "basic-file": [
            "--prometheus-basic-auth-user=mco",
            f"--prometheus-basic-auth-password-file={tmp_path / 'password'}",
        ],
        "basic-url": [],
    }[auth]
    if auth == "basic-url":
        url = url.replace("http://", f"http://mco:{PASSWORD}@")
    out = tmp_path / "report.json"
    caplog.set_level(logging.DEBUG)
    settings = parse_settings(["--once", f"--prometheus-url={url}", f"--output={out}", *flags])
    assert await run(settings) == 1
    reachable = next(
        c
        for c in json.loads(out.read_text())["status"]["conditions"]
        if c["type"] == "SourceReachable"
    )
    assert reachable["status"] == "False" and "HTTP 401" in reachable["message"]
    assert "[redacted]" in reachable["message"]
    logs = "\n".join(LogfmtFormatter().format(r) for r in caplog.records)
    assert "PromQL source failed" in logs
    pair = f"mco:{PASSWORD}"
    secrets = [TOKEN, PASSWORD, pair, base64.b64encode(pair.encode()).decode()]
    secrets += ["someone-elses-token", "Basic bWNv", f"Bearer {TOKEN[:4]}"]
    for where, text in (
        ("condition", reachable["message"]),
        ("logs", logs),
        ("stderr", capsys.readouterr().err),
        ("file", out.read_text()),
    ):
        for secret in secrets:
            assert secret not in text, (where, secret)


async def test_a_credential_across_the_excerpt_cut_leaves_no_prefix(server, tmp_path) -> None:
    """The excerpt of a body is cut at 200 characters: redaction comes first, so a credential
    straddling the cut does not leave a readable start; long engine errors are bounded."""
    (tmp_path / "token").write_text(TOKEN)

    async def straddle(request: web.Request) -> web.Response:
        return web.Response(status=403, text="x" * 190 + TOKEN + " y" * 50)

    async def long_error(request: web.Request) -> web.Response:
        body = {"status": "error", "errorType": "internal", "error": "e" * 100_000 + TOKEN}
        return web.json_response(body, status=500)

    for handler in (straddle, long_error):
        srv = await server(handler)
        cfg = SourceConfig(url_of(srv), bearer_token_file=str(tmp_path / "token"))
        async with PromQLClient(cfg) as client:
            with pytest.raises(SourceError) as err:
                await client.query("up", T0, dict)
        assert TOKEN[:6] not in err.value.message and len(err.value.message) <= 300


BUDGET = 1 << 20  # a small --prometheus-max-answer-bytes, so the tests move little data


def _answer_of(size: int) -> bytes:
    """A valid answer of about ``size`` bytes (one sample and padding whitespace)."""
    head = json.dumps(ok([{"metric": {"node": "n1"}, "value": [T0, "0.25"]}])).encode()
    return head[:-1] + b" " * max(0, size - len(head)) + b"}"


async def _stream(request: web.Request, body: bytes, encoding: str = "") -> web.StreamResponse:
    """``body`` in 64 KiB chunks without a Content-Length (chunked): the client cannot refuse
    it up front and must count what arrives."""
    resp = web.StreamResponse(headers={"Content-Encoding": encoding} if encoding else {})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    with contextlib.suppress(ConnectionError):
        for i in range(0, len(body), 1 << 16):
            await resp.write(body[i : i + (1 << 16)])
    return resp


@pytest.mark.parametrize(
    "shape", ["declared", "chunked", "gzip-bomb", "gzip-chunked-bomb", "deflate-bomb"]
)
async def test_answers_over_the_budget_are_refused_and_the_budget_comes_back(
    server, shape: str
) -> None:
    """Whatever the shape (a declared length, a chunked stream, a gzip or deflate bomb), an
    answer over --prometheus-max-answer-bytes is refused with its own kind and a message that
    names the flag; nothing stays counted, and the next answer is read normally."""
    big = b" " * (3 * BUDGET)
    bomb = gzip_bomb(16 * BUDGET) if "bomb" in shape else b""
    calls = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls > 1:
            return web.Response(body=_answer_of(BUDGET // 2), content_type="application/json")
        if shape == "declared":
            return web.Response(body=big, content_type="application/json")
        if shape == "chunked":
            return await _stream(request, big)
        if shape == "gzip-bomb":
            return web.Response(body=bomb, headers={"Content-Encoding": "gzip"})
        if shape == "deflate-bomb":
            deflated = zlib.compress(b"\0" * (8 * BUDGET))
            return web.Response(body=deflated, headers={"Content-Encoding": "deflate"})
        return await _stream(request, bomb, "gzip")

    srv = await server(handler)
    cfg = SourceConfig(url_of(srv), max_answer_bytes=BUDGET)
    async with PromQLClient(cfg) as client:
        with pytest.raises(SourceError) as err:
            await client.query("up", T0, dict)
        assert err.value.kind == TOO_LARGE
        assert "1 MiB" in err.value.message and "--prometheus-max-answer-bytes" in err.value.message
        assert client._budget.used == 0
        result, _ = await client.query("up", T0, dict)
        assert result == [{"metric": {"node": "n1"}, "value": [T0, "0.25"]}]
        assert client._budget.used == 0


async def test_the_budget_is_shared_by_concurrent_queries(server) -> None:
    """Three answers of 40 % of the budget each, in flight together: not all of them can be
    held, so one is refused (the cycle fails: AnswerTooLarge in SourceReachable), the others
    are read, and nothing stays counted."""
    plan = Plan(compact=False)
    started, release = asyncio.Event(), asyncio.Event()
    arrived = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal arrived
        arrived += 1
        if arrived == 3:
            started.set()
        await started.wait()  # all three answers are on their way at once
        body = _answer_of(BUDGET * 2 // 5)
        resp = web.StreamResponse()
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError):
            await resp.write(body[:-1])
            # No answer ends before the client gave up: all three are held at once.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), 10)
            await resp.write(body[-1:])
        return resp

    srv = await server(handler)
    async with PromQLClient(SourceConfig(url_of(srv), max_answer_bytes=BUDGET)) as client:

        async def one(expr: str) -> object:
            try:
                return await client.query(expr, T0, dict)
            except SourceError:
                release.set()  # the others may end now
                raise

        outcomes = await asyncio.gather(*map(one, plan.exprs), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, SourceError)]
        assert 1 <= len(errors) < 3 and {e.kind for e in errors} == {TOO_LARGE}
        assert client._budget.used == 0
        assert client._budget.available() == BUDGET
    err = errors[0]
    tracker = Tracker(
        EntryBuilder(plan, DetectionRuleConfig.default(), Epsilon()), stale_after=30, live_within=5
    )
    tracker.fail(err, T0)
    reachable = next(c for c in tracker.view().conditions if c.type == "SourceReachable")
    assert (reachable.status, reachable.reason) == ("False", "AnswerTooLarge")
    assert "--prometheus-max-answer-bytes" in reachable.message


async def test_plus_inf_is_read_from_plain_and_gzip_answers(server) -> None:
    body = json.dumps(ok([{"metric": {"node": "n1"}, "value": [T0, "+Inf"]}])).encode()

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("Accept-Encoding") == "gzip":
            return web.Response(body=gzip.compress(body), headers={"Content-Encoding": "gzip"})
        return web.Response(body=body)

    srv = await server(handler)
    for compression in (True, False):
        cfg = SourceConfig(url_of(srv), compression=compression)
        async with PromQLClient(cfg) as client:
            result, _ = await client.query("up", T0, TaggedSample)
        assert result[0].value.value == float("inf")


async def test_fetch_sends_the_victims_and_aggressors_with_the_second_query(server) -> None:
    """Still three queries: the pods ride along with the tagged series, and the parse tells
    them apart by their ``role`` label."""
    plan = Plan(compact=False)
    recorded, extra, info = answers(plan, {"a": quiet_values(plan)}, {"a": T0 - 1})
    culprits = culprit_lists.query(DetectionRuleConfig.default())
    pod = {"node": "a", "pod_uid": "u1", "qos": "burstable", "namespace": "ns", "pod": "web-0"}
    extra += [
        {"metric": {**pod, "role": "victims", "resource": "io"}, "value": [T0, "0.5"]},
        {"metric": {**pod, "role": "aggressors", "resource": "memory"}, "value": [T0, "1024"]},
    ]
    by_query = {
        plan.recorded_expr: recorded,
        f"{plan.extra_expr} or ({culprits})": extra,
        plan.info_expr: info,
    }
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        form = await request.post()
        seen.append(str(form["query"]))
        return web.json_response(ok(by_query[str(form["query"])]))

    srv = await server(handler)
    async with PromQLClient(SourceConfig(url_of(srv))) as client:
        snap = await fetch(client, plan, T0, culprits)
    assert sorted(seen) == sorted(by_query)
    assert snap.vectors["a"][plan.time_slot] == T0 - 1
    got = snap.culprits["a"]
    # No owner in the series: the workload is the pod's name less its generated suffix.
    ref = ("burstable", "ns", "web-0", "ns/Pod/web")
    assert got.victims == (PodRef("u1", "io", 0.5, *ref),)
    assert got.aggressors == (PodRef("u1", "memory", 1024.0, *ref),)
