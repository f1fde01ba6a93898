"""The hot-update controller against kmock (an aiohttp emulation of the Kubernetes API).

kmock stores objects and streams watch events but has no server-side apply and does not
validate; ``Cluster`` adds create-on-apply (what kube-apiserver does for an apply PATCH of an
absent object) and injectable 503s to the reporter's resourceVersion-keeping emulator (which the
Lease of leader election needs), and every object the controller writes is judged against
the CRD with tests/rulegen/crd_validation.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.test_utils
import kmock
import pytest
import trustme
import yaml
from kubernetes_asyncio import client

from exporter.collectors.biolatency import DEFAULT_BUCKETS
from mco.latency_buckets import parse_bounds
from rulegen.controller import FIELD_MANAGER, ControllerSettings, RuleConfigController
from rulegen.crd import crd
from rulegen.model import DetectionRuleConfig, config_from_object
from rulegen.render import render_prometheusrule
from scripts.procs import free_port
from testkit.kapi import DRC, LEASES, RULES, Cluster
from tests.rulegen.crd_validation import api_server_errors

ROOT = Path(__file__).resolve().parents[2]
DRC_PATH = "/apis/mco.io/v1alpha1/detectionruleconfigs"
RULE_PATH = "/apis/monitoring.coreos.com/v1/namespaces/monitoring/prometheusrules/mco-rules"


class QuickShutdownServer(aiohttp.test_utils.RawTestServer):
    """Stops in 0.5 s: aiohttp otherwise waits up to a minute for an open watch to end."""

    async def _make_runner(self, debug: bool = True, **kwargs: Any) -> aiohttp.web.ServerRunner:
        server = aiohttp.web.Server(self._handler, loop=self._loop, debug=debug, **kwargs)
        return aiohttp.web.ServerRunner(server, debug=debug, shutdown_timeout=0.5)


def drc(spec: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "mco.io/v1alpha1",
        "kind": "DetectionRuleConfig",
        "metadata": {"name": "default", "generation": generation},
        "spec": spec,
    }


GOOD = {"window": "20s", "detections": {"ioCongestion": {"weight": 2}}}
BAD = {"detections": {"ioCongestion": {"signals": {"psiIOSome": {"warn": 0.9, "critical": 0.2}}}}}
BETTER = {"window": "30s"}  # merged into GOOD by kmock: still valid


async def eventually(
    check: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            if check():
                return
        except (KeyError, TypeError, IndexError):
            pass
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def watching(cluster: Cluster) -> None:
    """Wait until a watch is open (kmock has no resourceVersions to close the list-watch gap)."""
    await eventually(lambda: any(r.params.get("watch") == "true" for r in cluster), what="a watch")
    await asyncio.sleep(0.1)


def status(cluster: Cluster) -> dict[str, Any]:
    return dict(cluster.objects[DRC, None, "default"].raw.get("status") or {})


def condition(cluster: Cluster, kind: str) -> dict[str, Any]:
    return next(c for c in status(cluster)["conditions"] if c["type"] == kind)


def rule(cluster: Cluster) -> dict[str, Any]:
    return dict(cluster.objects[RULES, "monitoring", "mco-rules"].raw)


def expected_rule(spec: dict[str, Any], generation: int) -> dict[str, Any]:
    config = config_from_object(drc(spec, generation))
    rendered: dict[str, Any] = yaml.safe_load(
        render_prometheusrule(
            config,
            name="mco-rules",
            namespace="monitoring",
            labels={"release": "kps", "app.kubernetes.io/managed-by": "mco-rulegen"},
            generation=generation,
        )
    )
    return rendered


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with Cluster() as k:
        k.resources["mco.io/v1alpha1/detectionruleconfigs"] = kmock.ResourceInfo()
        k.resources["monitoring.coreos.com/v1/prometheusrules"] = kmock.ResourceInfo()
        k.resources[LEASES] = kmock.ResourceInfo(kind="Lease", namespaced=True)
        yield k


SETTINGS = ControllerSettings(
    rule_labels={"release": "kps"}, backoff_initial=0.05, backoff_max=0.2, resync_seconds=300
)


@pytest.fixture
async def running_controller(
    cluster: Cluster,
) -> AsyncIterator[tuple[Cluster, RuleConfigController]]:
    async with kmock.Server(cluster) as server:
        api = client.ApiClient(client.Configuration(host=str(server.url).rstrip("/")))
        controller = RuleConfigController(api, SETTINGS)
        task = asyncio.create_task(controller.run())
        try:
            yield cluster, controller
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await api.close()


async def test_valid_config_is_applied_with_server_side_apply(running_controller):
    cluster, controller = running_controller
    await cluster.post(DRC_PATH, json=drc(GOOD))
    digest = config_from_object(drc(GOOD)).config_hash()
    await eventually(lambda: status(cluster).get("appliedRulesHash") == digest, what="applied")

    assert rule(cluster)["spec"] == expected_rule(GOOD, 1)["spec"]
    assert rule(cluster)["metadata"]["labels"]["release"] == "kps"
    last = cluster.applies[-1]
    assert last["path"] == RULE_PATH
    # kubernetes_asyncio spells the bool "True"; the API server parses it with strconv.ParseBool.
    assert last["params"]["fieldManager"] == FIELD_MANAGER
    assert last["params"]["force"] in ("true", "True")
    s = status(cluster)
    assert s["observedGeneration"] == 1 and s["appliedGeneration"] == 1
    assert condition(cluster, "Accepted")["status"] == "True"
    assert condition(cluster, "Applied")["status"] == "True"
    assert condition(cluster, "Applied")["reason"] == "RulesApplied"
    # What the controller wrote is a valid object for the API server (status schema included).
    assert api_server_errors(crd(), cluster.objects[DRC, None, "default"].raw) == []
    assert controller.metrics.accepted._value.get() == 1


async def test_bad_update_is_rejected_and_the_last_good_rules_stay(running_controller):
    cluster, controller = running_controller
    await cluster.post(DRC_PATH, json=drc(GOOD))
    good_hash = config_from_object(drc(GOOD)).config_hash()
    await eventually(lambda: status(cluster).get("appliedRulesHash") == good_hash, what="applied")
    applies_before = len(cluster.applies)
    rule_before = rule(cluster)

    await cluster.patch(f"{DRC_PATH}/default", json={"metadata": {"generation": 2}, "spec": BAD})
    await eventually(lambda: status(cluster).get("observedGeneration") == 2, what="judged")
    accepted = condition(cluster, "Accepted")
    assert accepted["status"] == "False" and accepted["reason"] == "Rejected"
    assert (
        "spec.detections.ioCongestion.signals.psiIOSome: warn (0.9) must be below critical (0.2)"
        in accepted["message"]
    )
    assert accepted["observedGeneration"] == 2
    # The rules in force and the status that names them are the last good ones.
    await asyncio.sleep(0.3)
    assert len(cluster.applies) == applies_before
    assert rule(cluster) == rule_before
    s = status(cluster)
    assert (s["appliedGeneration"], s["appliedRulesHash"]) == (1, good_hash)
    assert condition(cluster, "Applied")["status"] == "True"
    assert controller.metrics.accepted._value.get() == 0
    assert controller.metrics.rejections._value.get() == 1

    # A good edit after the bad one is applied (kmock merges patches, like a merge patch).
    fixed = {
        "detections": {"ioCongestion": {"signals": {"psiIOSome": {"warn": 0.1, "critical": 0.2}}}}
    }
    await cluster.patch(f"{DRC_PATH}/default", json={"metadata": {"generation": 3}, "spec": fixed})
    await eventually(lambda: status(cluster).get("appliedGeneration") == 3, what="gen 3 applied")
    stored = cluster.objects[DRC, None, "default"].raw
    assert stored["spec"]["detections"]["ioCongestion"]["signals"]["psiIOSome"]["warn"] == 0.1
    assert (
        status(cluster)["appliedRulesHash"] == config_from_object(stored).config_hash() != good_hash
    )
    assert rule(cluster)["spec"] == expected_rule(stored["spec"], 3)["spec"]
    assert condition(cluster, "Accepted")["status"] == "True"
    assert controller.metrics.accepted._value.get() == 1


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (
            {"detections": {"ioCongestion": {"weight": 10**400}}},
            "spec.detections.ioCongestion.weight: expected a finite number, got <integer of",
        ),
        (
            {"detections": {"ioCongestion": {"weight": 1e308}}},
            "spec.detections.ioCongestion.weight: must be <= 1000",
        ),
        ({"window": "9999999999s"}, "spec.window: '9999999999s' is out of range"),
        ({"report": {"neutralScore": [["x" * 10_000] * 50]}}, "expected a number, got [["),
        (
            {
                "policies": [
                    {
                        "name": "a",
                        "podSelector": {
                            "matchExpressions": [
                                {"key": "t", "operator": "Exists", "values": ["x"]}
                            ]
                        },
                    }
                ]
            },
            "spec.policies[0].podSelector.matchExpressions[0].values: operator Exists takes no",
        ),
        (
            {"policies": [{"name": "a", "maxLevel": 1.5}, {"name": "a"}]},
            "spec.policies[0].maxLevel: must be within [0, 1], got 1.5",
        ),
        ({"policies": {"name": "a"}}, "spec.policies: expected a list"),
    ],
)
async def test_hostile_numbers_are_rejected_with_a_short_reason(running_controller, spec, reason):
    """Values the API server may hold (its schema is not the only writer) never crash the loop."""
    cluster, controller = running_controller
    await cluster.post(DRC_PATH, json=drc(GOOD))
    good_hash = config_from_object(drc(GOOD)).config_hash()
    await eventually(lambda: status(cluster).get("appliedRulesHash") == good_hash, what="applied")
    rule_before = rule(cluster)

    await cluster.patch(f"{DRC_PATH}/default", json={"metadata": {"generation": 2}, "spec": spec})
    await eventually(lambda: status(cluster).get("observedGeneration") == 2, what="judged")
    accepted = condition(cluster, "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "Rejected")
    assert reason in accepted["message"] and len(accepted["message"]) < 500
    assert rule(cluster) == rule_before
    assert status(cluster)["appliedRulesHash"] == good_hash
    assert controller.metrics.rejections._value.get() == 1


async def test_failed_apply_is_reported_and_retried(running_controller):
    cluster, controller = running_controller
    cluster.failing.add("/prometheusrules/")
    await cluster.post(DRC_PATH, json=drc(GOOD))
    await eventually(
        lambda: condition(cluster, "Applied")["reason"] == "ApplyFailed", what="ApplyFailed"
    )
    applied = condition(cluster, "Applied")
    assert applied["status"] == "False" and "503" in applied["message"]
    assert "appliedRulesHash" not in status(cluster)
    assert condition(cluster, "Accepted")["status"] == "True"
    await eventually(
        lambda: controller.metrics.errors.labels("server_error")._value.get() >= 2, what="retries"
    )
    cluster.failing.clear()
    digest = config_from_object(drc(GOOD)).config_hash()
    await eventually(
        lambda: status(cluster).get("appliedRulesHash") == digest, timeout=5, what="recovery"
    )
    assert condition(cluster, "Applied")["status"] == "True"


async def test_deleted_config_falls_back_to_the_built_in_defaults(running_controller):
    cluster, _ = running_controller
    await cluster.post(DRC_PATH, json=drc(GOOD))
    await eventually(
        lambda: rule(cluster)["spec"] == expected_rule(GOOD, 1)["spec"], what="applied"
    )
    await watching(cluster)
    await cluster.delete(f"{DRC_PATH}/default")
    default_hash = DetectionRuleConfig.default().config_hash()
    await eventually(
        lambda: rule(cluster)["metadata"]["annotations"]["mco.io/rule-config-hash"] == default_hash,
        what="defaults applied",
    )
    assert rule(cluster)["metadata"]["annotations"]["mco.io/rule-config-generation"] == "0"


async def test_unreachable_api_is_retried_until_it_answers(cluster):
    port = free_port()
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}"))
    controller = RuleConfigController(api, SETTINGS)
    task = asyncio.create_task(controller.run())
    try:
        await eventually(
            lambda: controller.metrics.errors.labels("connection")._value.get() >= 3,
            what="retries",
        )
        assert not task.done() and not controller.synced.is_set()
        assert controller.metrics.up._value.get() == 0
        # The API server comes up (with the config already stored).
        cluster.objects[DRC, None, "default"] = drc(GOOD)
        async with kmock.Server(cluster, port=port, server_cls=QuickShutdownServer):
            await eventually(lambda: "appliedRulesHash" in status(cluster), timeout=5, what="sync")
            assert controller.synced.is_set() and controller.metrics.up._value.get() == 1
        # It goes away again mid-watch: the controller keeps retrying, the rules stay.
        before = controller.metrics.errors.labels("connection")._value.get()
        await eventually(
            lambda: controller.metrics.errors.labels("connection")._value.get() > before,
            what="errors",
        )
        assert not task.done()
        assert rule(cluster)["spec"] == expected_rule(GOOD, 1)["spec"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()


async def test_resync_undoes_a_hand_edit_of_the_prometheusrule(cluster):
    async with kmock.Server(cluster) as server:
        api = client.ApiClient(client.Configuration(host=str(server.url).rstrip("/")))
        controller = RuleConfigController(api, dataclasses.replace(SETTINGS, resync_seconds=0.5))
        task = asyncio.create_task(controller.run())
        try:
            await cluster.post(DRC_PATH, json=drc(GOOD))
            await eventually(lambda: "appliedRulesHash" in status(cluster), what="applied")
            await cluster.patch(RULE_PATH, json={"spec": {"groups": []}})
            assert rule(cluster)["spec"]["groups"] == []
            await eventually(
                lambda: rule(cluster)["spec"] == expected_rule(GOOD, 1)["spec"], what="resync"
            )
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await api.close()


async def test_two_controllers_converge_without_flapping(cluster):
    async with kmock.Server(cluster) as server:
        apis = [
            client.ApiClient(client.Configuration(host=str(server.url).rstrip("/")))
            for _ in range(2)
        ]
        tasks = [asyncio.create_task(RuleConfigController(a, SETTINGS).run()) for a in apis]
        try:
            await cluster.post(DRC_PATH, json=drc(GOOD))
            await eventually(lambda: "appliedRulesHash" in status(cluster), what="applied")
            await cluster.patch(
                f"{DRC_PATH}/default", json={"metadata": {"generation": 2}, "spec": BETTER}
            )
            await eventually(lambda: status(cluster).get("appliedGeneration") == 2, what="gen 2")
            await asyncio.sleep(0.5)
            settled = (len(list(cluster)), dict(status(cluster)))
            await asyncio.sleep(1.0)
            # Nothing more is written once both agree: no status ping-pong between them.
            assert len(list(cluster)) == settled[0]
            assert status(cluster) == settled[1]
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for a in apis:
                await a.close()


@pytest.mark.slow
async def test_cli_controller_serves_metrics_over_tls_and_stops_on_sigterm(cluster, tmp_path):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    port = free_port()
    async with kmock.Server(cluster) as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "kmock", "cluster": {"server": str(server.url).rstrip("/")}}
                    ],
                    "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "kmock", "user": "u"}}],
                    "current-context": "c",
                }
            )
        )
        await cluster.post(DRC_PATH, json=drc(GOOD))
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        env["POD_NAMESPACE"] = "mco-system"
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "rulegen",
            "controller",
            f"--kubeconfig={kubeconfig}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.tls-cert-file={tmp_path / 'server.pem'}",
            f"--web.tls-key-file={tmp_path / 'server.pem'}",
            "--prometheusrule-namespace=monitoring",
            "--prometheusrule-label=release=kps",
            "--leader-elect-identity=only",
            "--log.format=json",
            cwd=ROOT,
            env=env,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            context = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
            async with aiohttp.ClientSession() as http:

                async def ready() -> bool:
                    try:
                        async with http.get(f"https://127.0.0.1:{port}/readyz", ssl=context) as r:
                            return r.status == 200
                    except aiohttp.ClientError:
                        return False

                for _ in range(200):
                    if await ready():
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError("controller never became ready")
                async with http.get(f"https://127.0.0.1:{port}/metrics", ssl=context) as r:
                    text = await r.text()
            assert "mco_rulegen_config_accepted 1.0" in text
            assert "mco_rulegen_applied_generation 1.0" in text
            # Leader-elected by default, with the Lease in the pod's own namespace.
            assert "mco_rulegen_leader 1.0" in text
            lease = cluster.objects[LEASES, "mco-system", "mco-rulegen"].raw
            assert lease["spec"]["holderIdentity"] == "only"
            assert rule(cluster)["spec"] == expected_rule(GOOD, 1)["spec"]
        finally:
            proc.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(proc.communicate(), timeout=10)
        assert proc.returncode == 0, stderr.decode()
        lines = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
        assert any(rec["msg"] == "PrometheusRule applied" for rec in lines)
        # SIGTERM released the lease, so a standby need not wait it out.
        assert (
            not cluster.objects[LEASES, "mco-system", "mco-rulegen"]
            .raw["spec"]
            .get("holderIdentity")
        )
        assert "not-a-secret" not in stderr.decode()  # no credentials in the logs


@pytest.mark.parametrize(
    "flag",
    ["--web.listen-address=nowhere", "--resync=0s", "--resync=soon", "--web.tls-cert-file=/x.pem",
     "--leader-elect-renew-deadline=20s"],  # the last: longer than the lease duration
)  # fmt: skip
def test_cli_rejects_bad_flags(flag, capsys):
    from rulegen.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["controller", flag])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("mco-rulegen: error: ") and err.count("\n") == 1, err


def test_resync_takes_any_flag_duration():
    from rulegen.cli import ControllerCommand, parse_settings

    for text, seconds in (("500ms", 0.5), ("1m30s", 90.0), ("5m", 300.0)):
        command = parse_settings(["controller", f"--resync={text}"])
        assert isinstance(command, ControllerCommand)
        assert command.controller.resync_seconds == seconds


FAST_DISKS = {
    "detections": {
        "ioCongestion": {
            "signals": {"blockIOLatencyP95Seconds": {"warn": 0.001, "critical": 0.004}}
        }
    }
}


async def test_thresholds_outside_the_exporters_buckets_are_named_in_the_status(cluster):
    """Accepted and applied, but the status and a gauge say which buckets the exporters lack."""
    settings = dataclasses.replace(SETTINGS, exporter_buckets=parse_bounds(DEFAULT_BUCKETS))
    async with kmock.Server(cluster) as server:
        api = client.ApiClient(client.Configuration(host=str(server.url).rstrip("/")))
        controller = RuleConfigController(api, settings)
        task = asyncio.create_task(controller.run())
        try:
            await cluster.post(DRC_PATH, json=drc(FAST_DISKS))
            await eventually(lambda: status(cluster).get("appliedGeneration") == 1, what="applied")
            accepted = condition(cluster, "Accepted")
            assert accepted["status"] == "True"
            # P95 0.5-4.1 ms: the brackets from 0.512 ms to 4.096 ms, none of them exported.
            assert "latency buckets 0.000512,0.001024,0.002048,0.004096 " in accepted["message"]
            assert (
                "--collector.biolatency.buckets=0.000512,0.001024,0.002048,0.004096,0.016384,"
                in accepted["message"]
            )
            assert controller.metrics.latency_buckets_missing._value.get() == 4
            assert api_server_errors(crd(), cluster.objects[DRC, None, "default"].raw) == []

            # Back to the default thresholds: nothing missing.
            await cluster.patch(
                f"{DRC_PATH}/default",
                json={"metadata": {"generation": 2}, "spec": {"detections": None}},
            )
            await eventually(lambda: status(cluster).get("appliedGeneration") == 2, what="2")
            assert condition(cluster, "Accepted")["message"] == "the spec is valid"
            assert controller.metrics.latency_buckets_missing._value.get() == 0
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await api.close()
