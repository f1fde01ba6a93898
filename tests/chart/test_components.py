"""The chart drives the real components: their parsers accept its arguments, and the scheduler
configuration it ships is what `mco-extender print-config` prints."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from exporter.cli import build_parser as exporter_parser
from exporter.registry import specs
from extender import print_config
from extender.cli import build_parser as extender_parser
from extender.cli import config_from_args
from mco import webconfig
from mco.flags import listen_address, size
from mco.webconfig import TLSServerConfig, WebConfig
from rulegen.model import DetectionRuleConfig
from tests.chart.helm import merge, render, render_scenario, scenario_values
from tests.extender.kube_scheduler_v1 import problems


def container(rendered: Any, kind: str, suffix: str) -> dict[str, Any]:
    obj = rendered.one(kind, suffix)
    (c,) = obj["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = c
    return result


def served_web_config(rendered: Any, component: str, tmp_path: Path) -> WebConfig:
    """The component's web-config Secret as its server loads it, with the chart's mount paths
    pointed at real certificates: what the pod would run with."""
    text = rendered.one("Secret", f"-{component}-web-config")["stringData"]["web-config.yml"]
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    leaf.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    path = tmp_path / "web-config.yml"
    path.write_text(text.replace("/etc/mco/tls/", f"{tmp_path}/"))
    return webconfig.load(str(path))


def mounts(c: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in c["volumeMounts"]}


def test_exporter_accepts_the_chart_arguments(tmp_path: Path) -> None:
    values = {
        "exporter": {
            "collectors": {"perf_llc": False, "biolatency": True},
            "collectorOptions": {"kata.shim-paths": "/opt/kata/bin/containerd-shim-kata-v2"},
            "tls": {"enabled": True, "secretName": "s", "clientAuth": True},
        }
    }
    rendered = render(values)
    c = container(rendered, "DaemonSet", "-exporter")
    assert c["command"] == ["mco-exporter"]
    args = exporter_parser(specs()).parse_args(c["args"])
    assert (args.procfs, args.sysfs, args.rootfs) == ("/host/proc", "/host/sys", "/host/root")
    assert args.listen == ":9847"
    assert args.collector_perf_llc is False and args.collector_biolatency is True
    assert getattr(args, "option_kata.shim-paths") == "/opt/kata/bin/containerd-shim-kata-v2"
    assert args.web_config_file == "/etc/mco/web/web-config.yml"
    assert mounts(c)["/etc/mco/tls"] == "tls" and mounts(c)["/etc/mco/web"] == "web-config"
    config = served_web_config(rendered, "exporter", tmp_path)
    assert config.tls == TLSServerConfig(
        f"{tmp_path}/tls.crt", f"{tmp_path}/tls.key", f"{tmp_path}/ca.crt",
        "RequireAndVerifyClientCert",
    )  # fmt: skip
    assert not any(
        a.startswith(("--web.tls", "--tls", "--listen", "--client-ca")) for a in c["args"]
    )


def test_extender_accepts_the_chart_arguments_and_follows_the_model() -> None:
    c = container(render_scenario("full"), "Deployment", "-extender")
    assert c["command"] == ["mco-extender"]
    args = extender_parser().parse_args(c["args"])
    assert listen_address(args.listen) == ("", 9848)  # every interface, IPv4 and IPv6
    assert "--web.listen-address=:9848" in c["args"]
    assert not getattr(args, "deprecated_flags", None)
    assert args.workers == 1
    default = DetectionRuleConfig.default()
    assert args.stale_after == default.report.stale_after
    assert args.neutral_score == default.report.neutral_score
    assert args.report_file is None  # reports come from the Kubernetes API in a cluster


MiB = 1 << 20
WORKER_OVERHEAD = 100 * MiB  # report, verdict tables, one decode (docs/extender.md)


@pytest.mark.parametrize(
    ("workers", "extender", "per_worker"),
    [
        (1, {}, 384 * MiB),  # the pod's 384Mi, all to the one worker
        (4, {}, 256 * MiB),  # 96Mi each would be under one largest body: 256Mi each
        (4, {"maxBodyMemory": "512Mi"}, 256 * MiB),  # 128Mi each < one 256Mi body
        (4, {"maxBodyMemory": "512Mi", "maxBodySize": "64Mi"}, 128 * MiB),
        (4, {"maxBodyMemory": "1Gi", "maxBodySize": "8Mi"}, 256 * MiB),
        (3, {"maxBodyMemory": 100 * MiB, "maxBodySize": "1Mi"}, 100 * MiB // 3),
        # docs/helm.md, "Sizing the extender for Volcano": 256Mi prioritize bodies from 500 nodes
        (1, {"maxBodySize": "256Mi", "maxBodyMemory": "512Mi"}, 512 * MiB),
        (3, {"maxBodySize": "256Mi", "maxBodyMemory": "512Mi"}, 256 * MiB),
        (
            4,
            {
                "maxBodyMemory": "96Mi",
                "maxBodySize": "64Mi",
                "resources": {"limits": {"memory": "0.5Gi"}},
            },
            64 * MiB,
        ),
    ],
)
def test_extender_body_budget_is_the_pods_shared_by_its_workers(
    workers: int, extender: dict[str, Any], per_worker: int
) -> None:
    """`--max-body-memory` is per process: the chart gives each worker its share of the pod's
    budget, never less than one body of the largest size; the extender starts with them, and
    NOTES warns exactly when the workers' memory passes the container's limit, naming a limit
    that clears the warning."""
    values = {"extender": {"workers": workers, **extender}}
    rendered = render(values)
    c = container(rendered, "Deployment", "-extender")
    args = extender_parser().parse_args(c["args"])
    assert args.workers == workers
    assert args.max_body_memory == per_worker
    assert args.max_body_size == size(str(extender.get("maxBodySize", "256Mi")))
    config = config_from_args(args)  # the extender's own check: at least one largest body
    assert config.max_body_memory == per_worker
    limit_text = c["resources"]["limits"]["memory"]  # 512Mi (the default) or 0.5Gi
    limit = round(float(limit_text[:-2]) * (1024 * MiB if limit_text.endswith("Gi") else MiB))
    need = workers * (per_worker + WORKER_OVERHEAD)
    warned = "can be OOM-killed" in rendered.notes
    assert warned is (need > limit), rendered.notes
    if warned:
        suggested = f"{-(-need // MiB)}Mi"
        assert f"extender.resources.limits.memory={suggested}" in rendered.notes
        raised = merge(values, {"extender": {"resources": {"limits": {"memory": suggested}}}})
        assert "can be OOM-killed" not in render(raised).notes


def test_extender_tls_values_become_its_web_config(tmp_path: Path) -> None:
    values = {"extender": {"tls": {"enabled": True, "secretName": "x", "clientAuth": True}}}
    rendered = render(values)
    c = container(rendered, "Deployment", "-extender")
    args = extender_parser().parse_args(c["args"])
    assert args.web_config_file == "/etc/mco/web/web-config.yml"
    assert not getattr(args, "deprecated_flags", None)
    config = served_web_config(rendered, "extender", tmp_path)
    assert config.tls == TLSServerConfig(
        f"{tmp_path}/tls.crt", f"{tmp_path}/tls.key", f"{tmp_path}/ca.crt",
        "RequireAndVerifyClientCert",
    )  # fmt: skip
    # The kubelet has no client certificate: with one required, the probes check the port.
    assert c["readinessProbe"] == {"tcpSocket": {"port": "https"}, "periodSeconds": 5}
    assert mounts(c)["/etc/mco/web"] == "web-config"
    template = rendered.one("Deployment", "-extender")["spec"]["template"]
    assert "checksum/web-config" in template["metadata"]["annotations"]
    volumes = rendered.one("Deployment", "-extender")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "x"}} in volumes
    service = rendered.one("Service", "-extender")
    assert service["spec"]["ports"][0]["name"] == "https"
    # Without client certificates the kubelet probes /readyz over HTTPS.
    one_way = render({"extender": {"tls": {"enabled": True, "secretName": "x"}}})
    probe = container(one_way, "Deployment", "-extender")["readinessProbe"]
    assert probe["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}


def test_scheduler_client_auth_requires_certificates_of_the_schedulers_only(tmp_path: Path):
    """Issue 27 item 5: the chart sets up the route-level rule: certificates asked for and
    verified (not required: Prometheus and the kubelet have none), the extender requiring one
    on its scheduler routes, kube-scheduler presenting its own; refused with Volcano, whose
    extender client sends none."""
    tls = {"enabled": True, "secretName": "x", "schedulerClientAuth": True}
    kube = {"clientCertFile": "/etc/k/client.crt", "clientKeyFile": "/etc/k/client.key"}
    values = {"extender": {"tls": tls},
              "scheduler": {"volcano": {"configMap": False}, "kubeScheduler": kube}}  # fmt: skip
    rendered = render(values)
    c = container(rendered, "Deployment", "-extender")
    args = extender_parser().parse_args(c["args"])
    assert args.scheduler_auth == "client-cert"
    config = served_web_config(rendered, "extender", tmp_path)
    assert config.tls is not None and config.tls.client_auth_type == "VerifyClientCertIfGiven"
    assert config.tls.client_ca_file == f"{tmp_path}/ca.crt"
    probe = c["readinessProbe"]["httpGet"]  # the kubelet needs no certificate
    assert probe == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    scheduler = yaml.safe_load(
        rendered.one("ConfigMap", "-kube-scheduler")["data"]["kube-scheduler-config.yaml"]
    )
    [extender] = scheduler["extenders"]
    assert extender["tlsConfig"]["certFile"] == "/etc/k/client.crt"
    assert extender["tlsConfig"]["keyFile"] == "/etc/k/client.key"
    for bad, why in (
        (merge(values, {"scheduler": {"volcano": {"configMap": True}}}), "no client certificate"),
        (merge(values, {"extender": {"tls": {"enabled": False}}}), "needs extender.tls.enabled"),
    ):
        with pytest.raises(Exception, match=why):
            render(bad)
    assert (
        "--scheduler-auth=client-cert"
        not in container(render({}), "Deployment", "-extender")["args"]
    )


HASH = "$2b$04$" + "a" * 53


@pytest.mark.parametrize("component", ["reporter", "rulegen", "extender", "exporter"])
def test_web_config_values_reach_every_server(component: str, tmp_path: Path) -> None:
    """basic_auth_users and headers from values, in the Secret the server is started with;
    the components probed over HTTP get their probe paths opened for the kubelet."""
    web = {"basic_auth_users": {"prometheus": HASH},
           "http_server_config": {"headers": {"X-Frame-Options": "deny"}}}  # fmt: skip
    values = merge(scenario_values("full"), {component: {"webConfig": web}})
    rendered = render(values)
    kind = "DaemonSet" if component == "exporter" else "Deployment"
    c = container(rendered, kind, f"-{component}")
    assert "--web.config.file=/etc/mco/web/web-config.yml" in c["args"]
    assert mounts(c)["/etc/mco/web"] == "web-config"
    config = served_web_config(rendered, component, tmp_path)
    assert config.users == {"prometheus": HASH} and config.headers == {"X-Frame-Options": "deny"}
    assert config.ssl_context is None
    probed = component in ("rulegen", "extender")
    assert config.auth_excluded_paths == ({"/healthz", "/readyz"} if probed else set())
    if probed:
        assert c["readinessProbe"]["httpGet"]["path"] in config.auth_excluded_paths
    others = {"reporter", "rulegen", "extender", "exporter"} - {component}
    for other in others:
        kind = "DaemonSet" if other == "exporter" else "Deployment"
        assert not any(
            a.startswith("--web.config.file")
            for a in container(rendered, kind, f"-{other}")["args"]
        )


def test_extender_staleness_follows_a_tuned_detection_rule_config() -> None:
    values = {
        "detectionRuleConfig": {"spec": {"report": {"staleAfter": "1m30s", "neutralScore": 40}}}
    }
    args = extender_parser().parse_args(
        container(render(values), "Deployment", "-extender")["args"]
    )
    assert (args.stale_after, args.neutral_score) == (90.0, 40.0)


def _printed(argv: list[str]) -> Any:
    out = io.StringIO()
    assert print_config.main(argv, out=out) == 0
    return yaml.safe_load(out.getvalue())


@pytest.mark.parametrize("tls", [False, True])
def test_volcano_configmap_is_what_print_config_prints(tls: bool) -> None:
    values = merge(
        scenario_values("existing-volcano"),
        {
            "extender": {"tls": {"enabled": tls, "secretName": "x"}},
            "scheduler": {"volcano": {"httpTimeout": "300ms"}},
        },
    )
    rendered = render(values)
    data = rendered.one("ConfigMap", "-volcano-scheduler")["data"]
    scheme = "https" if tls else "http"
    url = f"{scheme}://mco-extender.mco-system.svc:9851"
    printed = _printed(["--volcano", "--url", url, "--http-timeout", "300ms"])
    assert yaml.safe_load(data["extender-tier.yaml"]) == printed
    whole = yaml.safe_load(data["volcano-scheduler.conf"])
    assert whole["tiers"][-1:] == printed
    plugins = [p["name"] for tier in whole["tiers"] for p in tier["plugins"]]
    assert plugins.count("extender") == 1 and "predicates" in plugins


@pytest.mark.parametrize(
    ("tls", "replicas", "name"),
    [(False, 1, None), (True, 1, None), (False, 2, "batch.example.com"), (True, 3, "b")],
)
def test_kube_scheduler_configmap_is_what_print_config_prints(
    tls: bool, replicas: int, name: str | None
) -> None:
    """One shape in two places: the ConfigMap equals print-config's output for the same
    choices (URL, TLS, profile name, leader election with more than one replica, the Lease in
    the release namespace), and kube-scheduler would run it as a second scheduler."""
    k: dict[str, Any] = {"deploy": {"replicas": replicas}}
    if tls:
        k.update(clientCertFile="/c.pem", clientKeyFile="/k.pem")
    if name:
        k["schedulerName"] = name
    values = {
        "extender": {"tls": {"enabled": tls, "secretName": "x"}},
        "scheduler": {"kubeScheduler": k},
    }
    data = render(values).one("ConfigMap", "-kube-scheduler")["data"]
    scheme = "https" if tls else "http"
    argv = ["--kube-scheduler", "--url", f"{scheme}://mco-extender.mco-system.svc:9851"]
    argv += ["--lease-namespace", "mco-system", "--scheduler-name", name or "mco-kube-scheduler"]
    if replicas > 1:
        argv.append("--leader-elect")
    if tls:
        argv += ["--client-cert-file", "/c.pem", "--client-key-file", "/k.pem"]
    doc = yaml.safe_load(data["kube-scheduler-config.yaml"])
    assert doc == _printed(argv)
    assert problems(doc) == []


def test_the_second_kube_scheduler_runs_the_configmap_with_its_own_permissions() -> None:
    """scheduler.kubeScheduler.deploy: upstream's "configure multiple schedulers" — kube-scheduler
    with the ConfigMap as --config, kube-scheduler's own cluster roles, the authentication
    reader in kube-system, get/update on its own Lease only with leader election, and the
    extender's NetworkPolicy admits it."""
    assert not [o for o in render().objects if o["kind"] == "Deployment"
                and o["metadata"]["name"] == "mco-kube-scheduler"]  # fmt: skip
    values = {"scheduler": {"kubeScheduler": {"deploy": {"enabled": True, "replicas": 2}}}}
    rendered = render(values, kube_version="v1.36.2")
    deployment = rendered.one("Deployment", "-kube-scheduler")
    pod = deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "registry.k8s.io/kube-scheduler:v1.36.2"  # the cluster's version
    config = next(a for a in c["command"] if a.startswith("--config="))
    (mount,) = [m for m in c["volumeMounts"] if config.startswith(f"--config={m['mountPath']}/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    cm = rendered.one("ConfigMap", "-kube-scheduler")
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    assert config.rpartition("/")[2] in cm["data"]
    doc = yaml.safe_load(cm["data"]["kube-scheduler-config.yaml"])
    assert doc["leaderElection"]["leaderElect"] is True and problems(doc) == []
    assert c["securityContext"]["runAsNonRoot"] and not c["securityContext"].get("privileged")

    sa = pod["serviceAccountName"]
    bound = {
        (b["kind"], b["metadata"].get("namespace"), b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in rendered.objects
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and {"kind": "ServiceAccount", "name": sa, "namespace": "mco-system"} in b["subjects"]
    }
    assert bound == {
        ("ClusterRoleBinding", None, "ClusterRole", "system:kube-scheduler"),
        ("ClusterRoleBinding", None, "ClusterRole", "system:volume-scheduler"),
        ("RoleBinding", "kube-system", "Role", "extension-apiserver-authentication-reader"),
        ("RoleBinding", "mco-system", "Role", "mco-kube-scheduler"),
    }
    lease = doc["leaderElection"]
    assert rendered.one("Role", "-kube-scheduler")["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [lease["resourceName"]],
            "verbs": ["get", "update"],
        }
    ]
    assert (
        lease["resourceNamespace"]
        == rendered.one("Role", "-kube-scheduler")["metadata"]["namespace"]
    )
    single = render({"scheduler": {"kubeScheduler": {"deploy": {"enabled": True}}}})
    assert not [o for o in single.objects if o["kind"] == "Role" and "kube-scheduler" in
                o["metadata"]["name"]]  # fmt: skip
    peers = rendered.one("NetworkPolicy", "-extender")["spec"]["ingress"][0]["from"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert any(
        set(p.keys()) == {"podSelector"}
        and p["podSelector"]["matchLabels"].items() <= labels.items()
        for p in peers
    )


def test_reporter_accepts_the_chart_arguments() -> None:
    from reporter.cli import build_parser as reporter_parser

    values = {"reporter": {"layout": "per-node", "compact": True, "interval": "2s"}}
    c = container(render(values), "Deployment", "-reporter")
    assert c["command"] == ["mco-reporter"]
    args = reporter_parser().parse_args(c["args"])
    assert args.prometheus_url == ["http://prometheus-operated.monitoring.svc:9090"]
    assert (args.interval, args.layout, args.compact) == (2.0, "per-node", True)
    assert args.leader_elect is True
    assert args.leader_elect_lease_name == "mco-reporter"
    assert args.leader_elect_namespace == "$(POD_NAMESPACE)"  # expanded by the kubelet
    assert args.leader_elect_identity == "$(POD_NAME)"
    assert args.listen == ":9849"
    assert args.output is None  # writes through the Kubernetes API
    env = {e["name"] for e in c["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= env
    # The Lease the reporter renews is the one its Role lets it renew.
    role = render(values).one("Role", "-reporter")
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named[0]["resourceNames"] == [args.leader_elect_lease_name]


def test_rulegen_controller_accepts_the_chart_arguments() -> None:
    from rulegen.cli import build_parser as rulegen_parser

    rendered = render_scenario("full")
    c = container(rendered, "Deployment", "-rulegen")
    args = rulegen_parser().parse_args(c["args"])
    assert args.command == "controller"
    rule = rendered.one("PrometheusRule")
    assert args.prometheusrule_name == rule["metadata"]["name"]
    assert args.prometheusrule_namespace == "$(POD_NAMESPACE)"
    labels = dict(pair.split("=", 1) for pair in args.prometheusrule_label)
    # The controller's PrometheusRule keeps the labels Prometheus selects it by.
    assert labels == {"release": "kube-prometheus-stack"}
    assert labels.items() <= rule["metadata"]["labels"].items()
    assert args.listen == ":9850"
    role = rendered.one("Role", "-rulegen")
    assert any(rule["metadata"]["name"] in r.get("resourceNames", []) for r in role["rules"])
    # Leader-elected like the reporter, on a Lease of its own that its Role lets it renew.
    assert args.leader_elect is True
    assert args.leader_elect_lease_name == "mco-rulegen"
    assert args.leader_elect_namespace == "$(POD_NAMESPACE)"  # expanded by the kubelet
    assert args.leader_elect_identity == "$(POD_NAME)"
    lease_rules = [r for r in role["rules"] if r["apiGroups"] == ["coordination.k8s.io"]]
    assert [r.get("resourceNames") for r in lease_rules if "get" in r["verbs"]] == [
        [args.leader_elect_lease_name]
    ]
    reporter_args = container(rendered, "Deployment", "-reporter")["args"]
    assert f"--leader-elect-lease-name={args.leader_elect_lease_name}" not in reporter_args
    deployment = rendered.one("Deployment", "-rulegen")
    assert deployment["spec"]["replicas"] == 2
    env = {e["name"] for e in c["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= env


@pytest.mark.parametrize("component", ["exporter", "reporter", "rulegen", "extender"])
def test_log_flags_reach_every_component(component: str) -> None:
    rendered = render({"log": {"level": "debug", "format": "logfmt"}})
    kind = "DaemonSet" if component == "exporter" else "Deployment"
    args = container(rendered, kind, f"-{component}")["args"]
    assert "--log.level=debug" in args and "--log.format=logfmt" in args


POD_WATCH_RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}


@pytest.mark.parametrize("scenario", ["full", None])
def test_the_shipped_extender_watches_pods_so_kube_scheduler_bursts_spread(
    scenario: str | None,
) -> None:
    """kube-scheduler never tells an extender where it put a pod: without the pod watch a whole
    burst lands on one node (issue 26). The chart's defaults and the full scenario turn it on,
    with exactly the `list` and `watch` on pods it needs."""
    rendered = render_scenario(scenario) if scenario else render()
    args = extender_parser().parse_args(container(rendered, "Deployment", "-extender")["args"])
    assert args.reservation_span == 15.0
    assert (args.volcano_placements, args.watch_pods) == ("auto", True)
    config_from_args(args)  # a valid configuration
    rules = rendered.one("ClusterRole", "-extender")["rules"]
    assert [r for r in rules if "pods" in r["resources"]] == [POD_WATCH_RULE]


def test_extender_reservation_values_become_its_flags_and_rbac() -> None:
    """Without `watchPods` (existing-volcano: Volcano's calls carry its placements) there is no
    pod watch and no pods rule; the other reservation values reach the extender as flags."""
    rendered = render_scenario("existing-volcano")
    args = extender_parser().parse_args(container(rendered, "Deployment", "-extender")["args"])
    assert args.watch_pods is False
    role = rendered.one("ClusterRole", "-extender")
    assert all("pods" not in rule["resources"] for rule in role["rules"])

    values = merge(
        scenario_values("full"),
        {"extender": {"reservation": {"span": "20s", "volcanoPlacements": "verbs"}}},
    )
    args = extender_parser().parse_args(
        container(render(values), "Deployment", "-extender")["args"]
    )
    assert args.reservation_span == 20.0
    assert (args.volcano_placements, args.watch_pods) == ("verbs", True)
