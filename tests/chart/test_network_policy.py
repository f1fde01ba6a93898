"""NetworkPolicies: each MCO pod admits only Prometheus (and, to the extender, the schedulers),
on its own port. The policies are evaluated with the NetworkPolicy rules (a pod is isolated by
the policies that select it; a connection passes when one rule's peers and ports match)."""

from __future__ import annotations

import ipaddress
import textwrap
from dataclasses import dataclass, field
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests.chart.helm import (
    NAMESPACE,
    SCENARIOS,
    chart,
    merge,
    render,
    render_scenario,
    scenario_values,
)

# The port each workload serves, by component (the chart's defaults).
PORTS = {"exporter": 9847, "reporter": 9849, "rulegen": 9850, "extender": 9848}
# The extender's scheduler routes, on a port of their own (extender.schedulerPort).
SCHEDULER_PORT = 9851


@dataclass(frozen=True)
class Source:
    """A client: its pod labels, its namespace and that namespace's labels, its address."""

    labels: dict[str, str]
    namespace: str
    ip: str = "10.244.7.7"
    namespace_labels: dict[str, str] = field(default_factory=dict)

    def ns_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels}


PROMETHEUS = Source(
    {"app.kubernetes.io/name": "prometheus", "prometheus": "kps-prometheus"}, "monitoring"
)
VOLCANO = Source({"app": "volcano-scheduler"}, "volcano-system")
KUBE_SCHEDULER = Source({"component": "kube-scheduler", "tier": "control-plane"}, "kube-system")
# Everything else: a pod of the release namespace, a look-alike elsewhere, a pod in monitoring.
STRANGERS = [
    Source({"app": "curl"}, NAMESPACE),
    Source({"app": "volcano-scheduler"}, "default"),
    Source({"app.kubernetes.io/name": "prometheus"}, "default"),
    Source({"app.kubernetes.io/name": "grafana"}, "monitoring"),
    Source({"component": "kube-scheduler"}, "default"),
]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        present, value = expr["key"] in labels, labels.get(expr["key"])
        match expr["operator"]:
            case "In":
                ok = value in expr["values"]
            case "NotIn":
                ok = value not in expr["values"]
            case "Exists":
                ok = present
            case _:
                ok = not present
        if not ok:
            return False
    return True


def peer_admits(peer: dict[str, Any], src: Source, policy_ns: str) -> bool:
    if "ipBlock" in peer:
        net = ipaddress.ip_network(peer["ipBlock"]["cidr"])
        ip = ipaddress.ip_address(src.ip)
        excepted = any(ip in ipaddress.ip_network(e) for e in peer["ipBlock"].get("except", []))
        return ip in net and not excepted
    if "namespaceSelector" in peer:
        ns_ok = selects(peer["namespaceSelector"], src.ns_labels())
    else:
        ns_ok = src.namespace == policy_ns
    return ns_ok and selects(peer.get("podSelector", {}), src.labels)


def admitted(
    policies: list[dict[str, Any]], pod_labels: dict[str, str], src: Source, port: int
) -> bool:
    """Would a connection from ``src`` to ``port`` of a pod with ``pod_labels`` pass?"""
    selecting = [p for p in policies if selects(p["spec"]["podSelector"], pod_labels)]
    if not selecting:
        return True  # not isolated
    for policy in selecting:
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        for rule in policy["spec"].get("ingress") or []:
            # A rule without `from` (or `ports`) admits every source (port); the chart never
            # renders one, asserted in test_no_rule_admits_everyone.
            peers_ok = any(
                peer_admits(p, src, policy["metadata"]["namespace"]) for p in rule["from"]
            )
            ports_ok = any(p["port"] == port and p["protocol"] == "TCP" for p in rule["ports"])
            if peers_ok and ports_ok:
                return True
    return False


def workloads(rendered: Any) -> dict[str, tuple[dict[str, str], set[int]]]:
    """component -> (pod labels, container ports) of every MCO workload rendered."""
    out = {}
    for obj, container in rendered.containers():
        labels = obj["spec"]["template"]["metadata"]["labels"]
        component = labels["app.kubernetes.io/component"]
        if component in PORTS:
            out[component] = (labels, {p["containerPort"] for p in container["ports"]})
    return out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_workload_admits_only_prometheus_and_the_schedulers(scenario: str) -> None:
    rendered = render_scenario(scenario)
    policies = rendered.of_kind("NetworkPolicy")
    pods = workloads(rendered)
    assert {p["metadata"]["name"].removeprefix("mco-") for p in policies} == set(pods)
    for component, (labels, ports) in pods.items():
        # Exactly one policy selects the workload's pods, and no other MCO workload's.
        (mine,) = [p for p in policies if selects(p["spec"]["podSelector"], labels)]
        assert mine["metadata"]["name"] == f"mco-{component}"
        assert mine["metadata"]["namespace"] == NAMESPACE
        port = PORTS[component]
        extender = component == "extender"
        assert ports == ({port, SCHEDULER_PORT} if extender else {port})
        assert {p["port"] for r in mine["spec"]["ingress"] for p in r["ports"]} == ports
        assert admitted(policies, labels, PROMETHEUS, port), component
        # The schedulers reach only the scheduler port, Prometheus only the metrics port.
        assert not admitted(policies, labels, VOLCANO, port)
        assert not admitted(policies, labels, KUBE_SCHEDULER, port)
        if extender:
            assert admitted(policies, labels, VOLCANO, SCHEDULER_PORT)
            assert admitted(policies, labels, KUBE_SCHEDULER, SCHEDULER_PORT)
            assert not admitted(policies, labels, PROMETHEUS, SCHEDULER_PORT)
        for stranger in STRANGERS:
            for p in ports:
                assert not admitted(policies, labels, stranger, p), (component, stranger)
        # Nothing but the port: Prometheus on another port of the same pod is refused.
        assert not admitted(policies, labels, PROMETHEUS, port + 1000)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_policies_validate_against_the_kubernetes_schema(scenario: str) -> None:
    for policy in render_scenario(scenario).of_kind("NetworkPolicy"):
        for version in ("1.25.0", kubernetes_validate.utils.latest_version()):
            kubernetes_validate.validate(policy, version, strict=True)


def test_turned_off_by_a_value() -> None:
    for scenario in SCENARIOS:
        values = {**scenario_values(scenario), "networkPolicy": {"enabled": False}}
        assert render(values).of_kind("NetworkPolicy") == []
    assert render_scenario("full").of_kind("NetworkPolicy")


def test_policies_follow_ports_release_and_rulegen_rendering() -> None:
    values = {
        "exporter": {"port": 19847},
        "extender": {"port": 19848},
        "reporter": {"metricsPort": 19849},
    }
    rendered = render(values, release="edge")
    pods = workloads(rendered)
    policies = rendered.of_kind("NetworkPolicy")
    for component, (labels, ports) in pods.items():
        (port,) = ports - {SCHEDULER_PORT}
        assert admitted(policies, labels, PROMETHEUS, port), component
    assert {p["metadata"]["name"] for p in policies} == {f"edge-mco-{c}" for c in pods}
    # Rendered offline, the rulegen controller and its policy are there; turned off, neither.
    assert "mco-rulegen" in render({}, monitoring=False).names("NetworkPolicy")
    bare = render({"rulegen": {"enabled": False}}, monitoring=False)
    assert "mco-rulegen" not in bare.names("NetworkPolicy")
    assert "mco-reporter" in bare.names("NetworkPolicy")


def test_custom_peers_kube_scheduler_on_the_host_network() -> None:
    host_scheduler = Source({}, "", ip="10.0.0.11")
    values = {
        "networkPolicy": {
            "schedulers": [{"ipBlock": {"cidr": "10.0.0.0/24", "except": ["10.0.0.128/25"]}}],
            "prometheus": [
                {
                    "namespaceSelector": {"matchLabels": {"team": "obs"}},
                    "podSelector": {
                        "matchExpressions": [{"key": "app", "operator": "In", "values": ["vm"]}]
                    },
                }
            ],
        }
    }
    rendered = render(values)
    policies = rendered.of_kind("NetworkPolicy")
    labels, _ = workloads(rendered)["extender"]
    assert admitted(policies, labels, host_scheduler, SCHEDULER_PORT)
    assert not admitted(policies, labels, host_scheduler, 9848)
    assert not admitted(policies, labels, Source({}, "", ip="10.0.0.200"), SCHEDULER_PORT)
    assert not admitted(policies, labels, VOLCANO, SCHEDULER_PORT)  # the defaults were replaced
    vm = Source({"app": "vm"}, "metrics", namespace_labels={"team": "obs"})
    assert admitted(policies, labels, vm, 9848)
    assert not admitted(policies, labels, PROMETHEUS, 9848)
    for policy in policies:
        kubernetes_validate.validate(
            policy, kubernetes_validate.utils.latest_version(), strict=True
        )


def test_one_port_for_every_route_with_scheduler_port_zero() -> None:
    """extender.schedulerPort 0: the schedulers and Prometheus share the one port, as before,
    and the scheduler ConfigMaps point at it."""
    rendered = render({"extender": {"schedulerPort": 0}})
    policies = rendered.of_kind("NetworkPolicy")
    labels, ports = workloads(rendered)["extender"]
    assert ports == {9848}
    for src in (VOLCANO, KUBE_SCHEDULER, PROMETHEUS):
        assert admitted(policies, labels, src, 9848)
    (deployment,) = [o for o, _ in rendered.containers() if o["metadata"]["name"] == "mco-extender"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--web.scheduler-listen-address") for a in args)
    text = yaml.safe_dump(rendered.of_kind("ConfigMap"))
    assert ".svc:9848/volcano" in text and ".svc:9848/scheduler" in text


def test_the_schedulers_are_pointed_at_the_scheduler_port() -> None:
    """Every template that sends a scheduler to the extender uses the scheduler port: the
    extender's flag, its container and Service ports, both ConfigMaps' URLs."""
    rendered = render({"extender": {"schedulerPort": 19851, "service": {"schedulerPort": 443}}})
    (deployment,) = [o for o, _ in rendered.containers() if o["metadata"]["name"] == "mco-extender"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--web.scheduler-listen-address=:19851" in container["args"]
    assert {"name": "scheduler", "containerPort": 19851} in [
        {k: p[k] for k in ("name", "containerPort")} for p in container["ports"]
    ]
    (service,) = [s for s in rendered.of_kind("Service") if s["metadata"]["name"] == "mco-extender"]
    assert {"name": "scheduler", "port": 443, "targetPort": "scheduler", "protocol": "TCP"} in (
        service["spec"]["ports"]
    )
    text = yaml.safe_dump(rendered.of_kind("ConfigMap"))
    assert ".svc:443/volcano" in text and ".svc:443/scheduler" in text
    assert ".svc:9848/volcano" not in text and ".svc:9848/scheduler" not in text
    labels, _ = workloads(rendered)["extender"]
    policies = rendered.of_kind("NetworkPolicy")
    assert admitted(policies, labels, VOLCANO, 19851)
    assert not admitted(policies, labels, VOLCANO, 9848)


def test_no_rule_admits_everyone() -> None:
    """Empty peer lists deny; the chart never renders a rule without `from` or `ports`."""
    rendered = render({"networkPolicy": {"prometheus": [], "schedulers": []}})
    policies = rendered.of_kind("NetworkPolicy")
    assert len(policies) == 4
    for policy in policies:
        assert policy["spec"]["ingress"] == []
    for component, (labels, ports) in workloads(rendered).items():
        for port in ports:
            assert not admitted(policies, labels, PROMETHEUS, port), component
    for scenario in SCENARIOS:
        for policy in render_scenario(scenario).of_kind("NetworkPolicy"):
            for rule in policy["spec"]["ingress"]:
                assert rule["from"] and rule["ports"]


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"networkPolicy": {"prometheus": [{}]}}, "prometheus"),
        ({"networkPolicy": {"schedulers": [{"podSelectr": {}}]}}, "podSelectr"),
        ({"networkPolicy": {"schedulers": [{"ipBlock": {"cidr": "10.0.0.1"}}]}}, "cidr"),
        (
            {
                "networkPolicy": {
                    "schedulers": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]
                }
            },
            "schedulers",
        ),
        ({"networkPolicy": {"enabled": "yes"}}, "enabled"),
    ],
)
def test_schema_rejects_malformed_peers(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=where):
        chart().validate_schema(values)


def test_notes_name_the_selectors_to_adjust() -> None:
    notes = render_scenario("full").notes
    assert 'Prometheus in namespace "monitoring"' in notes
    assert "ipBlock" in notes and "networkPolicy.schedulers" in notes
    # existing-volcano has no kube-scheduler config: no host-network hint there.
    assert "ipBlock" not in render_scenario("existing-volcano").notes
    off = render({**scenario_values("full"), "networkPolicy": {"enabled": False}}).notes
    assert "NetworkPolic" not in off


HOST_SCHEDULER = Source({}, "", ip="10.0.0.11")  # kubeadm's static pod: its node's address
BLOCKED = "has no ipBlock peer"


def _values_from_notes(notes: str) -> dict[str, Any]:
    """The values block the warning prints, its placeholder filled in as a user would."""
    lines = notes.splitlines()
    start = lines.index("    networkPolicy:")
    block = []
    for line in lines[start:]:
        if not line.strip():
            break
        block.append(line)
    text = textwrap.dedent("\n".join(block)).replace("<control-plane node IP>", "10.0.0.11")
    values: dict[str, Any] = yaml.safe_load(text)
    return values


VOLCANO_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "volcano-system"}},
    "podSelector": {"matchLabels": {"app": "volcano-scheduler"}},
}


@pytest.mark.parametrize(
    "schedulers",
    [None, [], [VOLCANO_PEER]],
    ids=["default", "none", "volcano-only"],
)
def test_notes_warn_when_a_host_network_kube_scheduler_is_blocked(
    schedulers: list[dict[str, Any]] | None,
) -> None:
    """With the kube-scheduler ConfigMap and no ipBlock peer, a kube-scheduler on the host
    network is dropped and (the extender being ignorable) every cycle waits out httpTimeout:
    NOTES says so and prints the value to set, which admits it and keeps every peer admitted
    before; with it set, the warning is gone."""
    values: dict[str, Any] = {"scheduler": {"kubeScheduler": {"httpTimeout": "3s"}}}
    if schedulers is not None:
        values["networkPolicy"] = {"schedulers": schedulers}
    before = render(values)
    labels, _ = workloads(before)["extender"]
    assert not admitted(before.of_kind("NetworkPolicy"), labels, HOST_SCHEDULER, SCHEDULER_PORT)
    assert BLOCKED in before.notes and "waits out httpTimeout (3s)" in before.notes

    after = render(merge(values, _values_from_notes(before.notes)))
    policies = after.of_kind("NetworkPolicy")
    assert admitted(policies, labels, HOST_SCHEDULER, SCHEDULER_PORT)
    assert not admitted(policies, labels, Source({}, "", ip="10.0.0.12"), 9848)
    for src in (VOLCANO, KUBE_SCHEDULER, PROMETHEUS, *STRANGERS):
        was = admitted(before.of_kind("NetworkPolicy"), labels, src, 9848)
        assert admitted(policies, labels, src, 9848) is was, src
    assert BLOCKED not in after.notes and "ipBlock peers" in after.notes


def test_no_host_network_warning_without_the_config_or_the_policy() -> None:
    assert BLOCKED in render({}).notes
    assert BLOCKED not in render({"scheduler": {"kubeScheduler": {"configMap": False}}}).notes
    assert BLOCKED not in render({"networkPolicy": {"enabled": False}}).notes
    assert BLOCKED not in render({"extender": {"enabled": False}}).notes
