"""``kubectl-mco`` as a real process against the Kubernetes API stand-in, whose service proxy
reaches a real running mco-extender: the pod is read from the API, the extender is asked
through the proxy with the kubeconfig's credentials, and failures say what to fix."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kmock
import pytest
import pytest_asyncio
import requests
import yaml

from reporter.schema import Violation, encode
from scripts.procs import Managed, free_port
from testkit import bodies
from testkit.kapi import REPORTS, ServiceProxy, VersionedKubernetes, service_proxy
from tests.extender.conftest import cluster_report, entry, write_reports
from tests.secured_web import PASSWORD, USER, secured_web, wait_served

pytestmark = pytest.mark.slow

PODS = kmock.resource("", "v1", "pods")
TOKEN = "kubectl-user-token"
SERVICE = ("mco", "http:mco-extender:http")  # the chart's defaults


@dataclass
class Cluster:
    kapi: VersionedKubernetes
    front: ServiceProxy
    kubeconfig: Path
    extender: str  # the extender's own URL (for sending scheduler requests directly)
    report_file: Path  # what the extender reads


def _kubeconfig(path: Path, url: str, namespace: str | None = None) -> Path:
    context: dict[str, Any] = {"cluster": "stand-in", "user": "me"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stand-in", "cluster": {"server": url}}],
                "users": [{"name": "me", "user": {"token": TOKEN}}],
                "contexts": [
                    {"name": "plain", "context": context},
                    {"name": "elsewhere", "context": {**context, "cluster": "nowhere"}},
                ],
                "current-context": "plain",
            }
        )
    )
    return path


def _pod(name: str, namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    p = bodies.pod(name, namespace, labels=labels)
    p["apiVersion"], p["kind"] = "v1", "Pod"
    return p


@pytest_asyncio.fixture
async def cluster(kapi: VersionedKubernetes, tmp_path: Path) -> AsyncIterator[Cluster]:
    report = cluster_report(
        {
            "quiet": entry(0.1),
            "busy": entry(0.6, reasons=["triggered:io_congestion"]),
            "blocked": entry(
                0.2, schedulable=False, violations=[Violation("psi_memory_full", 0.05, 0.0)]
            ),
        },
        heartbeat=time.time(),
    )
    for e in report.status.nodes.values():
        e.live = True
    path = tmp_path / "report.json"
    write_reports(path, [report])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = Managed(
        [sys.executable, "-m", "extender", f"--web.listen-address=127.0.0.1:{port}",
         f"--report-file={path}", "--stale-after=1h"],  # fresh for the whole test
        name="mco-extender", log_path=tmp_path / "extender.log",
    )  # fmt: skip
    kapi.resources[PODS] = kmock.ResourceInfo(kind="Pod", namespaced=True)
    kapi.objects[PODS, "shop", "web-1"] = _pod("web-1", "shop")
    raw = json.loads(encode(report))
    raw["status"]["summary"] = {"nodes": 3, "unschedulable": 1, "maxLevel": 0.6, "minScore": 40}
    kapi.objects[REPORTS, None, "cluster"] = raw
    with proc:
        await asyncio.to_thread(proc.wait_http, f"{url}/readyz", timeout=60)
        async with service_proxy(kapi, {SERVICE: url}) as front:
            kubeconfig = _kubeconfig(tmp_path / "kubeconfig", front.url)
            yield Cluster(kapi, front, kubeconfig, url, path)


async def plugin(cluster: Cluster, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kubectl_mco", "--kubeconfig", str(cluster.kubeconfig), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_why_asks_the_extender_through_the_proxy_with_the_users_credentials(cluster):
    # The scheduler asked about this pod before: the ring's decisions come along.
    args = bodies.kube_args(["quiet", "blocked"]).replace(b"web-7d4b9c-x2x9q", b"web-1")
    await asyncio.to_thread(requests.post, f"{cluster.extender}/scheduler/filter", data=args)

    code, out, err = await plugin(cluster, "why", "web-1", "-n", "shop", "-o", "json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["pod"]["pod"] == "shop/web-1"
    assert [n["name"] for n in answer["nodes"]] == ["blocked", "busy", "quiet"]
    blocked = answer["nodes"][0]
    assert (blocked["passed"], blocked["reason"]) == (False, "hard_constraint")
    assert blocked["explanation"]["hardConstraints"]["psi_memory_full"]["violated"] is True
    [decision] = answer["decisions"]
    assert (decision["route"], decision["nodes"], decision["passed"]) == ("scheduler_filter", 2, 1)
    # Every call (the pod, explain, decisions) went with the kubeconfig's token.
    assert cluster.front.authorizations[-3:] == [f"Bearer {TOKEN}"] * 3


async def test_why_for_a_person_and_for_one_node(cluster):
    code, out, _ = await plugin(cluster, "why", "web-1", "-n", "shop")
    assert code == 0
    assert "pod shop/web-1: policy default" in out
    assert "blocked                  REJECT hard_constraint" in out
    assert "node blocked: rejected (hard_constraint)" in out
    assert "psi_memory_full" in out and "VIOLATED" in out
    assert "node quiet" not in out  # only rejected nodes are detailed when all are listed
    placed = bodies.pod("w-1", "team-a", node_name="quiet")
    placed["metadata"]["uid"] = "uid-1"
    allocate = bodies.go_json({"task": bodies.task_info(placed, status=2, node_name="quiet")})
    await asyncio.to_thread(requests.post, f"{cluster.extender}/volcano/allocate", data=allocate)
    code, out, _ = await plugin(cluster, "why", "web-1", "-n", "shop", "--node", "quiet")
    assert code == 0
    assert "node quiet: passes (ok)" in out
    assert "level:" in out and "score:" in out
    assert "reservation: 0.05 for pods placed since the data (uid-1 0.05)" in out
    code, out, _ = await plugin(cluster, "why", "web-1", "-n", "shop", "--node", "ghost",
                                "-o", "yaml")  # fmt: skip
    assert code == 0
    [ghost] = yaml.safe_load(out)["nodes"]
    assert (ghost["known"], ghost["reason"], ghost["explanation"]) == (False, "unknown", None)


async def test_the_namespace_defaults_to_the_contexts(cluster, tmp_path):
    config = _kubeconfig(tmp_path / "with-ns", cluster.front.url, namespace="shop")
    cluster.kubeconfig = config
    code, out, err = await plugin(cluster, "why", "web-1", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["pod"]["pod"] == "shop/web-1"


async def test_nodes_is_the_live_view_table(cluster):
    code, out, _ = await plugin(cluster, "nodes")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["node", "level", "score", "cache", "io", "memory", "cpu",
                                "sched", "fallback", "age"]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in lines[1:] if line and line[0] != " "}
    assert rows["busy"][1:3] == ["0.600", "40.0"]
    assert rows["blocked"][7] == "NO"
    assert "reasons: triggered:io_congestion" in out
    code, out, _ = await plugin(cluster, "-o", "json", "nodes")
    assert [n["name"] for n in json.loads(out)["nodes"]] == ["blocked", "busy", "quiet"]


async def test_report_summary(cluster):
    code, out, _ = await plugin(cluster, "report")
    assert code == 0
    assert "nodes:           3" in out
    assert "unschedulable:   1" in out
    assert "max level:       0.600" in out
    code, out, _ = await plugin(cluster, "-o", "yaml", "report")
    assert yaml.safe_load(out)["metadata"]["name"] == "cluster"


async def test_failures_say_what_to_fix(cluster):
    code, _, err = await plugin(cluster, "why", "nobody", "-n", "shop")
    assert code == 1
    assert "cannot read pod shop/nobody: 404" in err
    code, _, err = await plugin(cluster, "--extender-service", "other", "nodes")
    assert code == 1
    assert "404" in err and "services/proxy" in err
    cluster.front.denied = True
    code, _, err = await plugin(cluster, "why", "web-1", "-n", "shop")
    assert code == 1
    assert "403" in err and "`get` and `create` on `services/proxy`" in err
    code, _, err = await plugin(cluster, "--context", "missing", "nodes")
    assert code == 2 and err.startswith("kubectl-mco: error: cannot load the kubeconfig: ")
    code, _, err = await plugin(cluster, "why")
    assert code == 2


# --- without the service proxy: --extender-url and --report-file ---------------------------


async def test_extender_url_asks_the_extender_itself_and_the_cluster_only_for_the_pod(cluster):
    """As through `kubectl port-forward`: the same answers as through the proxy, and the API
    server is asked for the pod alone (nodes needs no cluster at all)."""
    _, through_proxy, _ = await plugin(cluster, "-o", "json", "nodes")
    before = len(cluster.front.authorizations)
    code, out, err = await plugin(
        cluster, "--extender-url", cluster.extender, "-o", "json", "nodes"
    )
    assert code == 0, err
    assert _verdicts(json.loads(out)) == _verdicts(json.loads(through_proxy))
    assert len(cluster.front.authorizations) == before  # the proxy was not used
    code, out, err = await plugin(
        cluster,
        "why",
        "web-1",
        "-n",
        "shop",
        "--extender-url",
        cluster.extender + "/",
        "-o",
        "json",
    )
    assert code == 0, err
    answer = json.loads(out)
    assert answer["pod"]["pod"] == "shop/web-1"
    assert [(n["name"], n["passed"]) for n in answer["nodes"]] == [
        ("blocked", False), ("busy", True), ("quiet", True)
    ]  # fmt: skip
    assert len(cluster.front.authorizations) == before + 1  # the pod, nothing else
    # Nothing listening: exit 1, and what to check.
    code, _, err = await plugin(
        cluster, "--extender-url", f"http://127.0.0.1:{free_port()}", "nodes"
    )
    assert code == 1
    assert "cannot reach the extender at http://127.0.0.1:" in err and "port-forward" in err


def _verdicts(body: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(n["name"], n["level"], n["schedulable"], n["reasons"]) for n in body["nodes"]]


async def test_extender_url_with_tls_a_client_certificate_and_basic_auth(cluster, tmp_path):
    """A real extender behind its --web.config.file (TLS, client certificates, basic auth): the
    plugin's TLS and basic-auth flags get through, and each missing one is said."""
    web = secured_web(tmp_path)
    password = tmp_path / "password"
    password.write_text(PASSWORD + "\n")
    port = free_port()
    proc = Managed(
        [sys.executable, "-m", "extender", f"--web.listen-address=127.0.0.1:{port}",
         f"--web.config.file={web.config_file}", f"--report-file={cluster.report_file}",
         "--stale-after=1h"],
        name="mco-extender-tls", log_path=tmp_path / "extender-tls.log",
    )  # fmt: skip
    url = f"https://127.0.0.1:{port}"
    secured = [
        "--extender-url", url, "--extender-ca-file", web.ca_file,
        "--extender-cert-file", web.client[0], "--extender-key-file", web.client[1],
        "--extender-basic-auth-user", USER, "--extender-basic-auth-password-file", str(password),
    ]  # fmt: skip
    with proc:
        await asyncio.to_thread(wait_served, proc, port, "/readyz", web)
        code, out, err = await plugin(cluster, *secured, "-o", "json", "nodes")
        assert code == 0, err
        assert [n["name"] for n in json.loads(out)["nodes"]] == ["blocked", "busy", "quiet"]
        code, out, err = await plugin(cluster, *secured, "why", "web-1", "-n", "shop")
        assert code == 0, err
        assert "node blocked: rejected (hard_constraint)" in out
        # No password: the extender's 401, with the flags to give.
        code, _, err = await plugin(cluster, *secured[:8], "nodes")
        assert code == 1 and "401" in err and "--extender-basic-auth" in err, err
        # Not our CA: the handshake fails, unless verification is turned off.
        unverified = [a for a in secured if a not in ("--extender-ca-file", web.ca_file)]
        code, _, err = await plugin(cluster, *unverified, "nodes")
        assert code == 1 and "certificate verify failed" in err, err
        code, _, err = await plugin(
            cluster, *unverified, "--extender-insecure-skip-verify", "nodes"
        )
        assert code == 0, err
    # Half a client certificate, or a password file without a user: bad usage.
    code, _, err = await plugin(cluster, *secured[:6], "nodes")
    assert code == 2 and "--extender-key-file" in err
    code, _, err = await plugin(cluster, "--extender-url", "localhost:9848", "nodes")
    assert code == 2 and "http(s) URL" in err


async def test_report_file_judges_with_the_extenders_own_code(cluster, tmp_path):
    """--report-file: the answers the running extender gives for the same file, with no
    extender and, for nodes, no cluster."""
    code, out, err = await plugin(
        cluster, "--kubeconfig", str(tmp_path / "none"), "--report-file", str(cluster.report_file),
        "-o", "json", "nodes",
    )  # fmt: skip
    assert code == 0, err
    served = await asyncio.to_thread(requests.get, f"{cluster.extender}/v1/nodes", timeout=10)
    assert _verdicts(json.loads(out)) == _verdicts(served.json())
    code, out, err = await plugin(cluster, "--report-file", str(cluster.report_file), "nodes")
    assert code == 0 and "reasons: triggered:io_congestion" in out, err
    code, out, err = await plugin(
        cluster, "why", "web-1", "-n", "shop", "--report-file", str(cluster.report_file),
        "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    pod = _pod("web-1", "shop")  # what the fixture put in the cluster
    explained = await asyncio.to_thread(
        requests.post, f"{cluster.extender}/v1/explain", json={"pod": pod}, timeout=10
    )
    mine = json.loads(out)["nodes"]
    theirs = explained.json()["nodes"]
    assert [(n["name"], n["passed"], n["reason"]) for n in mine] == [
        (n["name"], n["passed"], n["reason"]) for n in theirs
    ]
    assert mine[0]["explanation"]["hardConstraints"] == theirs[0]["explanation"]["hardConstraints"]
    # A file that is not a report, and both sources at once.
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = await plugin(cluster, "--report-file", str(bad), "nodes")
    assert code == 1 and f"cannot read the report file {bad}" in err
    code, _, err = await plugin(
        cluster, "--report-file", str(cluster.report_file), "--extender-url", cluster.extender,
        "nodes",
    )  # fmt: skip
    assert code == 2 and "give one" in err
