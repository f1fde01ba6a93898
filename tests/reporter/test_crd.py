"""The generated CRD: structural, useful columns, and it accepts every object the reporter writes
(and rejects bad ones, so the validation is not vacuous)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import msgspec
import pytest
import yaml

from mco.policy import MAX_POLICIES
from mco.promql import UNREACHABLE, SourceError
from reporter.crd import CRD_PATH, crd, render_crd
from reporter.entries import EntryBuilder, Epsilon
from reporter.layout import whole_objects
from reporter.query import Kind, Plan
from reporter.schema import decode_report
from reporter.tracker import Tracker
from rulegen.model import DetectionRuleConfig
from scripts.generate import ROOT
from testkit.answers import T0, quiet_values, snapshot
from tests.reporter.conftest import crd_schema, validate_object


def test_checked_in_crd_is_the_generated_one_and_valid_for_kubernetes() -> None:
    assert (ROOT / CRD_PATH).read_text() == render_crd()
    kubernetes_validate.validate(yaml.safe_load(render_crd()), "1.30", strict=True)


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for key, sub in schema.get("properties", {}).items():
        out += _walk(sub, f"{path}.{key}")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _walk(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        out += _walk(schema["items"], f"{path}[]")
    return out


def test_schema_is_structural() -> None:
    """Every node has a type; no $ref, anyOf, nullable or defaults (apiextensions rules)."""
    for path, node in _walk(crd_schema()):
        assert "type" in node, path
        for banned in ("$ref", "anyOf", "oneOf", "nullable", "default", "$defs"):
            assert banned not in node, (path, banned)
        if "properties" in node:
            assert "additionalProperties" not in node, path


def test_status_subresource_and_printer_columns() -> None:
    version = crd()["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Max Level"] == ".status.summary.maxLevel"
    assert columns["Min Score"] == ".status.summary.minScore"
    assert columns["Unschedulable"] == ".status.summary.unschedulable"
    assert columns["Nodes"] == ".status.summary.nodes"
    assert columns["Last Sync"] == ".status.lastSyncTime"
    assert columns["Age"] == ".metadata.creationTimestamp"
    # Never a wildcard over the nodes: that shows whichever node comes first.
    assert not [p for p in columns.values() if "*" in p or ".status.nodes" in p]
    assert crd()["spec"]["scope"] == "Cluster"


def _column_values(obj: dict[str, Any]) -> dict[str, Any]:
    """What ``kubectl get`` prints for ``obj`` (the columns are plain dotted paths)."""
    out = {}
    for column in crd()["spec"]["versions"][0]["additionalPrinterColumns"]:
        value: Any = obj
        for key in column["jsonPath"].lstrip(".").split("."):
            value = value.get(key) if isinstance(value, dict) else None
        out[column["name"]] = value
    return out


@pytest.mark.parametrize("fail", [False, True])
def test_columns_show_the_worst_node_not_the_first(fail: bool) -> None:
    """The `cluster` object's first node is quiet and another violates: the columns must say
    so. Per-node objects show their own node; staleness is on `cluster` only."""
    (cluster,) = _objects(False, "cluster", fail)
    assert next(iter(cluster["status"]["nodes"])) == "quiet"  # the first node is the quiet one
    row = _column_values(cluster)
    assert row["Nodes"] == 4
    assert row["Unschedulable"] == 1
    assert row["Max Level"] == 1.0
    assert row["Min Score"] == 0.0
    assert row["Stale"] == 0  # two nodes lag, but their samples are 1-2 s old
    rows = {o["metadata"]["name"]: _column_values(o) for o in _objects(False, "per-node", fail)}
    assert rows["cluster"]["Nodes"] == 4 and rows["cluster"]["Unschedulable"] == 1
    assert rows["hot"] | {"Last Sync": None, "Age": None} == {
        "Nodes": 1,
        "Max Level": 1.0,
        "Min Score": 0.0,
        "Unschedulable": 1,
        "Stale": None,
        "Last Sync": None,
        "Age": None,
    }
    assert rows["quiet"]["Unschedulable"] == 0 and rows["quiet"]["Max Level"] == 0.1
    assert rows["empty"]["Max Level"] is None and rows["empty"]["Nodes"] == 1


def _objects(compact: bool, layout: str, fail: bool = False) -> list[Any]:
    plan = Plan(compact=compact)
    t = Tracker(
        EntryBuilder(plan, DetectionRuleConfig.default(), Epsilon()), stale_after=30, live_within=5
    )
    hot = quiet_values(plan)
    hot[(Kind.VIOLATED, "psi_io_some")] = 1.0
    hot[(Kind.SIGNAL, "psiIOSome")] = 0.9
    hot[(Kind.TRIGGERED, "io_congestion")] = 1.0
    hot[(Kind.LEVEL, "")] = 1.0
    hot[(Kind.SCORE, "")] = 0.0
    t.apply(
        snapshot(
            plan,
            {
                "quiet": quiet_values(plan),
                "hot": hot,
                "empty": {(Kind.FALLBACK, ""): 0.0},
                "cluster": quiet_values(plan),
            },
            T0,
        )
    )
    t.apply(snapshot(plan, {"quiet": quiet_values(plan)}, T0 + 1))  # two nodes lose `live`
    if fail:
        t.fail(SourceError(UNREACHABLE, "down"), T0 + 2)
    return [msgspec.to_builtins(o) for o in whole_objects(t.view(), layout)]


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("layout", ["cluster", "per-node"])
@pytest.mark.parametrize("fail", [False, True])
def test_every_written_object_validates(compact: bool, layout: str, fail: bool) -> None:
    objects = _objects(compact, layout, fail)
    assert len(objects) == (1 if layout == "cluster" else 4)  # `cluster` node stays in `cluster`
    for obj in objects:
        validate_object(obj)


def test_validation_rejects_what_a_cluster_would_reject() -> None:
    good = _objects(False, "cluster")[0]
    mutations: list[Callable[[Any], Any]] = [
        lambda o: o["status"]["nodes"]["hot"].__setitem__("level", 1.5),
        lambda o: o["status"]["nodes"]["hot"].__setitem__("score", "high"),
        lambda o: o["status"]["nodes"]["hot"].pop("sampleTime"),
        lambda o: o["status"]["nodes"]["hot"]["detections"]["io_congestion"].__setitem__(
            "index", -0.1
        ),
        lambda o: o["status"]["conditions"][0].__setitem__("status", "Maybe"),
        lambda o: o["status"].__setitem__("lastSyncTime", "yesterday"),
        lambda o: o["status"]["nodes"]["hot"]["signals"].__setitem__("psiIOSome", None),
        lambda o: o["status"]["summary"].__setitem__("unschedulable", -1),
        lambda o: o["status"]["summary"].__setitem__("maxLevel", 1.5),
        lambda o: o["status"]["summary"].pop("nodes"),
        lambda o: o["status"]["summary"].__setitem__("stale", 0.5),
    ]
    for mutate in mutations:
        bad = copy.deepcopy(good)
        mutate(bad)
        with pytest.raises(jsonschema.ValidationError):
            validate_object(bad)


def _with_policies(policies: list[dict[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = copy.deepcopy(_objects(False, "cluster")[0])
    obj["status"]["config"] = {"staleAfter": "30s", "neutralScore": 50.0, "policies": policies}
    return obj


def _policy(name: str, app: str) -> dict[str, Any]:
    return {"name": name, "podSelector": {"matchLabels": {"app": app}}, "maxLevel": 0.1}


def test_policy_names_are_unique_and_bounded_in_the_crd_and_the_decoder() -> None:
    """Issue 27 item 2: two policies named alike gave wrong verdicts (the verdict tables are
    keyed by name), and the report decoder and the CRD took 10,000 policies (rulegen: 16)."""
    good = _with_policies([_policy("a1", "a1"), _policy("a2", "a2")])
    validate_object(good)
    decode_report(json.dumps(good).encode())
    twins = _with_policies([_policy("x", "a1"), _policy("x", "a2")])
    many = _with_policies([_policy(f"p{i}", f"a{i}") for i in range(MAX_POLICIES + 1)])
    for bad, why in ((twins, "unique"), (many, str(MAX_POLICIES))):
        with pytest.raises(jsonschema.ValidationError):
            validate_object(bad)
        with pytest.raises(ValueError, match=why):
            decode_report(json.dumps(bad).encode())
    policies = crd_schema()["properties"]["status"]["properties"]["config"]["properties"]
    assert policies["policies"]["x-kubernetes-list-type"] == "map"
    assert policies["policies"]["x-kubernetes-list-map-keys"] == ["name"]
    assert policies["policies"]["maxItems"] == MAX_POLICIES
