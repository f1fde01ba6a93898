"""Kubernetes label selectors (``metav1.LabelSelector``): the type, its checks and its matching.

A DetectionRuleConfig policy picks pods with one (``spec.policies[].podSelector``); rulegen
checks it, the reporter copies it into the report, the extender matches pods' labels with it.
The rules are the API server's (``LabelSelectorAsSelector``): ``matchLabels`` and every
``matchExpressions`` requirement must all hold; an empty selector matches every pod; ``In`` and
``NotIn`` need values, ``Exists`` and ``DoesNotExist`` take none. The bounds keep the CRD's CEL
cost estimate small and the extender's matching cheap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, get_args

import msgspec

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
OPERATORS: Final[tuple[str, ...]] = get_args(Operator)
WITH_VALUES: Final = ("In", "NotIn")

MAX_KEY: Final = 317  # DNS-1123 subdomain prefix (253) + "/" + name (63)
MAX_VALUE: Final = 63
MAX_LABELS: Final = 32  # matchLabels entries
MAX_EXPRESSIONS: Final = 16
MAX_VALUES: Final = 32  # values of one requirement
_NAME: Final = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
KEY_PATTERN: Final = rf"^({_DNS_LABEL}(\.{_DNS_LABEL})*/)?{_NAME}$"
VALUE_PATTERN: Final = rf"^({_NAME})?$"
_KEY: Final = re.compile(KEY_PATTERN)
_VALUE: Final = re.compile(VALUE_PATTERN)

Key = Annotated[str, msgspec.Meta(max_length=MAX_KEY, pattern=KEY_PATTERN)]
Value = Annotated[str, msgspec.Meta(max_length=MAX_VALUE, pattern=VALUE_PATTERN)]


class Requirement(msgspec.Struct, rename="camel", omit_defaults=True):
    """One ``matchExpressions`` item."""

    key: Key
    operator: Operator
    values: Annotated[list[Value], msgspec.Meta(max_length=MAX_VALUES)] = msgspec.field(
        default_factory=list
    )


class LabelSelector(msgspec.Struct, rename="camel", omit_defaults=True):
    match_labels: Annotated[dict[Key, Value], msgspec.Meta(max_length=MAX_LABELS)] = msgspec.field(
        default_factory=dict
    )
    match_expressions: Annotated[list[Requirement], msgspec.Meta(max_length=MAX_EXPRESSIONS)] = (
        msgspec.field(default_factory=list)
    )


def matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Whether a pod with ``labels`` is selected; ``None`` (no selector) selects every pod."""
    if selector is None:
        return True
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    for req in selector.match_expressions:
        found = labels.get(req.key)
        op = req.operator
        if op == "In":
            ok = found is not None and found in req.values
        elif op == "NotIn":
            ok = found is None or found not in req.values
        elif op == "Exists":
            ok = found is not None
        else:  # DoesNotExist
            ok = found is None
        if not ok:
            return False
    return True


def _key_problem(key: Any) -> str | None:
    if not isinstance(key, str) or len(key) > MAX_KEY or not _KEY.match(key):
        return "must be a label key such as mco.io/workload-class (prefix/name, name <= 63)"
    return None


def _value_problem(value: Any) -> str | None:
    if not isinstance(value, str) or not _VALUE.match(value):
        return f"must be a label value (at most {MAX_VALUE} of A-Z a-z 0-9 - _ .)"
    return None


def parse_selector(raw: Any, path: str, problems: list[str]) -> LabelSelector | None:
    """``raw`` (as read from YAML or JSON) as a selector; each problem appended with its path."""
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: expected a label selector (matchLabels, matchExpressions)")
        return None
    before = len(problems)
    for key in raw:
        if key not in ("matchLabels", "matchExpressions"):
            problems.append(f"{path}.{key}: unknown field (known: matchLabels, matchExpressions)")
    labels = raw.get("matchLabels", {})
    if not isinstance(labels, Mapping):
        problems.append(f"{path}.matchLabels: expected a mapping of label keys to values")
    elif len(labels) > MAX_LABELS:
        problems.append(f"{path}.matchLabels: at most {MAX_LABELS} labels")
    else:
        for key, value in labels.items():
            for problem in (_key_problem(key), _value_problem(value)):
                if problem:
                    problems.append(f"{path}.matchLabels[{str(key)[:80]!r}]: {problem}")
    exprs = raw.get("matchExpressions", [])
    if not isinstance(exprs, list):
        problems.append(f"{path}.matchExpressions: expected a list of requirements")
    elif len(exprs) > MAX_EXPRESSIONS:
        problems.append(f"{path}.matchExpressions: at most {MAX_EXPRESSIONS} requirements")
    else:
        for i, req in enumerate(exprs):
            _check_requirement(req, f"{path}.matchExpressions[{i}]", problems)
    if len(problems) > before:
        return None
    return msgspec.convert(raw, LabelSelector)


def _check_requirement(req: Any, path: str, problems: list[str]) -> None:
    if not isinstance(req, Mapping):
        problems.append(f"{path}: expected a mapping with key, operator and values")
        return
    for key in req:
        if key not in ("key", "operator", "values"):
            problems.append(f"{path}.{key}: unknown field (known: key, operator, values)")
    if (problem := _key_problem(req.get("key"))) is not None:
        problems.append(f"{path}.key: {problem}")
    op = req.get("operator")
    if op not in OPERATORS:
        problems.append(f"{path}.operator: must be one of {', '.join(OPERATORS)}")
        return
    values = req.get("values", [])
    if not isinstance(values, list) or len(values) > MAX_VALUES:
        problems.append(f"{path}.values: expected a list of at most {MAX_VALUES} label values")
        return
    if op in WITH_VALUES and not values:
        problems.append(f"{path}.values: operator {op} needs at least one value")
    elif op not in WITH_VALUES and values:
        problems.append(f"{path}.values: operator {op} takes no values")
    for j, value in enumerate(values):
        if (problem := _value_problem(value)) is not None:
            problems.append(f"{path}.values[{j}]: {problem}")
