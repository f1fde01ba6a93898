"""What ``kubectl mco`` asks the API server: a pod, the report, and the extender through the
API server's service proxy (``/api/v1/namespaces/<ns>/services/<scheme>:<svc>:<port>/proxy/``),
so the user's kubeconfig and RBAC apply and the extender needs no exposure of its own.

Where that proxy is not usable (an API server that refuses loopback or unreachable endpoints,
RBAC without ``services/proxy``), the extender is asked at its own URL (``Direct``, e.g. through
``kubectl port-forward``), or the extender's own app judges a report file in this process
(``local_extender``): the same answers, from the same code."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
from aiohttp import web
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from mco.kubeconfig import load_kubeconfig
from mco.tlsclient import client_context
from reporter.schema import CLUSTER_REPORT_NAME, GROUP, PLURAL, VERSION, decode_reports


class PluginError(Exception):
    """What the user is told (exit 1): a pod that is not there, a proxy that refuses."""


class ConfigError(Exception):
    """A kubeconfig or context that cannot be used: bad configuration, exit 2 with one line
    as in every MCO binary."""


@dataclass(frozen=True, slots=True)
class Extender:
    """Where the chart's extender Service is (``--extender-*`` flags, chart defaults)."""

    namespace: str = "mco"
    service: str = "mco-extender"
    port: str = "http"  # the Service's port name (the chart names it after the scheme)
    scheme: str = "http"

    def proxy(self, path: str) -> str:
        target = quote(f"{self.scheme}:{self.service}:{self.port}", safe=":")
        return f"/api/v1/namespaces/{quote(self.namespace)}/services/{target}/proxy/{path}"


async def connect(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """The kubeconfig (``--kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config``) with
    ``--context``; inside a pod without one, its service account."""
    configuration = client.Configuration()
    try:
        await load_kubeconfig(configuration, kubeconfig, context)
    except (config.ConfigException, OSError, ValueError) as exc:
        if kubeconfig is not None or context is not None:
            raise ConfigError(f"cannot load the kubeconfig: {exc}") from None
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            raise ConfigError(f"no kubeconfig and not in a cluster: {exc}") from None
    return client.ApiClient(configuration)


async def _call(api: client.ApiClient, path: str, method: str = "GET", body: Any = None) -> Any:
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    response = await api.call_api(
        path,
        method,
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    raw = await response.read()
    if not 200 <= response.status <= 299:  # unread content raises nothing by itself
        error = ApiException(status=response.status, reason=response.reason)
        error.body = raw
        raise error
    try:
        return json.loads(raw)
    except ValueError:
        error = ApiException(status=response.status, reason="not JSON")
        error.body = raw[:300]
        raise error from None


def _failed(what: str, exc: ApiException, hint: str = "") -> PluginError:
    detail = ""
    try:
        said = json.loads(exc.body or b"{}")
        detail = str(said.get("message") or said.get("error") or "")
    except (ValueError, AttributeError, TypeError):
        detail = str(exc.body or "")[:300]
    text = f"{what}: {exc.status} {exc.reason}" + (f": {detail}" if detail else "")
    return PluginError(text + (f"\n{hint}" if hint else ""))


# Ask the extender: (path, POST body or None for GET, query) -> its JSON answer.
Ask = Callable[[str, Any, "dict[str, str] | None"], Awaitable[Any]]


async def pod(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    try:
        found: dict[str, Any] = await _call(
            api, f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
        )
    except ApiException as exc:
        raise _failed(f"cannot read pod {namespace}/{name}", exc) from None
    return found


async def report(api: client.ApiClient) -> dict[str, Any]:
    path = f"/apis/{GROUP}/{VERSION}/{PLURAL}/{CLUSTER_REPORT_NAME}"
    try:
        found: dict[str, Any] = await _call(api, path)
    except ApiException as exc:
        raise _failed(f"cannot read NodeInterferenceReport/{CLUSTER_REPORT_NAME}", exc) from None
    return found


_PROXY_HINT = (
    "kubectl mco reaches the extender through the API server's service proxy: it needs RBAC "
    "`get` and `create` on `services/proxy` in the extender's namespace, the Service "
    "(--extender-namespace, --extender-service, --extender-port, --extender-scheme) and, with "
    "networkPolicy.enabled, the API server's addresses admitted (docs/user-guide.md)."
)


def through_proxy(api: client.ApiClient, where: Extender) -> Ask:
    async def ask(path: str, body: Any = None, query: dict[str, str] | None = None) -> Any:
        return await extender(api, where, path, body, query)

    return ask


async def extender(
    api: client.ApiClient,
    where: Extender,
    path: str,
    body: Any = None,
    query: dict[str, str] | None = None,
) -> Any:
    """The extender's JSON answer at ``path``: POST with ``body``, else GET."""
    url = where.proxy(path) + (f"?{urlencode(query)}" if query else "")
    try:
        return await _call(api, url, "POST" if body is not None else "GET", body)
    except ApiException as exc:
        raise _failed(f"the extender did not answer {path}", exc, _PROXY_HINT) from None


@dataclass(frozen=True, slots=True)
class Direct:
    """The extender at its own URL (``--extender-url``, e.g. ``kubectl port-forward``), with the
    TLS and basic-auth options the other MCO clients offer."""

    url: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure_skip_verify: bool = False
    basic_auth_user: str | None = None
    basic_auth_password_file: str | None = None
    timeout: float = 30.0

    def validate(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--extender-url must be an http(s) URL, got {self.url!r}")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError(
                "a client certificate needs both --extender-cert-file and --extender-key-file"
            )
        if self.basic_auth_password_file and not self.basic_auth_user:
            raise ValueError("--extender-basic-auth-password-file needs --extender-basic-auth-user")


_DIRECT_HINT = (
    "kubectl mco asked the extender at --extender-url: check the URL (with kubectl "
    "port-forward: `kubectl -n mco port-forward svc/mco-extender 9848`), https with "
    "--extender-ca-file or --extender-insecure-skip-verify, and --extender-basic-auth-* where "
    "the extender's web config requires a password."
)


@contextlib.asynccontextmanager
async def direct(where: Direct) -> AsyncIterator[Ask]:
    """An ``Ask`` that talks to the extender at ``where.url``."""
    auth = None
    if where.basic_auth_user:
        try:
            password = (
                Path(where.basic_auth_password_file).read_text().strip()
                if where.basic_auth_password_file
                else ""
            )
        except OSError as exc:
            raise PluginError(f"cannot read --extender-basic-auth-password-file: {exc}") from None
        auth = aiohttp.BasicAuth(where.basic_auth_user, password)
    tls: Any = False
    if where.url.startswith("https:"):
        try:
            tls = client_context(
                ca_file=where.ca_file,
                cert_file=where.cert_file,
                key_file=where.key_file,
                insecure_skip_verify=where.insecure_skip_verify,
            )
        except (OSError, ValueError) as exc:
            raise PluginError(f"cannot set up TLS to the extender: {exc}") from None
    base = where.url.rstrip("/") + "/"
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=tls),
        auth=auth,
        timeout=aiohttp.ClientTimeout(total=where.timeout),
    ) as session:

        async def ask(path: str, body: Any = None, query: dict[str, str] | None = None) -> Any:
            url = base + path + (f"?{urlencode(query)}" if query else "")
            method = "POST" if body is not None else "GET"
            try:
                async with session.request(method, url, json=body) as response:
                    raw = await response.read()
                    status, reason = response.status, response.reason or ""
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise PluginError(
                    f"cannot reach the extender at {where.url}: {exc}\n{_DIRECT_HINT}"
                ) from None
            error = ApiException(status=status, reason=reason)
            error.body = raw[:300]
            if not 200 <= status <= 299:
                raise _failed(f"the extender did not answer {path}", error, _DIRECT_HINT)
            try:
                return json.loads(raw)
            except ValueError:
                error.reason = "not JSON"
                raise _failed(f"the extender did not answer {path}", error) from None

        yield ask


@contextlib.asynccontextmanager
async def local_extender(report_file: Path, load_timeout: float = 10.0) -> AsyncIterator[Ask]:
    """The extender's own app, in this process on a loopback port, reading ``report_file``
    as ``mco-extender --report-file`` does: its verdicts and explanations, not a second judge.
    Staleness is judged as the extender would now (an old file's entries are stale)."""
    # Imported here: the extender's app is only needed for --report-file.
    from extender.app import STORE, make_app
    from extender.config import ExtenderConfig, SourceConfig

    try:
        decode_reports(report_file.read_bytes())  # the extender's own decoder: a clear error
    except (OSError, ValueError) as exc:
        raise PluginError(f"cannot read the report file {report_file}: {exc}") from None
    app = make_app(ExtenderConfig(source=SourceConfig(report_file=str(report_file))))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        deadline = time.monotonic() + load_timeout
        while not app[STORE].loaded:
            if time.monotonic() > deadline:
                raise PluginError(f"the extender did not load the report file {report_file}")
            await asyncio.sleep(0.02)
        async with direct(Direct(f"http://{host}:{port}")) as ask:
            yield ask
    finally:
        await runner.cleanup()
