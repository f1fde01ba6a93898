"""kmock's Kubernetes emulator with what MCO's tests and benchmarks need that kmock lacks.

* resourceVersion semantics: every create/patch bumps a global counter into
  ``metadata.resourceVersion``; a patch whose body names another resourceVersion fails with 409
  and changes nothing (a real API server's optimistic concurrency). kmock otherwise has none.
* Faults: ``fail(verb, status, times=1, name=...)`` answers the next matching requests with an
  error *before* touching the stored objects, so a failed write really did not happen.
* ``Cluster`` (the rulegen controller's API server) adds create-on-apply and injectable 503s.

It still does not validate objects against the CRD schema: the tests do that with jsonschema.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import attrs
import kmock
from aiohttp import web
from kmock._internal import enums, rendering
from kmock._internal.k8s import KubernetesError

from reporter.schema import GROUP, PLURAL, VERSION

REPORTS = kmock.resource(GROUP, VERSION, PLURAL)
LEASES = kmock.resource("coordination.k8s.io", "v1", "leases")
DRC = kmock.resource("mco.io", "v1alpha1", "detectionruleconfigs")
RULES = kmock.resource("monitoring.coreos.com", "v1", "prometheusrules")


@dataclass
class Fault:
    action: str  # create | update | delete | fetch | list
    status: int
    times: int
    name: str | None = None
    subresource: str | None = "*"


@attrs.define(kw_only=True)
class VersionedKubernetes(kmock.KubernetesEmulator):
    _rv: int = 0
    _faults: list[Fault] = attrs.field(factory=list)
    delay: float = 0.0  # seconds added to every request (a slow API server)

    def fail(
        self,
        action: str,
        status: int,
        *,
        times: int = 1,
        name: str | None = None,
        subresource: str | None = "*",
    ) -> None:
        self._faults.append(Fault(action, status, times, name, subresource))

    def _fault(self, request: rendering.Request) -> Fault | None:
        action = request.action.value.lower() if request.action is not None else ""
        for fault in self._faults:
            if fault.times <= 0 or fault.action != action:
                continue
            if fault.name is not None and fault.name != request.name:
                continue
            if fault.subresource != "*" and fault.subresource != request.subresource:
                continue
            fault.times -= 1
            return fault
        return None

    async def _handle(self, request: rendering.Request) -> Any:
        if self.delay:
            await asyncio.sleep(self.delay)
        if request.resource is not None:
            fault = self._fault(request)
            if fault is not None:
                raise KubernetesError(
                    status=fault.status, reason="Injected", message=f"injected {fault.status}"
                )
            if request.action in (enums.action.CREATE, enums.action.UPDATE) and isinstance(
                request.data, dict
            ):
                meta = request.data.setdefault("metadata", {})
                if request.action == enums.action.UPDATE:
                    key = (request.resource, request.namespace, request.name or "")
                    stored = self.objects[key] if key in self.objects else None  # noqa: SIM401
                    if stored is not None and not stored.deleted:
                        want = meta.get("resourceVersion")
                        have = stored.get("metadata", {}).get("resourceVersion")
                        if want is not None and want != have:
                            raise KubernetesError(
                                status=409,
                                reason="Conflict",
                                message="the object has been modified",
                            )
                else:
                    meta["creationTimestamp"] = datetime.datetime.now(datetime.UTC).strftime(
                        "%Y-%m-%dT%H:%M:%SZ"
                    )
                    if request.subresource is None:
                        request.data.pop("status", None)  # a real server ignores it on create
                self._rv += 1
                meta["resourceVersion"] = str(self._rv)
        return await super()._handle(request)

    def reports(self) -> dict[str, dict[str, Any]]:
        """Every stored NodeInterferenceReport, by name (raw JSON)."""
        out = {}
        for (resource, _ns, name), obj in self.objects.items():
            if resource == REPORTS and not obj.deleted:
                out[name] = obj.raw
        return out

    def lease(self, name: str, namespace: str) -> dict[str, Any] | None:
        key = (LEASES, namespace, name)
        if key in self.objects and not self.objects[key].deleted:
            return self.objects[key].raw
        return None

    def lease_reads(self, identity: str) -> int:
        """Lease rounds of one replica as the server saw them (each round starts with a GET of
        the Lease; the replica's identity ends its User-Agent)."""
        return sum(
            1
            for r in self
            if r.resource == LEASES
            and r.method.value == "GET"
            and r.headers.get("User-Agent", "").endswith(f"({identity})")
        )


@contextlib.asynccontextmanager
async def versioned_kubernetes() -> AsyncIterator[VersionedKubernetes]:
    async with VersionedKubernetes(strict=False) as k, kmock.Server(k):
        k.resources[REPORTS] = kmock.ResourceInfo(
            kind="NodeInterferenceReport", namespaced=False, subresources={"status"}
        )
        k.resources[LEASES] = kmock.ResourceInfo(kind="Lease", namespaced=True)
        yield k


@dataclass
class ServiceProxy:
    """The API server's service proxy in front of the stand-in: ``/api/v1/namespaces/<ns>/
    services/<scheme>:<name>:<port>/proxy/<path>`` goes to the URL registered for that service
    (path and query kept, as the API server's proxy does), everything else to the emulator.
    ``denied`` answers 403 for service proxying (a user without RBAC on services/proxy);
    ``authorizations`` records the Authorization header of each request."""

    url: str
    services: dict[tuple[str, str], str]
    denied: bool = False
    authorizations: list[str] = dataclasses.field(default_factory=list)


@contextlib.asynccontextmanager
async def service_proxy(
    kapi: VersionedKubernetes, services: dict[tuple[str, str], str]
) -> AsyncIterator[ServiceProxy]:
    front = ServiceProxy("", dict(services))
    upstream = str(kapi.url).rstrip("/")

    async def handle(request: web.Request) -> web.StreamResponse:
        front.authorizations.append(request.headers.get("Authorization", ""))
        parts = request.path.split("/")
        body = await request.read()
        proxied = len(parts) > 7 and parts[1:4] == ["api", "v1", "namespaces"]
        if proxied and parts[5] == "services" and parts[7] == "proxy":
            if front.denied:
                return web.json_response(
                    {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                     "message": 'services "x" is forbidden: cannot get resource "services/proxy"'},
                    status=403,
                )  # fmt: skip
            target = front.services.get((parts[4], parts[6]))
            if target is None:
                return web.json_response(
                    {"kind": "Status", "reason": "NotFound", "code": 404,
                     "message": f'services "{parts[6]}" not found'},
                    status=404,
                )  # fmt: skip
            url = target + "/" + "/".join(parts[8:])
        else:
            url = upstream + request.path
        async with aiohttp.ClientSession() as session, session.request(
            request.method, url, params=request.query, data=body or None,
            headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
        ) as answer:  # fmt: skip
            return web.Response(
                status=answer.status, body=await answer.read(),
                content_type=answer.content_type,
            )  # fmt: skip

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    front.url = f"http://127.0.0.1:{port}"
    try:
        yield front
    finally:
        await runner.cleanup()


@attrs.define(kw_only=True)
class Cluster(VersionedKubernetes):
    """Server-side apply of an absent object creates it (as kube-apiserver does); ``failing``
    path fragments answer 503 to writes."""

    failing: set[str] = attrs.field(factory=set)  # path fragments answered 503 (not GETs)
    applies: list[dict[str, Any]] = attrs.field(factory=list)  # every apply PATCH seen

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # The Python clients send watch=True; kube-apiserver parses bools with
        # strconv.ParseBool, kmock only recognises "true".
        if raw.query.get("watch") == "True":
            raw = raw.clone(rel_url=raw.rel_url.update_query(watch="true"))
        return await super().__call__(raw)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if request.method != "GET" and any(f in request.url.path for f in self.failing):
            return aiohttp.web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "code": 503,
                    "reason": "ServiceUnavailable",
                    "message": "injected",
                },
                status=503,
            )
        content_type = request.headers.get("Content-Type", "")
        if request.method == "PATCH" and content_type == "application/apply-patch+yaml":
            self.applies.append(
                {"path": request.url.path, "params": dict(request.params), "body": request.data}
            )
            assert request.resource is not None and request.name is not None
            key = (request.resource, request.namespace, request.name)
            async with self._lock:
                if key not in self._objects or self._objects[key].deleted:
                    self._objects[key] = request.data
                    raw = self._objects[key].raw
                    await self._buses[request.resource].put({"type": "ADDED", "object": raw})
                    return aiohttp.web.json_response(raw, status=201)
        response: aiohttp.web.StreamResponse = await super()._handle(request)
        return response
