"""The DetectionRuleConfig CRD: structural schema, defaults and CEL, judged as the API server would.

Every case is also fed to rulegen's own loader: the CRD and the model must agree on what is
valid, or a config the API server accepts would be rejected by the controller (or vice versa).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rulegen.crd import crd, render_crd
from rulegen.generate import CRD_PATH, DEFAULT_CONFIG_PATH, render_default_config
from rulegen.model import ConfigError, DetectionRuleConfig, config_from_object
from tests.rulegen.crd_validation import api_server_errors, apply_defaults, version_schema

ROOT = Path(__file__).resolve().parents[2]
CRD = crd()


def obj(spec: dict[str, Any] | None = None, name: str = "default") -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "mco.io/v1alpha1",
        "kind": "DetectionRuleConfig",
        "metadata": {"name": name},
    }
    if spec is not None:
        body["spec"] = spec
    return body


def model_accepts(o: dict[str, Any]) -> bool:
    try:
        config_from_object(o)
    except ConfigError:
        return False
    return True


def test_checked_in_crd_is_the_generated_one():
    assert (ROOT / CRD_PATH).read_text() == render_crd()
    assert yaml.safe_load((ROOT / CRD_PATH).read_text()) == CRD


def test_checked_in_default_object_is_the_generated_one():
    assert (ROOT / DEFAULT_CONFIG_PATH).read_text() == render_default_config()
    assert (
        config_from_object(yaml.safe_load(render_default_config())) == DetectionRuleConfig.default()
    )


def test_crd_is_cluster_scoped_with_status_subresource():
    spec = CRD["spec"]
    assert CRD["metadata"]["name"] == "detectionruleconfigs.mco.io"
    assert spec["group"] == "mco.io" and spec["scope"] == "Cluster"
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["storage"] and version["served"]
    assert version["subresources"] == {"status": {}}


def _assert_structural(schema: dict[str, Any], path: str) -> None:
    """Every node typed; objects list their properties (no additionalProperties next to them)."""
    assert "type" in schema, path
    if schema["type"] == "object" and "properties" in schema:
        assert "additionalProperties" not in schema, path
        for key, sub in schema["properties"].items():
            _assert_structural(sub, f"{path}.{key}")
    if schema["type"] == "array":
        _assert_structural(schema["items"], f"{path}[]")


def test_schema_is_structural():
    _assert_structural(version_schema(CRD), "<root>")


def test_an_empty_spec_defaults_to_the_model_defaults():
    defaulted = apply_defaults(version_schema(CRD), obj({}))
    assert defaulted["spec"] == DetectionRuleConfig.default().to_spec()
    # Even without a spec at all.
    assert apply_defaults(version_schema(CRD), obj())["spec"] == defaulted["spec"]


def test_partial_objects_are_defaulted_field_by_field_like_the_model():
    partial = obj({"detections": {"ioCongestion": {"signals": {"psiIOSome": {"warn": 0.05}}}}})
    defaulted = apply_defaults(version_schema(CRD), partial)
    assert defaulted["spec"] == config_from_object(partial).to_spec()
    assert defaulted["spec"]["detections"]["ioCongestion"]["signals"]["psiIOSome"] == {
        "warn": 0.05,
        "critical": DetectionRuleConfig.default().threshold("psiIOSome").critical,
    }


VALID = {
    "checked-in default object": yaml.safe_load((ROOT / DEFAULT_CONFIG_PATH).read_text()),
    "no spec": obj(),
    "empty spec": obj({}),
    "promtool test config": yaml.safe_load(
        (Path(__file__).with_name("promtool") / "config.yaml").read_text()
    ),
    "integers where numbers": obj({"detections": {"cpuContention": {"weight": 2}}}),
    "only cpu weighted": obj(
        {
            "detections": {
                "cachePollution": {"weight": 0},
                "ioCongestion": {"weight": 0},
                "memoryPressure": {"weight": 0},
                "cpuContention": {"weight": 1},
            }
        }
    ),
    "compound durations": obj({"window": "1m30s", "evaluationInterval": "15s"}),
    "hold and clear at their bound, shorter than the interval": obj(
        {
            "window": "1m",
            "evaluationInterval": "15s",
            "hardConstraints": {"holdFor": "1s", "clearAfter": "1h"},
        }
    ),
    "window equal to interval": obj({"window": "5s", "evaluationInterval": "5s"}),
    "two matchers": obj({"alerts": {"exporterSelector": 'job="mco", namespace=~"mon.*"'}}),
    "every number and duration at its bound": obj(
        {
            "window": "8760h",
            "evaluationInterval": "8760h",
            "detections": {
                "cachePollution": {"weight": 1000},
                "ioCongestion": {
                    "weight": 0.001,
                    "signals": {"blockIOLatencyP99Seconds": {"warn": 0, "critical": 1e12}},
                },
                "memoryPressure": {"fallback": {"pageScanRate": {"critical": 1e12}}},
            },
            "report": {"staleAfter": "525600m"},
            "alerts": {"nodeInterferedFor": "31536000s"},
        }
    ),
    "every policy field and selector form": obj(
        {
            "policies": [
                {
                    "name": "online",
                    "podSelector": {
                        "matchLabels": {"mco.io/workload-class": "latency-sensitive"},
                        "matchExpressions": [
                            {"key": "tier", "operator": "In", "values": ["a", "b"]},
                            {"key": "example.com/x", "operator": "NotIn", "values": [""]},
                            {"key": "canary", "operator": "DoesNotExist"},
                            {"key": "team", "operator": "Exists", "values": []},
                        ],
                    },
                    "maxLevel": 0,
                    "hardConstraints": "Ignore",
                    "scoreWeight": 100,
                    "reservationPerPod": 1,
                    "triggeredLevel": 1,
                },
                {
                    "name": "batch",
                    "avoidPolicies": ["online"],
                    "avoidPerPod": 0.05,
                    "triggeredLevel": 0.5,
                },
                {"name": "everyone-else", "podSelector": {}},
            ]
        }
    ),
    "no policies at all": obj({"policies": []}),
}


def _selecting(selector: dict[str, Any]) -> dict[str, Any]:
    return {"policies": [{"name": "online", "podSelector": selector}]}


INVALID = {
    # (object, a fragment of the API server's message, a fragment of the model's message)
    "warn above critical": (
        obj(
            {
                "detections": {
                    "ioCongestion": {"signals": {"psiIOSome": {"warn": 0.5, "critical": 0.3}}}
                }
            }
        ),
        "warn must be below critical",
        "spec.detections.ioCongestion.signals.psiIOSome: warn (0.5) must be below critical (0.3)",
    ),
    "warn equal to critical": (
        obj(
            {
                "detections": {
                    "cachePollution": {"signals": {"llcMissRatio": {"warn": 0.5, "critical": 0.5}}}
                }
            }
        ),
        "warn must be below critical",
        "llcMissRatio: warn (0.5) must be below critical (0.5)",
    ),
    "lower-is-worse written the other way round": (
        obj(
            {
                "detections": {
                    "memoryPressure": {
                        "fallback": {"memoryAvailableRatio": {"warn": 0.05, "critical": 0.15}}
                    }
                }
            }
        ),
        "warn must be above critical: lower values are worse",
        "memoryAvailableRatio: warn (0.05) must be above critical (0.15): lower values are worse",
    ),
    "partial threshold that inverts the default order": (
        obj({"detections": {"ioCongestion": {"signals": {"psiIOSome": {"warn": 0.9}}}}}),
        "warn must be below critical",
        "psiIOSome: warn (0.9) must be below critical",
    ),
    "negative weight": (
        obj({"detections": {"ioCongestion": {"weight": -1}}}),
        "ioCongestion.weight: -1",
        "spec.detections.ioCongestion.weight: must be >= 0",
    ),
    "all weights zero": (
        obj(
            {
                "detections": {
                    k: {"weight": 0}
                    for k in ("cachePollution", "ioCongestion", "memoryPressure", "cpuContention")
                }
            }
        ),
        "at least one detection needs a weight above 0",
        "at least one detection needs a weight above 0",
    ),
    "duration without unit": (
        obj({"window": "10"}),
        "window: must be a duration",
        "spec.window: '10' is not a duration",
    ),
    "duration in days": (
        obj({"window": "1d"}),
        "window: must be a duration",
        "spec.window: '1d' is not a duration",
    ),
    "zero duration": (
        obj({"evaluationInterval": "0s"}),
        "evaluationInterval: must be a duration longer than 0s",
        "must be longer than 0s",
    ),
    "empty duration": (
        obj({"report": {"staleAfter": ""}}),
        "staleAfter: must be a duration",
        "spec.report.staleAfter",
    ),
    "window shorter than interval": (
        obj({"window": "5s", "evaluationInterval": "10s"}),
        "window must be at least evaluationInterval",
        "spec.window (5s) must be at least spec.evaluationInterval (10s)",
    ),
    "threshold as a string": (
        obj({"detections": {"ioCongestion": {"signals": {"psiIOSome": {"warn": "high"}}}}}),
        "'high' is not of type 'number'",
        "spec.detections.ioCongestion.signals.psiIOSome.warn: expected a number",
    ),
    "weight as a boolean": (
        obj({"detections": {"ioCongestion": {"weight": True}}}),
        "True is not of type 'number'",
        "expected a number, got True",
    ),
    "ratio above 1": (
        obj({"detections": {"cachePollution": {"signals": {"llcMissRatio": {"critical": 1.5}}}}}),
        "1.5 is greater than the maximum of 1",
        "llcMissRatio.critical: must be <= 1",
    ),
    "unknown field (typo)": (
        obj({"detections": {"ioCongestion": {"wieght": 2}}}),
        "Additional properties are not allowed ('wieght'",
        "spec.detections.ioCongestion.wieght: unknown field",
    ),
    "unknown signal": (
        obj(
            {
                "detections": {
                    "ioCongestion": {"signals": {"psiIOFull": {"warn": 0.1, "critical": 0.2}}}
                }
            }
        ),
        "Additional properties are not allowed ('psiIOFull'",
        "signals.psiIOFull: unknown field",
    ),
    "PromQL injected through the selector": (
        obj({"alerts": {"exporterSelector": 'job="x"} or vector(1) or up{job="x"'}}),
        "must be PromQL label matchers",
        "spec.alerts.exporterSelector: expected PromQL label matchers",
    ),
    "selector with a newline": (
        obj({"alerts": {"exporterSelector": 'job="x"\n'}}),
        "must be PromQL label matchers",
        "spec.alerts.exporterSelector",
    ),
    "runbook that is not http": (
        obj({"alerts": {"runbookURL": "javascript:alert(1)"}}),
        "must be an http(s) URL",
        "spec.alerts.runbookURL: expected an http(s) URL",
    ),
    "runbook with a template": (
        obj({"alerts": {"runbookURL": "https://x/{{ $labels.node }}"}}),
        "must be an http(s) URL",
        "spec.alerts.runbookURL",
    ),
    "neutral score above 100": (
        obj({"report": {"neutralScore": 150}}),
        "150 is greater than the maximum of 100",
        "spec.report.neutralScore: must be within [0, 100]",
    ),
    "hard max above 1": (
        obj({"hardConstraints": {"psiIOSomeMax": 2}}),
        "2 is greater than the maximum of 1",
        "spec.hardConstraints.psiIOSomeMax: must be within [0, 1]",
    ),
    "weight that overflows the level's sum": (
        obj({"detections": {"ioCongestion": {"weight": 1.0e308}}}),
        "1e+308 is greater than the maximum of 1000",
        "spec.detections.ioCongestion.weight: must be <= 1000, got 1e+308",
    ),
    "weight that underflows": (
        obj({"detections": {"ioCongestion": {"weight": 5e-324}}}),
        "ioCongestion.weight: must be 0 or at least 0.001",
        "spec.detections.ioCongestion.weight: must be 0 or at least 0.001",
    ),
    "threshold beyond 1e12": (
        obj({"detections": {"memoryPressure": {"fallback": {"pageScanRate": {"critical": 1e13}}}}}),
        "10000000000000.0 is greater than the maximum of 1000000000000.0",
        "pageScanRate.critical: must be <= 1e+12, got 1e+13",
    ),
    "window beyond the bound": (
        obj({"window": "8760h1s"}),
        "window: must be a duration longer than 0s like 10s, 1m or 1h30m (whole hours, minutes "
        "and seconds), at most 8760h",
        "spec.window: '8760h1s' is out of range: at most 8760h",
    ),
    "interval that overflows Prometheus": (
        obj({"window": "9999999999s", "evaluationInterval": "9999999999s"}),
        "evaluationInterval: must be a duration",
        "spec.evaluationInterval: '9999999999s' is out of range",
    ),
    "alert for that overflows Prometheus": (
        obj({"alerts": {"nodeInterferedFor": "2562048h"}}),
        "nodeInterferedFor: must be a duration",
        "spec.alerts.nodeInterferedFor: '2562048h' is out of range",
    ),
    "staleAfter beyond the bound": (
        obj({"report": {"staleAfter": "9000h"}}),
        "staleAfter: must be a duration",
        "spec.report.staleAfter: '9000h' is out of range: at most 8760h",
    ),
    "holdFor beyond its bound": (
        obj({"hardConstraints": {"holdFor": "1h1s"}}),
        "holdFor: must be at most 1h",
        "spec.hardConstraints.holdFor: must be at most 1h, got 1h1s",
    ),
    "clearAfter that is not a duration": (
        obj({"hardConstraints": {"clearAfter": "30"}}),
        "clearAfter: must be a duration",
        "spec.hardConstraints.clearAfter: '30' is not a duration",
    ),
    "alert level zero": (
        obj({"alerts": {"nodeInterferedLevel": 0}}),
        "nodeInterferedLevel: must be above 0",
        "spec.alerts.nodeInterferedLevel: must be within (0, 1]",
    ),
    "duplicate policy names": (
        obj({"policies": [{"name": "online"}, {"name": "online", "scoreWeight": 0}]}),
        "policy names must be unique",
        "spec.policies[1].name: 'online' is used by an earlier policy",
    ),
    "avoidPolicies naming no policy": (
        obj({"policies": [{"name": "batch", "avoidPolicies": ["online"]}, {"name": "onlin"}]}),
        "avoidPolicies must name policies of this list",
        "spec.policies[0].avoidPolicies: no policy is named 'online'",
    ),
    "avoidPerPod above 1": (
        obj({"policies": [{"name": "batch", "avoidPerPod": 5}]}),
        "avoidPerPod: 5 is greater than the maximum of 1",
        "spec.policies[0].avoidPerPod: must be within [0, 1], got 5",
    ),
    "negative triggeredLevel": (
        obj({"policies": [{"name": "online", "triggeredLevel": -1}]}),
        "triggeredLevel: -1 is less than the minimum of 0",
        "spec.policies[0].triggeredLevel: must be within [0, 1], got -1",
    ),
    "policy without a name": (
        obj({"policies": [{"maxLevel": 0.5}]}),
        "'name' is a required property",
        "spec.policies[0].name: required",
    ),
    "unknown selector operator": (
        obj(
            _selecting({"matchExpressions": [{"key": "tier", "operator": "Like", "values": ["a"]}]})
        ),
        "'Like' is not one of ['In', 'NotIn', 'Exists', 'DoesNotExist']",
        "spec.policies[0].podSelector.matchExpressions[0].operator: must be one of In, NotIn",
    ),
    "values with Exists": (
        obj(
            _selecting(
                {"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["a"]}]}
            )
        ),
        "operators In and NotIn need values; Exists and DoesNotExist take none",
        "matchExpressions[0].values: operator Exists takes no values",
    ),
    "In without values": (
        obj(_selecting({"matchExpressions": [{"key": "tier", "operator": "In"}]})),
        "operators In and NotIn need values; Exists and DoesNotExist take none",
        "matchExpressions[0].values: operator In needs at least one value",
    ),
    "selector value that is no label value": (
        obj(_selecting({"matchLabels": {"tier": "on line"}})),
        "podSelector.matchLabels.tier: 'on line' does not match",
        "podSelector.matchLabels['tier']: must be a label value",
    ),
    "maxLevel above 1": (
        obj({"policies": [{"name": "online", "maxLevel": 1.5}]}),
        "maxLevel: 1.5 is greater than the maximum of 1",
        "spec.policies[0].maxLevel: must be within [0, 1], got 1.5",
    ),
    "negative maxLevel": (
        obj({"policies": [{"name": "online", "maxLevel": -0.1}]}),
        "maxLevel: -0.1 is less than the minimum of 0",
        "spec.policies[0].maxLevel: must be within [0, 1], got -0.1",
    ),
    "negative score weight": (
        obj({"policies": [{"name": "online", "scoreWeight": -1}]}),
        "scoreWeight: -1 is less than the minimum of 0",
        "spec.policies[0].scoreWeight: must be within [0, 100], got -1",
    ),
    "reservation above 1": (
        obj({"policies": [{"name": "online", "reservationPerPod": 2}]}),
        "reservationPerPod: 2 is greater than the maximum of 1",
        "spec.policies[0].reservationPerPod: must be within [0, 1], got 2",
    ),
    "unknown hardConstraints value": (
        obj({"policies": [{"name": "online", "hardConstraints": "Sometimes"}]}),
        "'Sometimes' is not one of ['Enforce', 'Ignore']",
        "spec.policies[0].hardConstraints: must be Enforce or Ignore, got 'Sometimes'",
    ),
}


@pytest.mark.parametrize("name", list(VALID))
def test_valid_objects_are_accepted_by_crd_and_model(name):
    assert api_server_errors(CRD, VALID[name]) == []
    assert model_accepts(VALID[name])


@pytest.mark.parametrize("name", list(INVALID))
def test_invalid_objects_are_rejected_by_crd_and_model_with_the_path(name):
    body, crd_message, model_message = INVALID[name]
    errors = api_server_errors(CRD, body)
    assert any(crd_message in e for e in errors), errors
    with pytest.raises(ConfigError) as caught:
        config_from_object(body)
    assert model_message in str(caught.value)


def test_a_selector_key_that_is_no_label_key_is_rejected_by_the_model():
    """The API server cannot check map keys within its CEL cost budget; rulegen does (the
    controller marks the object Rejected and keeps the last good config)."""
    body = obj(_selecting({"matchLabels": {"tier class": "online"}}))
    with pytest.raises(ConfigError, match=r"podSelector.matchLabels\['tier class'\]: must be"):
        config_from_object(body)


def test_only_the_default_object_is_allowed():
    errors = api_server_errors(CRD, obj({}, name="staging"))
    assert errors == ["<root>: mco-rulegen reads only the DetectionRuleConfig named default"]


def test_every_cel_rule_compiles_and_is_exercised_by_an_invalid_case():
    """No rule is dead: each CEL message appears in at least one invalid case's errors."""
    messages: set[str] = set()

    def walk(schema: dict[str, Any]) -> None:
        for v in schema.get("x-kubernetes-validations", []):
            messages.add(v["message"])
        for sub in schema.get("properties", {}).values():
            walk(sub)
        for part in ("items", "additionalProperties"):
            if isinstance(schema.get(part), dict):
                walk(schema[part])

    walk(version_schema(CRD))
    seen = {e for body, _, _ in INVALID.values() for e in api_server_errors(CRD, body)}
    seen |= set(api_server_errors(CRD, obj({}, name="staging")))
    for message in messages:
        assert any(message in e for e in seen), message


thresholds = st.floats(min_value=0, max_value=1, allow_nan=False, width=32)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    warn=thresholds,
    critical=thresholds,
    avail_warn=thresholds,
    avail_critical=thresholds,
    weights=st.lists(st.sampled_from([0, 0.5, 1, 3]), min_size=4, max_size=4),
    window=st.integers(min_value=1, max_value=120),
    interval=st.integers(min_value=1, max_value=120),
)
def test_crd_and_model_agree_on_random_specs(
    warn, critical, avail_warn, avail_critical, weights, window, interval
):
    keys = ("cachePollution", "ioCongestion", "memoryPressure", "cpuContention")
    spec: dict[str, Any] = {
        "window": f"{window}s",
        "evaluationInterval": f"{interval}s",
        "detections": {k: {"weight": w} for k, w in zip(keys, weights, strict=True)},
    }
    spec["detections"]["ioCongestion"]["signals"] = {
        "psiIOSome": {"warn": warn, "critical": critical}
    }
    spec["detections"]["memoryPressure"]["fallback"] = {
        "memoryAvailableRatio": {"warn": avail_warn, "critical": avail_critical}
    }
    body = obj(copy.deepcopy(spec))
    assert (api_server_errors(CRD, body) == []) == model_accepts(body)


@st.composite
def durations(draw: st.DrawFn) -> str:
    """h/m/s spellings from well inside to far beyond the 8760h bound (and Go's overflow)."""
    text = ""
    for unit, top in (("h", 10**7), ("m", 10**9), ("s", 10**11)):
        if draw(st.booleans()):
            n = draw(st.integers(0, 99) | st.integers(8000, 9000) | st.integers(0, top))
            text += f"{n}{unit}"
    return text or "1s"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(window=durations(), stale=durations(), interfered_for=durations())
def test_crd_and_model_agree_on_durations_up_to_and_beyond_the_bound(window, stale, interfered_for):
    body = obj(
        {
            "window": window,
            "evaluationInterval": "1s",
            "report": {"staleAfter": stale},
            "alerts": {"nodeInterferedFor": interfered_for},
        }
    )
    assert (api_server_errors(CRD, body) == []) == model_accepts(body)
