"""scripts/procs.py: wait_until retries only "not yet" errors; free_port never hands two workers
the same port."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from scripts.procs import free_port, wait_until


def test_connection_errors_are_retried_until_the_check_holds() -> None:
    calls = 0

    def check() -> bool:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise requests.ConnectionError("refused")
        return calls == 4

    wait_until(check, timeout=30, interval=0.01)
    assert calls == 4


def test_a_server_that_never_answers_times_out_naming_the_last_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/ready"  # nobody listens: connection refused

    with pytest.raises(TimeoutError, match=r"waiting for the server \(last error: Connection"):
        wait_until(
            lambda: requests.get(url, timeout=1).ok, timeout=0.5, interval=0.05, what="the server"
        )


def test_any_other_exception_propagates_at_once() -> None:
    calls = 0

    def check() -> bool:
        nonlocal calls
        calls += 1
        body: dict[str, list[str]] = json.loads('{"status": "ok"}')
        return body["nodes"] == []  # a bug in the check: KeyError

    start = time.monotonic()
    with pytest.raises(KeyError, match="nodes"):
        wait_until(check, timeout=30, interval=0.01)
    assert calls == 1
    assert time.monotonic() - start < 5


def test_the_caller_names_what_else_means_not_yet() -> None:
    seen: Iterator[dict[str, list[str]] | None] = iter([None, None, {"nodes": []}])

    def check() -> bool:
        body = next(seen)
        if body is None:
            raise LookupError("no report yet")
        return body["nodes"] == []

    wait_until(check, timeout=30, interval=0.01, retry_on=(LookupError,))

    def never_there() -> bool:
        raise LookupError("no report yet")

    with pytest.raises(TimeoutError, match=r"last error: LookupError: no report yet"):
        wait_until(never_there, timeout=0.2, interval=0.05, retry_on=(LookupError,))
    with pytest.raises(LookupError):  # not named: propagates
        wait_until(never_there, timeout=30, interval=0.05)


def test_a_false_check_times_out_without_an_error() -> None:
    with pytest.raises(TimeoutError) as err:
        wait_until(lambda: False, timeout=0.2, interval=0.05, what="never")
    assert str(err.value) == "timed out after 0s waiting for never"
    assert err.value.__cause__ is None


def _lane_ports(monkeypatch: pytest.MonkeyPatch, worker: str, count: int) -> set[int]:
    import scripts.procs as procs

    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    monkeypatch.setattr(procs, "_next_port", None)
    return {free_port() for _ in range(50)}


def test_workers_draw_ports_from_disjoint_lanes_below_the_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The CI failure this guards: a VictoriaMetrics shard's port, checked free by one worker,
    # was bound meanwhile by another worker's server, and the shard answered nothing for 240 s.
    first = _lane_ports(monkeypatch, "gw0", 2)
    second = _lane_ports(monkeypatch, "gw1", 2)
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert first.isdisjoint(second)
    assert max(first) < min(second)
    assert max(first | second) < ephemeral_low


def test_a_port_in_use_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import scripts.procs as procs

    taken = free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", taken))
        server.listen()
        monkeypatch.setattr(procs, "_next_port", taken)
        assert free_port() != taken
