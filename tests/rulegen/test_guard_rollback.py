"""The guard against a spec that would filter most nodes, the spec history and rollback.

The guard reads a real Prometheus whose "live data" are recording rules of constant values
(ten nodes, two of them over the memory limit now); the controller runs against the Kubernetes
API stand-in of test_controller.py. kmock does not bump ``metadata.generation`` on a spec
change, so the tests do what the API server would.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml
from kubernetes_asyncio import client

from mco.promql import SourceConfig
from rulegen import guard, history
from rulegen.catalog import CATALOG, Signal
from rulegen.cli import RollbackCommand, cmd_rollback, main
from rulegen.controller import GUARD_REJECTED, RuleConfigController
from rulegen.crd import crd
from rulegen.model import DetectionRuleConfig, config_from_object, from_spec
from rulegen.rollback import RollbackError, rollback
from scripts.procs import Prometheus, free_port
from testkit.kapi import DRC, Cluster
from tests.rulegen.crd_validation import api_server_errors
from tests.rulegen.test_controller import (
    DRC_PATH,
    SETTINGS,
    condition,
    drc,
    eventually,
    rule,
    status,
)

NODES = [f"node-{i}" for i in range(10)]
MEMORY = {n: (0.02 if i < 2 else 0.002) for i, n in enumerate(NODES)}  # PSI memory full now
# Half the nodes without PSI: the memory-pressure fallback signals count there, PSI elsewhere.
FALLBACK = {n: int(i >= 5) for i, n in enumerate(NODES)}


def _quiet(signal: Signal) -> float:
    """Each signal's live value: on the good side of its default warn by a factor of two."""
    warn = DetectionRuleConfig.default().threshold(signal.key).warn
    return 2 * warn if signal.lower_is_worse else warn / 2


def _catching(signal: Signal) -> dict[str, float]:
    """Thresholds for ``signal`` that every quiet value is at or beyond, both of them."""
    warn = DetectionRuleConfig.default().threshold(signal.key).warn
    if signal.lower_is_worse:
        return {"warn": 4 * warn, "critical": 3 * warn}
    return {"warn": warn / 4, "critical": warn / 3}


def _live_rules() -> dict[str, Any]:
    rules: list[dict[str, Any]] = []
    for node in NODES:
        labels = {"node": node}
        rules += [
            {"record": "node:mco_node:info", "expr": "vector(1)", "labels": labels},
            {
                "record": "node:mco_psi_memory_full_ratio:smoothed",
                "expr": f"vector({MEMORY[node]})",
                "labels": labels,
            },
            {
                "record": "node:mco_memory_pressure_fallback:bool",
                "expr": f"vector({FALLBACK[node]})",
                "labels": labels,
            },
            *(
                {"record": sig.series, "expr": f"vector({_quiet(sig)})", "labels": labels}
                for sig in CATALOG.signals
            ),
            {
                "record": "node:mco_hard_constraint_violated:bool",
                "expr": f"vector({1 if MEMORY[node] > 0.01 else 0})",
                "labels": {**labels, "constraint": "psi_memory_full"},
            },
        ]
    return {"groups": [{"name": "live", "interval": "1s", "rules": rules}]}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    workdir = tmp_path_factory.mktemp("guard-prometheus")
    rules = workdir / "live.yaml"
    rules.write_text(yaml.safe_dump(_live_rules()))
    server = Prometheus(workdir, rule_files=[rules])
    server.start()
    try:
        server.wait_for_series("count(node:mco_hard_constraint_violated:bool) == 10")
        yield server
    finally:
        server.stop()


def _with_memory_limit(limit: float) -> DetectionRuleConfig:
    default = DetectionRuleConfig.default()
    return dataclasses.replace(
        default, hard_constraints={**default.hard_constraints, "psiMemoryFullMax": limit}
    )


pytestmark = pytest.mark.slow


async def test_guard_counts_the_nodes_a_spec_would_filter_now(prometheus: Prometheus) -> None:
    settings = guard.GuardSettings(SourceConfig(prometheus.url, timeout=30), max_filtered_share=0.5)
    typo = await guard.check(settings, _with_memory_limit(0.001))  # meant 0.01
    assert not typo.allowed and typo.checked
    assert "would filter 10 of 10 nodes now (100%; the rules in force filter 2)" in typo.message
    assert guard.SKIP_ANNOTATION in typo.message
    fine = await guard.check(settings, _with_memory_limit(0.01))
    assert fine.allowed and fine.checked and "2 of 10 nodes" in fine.message
    # A cluster already in trouble can still be tuned: over the share, but no worse than the
    # rules in force, passes; worse does not.
    strict = guard.GuardSettings(SourceConfig(prometheus.url, timeout=30), max_filtered_share=0.1)
    assert (await guard.check(strict, _with_memory_limit(0.01))).allowed
    assert not (await guard.check(strict, _with_memory_limit(0.001))).allowed
    down = guard.GuardSettings(SourceConfig(f"http://127.0.0.1:{free_port()}", timeout=1))
    unchecked = await guard.check(down, _with_memory_limit(0.001))
    assert unchecked.allowed and not unchecked.checked
    assert unchecked.message.startswith("guard not checked:")


async def test_guard_counts_the_nodes_each_signals_thresholds_would_catch_now(
    prometheus: Prometheus,
) -> None:
    """Every threshold a spec holds (and ``mco-rulegen recommend`` proposes) is guarded: one
    signal's warn and critical moved into its quiet range trip the guard on their own."""
    settings = guard.GuardSettings(SourceConfig(prometheus.url, timeout=30), max_filtered_share=0.4)
    default = await guard.check(settings, DetectionRuleConfig.default())
    assert default.allowed, default.message
    assert "its warn thresholds would trigger on 0 of 10 nodes now" in default.message
    for sig in CATALOG.signals:
        caught = (
            5 if CATALOG.detection(sig.detection).psi_fallback else 10
        )  # where the rules count the signal (its PSI gate)
        where = "fallback" if sig.fallback else "signals"
        spec = DetectionRuleConfig.default().to_spec()
        spec["detections"][sig.detection][where][sig.key] = _catching(sig)
        config = from_spec(spec)
        verdict = await guard.check(settings, config)
        assert not verdict.allowed, (sig.key, verdict.message)
        assert f"its warn thresholds would trigger on {caught} of 10 nodes now" in verdict.message
        assert f"its critical thresholds would reach {caught} of 10 nodes now" in verdict.message


@pytest.fixture
async def guarded(
    prometheus: Prometheus,
) -> AsyncIterator[tuple[Cluster, RuleConfigController, client.ApiClient]]:
    async with Cluster() as cluster:
        cluster.resources["mco.io/v1alpha1/detectionruleconfigs"] = kmock.ResourceInfo()
        cluster.resources["monitoring.coreos.com/v1/prometheusrules"] = kmock.ResourceInfo()
        async with kmock.Server(cluster) as server:
            api = client.ApiClient(client.Configuration(host=str(server.url).rstrip("/")))
            settings = dataclasses.replace(
                SETTINGS,
                guard=guard.GuardSettings(SourceConfig(prometheus.url, timeout=30)),
                history_limit=3,
            )
            controller = RuleConfigController(api, settings)
            task = asyncio.create_task(controller.run())
            try:
                yield cluster, controller, api
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await api.close()


def _memory(limit: float) -> dict[str, Any]:
    return {"hardConstraints": {"psiMemoryFullMax": limit}}


async def _edit(cluster: Cluster, spec: dict[str, Any], generation: int) -> None:
    """A spec edit as the API server stores it: the new spec under a new generation."""
    await cluster.patch(
        f"{DRC_PATH}/default",
        json={"metadata": {"generation": generation}, "spec": spec},
    )


async def test_a_spec_that_would_empty_the_cluster_is_rejected_until_overridden(guarded):
    cluster, controller, _ = guarded
    await cluster.post(DRC_PATH, json=drc(_memory(0.05)))
    await eventually(lambda: status(cluster).get("appliedGeneration") == 1, what="gen 1")
    assert "would filter 0 of 10 nodes" in condition(cluster, "Accepted")["message"]
    # A resync judges it again with nothing to guard: the guard's word stays.
    await controller.reconcile(dict(cluster.objects[DRC, None, "default"].raw), force=True)
    assert "would filter 0 of 10 nodes" in condition(cluster, "Accepted")["message"]
    rules_before = rule(cluster)

    await _edit(cluster, _memory(0.001), 2)
    await eventually(lambda: status(cluster).get("observedGeneration") == 2, what="judged")
    accepted = condition(cluster, "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", GUARD_REJECTED)
    assert "would filter 10 of 10 nodes now" in accepted["message"]
    assert status(cluster)["appliedGeneration"] == 1 and rule(cluster) == rules_before
    assert controller.metrics.accepted._value.get() == 0
    assert controller.metrics.guard_checks.labels("rejected")._value.get() >= 1
    assert api_server_errors(crd(), cluster.objects[DRC, None, "default"].raw) == []

    # Annotating the same generation applies it (the operator's explicit override).
    await cluster.patch(
        f"{DRC_PATH}/default",
        json={"metadata": {"annotations": {guard.SKIP_ANNOTATION: "true"}}},
    )
    await eventually(lambda: status(cluster).get("appliedGeneration") == 2, what="overridden")
    assert condition(cluster, "Accepted")["status"] == "True"


async def _applied(cluster: Cluster, generation: int) -> None:
    await eventually(
        lambda: status(cluster).get("appliedGeneration") == generation, what=f"gen {generation}"
    )


async def test_history_keeps_the_accepted_specs_and_rollback_restores_one(guarded, capsys):
    cluster, _, api = guarded
    specs = {1: _memory(0.05), 2: _memory(0.04), 3: _memory(0.03), 4: _memory(0.02)}
    await cluster.post(DRC_PATH, json=drc(specs[1]))
    await eventually(lambda: status(cluster).get("appliedGeneration") == 1, what="gen 1")
    for generation in (2, 3, 4):
        await _edit(cluster, specs[generation], generation)
        await _applied(cluster, generation)
    past = status(cluster)["history"]
    # Newest first, bounded by --history-limit (3), each with the spec that was in force.
    assert [h["generation"] for h in past] == [4, 3, 2]
    assert past[1]["spec"]["hardConstraints"]["psiMemoryFullMax"] == 0.03
    assert past[1]["hash"] == config_from_object(drc(specs[3], 3)).config_hash()
    assert api_server_errors(crd(), cluster.objects[DRC, None, "default"].raw) == []

    # Without --to-generation: the last accepted spec before the one in force (generation 3).
    restored = await rollback(api, name="default", to_generation=None)
    assert (restored.from_generation, restored.previous_generation) == (3, 4)
    stored = cluster.objects[DRC, None, "default"].raw
    assert stored["spec"]["hardConstraints"]["psiMemoryFullMax"] == 0.03
    await _edit(cluster, stored["spec"], 5)  # the API server's new generation
    await eventually(lambda: status(cluster).get("appliedGeneration") == 5, what="restored")
    assert status(cluster)["appliedRulesHash"] == past[1]["hash"]

    # A generation that is not kept: exit 2 with the generations there are.
    with pytest.raises(RollbackError, match=r"generation 1 is not in the history .*: 5, 4, 3"):
        await rollback(api, name="default", to_generation=1)


async def test_rollback_restores_the_spec_exactly_not_merged(guarded):
    """Keys the bad edit added are removed, not left behind by the merge patch."""
    cluster, _, api = guarded
    await cluster.post(DRC_PATH, json=drc(_memory(0.05)))
    await eventually(lambda: status(cluster).get("appliedGeneration") == 1, what="gen 1")
    await _edit(cluster, {**_memory(0.05), "window": "30s"}, 2)
    await eventually(lambda: status(cluster).get("appliedGeneration") == 2, what="gen 2")
    await rollback(api, name="default", to_generation=1)
    assert cluster.objects[DRC, None, "default"].raw["spec"] == _memory(0.05)


def test_merge_patch_turns_one_spec_into_the_other() -> None:
    current = {"window": "30s", "hardConstraints": {"a": 1, "b": 2}, "policies": [1, 2]}
    target = {"hardConstraints": {"a": 3}, "policies": [1]}
    patch = history.merge_patch(current, target)
    assert patch == {"window": None, "hardConstraints": {"a": 3, "b": None}, "policies": [1]}


def test_cli_rollback_without_a_cluster_exits_2(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "absent-kubeconfig"
    assert main(["rollback", "--kubeconfig", str(missing)]) == 2
    assert "no Kubernetes API configuration" in capsys.readouterr().err


async def test_cli_rollback_through_a_kubeconfig(guarded, tmp_path: Path, capsys) -> None:
    """The console command: the user's kubeconfig, the restore printed, exit 2 with the
    generations kept when the asked one is not among them."""
    cluster, _, api = guarded
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stand-in", "cluster": {"server": api.configuration.host}}],
                "users": [{"name": "me", "user": {}}],
                "contexts": [{"name": "here", "context": {"cluster": "stand-in", "user": "me"}}],
                "current-context": "here",
            }
        )
    )
    await cluster.post(DRC_PATH, json=drc(_memory(0.05)))
    await _applied(cluster, 1)
    await _edit(cluster, _memory(0.04), 2)
    await _applied(cluster, 2)
    command = RollbackCommand(kubeconfig=str(kubeconfig), to_generation=9)
    assert await cmd_rollback(command) == 2
    assert "generation 9 is not in the history of DetectionRuleConfig default; it has: 2, 1" in (
        capsys.readouterr().err
    )
    assert await cmd_rollback(RollbackCommand(kubeconfig=str(kubeconfig))) == 0
    assert "restored the spec of generation 1 (was generation 2)" in capsys.readouterr().out
    stored = cluster.objects[DRC, None, "default"].raw
    assert stored["spec"] == _memory(0.05)
