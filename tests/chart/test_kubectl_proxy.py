"""``kubectl mco`` reaches the chart's extender Service through the API server's service proxy:
its defaults must name that Service, its namespace and its port (named after the scheme)."""

from __future__ import annotations

import pytest

from kubectl_mco.api import Extender
from tests.chart.helm import render


@pytest.mark.parametrize(
    ("values", "scheme"),
    [({}, "http"), ({"extender": {"tls": {"enabled": True, "secretName": "x"}}}, "https")],
)
def test_the_proxy_path_names_the_charts_service_and_port(values, scheme):
    rendered = render(values, release="mco", namespace="mco")
    service = rendered.one("Service", "-extender")
    # /v1/* stay on the main port; the scheduler routes have a port of their own.
    [port] = [p for p in service["spec"]["ports"] if p["name"] != "scheduler"]
    defaults = Extender()
    where = Extender(defaults.namespace, defaults.service, scheme, scheme)
    assert (service["metadata"]["namespace"], service["metadata"]["name"]) == (
        defaults.namespace, defaults.service
    )  # fmt: skip
    assert port["name"] == where.port
    assert where.proxy("v1/explain") == (
        f"/api/v1/namespaces/mco/services/{scheme}:mco-extender:{scheme}/proxy/v1/explain"
    )
