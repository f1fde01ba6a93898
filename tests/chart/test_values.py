"""values.yaml, values.schema.json and the README agree; the schema rejects bad values."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import helm_python as helm
import pytest
import yaml

from exporter.registry import specs
from tests.chart.helm import CHART, SCENARIOS, chart, scenario_values

# Values whose content is free-form Kubernetes (documented as a whole, not key by key).
FREE_FORM = {"resources", "nodeSelector", "updateStrategy", "seccompProfile", "affinity"}


def leaves(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value and key not in FREE_FORM:
            yield from leaves(value, path)
        else:
            yield path


def defaults() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


def documented() -> set[str]:
    """Every `dotted.key` in the first column of the README's value tables."""
    keys: set[str] = set()
    for line in (CHART / "README.md").read_text().splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            keys |= set(re.findall(r"`([A-Za-z][\w.]*)`", first))
    return keys


def test_every_value_is_documented_in_the_readme() -> None:
    missing = [path for path in leaves(defaults()) if path not in documented()]
    assert not missing, f"undocumented values: {missing}"


def test_the_readme_documents_no_value_that_does_not_exist() -> None:
    known = set(leaves(defaults()))
    prefixes = {p.rsplit(".", i)[0] for p in known for i in range(p.count(".") + 1)}
    stale = sorted(k for k in documented() if k not in known | prefixes)
    assert not stale, f"README documents values that do not exist: {stale}"


def test_schema_covers_every_default_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        return node

    for path in leaves(defaults()):
        node = schema
        for part in path.split("."):
            properties = resolve(node).get("properties", {})
            assert part in properties, f"{path}: the schema has no {part!r}"
            node = properties[part]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenarios_satisfy_the_schema(scenario: str) -> None:
    chart().validate_schema(scenario_values(scenario))


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"exporter": {"collectors": {"perfllc": False}}}, "perfllc"),
        ({"exporter": {"capabilities": {"add": ["SYS_ADMIN"]}}}, "capabilities"),
        ({"exporter": {"serviceMonitor": {"interval": "1 second"}}}, "interval"),
        ({"reporter": {"layout": "sharded"}}, "layout"),
        ({"prometheus": {"url": "prometheus:9090"}}, "url"),
        ({"extender": {"prot": 9848}}, "prot"),
        ({"image": {"digest": "latest"}}, "digest"),
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=where):
        chart().validate_schema(values)


def test_schema_knows_exactly_the_exporters_collectors() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    names = schema["properties"]["exporter"]["properties"]["collectors"]["propertyNames"]["enum"]
    assert set(names) == set(specs())


def test_schema_log_settings_are_the_components() -> None:
    from mco.logs import FORMATS, LEVELS

    log = json.loads((CHART / "values.schema.json").read_text())["properties"]["log"]["properties"]
    assert tuple(log["level"]["enum"]) == LEVELS
    assert tuple(log["format"]["enum"]) == FORMATS
