"""Least privilege: explicit RBAC without wildcards, no privileged MCO container."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

from tests.chart.helm import SCENARIOS, merge, render, render_scenario, scenario_values

ROLE_KINDS = ("Role", "ClusterRole")
# The whole of each component's permissions: (apiGroup, resource) -> verbs, over all its roles.
EXPECTED_RBAC: dict[str, dict[tuple[str, str], set[str]]] = {
    # The API calls each component makes (reporter/kubeapi.py, mco/leader.py,
    # reporter/ruleconfig.py, rulegen/controller.py, extender/report_watch.py,
    # extender/pod_watch.py), nothing more.
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
    "mco-extender": {
        ("mco.io", "nodeinterferencereports"): {"get", "list", "watch"},
        ("", "pods"): {"list", "watch"},  # the pod watch (kube-scheduler placements), by default
    },
    "mco-kata-deploy": {("", "nodes"): {"get", "patch"}},
    # The second kube-scheduler's own Lease (client-go's leases lock reads, then updates); the
    # rest of what it needs comes from kube-scheduler's bootstrap roles (below).
    "mco-kube-scheduler": {("coordination.k8s.io", "leases"): {"get", "update"}},
}
# Roles Kubernetes ships that the second kube-scheduler is bound to, as upstream's "configure
# multiple schedulers" binds its scheduler: (binding kind, namespace, role).
KUBE_SCHEDULER_ROLES = {
    ("ClusterRoleBinding", None, "system:kube-scheduler"),
    ("ClusterRoleBinding", None, "system:volume-scheduler"),
    ("RoleBinding", "kube-system", "extension-apiserver-authentication-reader"),
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
    values = merge(
        scenario_values("full"),
        {
            "kata": {"deploy": {"enabled": True}},
            "scheduler": {"kubeScheduler": {"deploy": {"enabled": True, "replicas": 2}}},
        },
    )
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
    """Each ServiceAccount to the roles of the same name, except the second kube-scheduler's,
    which is bound to kube-scheduler's own shipped roles too, and to nothing else."""
    objects = everything()
    shipped = set()
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        (subject,) = binding["subjects"]
        assert subject["kind"] == "ServiceAccount"
        role = binding["roleRef"]["name"]
        if subject["name"] == "mco-kube-scheduler" and role != "mco-kube-scheduler":
            shipped.add((binding["kind"], binding["metadata"].get("namespace"), role))
            continue
        assert subject["name"] == role == binding["metadata"]["name"]
    assert shipped == KUBE_SCHEDULER_ROLES


def exporter_pod(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = render(values).one("DaemonSet", "-exporter")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def host_mounts(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """Container path -> host path of every hostPath mount (all read-only)."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    out = {}
    for m in container["volumeMounts"]:
        host = volumes[m["name"]].get("hostPath")
        if host:
            assert m["readOnly"] is True, m
            out[m["mountPath"]] = host["path"]
    return out


CGROUP = {"/host/cgroup": "/sys/fs/cgroup"}  # the cgroup collector's pod cgroups


def test_the_cgroupfs_mount_follows_the_cgroup_collector() -> None:
    pod, container = exporter_pod({"exporter": {"collectors": {"cgroup": False}}})
    assert "/host/cgroup" not in host_mounts(pod, container)
    assert not [a for a in container["args"] if a.startswith("--path.cgroupfs")]
    assert "--no-collector.cgroup" in container["args"]
    pod, container = exporter_pod({"exporter": {"collectors": {"cgroup": True}}})
    assert host_mounts(pod, container)["/host/cgroup"] == "/sys/fs/cgroup"
    assert "--path.cgroupfs=/host/cgroup" in container["args"]
    volume = next(v for v in pod["volumes"] if v["name"] == "cgroup")
    assert volume["hostPath"]["type"] == "Directory"


def kata_shim_dirs() -> dict[str, str]:
    """What the kata collector's default shim paths need: each top-level directory under
    /host/root (exporter/collectors/kata.py is the one list)."""
    from exporter.collectors.kata import DEFAULT_SHIMS

    tops = {"/" + p.strip("/").split("/")[0] for p in DEFAULT_SHIMS.split(",")}
    return {f"/host/root{top}": top for top in tops}


# Where the exporter runs least-privileged: the chart's defaults and every scenario but `full`
# (kata-only has no exporter).
LEAST_PRIVILEGE = ["defaults", *(s for s in SCENARIOS if s not in ("kata-only", "full"))]
# The exporter with its kernel-event collectors: the switch alone, and the `full` scenario.
KERNEL_EVENTS = ["kernelEvents", "full"]


def values_of(case: str) -> dict[str, Any]:
    if case == "defaults":
        return {}
    if case == "kernelEvents":
        return {"exporter": {"kernelEvents": {"enabled": True}}}
    return scenario_values(case)


def documented_capabilities() -> set[str]:
    """The capabilities docs/helm.md's table lists as what kernelEvents adds, without those
    behind a further option (SYS_ADMIN, `exporter.capabilities.sysAdmin`)."""
    text = (Path(__file__).parents[2] / "docs" / "helm.md").read_text()
    table = text.split("| capability | needed by | without it |", 1)[1].split("\n\n", 1)[0]
    cells = [row.split("|")[1].strip() for row in table.strip().splitlines()[1:]]
    return {c.strip("`") for c in cells if " " not in c}


@pytest.mark.parametrize("case", LEAST_PRIVILEGE)
def test_exporter_runs_as_non_root_without_capabilities_or_the_hosts_root(case: str) -> None:
    pod, container = exporter_pod(values_of(case))
    assert pod["securityContext"] == {"runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": True}
    sc = container["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["hostPID"] is True
    assert pod["automountServiceAccountToken"] is False
    assert {"operator": "Exists"} in pod["tolerations"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    # /proc, /sys, the cgroupfs and the Kata shim directories: nothing else, never its /.
    mounts = host_mounts(pod, container)
    assert mounts == {"/host/proc": "/proc", "/host/sys": "/sys", **CGROUP, **kata_shim_dirs()}
    assert "/" not in mounts.values()
    # Every host path is read-only; only the scratch emptyDir is writable.
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    assert writable == ["/tmp"]
    args = container["args"]
    for flag in ("--path.procfs=/host/proc", "--path.sysfs=/host/sys", "--path.rootfs=/host/root"):
        assert flag in args
    assert "--path.cgroupfs=/host/cgroup" in args
    # The two collectors that need root with capabilities are off, so none fails every scrape.
    assert {"--no-collector.biolatency", "--no-collector.perf_llc"} <= set(args)


@pytest.mark.parametrize("case", KERNEL_EVENTS)
def test_kernel_events_run_as_root_with_only_what_ebpf_and_perf_need(case: str) -> None:
    pod, container = exporter_pod(values_of(case))
    assert pod["securityContext"] == {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False}
    sc = container["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sorted(sc["capabilities"]["add"]) == ["BPF", "PERFMON", "SYS_RESOURCE"]
    assert set(sc["capabilities"]["add"]) == documented_capabilities()
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    mounts = host_mounts(pod, container)
    assert mounts == {
        "/host/proc": "/proc",
        "/host/sys": "/sys",
        **CGROUP,
        **kata_shim_dirs(),
        "/sys/kernel/tracing": "/sys/kernel/tracing",
        "/sys/fs/bpf": "/sys/fs/bpf",
        "/lib/modules": "/lib/modules",
        "/usr/src": "/usr/src",
    }
    assert not [a for a in container["args"] if a.startswith("--no-collector.")]
    assert not [a for a in container["args"] if "perf_llc" in a]
    # biolatency runs, with its default switch, and the latency buckets of the thresholds.
    assert [a for a in container["args"] if "biolatency" in a] == [
        "--collector.biolatency.buckets=0.016384,0.032768,0.065536,0.131072,0.262144"
    ]


def test_kata_mounts_follow_the_shim_paths_and_the_collector() -> None:
    option = {"kata.shim-paths": "/var/lib/kata/bin/shim, /opt/k/shim,/var/x/shim"}
    pod, container = exporter_pod({"exporter": {"collectorOptions": option}})
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert host_mounts(pod, container) == {
        "/host/proc": "/proc",
        "/host/sys": "/sys",
        **CGROUP,
        "/host/root/var": "/var",
        "/host/root/opt": "/opt",
    }
    for m in container["volumeMounts"]:
        if m["mountPath"].startswith("/host/root/"):
            assert volumes[m["name"]]["hostPath"]["type"] == "DirectoryOrCreate"
    pod, container = exporter_pod({"exporter": {"collectors": {"kata": False}}})
    assert not [p for p in host_mounts(pod, container) if p.startswith("/host/root")]
    for bad in ("/shim", "shim", "/opt/../etc/shim"):
        with pytest.raises(helm.HelmError, match=r"kata\.shim-paths"):
            render({"exporter": {"collectorOptions": {"kata.shim-paths": bad}}})


def test_sys_admin_and_resctrl_are_options() -> None:
    values = {
        "exporter": {
            "kernelEvents": {"enabled": True},
            "capabilities": {"sysAdmin": True},
            "hostMounts": {"resctrl": True, "debugfs": True},
        }
    }
    _pod, container = exporter_pod(values)
    sc = container["securityContext"]
    assert "SYS_ADMIN" in sc["capabilities"]["add"]
    assert sc["privileged"] is False
    # kube-apiserver rejects allowPrivilegeEscalation=false together with CAP_SYS_ADMIN.
    assert sc["allowPrivilegeEscalation"] is True
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/sys/fs/resctrl", "/sys/kernel/debug"} <= mounts
    # Capabilities do nothing for a non-root process in a pod: asking for one without root fails.
    with pytest.raises(helm.HelmError, match="kernelEvents"):
        render({"exporter": {"capabilities": {"sysAdmin": True}}})


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


def test_notes_say_what_the_exporter_runs_as() -> None:
    assert "running as UID 65532 without capabilities" in render({}).notes
    notes = render({"exporter": {"kernelEvents": {"enabled": True}}}).notes
    assert "running as root with BPF, PERFMON, SYS_RESOURCE" in notes


def test_the_taint_mode_adds_node_rights_to_the_reporter_only_when_on() -> None:
    """reporter.taintNodes.enabled: the reporter's ClusterRole gains get/list/patch on nodes
    (reporter/nodeapi.py's calls) and its Deployment the flags; off (the default), neither."""
    from reporter.cli import build_parser as reporter_parser

    base = scenario_values("full")
    off = render(base)
    on = render(merge(base, {"reporter": {"taintNodes": {"enabled": True, "qps": 2}}}))
    assert ("", "nodes") not in permissions(off.objects, "mco-reporter")
    assert permissions(on.objects, "mco-reporter") == {
        **EXPECTED_RBAC["mco-reporter"],
        ("", "nodes"): {"get", "list", "patch"},
    }
    # Only the reporter gains anything; the rule sits in its ClusterRole (Nodes are cluster-wide).
    for name in EXPECTED_RBAC:
        if name != "mco-reporter":
            assert permissions(on.objects, name) == permissions(off.objects, name)
    assert any("nodes" in r["resources"] for r in on.one("ClusterRole", "-reporter")["rules"])

    def args(rendered: Any) -> Any:
        deployment = rendered.one("Deployment", "-reporter")
        return reporter_parser().parse_args(
            deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        )

    assert not args(off).taint_nodes
    parsed = args(on)
    assert parsed.taint_nodes and parsed.taint_qps == 2.0
    assert (parsed.taint_burst, parsed.taint_resync) == (10, 600.0)
