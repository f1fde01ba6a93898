"""Where staleAfter and the hard-constraint limits come from: a file, or the API's `default`
DetectionRuleConfig, followed by a watch (kmock); a bad one keeps the last good one."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kmock
import yaml

from mco.promql import PromQLClient, SourceConfig
from mco.watch import WatchSettings
from reporter.engine import Reporter
from reporter.entries import Epsilon
from reporter.filesink import FileSink
from reporter.layout import LayoutChooser
from reporter.metrics import ReporterMetrics
from reporter.query import Kind, Plan, window
from reporter.ruleconfig import RuleConfigSource
from rulegen.model import API_GROUP, API_VERSION, PLURAL, DetectionRuleConfig
from testkit.answers import quiet_values
from testkit.fakeprom import fake_prometheus
from testkit.kapi import VersionedKubernetes


def config_yaml(io_max: float, stale: str = "45s") -> str:
    obj = DetectionRuleConfig.default().to_object()
    obj["spec"]["hardConstraints"]["psiIOSomeMax"] = io_max
    obj["spec"]["report"]["staleAfter"] = stale
    return yaml.safe_dump(obj)


async def test_file_is_reloaded_when_it_changes_and_a_bad_edit_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config_yaml(0.7))
    source = RuleConfigSource(path=str(path))
    assert source.load_initial().hard_constraints["psiIOSomeMax"] == 0.7
    assert source.config.report.stale_after == 45
    path.write_text(config_yaml(0.6, "1m"))
    os.utime(path, ns=(1, 10**18))  # a new mtime even within the same clock tick
    assert (await source.current()).hard_constraints["psiIOSomeMax"] == 0.6
    path.write_text("spec: {window: 0s}\n")
    os.utime(path, ns=(1, 2 * 10**18))
    assert (await source.current()).report.stale_after == 60  # kept the last good one


DRC = kmock.resource(API_GROUP, API_VERSION, PLURAL)
DRC_PATH = f"/apis/{API_GROUP}/{API_VERSION}/{PLURAL}"
FAST = WatchSettings(backoff_initial=0.05, backoff_max=0.2)


async def eventually(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


def drc_requests(kapi: VersionedKubernetes) -> list[Any]:
    return [r for r in kapi if r.resource == DRC]


def watching(kapi: VersionedKubernetes) -> Callable[[], bool]:
    """Whether a watch on DetectionRuleConfigs is subscribed to kmock's event bus."""
    return lambda: kapi._buses[DRC].consumer_count > 0


def io_max(source: RuleConfigSource) -> float:
    return source.config.hard_constraints["psiIOSomeMax"]


async def test_api_object_is_followed_by_a_watch_not_polled(
    kapi: VersionedKubernetes, api_client, caplog
) -> None:
    kapi.resources[DRC] = kmock.ResourceInfo(kind="DetectionRuleConfig", namespaced=False)
    source = RuleConfigSource(api_client=api_client, watch=FAST)
    assert not source.synced.is_set()
    task = asyncio.create_task(source.follow())
    try:
        async with asyncio.timeout(5):
            await source.synced.wait()
        assert await source.current() == DetectionRuleConfig.default()  # none: defaults
        await eventually(watching(kapi), "the watch")
        await kapi.post(DRC_PATH, json=yaml.safe_load(config_yaml(0.5)))
        await eventually(lambda: io_max(source) == 0.5, "the new object")
        assert (await source.current()).report.stale_after == 45
        # A bad edit is rejected; the last good config stays.
        caplog.set_level("ERROR", logger="mco.reporter.ruleconfig")
        await kapi.patch(f"{DRC_PATH}/default", json={"spec": {"window": "banana"}})
        await eventually(lambda: "rejected" in caplog.text, "the rejection")
        assert io_max(source) == 0.5
        await kapi.patch(
            f"{DRC_PATH}/default",
            json={"spec": {"window": "30s", "hardConstraints": {"psiIOSomeMax": 0.4}}},
        )
        await eventually(lambda: io_max(source) == 0.4, "the fixed object")
        await kapi.delete(f"{DRC_PATH}/default")
        await eventually(lambda: source.config == DetectionRuleConfig.default(), "the defaults")
        # Followed, not polled: one list, then watch requests only; never a GET of the object.
        # (The test's own writes are the other requests.)
        reads = [r for r in drc_requests(kapi) if r.method.value == "GET"]
        lists = [r for r in reads if r.params.get("watch") != "true"]
        assert len(lists) == 1 and lists[0].params.get("fieldSelector") == "metadata.name=default"
        assert not any(r.name for r in reads)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_reporter_writes_the_limits_of_an_edited_rule_config_without_a_restart(
    kapi: VersionedKubernetes, api_client, tmp_path: Path
) -> None:
    """A leader term of the engine follows the DetectionRuleConfig: an edit of the hard limit
    is in the violations the next cycles write."""
    kapi.resources[DRC] = kmock.ResourceInfo(kind="DetectionRuleConfig", namespaced=False)
    await kapi.post(DRC_PATH, json=yaml.safe_load(config_yaml(0.7)))
    plan = Plan(compact=False)
    values = quiet_values(plan)
    values[(Kind.VIOLATED, "psi_io_some")] = 1.0
    values[(Kind.SIGNAL, "psiIOSome")] = 0.75
    out = tmp_path / "report.json"

    def limits() -> list[float]:
        try:
            report = json.loads(out.read_text())
        except (OSError, ValueError):
            return []
        return [v["limit"] for v in report["status"]["nodes"]["a"].get("violations", [])]

    async with fake_prometheus() as prom, PromQLClient(SourceConfig(prom.url)) as source:
        prom.nodes = {"a": values}
        reporter = Reporter(
            source=source,
            rules=RuleConfigSource(api_client=api_client, watch=FAST),
            plan=plan,
            epsilon=Epsilon(),
            metrics=ReporterMetrics(),
            sink=FileSink(str(out), LayoutChooser("cluster")),
        )
        term = asyncio.create_task(reporter.lead(0.05))
        try:
            await eventually(lambda: limits() == [0.7], "the first report")
            await eventually(watching(kapi), "the watch")
            await kapi.patch(
                f"{DRC_PATH}/default", json={"spec": {"hardConstraints": {"psiIOSomeMax": 0.6}}}
            )
            await eventually(lambda: limits() == [0.6], "the edited limit in the report")
            reads = [r for r in drc_requests(kapi) if r.method.value == "GET"]
            assert reads and not any(r.name for r in reads)  # never polled by name
        finally:
            term.cancel()
            await asyncio.gather(term, return_exceptions=True)


async def test_hostile_file_edits_are_rejected_fast_and_the_last_good_one_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config_yaml(0.7))
    source = RuleConfigSource(path=str(path))
    source.load_initial()
    bomb = "".join(
        f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}' if i else 'x'] * 9)}]\n" for i in range(9)
    )
    head = "apiVersion: mco.io/v1alpha1\nkind: DetectionRuleConfig\nspec:\n"
    for n, hostile in enumerate(
        (
            head + bomb + "  window: *a8\n",  # YAML alias bomb
            head + "  detections: {ioCongestion: {weight: " + "9" * 401 + "}}\n",
            head + "  window: 9999999999s\n",
        ),
        start=1,
    ):
        path.write_text(hostile)
        os.utime(path, ns=(1, n * 10**18))
        start = time.perf_counter()
        assert (await source.current()).hard_constraints["psiIOSomeMax"] == 0.7
        assert time.perf_counter() - start < 0.5


async def test_status_config_follows_the_accepted_rule_config_and_never_a_rejected_one(
    kapi: VersionedKubernetes, api_client, tmp_path: Path
) -> None:
    """status.config carries the accepted object's generation, report settings and policies;
    a rejected edit (a bad policy) leaves the last good one in the report."""
    kapi.resources[DRC] = kmock.ResourceInfo(kind="DetectionRuleConfig", namespaced=False)
    first = yaml.safe_load(config_yaml(0.7, "40s"))
    first["metadata"]["generation"] = 1
    await kapi.post(DRC_PATH, json=first)
    plan = Plan(compact=False)
    out = tmp_path / "report.json"

    def config() -> dict[str, Any]:
        try:
            found: dict[str, Any] = json.loads(out.read_text())["status"].get("config", {})
        except (OSError, ValueError):
            return {}
        return found

    async with fake_prometheus() as prom, PromQLClient(SourceConfig(prom.url)) as source:
        prom.nodes = {"a": quiet_values(plan)}
        reporter = Reporter(
            source=source,
            rules=RuleConfigSource(api_client=api_client, watch=FAST),
            plan=plan,
            epsilon=Epsilon(),
            metrics=ReporterMetrics(),
            sink=FileSink(str(out), LayoutChooser("cluster")),
        )
        term = asyncio.create_task(reporter.lead(0.05))
        try:
            await eventually(lambda: config().get("generation") == 1, "the first config")
            assert config()["staleAfter"] == "40s" and config()["neutralScore"] == 50
            # The recorded query's window follows staleAfter (30s by default: [31s]).
            assert reporter.plan.window == window(40) == 41
            await eventually(
                lambda: prom.recorded_query == reporter.plan.recorded_expr, "a [41s] read"
            )
            assert prom.recorded_query.endswith("[41s])")
            names = [p["name"] for p in config()["policies"]]
            assert names == ["latency-sensitive", "batch", "best-effort", "default"]
            await eventually(watching(kapi), "the watch")
            bad = [{"name": "online", "podSelector": {"matchExpressions": [
                {"key": "tier", "operator": "Exists", "values": ["x"]}]}}]  # fmt: skip
            await kapi.patch(
                f"{DRC_PATH}/default",
                json={"metadata": {"generation": 2}, "spec": {"policies": bad}},
            )
            good = [{"name": "online", "maxLevel": 0.2, "scoreWeight": 2}]
            await asyncio.sleep(0.5)  # ten cycles: the rejected generation must not show
            assert config().get("generation") == 1
            await kapi.patch(
                f"{DRC_PATH}/default",
                json={
                    "metadata": {"generation": 3},
                    "spec": {"policies": good, "report": {"neutralScore": 80}},
                },
            )
            await eventually(lambda: config().get("generation") == 3, "the fixed config")
            assert config()["neutralScore"] == 80
            # Fields at their defaults are left out (mco.policy.Policy fills them back in).
            assert config()["policies"] == [{"name": "online", "maxLevel": 0.2, "scoreWeight": 2.0}]
        finally:
            term.cancel()
            await asyncio.gather(term, return_exceptions=True)


async def test_a_reporter_starting_on_a_rejected_rule_config_writes_no_status_config(
    kapi: VersionedKubernetes, api_client, tmp_path: Path
) -> None:
    """The built-in defaults the reporter falls back to are not the accepted config: the
    report leaves status.config out (readers keep what they had) until an object is accepted."""
    kapi.resources[DRC] = kmock.ResourceInfo(kind="DetectionRuleConfig", namespaced=False)
    bad = yaml.safe_load(config_yaml(0.7))
    bad["metadata"]["generation"] = 4
    bad["spec"]["policies"] = [{"name": "online", "maxLevel": 2}]
    await kapi.post(DRC_PATH, json=bad)
    plan = Plan(compact=False)
    out = tmp_path / "report.json"

    def status() -> dict[str, Any]:
        try:
            found: dict[str, Any] = json.loads(out.read_text())["status"]
        except (OSError, ValueError):
            return {}
        return found

    async with fake_prometheus() as prom, PromQLClient(SourceConfig(prom.url)) as source:
        prom.nodes = {"a": quiet_values(plan)}
        rules = RuleConfigSource(api_client=api_client, watch=FAST)
        reporter = Reporter(
            source=source,
            rules=rules,
            plan=plan,
            epsilon=Epsilon(),
            metrics=ReporterMetrics(),
            sink=FileSink(str(out), LayoutChooser("cluster")),
        )
        term = asyncio.create_task(reporter.lead(0.05))
        try:
            await eventually(lambda: "a" in status().get("nodes", {}), "the first report")
            assert rules.unaccepted and "config" not in status()
            await eventually(watching(kapi), "the watch")
            await kapi.patch(
                f"{DRC_PATH}/default",
                json={"metadata": {"generation": 5}, "spec": {"policies": [{"name": "online"}]}},
            )
            await eventually(lambda: status().get("config", {}).get("generation") == 5, "fixed")
            assert status()["config"]["policies"] == [{"name": "online"}]
        finally:
            term.cancel()
            await asyncio.gather(term, return_exceptions=True)
