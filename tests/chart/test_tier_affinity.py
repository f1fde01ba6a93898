"""The zero-call scoring path in the chart: the reporter's tier-label mode
(``reporter.tierLabels``) and the MutatingAdmissionPolicy (``scheduler.tierAffinity``) that gives
pods of the listed workload classes a preferred node affinity on that label.

The policy's CEL is evaluated here with cel-python on sample pods: the match conditions and the
variables as written; the mutation after one textual step, because it builds Kubernetes-only
typed values (``JSONPatch{...}``, ``Object.spec.affinity{...}``) that cel-python does not have:
those constructors become map literals with the same fields, and the JSON patches it returns are
applied to the pod. That the API server compiles the policy and mutates pods so is checked by
hand against a real kube-apiserver v1.36 (docs/helm.md, "Scoring without the extender")."""

from __future__ import annotations

import copy
import re
from typing import Any

import celpy
import pytest
from celpy import celtypes
from celpy.adapter import json_to_cel

from mco.policy import WORKLOAD_CLASS_LABEL
from reporter.cli import build_parser as reporter_parser
from reporter.cli import parse_settings
from reporter.tiers import TIER_LABEL
from tests.chart.helm import Rendered, merge, render, scenario_values

V1 = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
V1BETA1 = "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"
ON = {"scheduler": {"tierAffinity": {"enabled": True}}}
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def policy(rendered: Rendered) -> tuple[dict[str, Any], dict[str, Any]]:
    return rendered.one("MutatingAdmissionPolicy"), rendered.one("MutatingAdmissionPolicyBinding")


def test_off_by_default_nothing_rendered_and_no_node_rights() -> None:
    r = render(scenario_values("full"), cluster=True, apis=(V1,))
    assert not r.of_kind("MutatingAdmissionPolicy") and not r.of_kind(
        "MutatingAdmissionPolicyBinding"
    )
    args = r.one("Deployment", "-reporter")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not reporter_parser().parse_args(args).tier_label_nodes
    rules = r.one("ClusterRole", "-reporter")["rules"]
    assert not any("nodes" in rule["resources"] for rule in rules)


def test_tier_labels_pass_every_value_and_gain_node_patch_only_then() -> None:
    values = {
        "reporter": {
            "tierLabels": {"enabled": True, "mediumAt": 0.25, "hold": "5m", "qps": 2, "burst": 3}
        }
    }
    r = render(merge(scenario_values("full"), values))
    args = r.one("Deployment", "-reporter")["spec"]["template"]["spec"]["containers"][0]["args"]
    settings = parse_settings(args)
    assert settings.tiers is not None and settings.taint is None
    rule = settings.tiers.rule
    assert (rule.medium_at, rule.high_at, rule.margin, rule.hold) == (0.25, 0.6, 0.1, 300.0)
    assert (settings.tiers.qps, settings.tiers.burst, settings.tiers.resync) == (2, 3, 600.0)
    node_rules = [
        rule for rule in r.one("ClusterRole", "-reporter")["rules"] if "nodes" in rule["resources"]
    ]
    assert node_rules == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}
    ]


@pytest.mark.parametrize(
    ("apis", "cluster", "version"),
    [
        ((), False, "admissionregistration.k8s.io/v1"),  # offline: the GA API
        ((V1,), True, "admissionregistration.k8s.io/v1"),  # 1.36+
        ((V1BETA1,), True, "admissionregistration.k8s.io/v1beta1"),  # 1.34-1.35, beta turned on
        ((V1, V1BETA1), True, "admissionregistration.k8s.io/v1"),
    ],
)
def test_the_policy_follows_the_served_api(
    apis: tuple[str, ...], cluster: bool, version: str
) -> None:
    mutating, binding = policy(render(ON, cluster=cluster, apis=apis))
    assert mutating["apiVersion"] == binding["apiVersion"] == version
    assert binding["spec"]["policyName"] == mutating["metadata"]["name"] == "mco-tier-affinity"
    assert "matchResources" not in binding["spec"]  # every namespace by default
    spec = mutating["spec"]
    assert spec["failurePolicy"] == "Ignore"  # a preference never blocks a pod
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
    assert [m["patchType"] for m in spec["mutations"]] == ["JSONPatch"]


def test_a_cluster_without_the_api_fails_the_render_by_name() -> None:
    with pytest.raises(Exception, match=r"scheduler\.tierAffinity\.enabled.*MutatingAdmission"):
        render(ON, cluster=True)
    with pytest.raises(Exception, match="at least one class"):
        render(merge(ON, {"scheduler": {"tierAffinity": {"classes": None}}}), apis=(V1,))


def test_a_namespace_selector_goes_to_the_binding() -> None:
    selector = {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}
    values = merge(ON, {"scheduler": {"tierAffinity": {"namespaceSelector": selector}}})
    _, binding = policy(render(values))
    assert binding["spec"]["matchResources"] == {"namespaceSelector": selector}


# --- the CEL, on sample pods ---------------------------------------------------------------

_ENV = celpy.Environment()


def _run(expression: str, activation: dict[str, Any]) -> Any:
    program = _ENV.program(_ENV.compile(expression))
    return program.evaluate({k: json_to_cel(v) for k, v in activation.items()})


def _plain(value: Any) -> Any:
    """cel-python's values as JSON ones."""
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, celtypes.MapType | dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType | list):
        return [_plain(v) for v in value]
    return value


def _untyped(expression: str) -> str:
    """Kubernetes' typed constructors as map literals: ``JSONPatch{op: "add"}`` and
    ``Object.spec.affinity{nodeAffinity: x}`` become ``{"op": "add"}``, ``{"nodeAffinity": x}``."""
    text = re.sub(r"\b(?:JSONPatch|Object(?:\.\w+)*)\{", "{", expression)
    return re.sub(r"(?<=[{,])(\s*)(\w+):", r'\1"\2":', text)


def _apply(pod: dict[str, Any], patches: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``add`` (the only op the policy uses): a member, or ``-`` to append."""
    out = copy.deepcopy(pod)
    for patch in patches:
        assert patch["op"] == "add"
        *parents, last = patch["path"].lstrip("/").split("/")
        target: Any = out
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if last == "-":
            target.append(copy.deepcopy(patch["value"]))
        else:
            assert last not in target, f"add would replace {patch['path']}"
            target[last] = copy.deepcopy(patch["value"])
    return out


def admit(spec: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the policy leaves it: unchanged unless every match condition holds."""
    if not all(bool(_run(m["expression"], {"object": pod})) for m in spec["matchConditions"]):
        return pod
    variables: dict[str, Any] = {}
    for var in spec["variables"]:
        variables[var["name"]] = _plain(
            _run(var["expression"], {"object": pod, "variables": variables})
        )
    for mutation in spec["mutations"]:
        expression = _untyped(mutation["jsonPatch"]["expression"])
        patches = _plain(_run(expression, {"object": pod, "variables": variables}))
        pod = _apply(pod, patches)
    return pod


def pod(cls: str | None, affinity: dict[str, Any] | None = None) -> dict[str, Any]:
    labels = {"app": "x"} | ({WORKLOAD_CLASS_LABEL: cls} if cls else {})
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if affinity is not None:
        spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": labels}, "spec": spec}


def term(weight: int, operator: str, tiers: list[str], key: str = TIER_LABEL) -> dict[str, Any]:
    expr = {"key": key, "operator": operator, "values": tiers}
    return {"weight": weight, "preference": {"matchExpressions": [expr]}}


REQUIRED = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["x"]}]}
        ]
    }
}
ANTI = {"podAntiAffinity": {PREFERRED: [{"weight": 1, "podAffinityTerm": {"topologyKey": "h"}}]}}


def test_the_shipped_classes_get_their_term_and_nothing_else_changes() -> None:
    spec = policy(render(ON))[0]["spec"]
    low, not_high = term(50, "In", ["low"]), term(50, "NotIn", ["high"])
    zone = term(10, "In", ["a"], key="zone")
    cases = [
        (pod("latency-sensitive"), {"nodeAffinity": {PREFERRED: [low]}}),
        (pod("batch"), {"nodeAffinity": {PREFERRED: [not_high]}}),
        (
            pod("batch", {"nodeAffinity": REQUIRED}),
            {"nodeAffinity": {**REQUIRED, PREFERRED: [not_high]}},
        ),
        (
            pod("latency-sensitive", {"nodeAffinity": {PREFERRED: [zone]}}),
            {"nodeAffinity": {PREFERRED: [zone, low]}},
        ),
        (pod("batch", ANTI), {**ANTI, "nodeAffinity": {PREFERRED: [not_high]}}),
        (pod("batch", {}), {"nodeAffinity": {PREFERRED: [not_high]}}),
        (pod("batch", {"nodeAffinity": {}}), {"nodeAffinity": {PREFERRED: [not_high]}}),
    ]
    for before, affinity in cases:
        after = admit(spec, before)
        assert after["spec"]["affinity"] == affinity, before
        assert after["metadata"] == before["metadata"]
        assert after["spec"]["containers"] == before["spec"]["containers"]
    for untouched in (
        pod(None),
        pod("best-effort"),
        pod("default"),
        # Already names the tier label (set by hand, or a second admission): left as it is.
        pod("latency-sensitive", {"nodeAffinity": {PREFERRED: [term(7, "In", ["medium"])]}}),
        {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"containers": []}},
    ):
        assert admit(spec, untouched) == untouched


def test_every_configured_class_gets_its_own_term() -> None:
    classes = {
        "latency-sensitive": {"weight": 80, "operator": "In", "tiers": ["low"]},
        "batch": {"weight": 40, "operator": "NotIn", "tiers": ["high"]},
        "best-effort": {"weight": 5, "operator": "In", "tiers": ["low", "medium"]},
    }
    # The chart merges the default classes in: replace them wholesale with this list.
    values = merge(ON, {"scheduler": {"tierAffinity": {"classes": classes}}})
    spec = policy(render(values))[0]["spec"]
    for name, c in classes.items():
        after = admit(spec, pod(name))
        want = term(c["weight"], c["operator"], c["tiers"])  # type: ignore[arg-type]
        assert after["spec"]["affinity"] == {"nodeAffinity": {PREFERRED: [want]}}, name
    assert admit(spec, pod("other")) == pod("other")
    only_batch = merge(
        ON, {"scheduler": {"tierAffinity": {"classes": {"latency-sensitive": None}}}}
    )
    spec = policy(render(only_batch))[0]["spec"]
    assert admit(spec, pod("latency-sensitive")) == pod("latency-sensitive")
    assert admit(spec, pod("batch"))["spec"]["affinity"] == {
        "nodeAffinity": {PREFERRED: [term(50, "NotIn", ["high"])]}
    }


def test_the_label_keys_are_the_code_s() -> None:
    text = str(policy(render(ON))[0]["spec"])
    assert TIER_LABEL == "mco.io/interference-tier" and TIER_LABEL in text
    assert WORKLOAD_CLASS_LABEL in text
