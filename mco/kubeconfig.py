"""The Kubernetes API client every MCO binary builds the same way."""

from __future__ import annotations

import os

import yaml
from kubernetes_asyncio import client, config


def kubeconfig_paths(kubeconfig: str | None) -> str:
    """``--kubeconfig``, else ``$KUBECONFIG`` (a list, as kubectl reads it), else
    ``~/.kube/config``: read at call time, not at import as the client's default is."""
    return kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


async def load_kubeconfig(
    configuration: client.Configuration, kubeconfig: str | None, context: str | None
) -> None:
    """``load_kube_config`` with a missing file as the error itself. The client would log a
    warning line ("Config not found") and then fail on the empty config it read instead
    ("Expected key current-context"): two lines, the second misleading, where every MCO
    binary says what is wrong in one. A file that is not YAML is a ConfigException too, not a
    traceback."""
    paths = kubeconfig_paths(kubeconfig)
    if not any(os.path.exists(os.path.expanduser(p)) for p in paths.split(os.pathsep) if p):
        raise config.ConfigException(f"no kubeconfig file at {paths}")
    try:
        await config.load_kube_config(
            config_file=paths, context=context, client_configuration=configuration
        )
    except yaml.YAMLError as exc:
        raise config.ConfigException(f"{paths}: not YAML: {exc}") from None


async def api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """``kubeconfig`` when given; else the pod's service account; else ``~/.kube/config``.

    Raises ``kubernetes_asyncio.config.ConfigException`` when none of them is usable.
    """
    configuration = client.Configuration()
    if kubeconfig is None and context is None:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            pass
        else:
            return client.ApiClient(configuration)
    await load_kubeconfig(configuration, kubeconfig, context)
    return client.ApiClient(configuration)
