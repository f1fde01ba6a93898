"""What ``kubectl mco`` asks the API server: a pod, the report, and the extender through the
API server's service proxy (``/api/v1/namespaces/<ns>/services/<scheme>:<svc>:<port>/proxy/``),
so the user's kubeconfig and RBAC apply and the extender needs no exposure of its own."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from mco.kubeconfig import load_kubeconfig
from reporter.schema import CLUSTER_REPORT_NAME, GROUP, PLURAL, VERSION


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
