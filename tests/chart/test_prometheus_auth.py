"""The reporter's Prometheus credentials come from Secrets as files, never from its arguments.

The rendered projected volume is materialised the way the kubelet would (each item's key of the
named Secret or ConfigMap written at its path), the rendered arguments are parsed by the real
reporter parser, and the real PromQL client then queries a real HTTP server with them.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from mco.promql import PromQLClient
from reporter.cli import parse_settings
from rulegen.cli import ControllerCommand
from rulegen.cli import parse_settings as rulegen_settings
from scripts.procs import free_port
from testkit.answers import T0, ok
from tests.chart.helm import chart, render

MOUNT = "/etc/mco/prometheus"
# What the cluster holds: the chart only ever sees the names, the test plays the kubelet.
SECRETS = {
    "prom-token": {"token": "tok-9f8e7d"},
    "prom-basic": {"pw": "pa55-w0rd"},
    "prom-ca": {"ca.crt": "CA PEM"},
    "prom-client": {"tls.crt": "CERT PEM", "tls.key": "KEY PEM"},
}
CONFIG_MAPS = {"prom-ca-cm": {"bundle.pem": "CA PEM FROM CM"}}
SECRET_TEXT = [
    v for store in (SECRETS, CONFIG_MAPS) for data in store.values() for v in data.values()
]


def reporter_pod(values: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = render(values).one("Deployment", "-reporter")["spec"]["template"]["spec"]
    return pod


def materialise(pod: dict[str, Any], root: Path) -> Path:
    """Write the projected credentials volume under ``root`` as the kubelet would mount it."""
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == MOUNT]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["projected"]["defaultMode"] == 0o440
    for source in volume["projected"]["sources"]:
        ((kind, ref),) = source.items()
        data = (SECRETS if kind == "secret" else CONFIG_MAPS)[ref["name"]]
        for item in ref["items"]:
            (root / item["path"]).write_text(data[item["key"]])
    return root


def reporter_args(pod: dict[str, Any], root: Path) -> list[str]:
    (container,) = pod["containers"]
    return [a.replace(MOUNT, str(root)) for a in container["args"]]


def no_secret_in_the_container_spec(pod: dict[str, Any]) -> None:
    (container,) = pod["containers"]
    text = json.dumps({"args": container["args"], "env": container.get("env", [])})
    for secret in SECRET_TEXT:
        assert secret not in text


async def seen_authorization(args: list[str]) -> str:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response(ok([]))

    app = web.Application()
    app.router.add_route("*", "/api/v1/query", handler)
    srv = TestServer(app, host="127.0.0.1", port=free_port())
    await srv.start_server()
    try:
        settings = parse_settings(
            [a for a in args if not a.startswith("--prometheus-url=")]
            + [f"--prometheus-url=http://127.0.0.1:{srv.port}"]
        )
        async with PromQLClient(settings.source) as client:
            await client.query("up", T0, dict)
    finally:
        await srv.close()
    (auth,) = seen
    return auth


async def test_bearer_token_from_a_secret(tmp_path: Path) -> None:
    pod = reporter_pod({"prometheus": {"auth": {"bearerToken": {"secretName": "prom-token"}}}})
    no_secret_in_the_container_spec(pod)
    args = reporter_args(pod, materialise(pod, tmp_path))
    assert f"--prometheus-bearer-token-file={tmp_path}/token" in args
    assert await seen_authorization(args) == "Bearer tok-9f8e7d"


async def test_basic_auth_password_from_a_secret(tmp_path: Path) -> None:
    values = {
        "prometheus": {
            "auth": {
                "basicAuth": {
                    "username": "mco",
                    "passwordSecretName": "prom-basic",
                    "passwordKey": "pw",
                }
            }
        }
    }
    pod = reporter_pod(values)
    no_secret_in_the_container_spec(pod)
    args = reporter_args(pod, materialise(pod, tmp_path))
    assert "--prometheus-basic-auth-user=mco" in args
    expected = base64.b64encode(b"mco:pa55-w0rd").decode()
    assert await seen_authorization(args) == f"Basic {expected}"


@pytest.mark.parametrize(
    ("ca", "content"),
    [
        ({"secretName": "prom-ca"}, "CA PEM"),
        ({"configMapName": "prom-ca-cm", "key": "bundle.pem"}, "CA PEM FROM CM"),
    ],
)
def test_ca_and_client_certificate_files(tmp_path: Path, ca: dict[str, str], content: str) -> None:
    values = {
        "prometheus": {
            "url": "https://thanos.monitoring.svc:9091",
            "tls": {"ca": ca, "clientCertSecretName": "prom-client", "insecureSkipVerify": True},
        }
    }
    pod = reporter_pod(values)
    no_secret_in_the_container_spec(pod)
    source = parse_settings(reporter_args(pod, materialise(pod, tmp_path))).source  # validated
    assert source.ca_file is not None and Path(source.ca_file).read_text() == content
    assert source.cert_file is not None and Path(source.cert_file).read_text() == "CERT PEM"
    assert source.key_file is not None and Path(source.key_file).read_text() == "KEY PEM"
    assert source.insecure_skip_verify is True


def test_no_credentials_no_volume_and_everything_validates() -> None:
    plain = reporter_pod({})
    assert not [a for a in plain["containers"][0]["args"] if "auth" in a or "-file=" in a]
    assert [v["name"] for v in plain["volumes"]] == ["tmp"]
    values = {
        "prometheus": {
            "auth": {"bearerToken": {"secretName": "prom-token"}},
            "tls": {"ca": {"configMapName": "prom-ca-cm"}, "clientCertSecretName": "prom-client"},
        }
    }
    deployment = render(values).one("Deployment", "-reporter")
    kubernetes_validate.validate(
        deployment, kubernetes_validate.utils.latest_version(), strict=True
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://mco:hunter2-pw@prometheus.example:9090",
        "http://hunter2-pw@prometheus-operated.monitoring.svc:9090/prefix",
        "http://user:hunter2-pw@[::1]:9090",
    ],
)
def test_credentials_in_the_url_are_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(helm.HelmError) as caught:
        render({"prometheus": {"url": url}})
    message = str(caught.value)
    assert "prometheus.url must not hold credentials" in message
    assert "prometheus.auth" in message
    assert "hunter2" not in message


def test_an_at_sign_after_the_host_is_not_credentials() -> None:
    url = "http://prometheus.monitoring.svc:9090/api/prom?tenant=a@b"
    (arg,) = [
        a
        for a in reporter_pod({"prometheus": {"url": url}})["containers"][0]["args"]
        if a.startswith("--prometheus-url=")
    ]
    assert arg == f"--prometheus-url={url}"


@pytest.mark.parametrize(
    ("prometheus", "reason"),
    [
        (
            {
                "auth": {
                    "bearerToken": {"secretName": "t"},
                    "basicAuth": {"username": "u", "passwordSecretName": "p"},
                }
            },
            "either bearerToken or basicAuth",
        ),
        ({"auth": {"basicAuth": {"username": "u"}}}, "needs both username and passwordSecretName"),
        (
            {"auth": {"basicAuth": {"passwordSecretName": "p"}}},
            "needs both username and passwordSecretName",
        ),
        (
            {"tls": {"ca": {"secretName": "a", "configMapName": "b"}}},
            "either secretName or configMapName",
        ),
    ],
)
def test_contradicting_credentials_are_refused(prometheus: dict[str, Any], reason: str) -> None:
    with pytest.raises(helm.HelmError, match=reason):
        render({"prometheus": prometheus})


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"prometheus": {"auth": {"bearerToken": {"secretName": "Not_A_Name"}}}}, "secretName"),
        ({"prometheus": {"auth": {"bearerToken": {"token": "x"}}}}, "token"),
        ({"prometheus": {"auth": {"basicAuth": {"password": "x"}}}}, "password"),
        ({"prometheus": {"tls": {"insecureSkipVerify": "yes"}}}, "insecureSkipVerify"),
    ],
)
def test_schema_refuses_inline_secrets_and_bad_names(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=where):
        chart().validate_schema(values)


def test_the_rulegen_guard_reads_prometheus_with_the_same_credentials(tmp_path: Path) -> None:
    """The controller's guard queries the reporter's Prometheus: same URL, same Secrets."""
    values = {
        "prometheus": {
            "auth": {
                "basicAuth": {
                    "username": "mco",
                    "passwordSecretName": "prom-basic",
                    "passwordKey": "pw",
                }
            }
        },
        "rulegen": {"guard": {"maxFilteredShare": 0.3}, "historyLimit": 7},
    }
    deployment = render(values).one("Deployment", "-rulegen")
    pod = deployment["spec"]["template"]["spec"]
    no_secret_in_the_container_spec(pod)
    args = reporter_args(pod, materialise(pod, tmp_path))
    command = rulegen_settings(args)
    assert isinstance(command, ControllerCommand)
    guard = command.controller.guard
    assert guard is not None and guard.max_filtered_share == 0.3
    assert guard.source.url == render(values).one("Deployment", "-reporter")["spec"]["template"][
        "spec"
    ]["containers"][0]["args"][0].removeprefix("--prometheus-url=")
    assert guard.source.basic_auth_user == "mco"
    assert (tmp_path / "password").read_text() == "pa55-w0rd"
    assert guard.source.basic_auth_password_file == f"{tmp_path}/password"
    assert command.controller.history_limit == 7
    # Off: no Prometheus flags at all, and no credentials mounted.
    off = render({**values, "rulegen": {"guard": {"enabled": False}}}).one("Deployment", "-rulegen")
    (container,) = off["spec"]["template"]["spec"]["containers"]
    assert not any(a.startswith("--prometheus-") for a in container["args"])
    plain = rulegen_settings(container["args"])
    assert isinstance(plain, ControllerCommand) and plain.controller.guard is None
