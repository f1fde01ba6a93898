"""The Kubernetes API client every MCO controller builds the same way."""

from __future__ import annotations

from kubernetes_asyncio import client, config


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
    await config.load_kube_config(
        config_file=kubeconfig, context=context, client_configuration=configuration
    )
    return client.ApiClient(configuration)
