"""The DetectionRuleConfig CRD, generated from the model so schema, defaults and rules match.

Structural schema with a ``default`` on every field, and on every object the value its fields'
defaults make (so an empty ``spec`` is filled completely). The API server validates each
``default`` as written, against its node's schema and CEL rules, before it fills nested
defaults: a bare ``default: {}`` under a rule such as ``self.warn < self.critical`` fails there
with "no such key", so an object's default spells its fields out. ``x-kubernetes-validations``
(CEL) say what a schema cannot: threshold order by direction, weights not all zero, durations
that parse, window not shorter than the evaluation interval, holdFor and clearAfter within
their bound. ``rulegen.model`` enforces the same rules, so a rulegen run outside a cluster
rejects what the API server would.
"""

from __future__ import annotations

import copy
from typing import Any, Final

import yaml

from mco import labelselector, policy
from rulegen import history, limits, model
from rulegen.catalog import CATALOG, Catalog, Signal
from rulegen.durations import MAX_LENGTH as DURATION_MAX_LENGTH
from rulegen.durations import MAX_TEXT as DURATION_MAX
from rulegen.durations import PATTERN as DURATION_PATTERN

CRD_NAME: Final = f"{model.PLURAL}.{model.API_GROUP}"


def _parses(expr: str) -> str:
    """CEL: ``expr`` is a duration ``duration()`` accepts in Kubernetes (Go) and Prometheus."""
    return f"{expr} != '' && {expr}.matches(r'{DURATION_PATTERN}')"


# The pattern bounds each part's digits, so ``duration()`` cannot overflow before the bound.
_DURATION_OK = (
    f"{_parses('self')} && duration(self) > duration('0s')"
    f" && duration(self) <= duration('{DURATION_MAX}')"
)

_FIELD_HELP: Final[dict[str, str]] = {
    "window": "Smoothing window of every signal (rate, avg_over_time, histogram rate): "
    "whole h/m/s, e.g. 10s. Keep it at least 4 scrape intervals.",
    "evaluationInterval": "How often Prometheus evaluates the recording rules, e.g. 1s.",
    "detections": "Interference detections, each a weighted max over its signals.",
    "weight": f"Weight of the detection in the interference level: 0 records it but leaves "
    f"it out of the level, else {limits.MIN_WEIGHT:g} to {limits.MAX_WEIGHT:g}.",
    "signals": "Thresholds of the detection's signals.",
    "fallback": "Signals used instead of PSI on nodes where PSI is not available.",
    "hardConstraints": "Limits that make a node unschedulable while exceeded (held for "
    "holdFor, released clearAfter after the last excess).",
    "holdFor": "How long a limit must be exceeded, at every evaluation, before the node is "
    f"filtered, at most {model.MAX_HYSTERESIS} (the rules use at least one evaluationInterval).",
    "clearAfter": "How long a limit must stay clear before the node is "
    f"admitted again, at most {model.MAX_HYSTERESIS} (the rules use at least one "
    "evaluationInterval).",
    "report": "How readers of the recorded series (reporter, extender) treat them.",
    "staleAfter": "Data older than this is stale: the node gets the neutral score.",
    "neutralScore": "Score (0-100) of a node without fresh data.",
    "alerts": "Parameters of the bundled alerts.",
    "exporterSelector": "PromQL label matchers selecting mco-exporter's scrape targets in `up`.",
    "runbookURL": "Base URL of the runbook; each alert links to its section.",
    "nodeInterferedLevel": "Interference level at which MCONodeInterfered fires.",
    "nodeInterferedFor": "How long the level must stay at or above it first.",
    "policies": "Workload-class policies, in order: a pod gets the first whose podSelector "
    "matches its labels (a policy without podSelector matches every pod); a pod no policy "
    "matches is treated as by the catch-all default. Kata placement is not a policy: it "
    "always applies.",
    "name": "Unique name of the policy (a DNS label); shown in the extender's explanations.",
    "podSelector": "Kubernetes label selector over the pod's labels; absent: every pod.",
    "maxLevel": "Nodes whose interference level plus reservation is above this are filtered "
    "for these pods; absent: no limit.",
    "policyHardConstraints": "Enforce: nodes violating a hard constraint are filtered for "
    "these pods; Ignore: they are not (the constraint still shows in the report).",
    "scoreWeight": "How much the interference level counts in these pods' score: score = "
    "neutral + weight x (100 x (1 - level) - neutral), within 0-100. 1: as the report says; "
    "0: every node scores the same.",
    "reservationPerPod": "Level each of these pods adds to the node it was just placed on, "
    "until the node's data shows it (the extender's reservation).",
    "avoidPolicies": "Names of policies whose pods these pods keep away from: each of their "
    "pods on a node takes 100 x avoidPerPod off the node's score for these pods, after "
    "scoreWeight (it filters only with avoidFilter). The extender learns the pods on each "
    "node from --watch-pods (kube-scheduler; without it this has no effect there) or from the "
    "tasks of Volcano's NodeInfos.",
    "avoidPerPod": "Score (over 100) each pod of avoidPolicies on a node takes off it.",
    "triggeredLevel": "A node where any detection is triggered counts, for these pods, as if "
    "its interference level were at least this (for maxLevel and the score); 0: off.",
    "avoidFilter": "Filter instead of score: nodes running a pod of avoidPolicies are "
    "filtered for these pods while nodes without one remain; where none remains, the least "
    "interfered pass (a policy never leaves a pod pending while nodes fit it).",
    "gatherPerPod": "Score (over 100) each pod of this same policy on a node adds to it: "
    "these pods gather on the nodes that already hold them.",
}


def _number(default: float, help_text: str, *, maximum: float | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "number",
        "minimum": 0,
        "default": default,
        "description": help_text,
    }
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def _duration(default: str, help_text: str) -> dict[str, Any]:
    return {
        "type": "string",
        "maxLength": DURATION_MAX_LENGTH,
        "default": default,
        "description": help_text,
        "x-kubernetes-validations": [
            {
                "rule": _DURATION_OK,
                "message": "must be a duration longer than 0s like 10s, 1m or 1h30m "
                f"(whole hours, minutes and seconds), at most {DURATION_MAX}",
            }
        ],
    }


def _hysteresis(default: str, help_text: str) -> dict[str, Any]:
    schema = _duration(default, help_text)
    schema["x-kubernetes-validations"].append(
        {
            "rule": f"!({_parses('self')}) || duration(self) <= duration('{model.MAX_HYSTERESIS}')",
            "message": f"must be at most {model.MAX_HYSTERESIS}",
        }
    )
    return schema


def _object(properties: dict[str, Any], help_text: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "default": {
            k: copy.deepcopy(v["default"]) for k, v in properties.items() if "default" in v
        },
        "description": help_text,
        "properties": properties,
        **extra,
    }


def _threshold(signal: Signal, default: dict[str, float]) -> dict[str, Any]:
    if signal.lower_is_worse:
        rule, order = "self.warn > self.critical", "above"
        worse = "lower values are worse"
    else:
        rule, order = "self.warn < self.critical", "below"
        worse = "higher values are worse"
    return _object(
        {
            "warn": _number(
                default["warn"],
                f"Value ({signal.unit}) at which the signal triggers its detection.",
                maximum=limits.threshold_maximum(signal.maximum),
            ),
            "critical": _number(
                default["critical"],
                f"Value ({signal.unit}) at which the signal's index reaches 1.",
                maximum=limits.threshold_maximum(signal.maximum),
            ),
        },
        signal.help,
        **{
            "x-kubernetes-validations": [
                {"rule": rule, "message": f"warn must be {order} critical: {worse}"}
            ]
        },
    )


def _detection(key: str, default: dict[str, Any], catalog: Catalog) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "weight": {
            **_number(default["weight"], _FIELD_HELP["weight"], maximum=limits.MAX_WEIGHT),
            "x-kubernetes-validations": [
                {
                    "rule": f"self == 0.0 || self >= {limits.MIN_WEIGHT!r}",
                    "message": f"must be 0 or at least {limits.MIN_WEIGHT:g}",
                }
            ],
        },
    }
    for part in ("signals", "fallback"):
        if part not in default:
            continue
        properties[part] = _object(
            {k: _threshold(catalog.signal(k), threshold) for k, threshold in default[part].items()},
            _FIELD_HELP[part],
        )
    return _object(properties, f"The {key} detection.")


def _strings(pattern: str, max_length: int, help_text: str) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length, "pattern": pattern, "description": help_text}


def _selector() -> dict[str, Any]:
    ls = labelselector
    key = _strings(ls.KEY_PATTERN, ls.MAX_KEY, "A label key, e.g. mco.io/workload-class.")
    value = _strings(ls.VALUE_PATTERN, ls.MAX_VALUE, "A label value.")
    requirement = {
        "type": "object",
        "required": ["key", "operator"],
        "properties": {
            "key": key,
            "operator": {
                "type": "string",
                "enum": list(ls.OPERATORS),
                "description": "In, NotIn (need values), Exists, DoesNotExist (take none).",
            },
            "values": {"type": "array", "maxItems": ls.MAX_VALUES, "items": value},
        },
        "x-kubernetes-validations": [
            {
                "rule": "(self.operator in ['In', 'NotIn']) == "
                "(has(self.values) && size(self.values) > 0)",
                "message": "operators In and NotIn need values; Exists and DoesNotExist take none",
            }
        ],
    }
    return {
        "type": "object",
        "description": _FIELD_HELP["podSelector"],
        "properties": {
            "matchLabels": {
                "type": "object",
                "maxProperties": ls.MAX_LABELS,
                "additionalProperties": value,
                # Keys are checked by rulegen, not here: a structural schema cannot bound a
                # map key's length, so a CEL ``matches`` over the keys would be estimated at
                # the whole request's size per key and exceed the API server's cost budget.
                "description": "Labels the pod must carry with these values (label keys such "
                "as mco.io/workload-class).",
            },
            "matchExpressions": {
                "type": "array",
                "maxItems": ls.MAX_EXPRESSIONS,
                "items": requirement,
                "description": "Requirements the pod's labels must all meet.",
            },
        },
    }


def _policies(default: list[dict[str, Any]]) -> dict[str, Any]:
    item = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {
                **_strings(policy.NAME_PATTERN, policy.MAX_NAME, _FIELD_HELP["name"]),
                "minLength": 1,
            },
            "podSelector": _selector(),
            "maxLevel": {
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "description": _FIELD_HELP["maxLevel"],
            },
            "hardConstraints": {
                "type": "string",
                "enum": list(policy.HARD_CONSTRAINTS),
                "default": "Enforce",
                "description": _FIELD_HELP["policyHardConstraints"],
            },
            "scoreWeight": _number(
                1.0, _FIELD_HELP["scoreWeight"], maximum=policy.MAX_SCORE_WEIGHT
            ),
            "reservationPerPod": _number(
                policy.DEFAULT_RESERVATION, _FIELD_HELP["reservationPerPod"], maximum=1
            ),
            "avoidPolicies": {
                "type": "array",
                "maxItems": policy.MAX_POLICIES,
                "default": [],
                "items": _strings(policy.NAME_PATTERN, policy.MAX_NAME, "A policy's name."),
                "description": _FIELD_HELP["avoidPolicies"],
            },
            "avoidPerPod": _number(0.0, _FIELD_HELP["avoidPerPod"], maximum=1),
            "triggeredLevel": _number(0.0, _FIELD_HELP["triggeredLevel"], maximum=1),
            "avoidFilter": {
                "type": "boolean",
                "default": False,
                "description": _FIELD_HELP["avoidFilter"],
            },
            "gatherPerPod": _number(0.0, _FIELD_HELP["gatherPerPod"], maximum=1),
        },
    }
    return {
        "type": "array",
        "maxItems": policy.MAX_POLICIES,
        "default": default,
        "description": _FIELD_HELP["policies"],
        "items": item,
        "x-kubernetes-validations": [
            {
                "rule": "self.all(p, self.exists_one(q, q.name == p.name))",
                "message": "policy names must be unique",
            },
            {
                "rule": "self.all(p, !has(p.avoidPolicies) || "
                "p.avoidPolicies.all(n, self.exists(q, q.name == n)))",
                "message": "avoidPolicies must name policies of this list",
            },
        ],
    }


def spec_schema(catalog: Catalog = CATALOG) -> dict[str, Any]:
    d = model.default_spec(catalog)
    keys = [detection.key for detection in catalog.detections]
    detections = _object(
        {key: _detection(key, d["detections"][key], catalog) for key in keys},
        _FIELD_HELP["detections"],
        **{
            "x-kubernetes-validations": [
                {
                    "rule": " + ".join(f"self.{k}.weight" for k in keys) + " > 0.0",
                    "message": "at least one detection needs a weight above 0",
                }
            ]
        },
    )
    alerts = d["alerts"]
    return _object(
        {
            "window": _duration(d["window"], _FIELD_HELP["window"]),
            "evaluationInterval": _duration(
                d["evaluationInterval"], _FIELD_HELP["evaluationInterval"]
            ),
            "detections": detections,
            "hardConstraints": _object(
                {
                    c.key: _number(
                        d["hardConstraints"][c.key],
                        c.help,
                        maximum=limits.threshold_maximum(c.maximum),
                    )
                    for c in catalog.constraints
                }
                | {
                    name: _hysteresis(d["hardConstraints"][name], _FIELD_HELP[name])
                    for name in ("holdFor", "clearAfter")
                },
                _FIELD_HELP["hardConstraints"],
            ),
            "report": _object(
                {
                    "staleAfter": _duration(d["report"]["staleAfter"], _FIELD_HELP["staleAfter"]),
                    "neutralScore": _number(
                        d["report"]["neutralScore"], _FIELD_HELP["neutralScore"], maximum=100
                    ),
                },
                _FIELD_HELP["report"],
            ),
            "alerts": _object(
                {
                    "exporterSelector": {
                        "type": "string",
                        "maxLength": model.MAX_SELECTOR,
                        "default": alerts["exporterSelector"],
                        "description": _FIELD_HELP["exporterSelector"],
                        "x-kubernetes-validations": [
                            {
                                "rule": f"self.matches(r'{model.SELECTOR_PATTERN}')",
                                "message": 'must be PromQL label matchers, e.g. job="mco-exporter"',
                            }
                        ],
                    },
                    "runbookURL": {
                        "type": "string",
                        "maxLength": model.MAX_URL,
                        "default": alerts["runbookURL"],
                        "description": _FIELD_HELP["runbookURL"],
                        "x-kubernetes-validations": [
                            {
                                "rule": f"self.matches(r'{model.URL_PATTERN}')",
                                "message": "must be an http(s) URL without spaces, quotes, braces",
                            }
                        ],
                    },
                    "nodeInterferedLevel": {
                        **_number(
                            alerts["nodeInterferedLevel"],
                            _FIELD_HELP["nodeInterferedLevel"],
                            maximum=1,
                        ),
                        "x-kubernetes-validations": [
                            {"rule": "self > 0.0", "message": "must be above 0"}
                        ],
                    },
                    "nodeInterferedFor": _duration(
                        alerts["nodeInterferedFor"], _FIELD_HELP["nodeInterferedFor"]
                    ),
                },
                _FIELD_HELP["alerts"],
            ),
            "policies": _policies(d["policies"]),
        },
        "The detection model: signal thresholds, detection weights, hard constraints.",
        **{
            "x-kubernetes-validations": [
                {
                    "rule": f"!({_parses('self.window')} && {_parses('self.evaluationInterval')})"
                    " || duration(self.window) >= duration(self.evaluationInterval)",
                    "message": "window must be at least evaluationInterval",
                }
            ]
        },
    )


def _status_schema() -> dict[str, Any]:
    condition = {
        "type": "object",
        "required": ["type", "status", "lastTransitionTime", "reason", "message"],
        "properties": {
            "type": {"type": "string", "maxLength": 316},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "reason": {"type": "string", "maxLength": 1024},
            "message": {"type": "string", "maxLength": 32768},
        },
    }
    return {
        "type": "object",
        "description": "Written by mco-rulegen's controller.",
        "properties": {
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "The latest generation the controller has judged.",
            },
            "appliedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "The generation whose rules are in force (the last good one).",
            },
            "appliedRulesHash": {
                "type": "string",
                "description": "config_hash of the rules in force; Prometheus exposes it as "
                "the hash label of mco:rule_config:info.",
            },
            "history": {
                "type": "array",
                "maxItems": history.MAX_LIMIT,
                "description": "The last accepted specs, newest first, for mco-rulegen "
                "rollback (the controller's --history-limit).",
                "items": {
                    "type": "object",
                    "required": ["generation", "acceptedTime", "hash", "spec"],
                    "properties": {
                        "generation": {"type": "integer", "format": "int64", "minimum": 0},
                        "acceptedTime": {"type": "string", "format": "date-time"},
                        "hash": {"type": "string", "maxLength": 64},
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    },
                },
            },
            "conditions": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": condition,
                "description": "Accepted: the latest generation is valid (False, reason "
                "Rejected, with the problems). Applied: its PrometheusRule is in force.",
            },
        },
    }


def crd(catalog: Catalog = CATALOG) -> dict[str, Any]:
    accepted = '.status.conditions[?(@.type=="Accepted")]'
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": model.API_GROUP,
            "scope": "Cluster",
            "names": {
                "kind": model.KIND,
                "listKind": f"{model.KIND}List",
                "plural": model.PLURAL,
                "singular": model.KIND.lower(),
                "shortNames": ["drc"],
            },
            "versions": [
                {
                    "name": model.API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Accepted", "type": "string", "jsonPath": f"{accepted}.status"},
                        {"name": "Reason", "type": "string", "jsonPath": f"{accepted}.reason"},
                        {
                            "name": "Applied-Generation",
                            "type": "integer",
                            "jsonPath": ".status.appliedGeneration",
                        },
                        {"name": "Hash", "type": "string", "jsonPath": ".status.appliedRulesHash"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "The detection model MCO's recording rules encode. "
                            "mco-rulegen reads the one named default.",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(catalog),
                                "status": _status_schema(),
                            },
                            "x-kubernetes-validations": [
                                {
                                    "rule": f"self.metadata.name == '{model.DEFAULT_NAME}'",
                                    "message": "mco-rulegen reads only the DetectionRuleConfig "
                                    f"named {model.DEFAULT_NAME}",
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def render_crd(catalog: Catalog = CATALOG) -> str:
    header = (
        "# DetectionRuleConfig CRD, generated by rulegen.crd from the detection model.\n"
        "# Do not edit: run `make generate`.\n"
    )
    return header + yaml.safe_dump(crd(catalog), sort_keys=False, width=100)
