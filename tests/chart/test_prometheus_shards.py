"""``prometheus.shards``: one ``--prometheus-url`` per shard, parsed by the real reporter parser
into one source each with the same credentials, refused with credentials in any URL (without
echoing them), and nothing else in the release changes (NetworkPolicies, volumes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

from reporter.cli import parse_settings
from tests.chart.helm import render
from tests.chart.test_prometheus_auth import materialise, reporter_args, reporter_pod

SHARDS = [
    "http://mco-prometheus-shard-0.monitoring.svc:9090",
    "http://mco-prometheus-shard-1.monitoring.svc:9090",
    "http://mco-prometheus-shard-2.monitoring.svc:9090",
]


def url_args(pod: dict[str, Any]) -> list[str]:
    return [a for a in pod["containers"][0]["args"] if a.startswith("--prometheus-url=")]


def test_one_url_flag_per_shard_each_with_the_same_credentials(tmp_path: Path) -> None:
    values = {
        "prometheus": {
            "shards": SHARDS,
            "auth": {"bearerToken": {"secretName": "prom-token"}},
            "tls": {"ca": {"secretName": "prom-ca"}},
        }
    }
    pod = reporter_pod(values)
    assert url_args(pod) == [f"--prometheus-url={u}" for u in SHARDS]
    settings = parse_settings(reporter_args(pod, materialise(pod, tmp_path)))
    assert [s.url for s in settings.sources] == SHARDS
    assert {s.bearer_token_file for s in settings.sources} == {f"{tmp_path}/token"}
    assert {s.ca_file for s in settings.sources} == {f"{tmp_path}/ca.crt"}


def test_the_notes_name_every_shard() -> None:
    notes = render({"prometheus": {"shards": SHARDS}}).notes
    assert f"querying {', '.join(SHARDS)}" in notes


def test_without_shards_the_one_url() -> None:
    pod = reporter_pod({"prometheus": {"url": "http://thanos-query.monitoring.svc:9090"}})
    assert url_args(pod) == ["--prometheus-url=http://thanos-query.monitoring.svc:9090"]
    assert len(parse_settings(pod["containers"][0]["args"]).sources) == 1


def test_shards_change_nothing_else_in_the_release() -> None:
    plain = render({"prometheus": {"url": SHARDS[0]}})
    sharded = render({"prometheus": {"shards": SHARDS}})
    for kind in ("NetworkPolicy", "Service", "Role", "ClusterRole"):
        assert sharded.of_kind(kind) == plain.of_kind(kind), kind
    a = plain.one("Deployment", "-reporter")["spec"]["template"]["spec"]
    b = sharded.one("Deployment", "-reporter")["spec"]["template"]["spec"]
    assert a["volumes"] == b["volumes"]
    assert [x for x in b["containers"][0]["args"] if not x.startswith("--prometheus-url=")] == [
        x for x in a["containers"][0]["args"] if not x.startswith("--prometheus-url=")
    ]


def test_credentials_in_a_shard_url_are_refused_without_echoing_them() -> None:
    with pytest.raises(helm.HelmError) as caught:
        render({"prometheus": {"shards": [SHARDS[0], "http://mco:hunter2-pw@shard-1:9090"]}})
    assert "must not hold credentials" in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("shards", [[SHARDS[0], SHARDS[0]], ["shard-0:9090"]])
def test_repeated_or_malformed_shard_urls_are_refused(shards: list[str]) -> None:
    with pytest.raises(helm.HelmError):
        render({"prometheus": {"shards": shards}})


DISABLE_SHARDING = {"targetLabel": "__tmp_disable_sharding", "replacement": "true"}


def test_every_operator_shard_scrapes_the_reporter_by_default_and_only_the_reporter() -> None:
    rendered = render()
    (endpoint,) = rendered.one("ServiceMonitor", "-reporter")["spec"]["endpoints"]
    assert endpoint["relabelings"] == [DISABLE_SHARDING]
    for name in ("-exporter", "-rulegen", "-extender"):
        for ep in rendered.one("ServiceMonitor", name)["spec"]["endpoints"]:
            assert DISABLE_SHARDING not in ep.get("relabelings", []), name


def test_all_shards_off_leaves_the_reporter_to_one_shard() -> None:
    rendered = render({"reporter": {"serviceMonitor": {"allShards": False}}})
    (endpoint,) = rendered.one("ServiceMonitor", "-reporter")["spec"]["endpoints"]
    assert "relabelings" not in endpoint


@pytest.mark.parametrize("component", ["rulegen", "extender"])
def test_all_shards_is_there_for_the_other_components_when_asked(component: str) -> None:
    rendered = render({component: {"serviceMonitor": {"allShards": True}}})
    (endpoint,) = rendered.one("ServiceMonitor", f"-{component}")["spec"]["endpoints"]
    assert endpoint["relabelings"] == [DISABLE_SHARDING]
