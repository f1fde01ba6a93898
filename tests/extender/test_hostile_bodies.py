"""Hostile request bodies: encodings that do not decode, lengths that are declared but never
sent, and more body bytes in flight than the pod's memory holds. Real sockets throughout."""

from __future__ import annotations

import asyncio
import gc
import gzip
import logging
import socket
import sys
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
import requests

from extender.app import BUDGET
from extender.config import ExtenderConfig, SourceConfig
from scripts.procs import Managed, free_port, wait_until
from testkit import bodies
from tests.extender.conftest import cluster_report, entry, write_reports

JSON = {"Content-Type": "application/json"}
SCHEDULER_ROUTES = {
    "/volcano/predicate": bodies.volcano_predicate("n1"),
    "/volcano/prioritize": bodies.volcano_prioritize(["n1", "n2"], tasks=2),
    "/scheduler/filter": bodies.kube_args(["n1", "n2"]),
    "/scheduler/prioritize": bodies.kube_args(["n1", "n2"]),
}
POST_ROUTES = [*SCHEDULER_ROUTES, "/volcano/onSessionOpen", "/volcano/onSessionClose"]


@pytest.fixture
def report(tmp_path: Path) -> Path:
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report({"n1": entry(0.3), "n2": entry(0.0)})])
    return path


def config(report: Path, **server: int) -> ExtenderConfig:
    source = SourceConfig(report_file=str(report), poll_interval=0.05)
    return ExtenderConfig(source=source, **server)  # type: ignore[arg-type]


def _undecodable(body: bytes) -> list[tuple[str, bytes, bool]]:
    """Bodies whose Content-Encoding does not decode: not compressed at all, compressed and cut
    short, compressed with the other algorithm, a gzip header before junk; and whether the
    HTTP layer sees it (a gzip stream cut short is delivered as its decoded prefix, which only
    a route that reads the body finds wrong)."""
    squeezed = gzip.compress(body)
    return [
        ("gzip", body, True),
        ("deflate", body, True),
        ("gzip", squeezed[: len(squeezed) // 2], False),
        ("deflate", zlib.compress(body)[:-7], True),
        ("deflate", squeezed, True),
        ("gzip", b"\x1f\x8b\x08\x00" + b"\xff" * 64, True),
        ("br", body, True),
        ("zstd", body, True),
        ("br", b"\xce\xb2\xcf\x81" * 16, True),
        ("zstd", b"\x28\xb5\x2f\xfd" + b"\xff" * 64, True),
    ]


async def _raw_post(port: int, path: str, headers: bytes, body: bytes) -> tuple[int, bytes]:
    """One request written whole on a fresh connection; the status and body of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\n%s\r\n%s" % (path.encode(), headers, body))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        return int(head.split()[1]), await reader.readexactly(length)
    finally:
        writer.close()


@pytest.mark.parametrize("path", POST_ROUTES)
async def test_a_body_that_does_not_decode_is_a_400_on_every_post_route(
    serve, report, path, caplog
):
    caplog.set_level(logging.DEBUG, logger="mco.extender")
    client = await serve(config(report))
    port = client.server.port
    body = SCHEDULER_ROUTES.get(path, b'{"Jobs": {}}')
    for encoding, data, seen in _undecodable(body):
        head = b"Content-Type: application/json\r\nContent-Encoding: %s\r\n" % encoding.encode()
        for chunked in (False, True):
            if chunked:
                framed = (
                    head + b"Transfer-Encoding: chunked\r\n",
                    b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data),
                )
            else:
                framed = head + b"Content-Length: %d\r\n" % len(data), data
            status, raw = await _raw_post(port, path, *framed)
            if not seen and path not in SCHEDULER_ROUTES:  # a session hook never reads it
                assert status == 200
                continue
            assert status == 400, (encoding, chunked, raw)
            # Ours: JSON (unreadable, or cut short and so not JSON). A deflate stream that ends
            # early is caught by aiohttp's parser at the message's end, an encoding it has no
            # library for (br, zstd) at the headers: its own text 400.
            assert (
                raw.startswith(b'{"error":')
                or raw == encoding.encode()
                or raw.startswith(b"Can not decode content-encoding")
            ), raw
    assert client.server.app[BUDGET].held == 0
    assert (await client.post("/volcano/predicate", data=SCHEDULER_ROUTES["/volcano/predicate"],
                              headers=JSON)).status == 200  # fmt: skip
    # Nothing at ERROR, ours or aiohttp's ("Error handling request" with a traceback for every
    # request whose encoding its parser cannot decode): one client could flood the log.
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    assert "Unhandled exception" not in caplog.text
    assert "Traceback" not in caplog.text
    refused = [r.getMessage() for r in caplog.records if r.name == "mco.extender"]
    assert any("answered 400 to a bad request" in m and "br" in m for m in refused), refused


@pytest.mark.parametrize("path", list(SCHEDULER_ROUTES))
async def test_compressed_bodies_are_read_decoded(serve, report, path):
    """A Content-Length counts the compressed bytes: the decoded body is longer, and valid."""
    client = await serve(config(report))
    plain = await client.post(path, data=SCHEDULER_ROUTES[path], headers=JSON)
    for encoding, squeeze in (("gzip", gzip.compress), ("deflate", zlib.compress)):
        data = squeeze(SCHEDULER_ROUTES[path])
        response = await client.post(
            path, data=data, headers={**JSON, "Content-Encoding": encoding}
        )
        assert response.status == 200, await response.text()
        assert await response.read() == await plain.read()


async def test_a_compressed_body_is_limited_by_its_decoded_size(serve, report):
    client = await serve(config(report, max_body_bytes=1 << 20, max_body_memory=1 << 20))
    bomb = gzip.compress(b" " * (8 << 20))  # 8 KiB that inflate to 8 MiB
    response = await client.post(
        "/volcano/predicate", data=bomb, headers={**JSON, "Content-Encoding": "gzip"}
    )
    assert response.status == 413, await response.text()
    assert client.server.app[BUDGET].held == 0


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _open_body(port: int, length: int, first: bytes) -> Connection:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /volcano/predicate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (length, first)
    )
    await writer.drain()
    return reader, writer


async def test_body_bytes_in_flight_are_bounded_and_given_back(serve, report):
    """Two connections hold most of the budget; a third is refused with 503 as soon as its
    bytes would exceed it; once the two go away their buffers are freed at once (no garbage
    collection runs: nothing, such as a kept traceback, still refers to them)."""
    mib = 1 << 20
    client = await serve(config(report, max_body_bytes=mib, max_body_memory=2 * mib))
    budget = client.server.app[BUDGET]
    port = client.server.port
    part = b" " * (900 << 10)
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        held = [await _open_body(port, mib, part) for _ in range(2)]
        deadline = time.monotonic() + 10
        while budget.held < 2 * len(part):
            assert time.monotonic() < deadline, budget.held
            await asyncio.sleep(0.01)
        holding = tracemalloc.get_traced_memory()[0]
        reader, writer = await _open_body(port, mib, part)
        status = await asyncio.wait_for(reader.readline(), 10)
        assert status.startswith(b"HTTP/1.1 503"), status
        writer.close()
        for _reader, w in held:
            w.close()
        deadline = time.monotonic() + 10
        while budget.held:
            assert time.monotonic() < deadline, budget.held
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        freed = holding - tracemalloc.get_traced_memory()[0]
        assert freed > 1.5 * len(part), f"only {freed} bytes freed when two bodies went away"
    finally:
        tracemalloc.stop()
        gc.enable()
    body = bodies.volcano_predicate("n1")
    padded = body + b" " * (mib - len(body))  # the largest body allowed, alone: accepted
    response = await client.post("/volcano/predicate", data=padded, headers=JSON)
    assert response.status == 200 and await response.json() == {"status": "", "code": 0}
    assert budget.held == 0


def _rss(pid: int) -> int:
    """Resident bytes of process ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_declared_lengths_cost_no_memory_held_or_dropped(tmp_path, report):
    """Ten connections announce 64 MiB each and send one byte: the server's RSS must not grow
    by what they announced, neither while they hang nor after they go away."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Managed(
        [
            sys.executable,
            "-m",
            "extender",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--report-file={report}",
        ],
        name="mco-extender",
        log_path=tmp_path / "extender.log",
    ) as proc:
        proc.wait_http(f"{url}/readyz")
        for route in SCHEDULER_ROUTES:  # warm up every route once
            requests.post(f"{url}{route}", data=SCHEDULER_ROUTES[route], timeout=10)
        before = _rss(proc.pid)
        for _round in range(3):
            socks = []
            for _ in range(10):
                sock = socket.create_connection(("127.0.0.1", port))
                sock.sendall(
                    b"POST /volcano/prioritize HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 67108864\r\n\r\n{"
                )
                socks.append(sock)
            time.sleep(0.5)
            hanging = _rss(proc.pid) - before
            for sock in socks:
                sock.close()
            wait_until(lambda: requests.get(f"{url}/healthz", timeout=5).ok, timeout=10)
            time.sleep(0.3)
            assert hanging < 32 << 20, f"{hanging >> 20} MiB held by ten one-byte bodies"
        dropped = _rss(proc.pid) - before
        assert dropped < 32 << 20, f"{dropped >> 20} MiB kept after the connections closed"
        answer = requests.post(
            f"{url}/volcano/predicate", data=SCHEDULER_ROUTES["/volcano/predicate"], timeout=10
        )
        assert answer.json() == {"status": "", "code": 0}
        assert proc.alive
