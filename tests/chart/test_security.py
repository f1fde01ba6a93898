"""Least privilege: explicit RBAC without wildcards, no privileged MCO container."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.helm import SCENARIOS, merge, render, render_scenario, scenario_values

ROLE_KINDS = ("Role", "ClusterRole")
# The whole of each component's permissions: (apiGroup, resource) -> verbs, over all its roles.
EXPECTED_RBAC: dict[str, dict[tuple[str, str], set[str]]] = {
    # The API calls each component makes (reporter/kubeapi.py, mco/leader.py,
    # reporter/ruleconfig.py, rulegen/controller.py, extender/report_watch.py), nothing more.
    "mco-reporter": {
        ("mco.io", "nodeinterferencereports"): {"get", "list", "create", "patch", "delete"},
        ("mco.io", "nodeinterferencereports/status"): {"patch"},
        ("mco.io", "detectionruleconfigs"): {"list", "watch"},
        ("coordination.k8s.io", "leases"): {"create", "get", "patch"},
    },
    "mco-rulegen": {
        ("mco.io", "detectionruleconfigs"): {"get", "list", "watch"},
        ("mco.io", "detectionruleconfigs/status"): {"patch"},
        ("monitoring.coreos.com", "prometheusrules"): {"create", "patch"},
        ("coordination.k8s.io", "leases"): {"create", "get", "patch"},
    },
    "mco-extender": {("mco.io", "nodeinterferencereports"): {"get", "list", "watch"}},
    "mco-kata-deploy": {("", "nodes"): {"get", "patch"}},
}


def permissions(objects: list[dict[str, Any]], role_name: str) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for role in (o for o in objects if o["kind"] in ROLE_KINDS):
        if role["metadata"]["name"] != role_name:
            continue
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def everything() -> list[dict[str, Any]]:
    values = merge(scenario_values("full"), {"kata": {"deploy": {"enabled": True}}})
    return render(values).objects


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rbac_has_no_wildcards_and_explicit_rules(scenario: str) -> None:
    for role in render_scenario(scenario).objects:
        if role["kind"] not in ROLE_KINDS:
            continue
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert rule.get(field), f"{role['metadata']['name']}: rule without {field}"
                assert "*" not in rule[field], f"{role['metadata']['name']}: wildcard {field}"
            assert "nonResourceURLs" not in rule


@pytest.mark.parametrize("component", sorted(EXPECTED_RBAC))
def test_each_component_gets_exactly_its_permissions(component: str) -> None:
    assert permissions(everything(), component) == EXPECTED_RBAC[component]


def test_lease_and_prometheusrule_updates_are_limited_to_their_own_objects() -> None:
    objects = everything()
    for role in (o for o in objects if o["kind"] == "Role"):
        for rule in role["rules"]:
            if set(rule["verbs"]) & {"get", "update", "patch", "delete"}:
                names = rule.get("resourceNames")
                assert names, f"{role['metadata']['name']}: {rule} may touch any object"
                assert all(n.startswith("mco-") for n in names)


def test_every_service_account_is_bound_only_to_its_own_roles() -> None:
    objects = everything()
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        (subject,) = binding["subjects"]
        assert subject["kind"] == "ServiceAccount"
        assert subject["name"] == binding["roleRef"]["name"] == binding["metadata"]["name"]


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "kata-only"])
def test_exporter_daemonset_is_not_privileged_but_has_what_ebpf_needs(scenario: str) -> None:
    ds = render_scenario(scenario).one("DaemonSet", "-exporter")
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sorted(sc["capabilities"]["add"]) == ["BPF", "PERFMON", "SYS_RESOURCE"]
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["hostPID"] is True
    assert pod["automountServiceAccountToken"] is False
    assert {"operator": "Exists"} in pod["tolerations"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]

    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for path, host in [
        ("/host/proc", "/proc"),
        ("/host/sys", "/sys"),
        ("/host/root", "/"),
        ("/sys/kernel/tracing", "/sys/kernel/tracing"),
        ("/sys/fs/bpf", "/sys/fs/bpf"),
        ("/lib/modules", "/lib/modules"),
        ("/usr/src", "/usr/src"),
    ]:
        assert mounts[path]["readOnly"] is True, path
        assert volumes[mounts[path]["name"]]["hostPath"]["path"] == host
    # Every host path is read-only; only the scratch emptyDir is writable.
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    assert writable == ["/tmp"]
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    args = container["args"]
    for flag in ("--path.procfs=/host/proc", "--path.sysfs=/host/sys", "--path.rootfs=/host/root"):
        assert flag in args


def test_sys_admin_and_resctrl_are_options() -> None:
    values = {
        "exporter": {
            "capabilities": {"sysAdmin": True},
            "hostMounts": {"resctrl": True, "debugfs": True},
        }
    }
    ds = render(values).one("DaemonSet", "-exporter")
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    sc = container["securityContext"]
    assert "SYS_ADMIN" in sc["capabilities"]["add"]
    assert sc["privileged"] is False
    # kube-apiserver rejects allowPrivilegeEscalation=false together with CAP_SYS_ADMIN.
    assert sc["allowPrivilegeEscalation"] is True
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/sys/fs/resctrl", "/sys/kernel/debug"} <= mounts


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_controllers_run_restricted(scenario: str) -> None:
    for obj in render_scenario(scenario).of_kind("Deployment"):
        pod = obj["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}


def test_only_kata_deploy_is_privileged_and_only_when_asked() -> None:
    privileged = {
        o["metadata"]["name"]
        for o in everything()
        if o["kind"] in ("DaemonSet", "Deployment")
        for c in o["spec"]["template"]["spec"]["containers"]
        if c.get("securityContext", {}).get("privileged")
    }
    assert privileged == {"mco-kata-deploy"}
    env = {
        e["name"]: e.get("value")
        for e in render_scenario("kata-only").one("DaemonSet", "-kata-deploy")["spec"]["template"][
            "spec"
        ]["containers"][0]["env"]
    }
    assert env["CREATE_RUNTIMECLASSES"] == "false"  # the chart owns the RuntimeClasses
    assert env["SHIMS"] == "qemu clh fc dragonball"
