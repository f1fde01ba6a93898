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
from rulegen import durations
from scripts import values_table
from scripts.generate import all_spliced, drifted
from tests.chart.helm import CHART, SCENARIOS, chart, render, scenario_values
from tests.chart.test_validate import operator_crds, operator_errors

# Values whose content is free-form Kubernetes (documented as a whole, not key by key).
FREE_FORM = {"resources", "nodeSelector", "updateStrategy", "seccompProfile", "affinity", "classes"}


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


def test_every_value_has_a_description() -> None:
    """The README's table is generated from values.yaml; a key nobody described is a row with
    an empty description, which a new user cannot use."""
    rows = values_table.rows((CHART / "values.yaml").read_text())
    assert [r.key for r in rows if not r.description] == []
    assert {r.key for r in rows} >= set(leaves(defaults())) - {
        p for p in leaves(defaults()) if any(p.startswith(r.key + ".") for r in rows)
    }


SAMPLE = """\
# @section -- First
# A plain note: not a description.
# -- The image.
image:
  # -- Where from.
  registry: ghcr.io
  tag: ""
# @section -- Second
# -- Resources, described as a whole.
resources:
  requests:
    cpu: 100m
# -- A list | with a pipe.
peers:
  - name: a
    port: 1
"""


def test_the_values_table_is_values_yaml_as_helm_docs_writes_it() -> None:
    rows = values_table.rows(SAMPLE)
    assert [(r.section, r.key, r.type, r.default, r.description) for r in rows] == [
        ("First", "image", "object", '{"registry": "ghcr.io", "tag": ""}', "The image."),
        ("Second", "resources", "object", '{"requests": {"cpu": "100m"}}',
         "Resources, described as a whole."),
        ("Second", "peers", "list", '[{"name": "a", "port": 1}]', "A list | with a pipe."),
    ]  # fmt: skip
    undocumented = values_table.rows(SAMPLE.replace("# -- The image.\n", ""))
    assert [(r.key, r.description) for r in undocumented[:2]] == [
        ("image.registry", "Where from."),
        ("image.tag", ""),
    ]
    text = values_table.table(SAMPLE)
    assert "### First" in text and "### Second" in text
    row = '| `peers` | list | `[{"name": "a", "port": 1}]` | A list \\| with a pipe. |'
    assert row in text


def test_a_changed_default_is_drift_until_regenerated(tmp_path) -> None:
    (tmp_path / "charts" / "mco").mkdir(parents=True)
    values = (CHART / "values.yaml").read_text()
    (tmp_path / values_table.VALUES).write_text(values)
    (tmp_path / values_table.README).write_text((CHART / "README.md").read_text())
    assert drifted(all_spliced(tmp_path), tmp_path) == []
    changed = values.replace("httpTimeout: 4s", "httpTimeout: 9s")
    (tmp_path / values_table.VALUES).write_text(changed)
    assert drifted(all_spliced(tmp_path), tmp_path) == [values_table.README]
    readme = tmp_path / values_table.README
    readme.write_text(readme.read_text().replace(values_table.BEGIN, ""))
    with pytest.raises(ValueError, match="markers"):
        all_spliced(tmp_path)


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
        ({"detectionRuleConfig": {"spec": {"hardConstraints": {"holdFor": "5"}}}}, "holdFor"),
        ({"detectionRuleConfig": {"spec": {"hardConstraints": {"clearAfter": 30}}}}, "clearAfter"),
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=where):
        chart().validate_schema(values)


def test_schema_checks_hysteresis_durations_as_the_model_parses_them() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    spec = schema["properties"]["detectionRuleConfig"]["properties"]["spec"]
    for name in ("holdFor", "clearAfter"):
        field = spec["properties"]["hardConstraints"]["properties"][name]
        assert field["pattern"] == durations.PATTERN
        assert field["maxLength"] == durations.MAX_LENGTH
    hard = {"holdFor": "10s", "clearAfter": "1m30s", "psiIOSomeMax": 0.5}
    chart().validate_schema({"detectionRuleConfig": {"spec": {"hardConstraints": hard}}})


def test_schema_knows_exactly_the_exporters_collectors() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    names = schema["properties"]["exporter"]["properties"]["collectors"]["propertyNames"]["enum"]
    assert set(names) == set(specs())


def test_schema_log_settings_are_the_components() -> None:
    from mco.logs import FORMATS, LEVELS

    log = json.loads((CHART / "values.schema.json").read_text())["properties"]["log"]["properties"]
    assert tuple(log["level"]["enum"]) == LEVELS
    assert tuple(log["format"]["enum"]) == FORMATS


# Every value that ends up in a ServiceMonitor's endpoint, by the CRD field it fills.
OPERATOR_DURATIONS = {
    ("exporter", "interval"): "interval",
    ("exporter", "scrapeTimeout"): "scrapeTimeout",
    ("reporter", "interval"): "interval",
    ("rulegen", "interval"): "interval",
    ("extender", "interval"): "interval",
}


def _endpoint_pattern(field: str) -> str:
    crd = operator_crds()["ServiceMonitor"]
    (version,) = crd["spec"]["versions"]
    endpoint = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "endpoints"
    ]["items"]["properties"][field]
    pattern: str = endpoint["pattern"]
    return pattern


def _service_monitor_schema(component: str) -> dict[str, Any]:
    schema = json.loads((CHART / "values.schema.json").read_text())
    node: dict[str, Any] = schema["properties"][component]["properties"]["serviceMonitor"]
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return {
        key: schema["$defs"][value["$ref"].rsplit("/", 1)[1]] if "$ref" in value else value
        for key, value in node["properties"].items()
    }


@pytest.mark.parametrize(("where", "field"), sorted(OPERATOR_DURATIONS.items()))
def test_service_monitor_durations_use_the_operators_pattern(
    where: tuple[str, str], field: str
) -> None:
    component, key = where
    assert _service_monitor_schema(component)[key]["pattern"] == _endpoint_pattern(field)


@pytest.mark.parametrize("component", ["exporter", "reporter", "extender"])
@pytest.mark.parametrize("bad", ["1.5s", "15", "1s1m", "-1s", ""])
def test_schema_rejects_durations_the_operator_rejects(component: str, bad: str) -> None:
    with pytest.raises(helm.HelmValuesError, match="interval"):
        chart().validate_schema({component: {"serviceMonitor": {"interval": bad}}})


def test_durations_the_operator_accepts_render_and_validate() -> None:
    values = {
        "exporter": {"serviceMonitor": {"interval": "1m30s", "scrapeTimeout": "500ms"}},
        "reporter": {"serviceMonitor": {"interval": "1d"}},
        "extender": {"serviceMonitor": {"interval": "0"}},
    }
    chart().validate_schema(values)
    monitors = render(values).of_kind("ServiceMonitor")
    intervals = {m["metadata"]["name"]: m["spec"]["endpoints"][0]["interval"] for m in monitors}
    assert intervals["mco-exporter"] == "1m30s" and intervals["mco-reporter"] == "1d"
    for monitor in monitors:
        assert operator_errors(monitor) == [], monitor["metadata"]["name"]
