"""Where staleAfter and the hard-constraint limits come from: a file, or the API's `default`
DetectionRuleConfig; a bad one keeps the last good one."""

from __future__ import annotations

import os
from pathlib import Path

import kmock
import yaml

from reporter.ruleconfig import RuleConfigSource
from rulegen.model import API_GROUP, API_VERSION, PLURAL, DetectionRuleConfig
from tests.reporter.kapi import VersionedKubernetes


def config_yaml(io_max: float, stale: str = "45s") -> str:
    obj = DetectionRuleConfig.default().to_object()
    obj["spec"]["hardConstraints"]["psiIOSomeMax"] = io_max
    obj["spec"]["report"]["staleAfter"] = stale
    return yaml.safe_dump(obj)


async def test_file_is_reloaded_when_it_changes_and_a_bad_edit_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config_yaml(0.7))
    source = RuleConfigSource(path=str(path))
    assert source.load_initial().hard_constraints.psi_io_some_max == 0.7
    assert source.config.report.stale_after == 45
    path.write_text(config_yaml(0.6, "1m"))
    os.utime(path, ns=(1, 10**18))  # a new mtime even within the same clock tick
    assert (await source.current()).hard_constraints.psi_io_some_max == 0.6
    path.write_text("spec: {window: 0s}\n")
    os.utime(path, ns=(1, 2 * 10**18))
    assert (await source.current()).report.stale_after == 60  # kept the last good one


async def test_api_object_is_read_and_defaults_apply_without_one(
    kapi: VersionedKubernetes, api_client
) -> None:
    clock = [0.0]
    source = RuleConfigSource(api_client=api_client, refresh=30, clock=lambda: clock[0])
    assert await source.current() == DetectionRuleConfig.default()  # 404: defaults
    resource = kmock.resource(API_GROUP, API_VERSION, PLURAL)
    kapi.objects[resource, None, "default"] = yaml.safe_load(config_yaml(0.5))
    assert (await source.current()) == DetectionRuleConfig.default()  # not re-read yet
    clock[0] = 31
    assert (await source.current()).hard_constraints.psi_io_some_max == 0.5
    kapi.objects[resource, None, "default"] = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "DetectionRuleConfig",
        "metadata": {"name": "default"},
        "spec": {"window": "banana"},
    }
    clock[0] = 62
    assert (await source.current()).hard_constraints.psi_io_some_max == 0.5  # last good one
