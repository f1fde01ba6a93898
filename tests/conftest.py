"""Fixtures more than one test area uses: a real Kubernetes-API stand-in and a client on it
(the reporter's sink, the rulegen controller's and the extender's watches, ``mco.watch``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from kubernetes_asyncio import client

from testkit.kapi import VersionedKubernetes, versioned_kubernetes


@pytest_asyncio.fixture
async def kapi() -> AsyncIterator[VersionedKubernetes]:
    async with versioned_kubernetes() as k:
        yield k


@pytest_asyncio.fixture
async def api_client(kapi: VersionedKubernetes) -> AsyncIterator[client.ApiClient]:
    cfg = client.Configuration(host=str(kapi.url).rstrip("/"))
    async with client.ApiClient(configuration=cfg) as api:
        yield api
