"""Fixtures more than one test area uses: a real Kubernetes-API stand-in and a client on it
(the reporter's sink, the rulegen controller's and the extender's watches, ``mco.watch``); and
the grouping that keeps tests sharing a fixture on one pytest-xdist worker."""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes_asyncio import client

from testkit.kapi import VersionedKubernetes, versioned_kubernetes

# Tests that make or measure host-wide interference (stress-ng, PSI, IRQs) run one after the
# other on one worker: one's stress would be another's "idle" baseline or calm node.
HOST_LOAD = "host-load"
# Wider scopes first: a test using several shared fixtures goes with the widest one's group.
SHARED_SCOPES = ("session", "package", "module")


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The xdist group of a test that uses one of this project's module-, package- or
    session-scoped fixtures (a real Prometheus, a built image): every test that shares it runs
    on the same worker, so it starts once, as it does without xdist. Plugins' own shared
    fixtures (pytest-asyncio's loop policy, tmp_path_factory) have no base id and share
    nothing worth grouping."""
    if not isinstance(item, pytest.Function):
        return None
    found: dict[str, str] = {}
    for name in item.fixturenames:
        for fixturedef in item._fixtureinfo.name2fixturedefs.get(name, ()):
            if fixturedef.scope in SHARED_SCOPES and fixturedef.baseid:
                module = item.nodeid.split("::")[0]
                found.setdefault(
                    fixturedef.scope, module if fixturedef.scope == "module" else fixturedef.baseid
                )
    scope = next((s for s in SHARED_SCOPES if s in found), None)
    return f"{scope}:{found[scope]}" if scope else None


def _slow_module(item: pytest.Item, slow: set[str]) -> bool:
    return item.nodeid.split("::")[0] in slow


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Modules with slow tests first (each module kept whole, so a module fixture starts once):
    # the quick tests then fill both workers' ends instead of one long test alone at the end.
    slow = {i.nodeid.split("::")[0] for i in items if i.get_closest_marker("slow")}
    items.sort(key=lambda i: not _slow_module(i, slow))
    for item in items:
        if item.get_closest_marker("host_load") is not None:
            group: str | None = HOST_LOAD
        else:
            group = shared_fixture_group(item)
        if group and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest_asyncio.fixture
async def kapi() -> AsyncIterator[VersionedKubernetes]:
    async with versioned_kubernetes() as k:
        yield k


@pytest_asyncio.fixture
async def api_client(kapi: VersionedKubernetes) -> AsyncIterator[client.ApiClient]:
    cfg = client.Configuration(host=str(kapi.url).rstrip("/"))
    async with client.ApiClient(configuration=cfg) as api:
        yield api


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Under xdist, a test marked ``exclusive`` runs while no other test does: every test holds
    a shared lock of the run, an exclusive one takes it alone. A turnstile taken first lets a
    waiting exclusive test in before the other worker's next test."""
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None:
        yield
        return
    base = Path(tempfile.gettempdir()) / f"mco-pytest-{workerinput['testrunuid']}"
    alone = item.get_closest_marker("exclusive") is not None
    with open(f"{base}.turnstile", "a") as turnstile, open(f"{base}.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
