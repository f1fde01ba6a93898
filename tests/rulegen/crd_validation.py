"""What the API server does with a custom resource, without an API server.

kmock stores whatever it is sent, so the tests judge objects the way kube-apiserver would: apply
the structural schema's defaults, validate against ``openAPIV3Schema`` (jsonschema; unknown
fields rejected, as with ``kubectl``'s default strict field validation), then evaluate every
``x-kubernetes-validations`` rule with cel-python, ``self`` bound to the defaulted value with
the schema's types (``number`` is a CEL double even when written as ``1``).
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import celpy
import jsonschema  # type: ignore[import-untyped]
from celpy import celtypes


def version_schema(crd: dict[str, Any], version: str = "v1alpha1") -> dict[str, Any]:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema: dict[str, Any] = v["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(version)


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting: an absent property with a ``default`` gets it, recursively."""
    value = copy.deepcopy(value)
    if schema.get("type") == "object" and isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(sub, value[key])
    elif schema.get("type") == "array" and isinstance(value, list) and "items" in schema:
        value = [apply_defaults(schema["items"], item) for item in value]
    return value


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    schema = copy.deepcopy(schema)
    if schema.get("type") == "object" and "properties" in schema:
        schema["additionalProperties"] = False
        schema["properties"] = {k: _strict(v) for k, v in schema["properties"].items()}
    if "items" in schema:
        schema["items"] = _strict(schema["items"])
    return schema


def _to_cel(schema: dict[str, Any], value: Any) -> Any:
    kind = schema.get("type")
    if kind == "object" and isinstance(value, dict):
        props = schema.get("properties", {})
        return celtypes.MapType(
            {celtypes.StringType(k): _to_cel(props.get(k, {}), v) for k, v in value.items()}
        )
    if kind == "array" and isinstance(value, list):
        return celtypes.ListType([_to_cel(schema.get("items", {}), v) for v in value])
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if kind == "number" and isinstance(value, int | float):
        return celtypes.DoubleType(float(value))
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, dict):
        return celtypes.MapType({celtypes.StringType(k): _to_cel({}, v) for k, v in value.items()})
    raise TypeError(f"no CEL type for {value!r}")


@cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def cel_errors(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    errors = []
    for validation in schema.get("x-kubernetes-validations", []):
        try:
            ok = _program(validation["rule"]).evaluate({"self": _to_cel(schema, value)})
        except Exception as exc:  # a CEL runtime error rejects the object, as in Kubernetes
            errors.append(f"{path or '<root>'}: {validation['rule']} failed: {exc}")
            continue
        if not isinstance(ok, celtypes.BoolType) or not bool(ok):
            errors.append(f"{path or '<root>'}: {validation.get('message', validation['rule'])}")
    if schema.get("type") == "object" and isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                errors += cel_errors(sub, value[key], f"{path}.{key}" if path else key)
    if schema.get("type") == "array" and isinstance(value, list):
        for i, item in enumerate(value):
            errors += cel_errors(schema.get("items", {}), item, f"{path}[{i}]")
    return errors


def api_server_errors(
    crd: dict[str, Any], obj: dict[str, Any], version: str = "v1alpha1"
) -> list[str]:
    """Why the API server would reject ``obj`` (empty when it would accept it)."""
    schema = version_schema(crd, version)
    defaulted = apply_defaults(schema, obj)
    validator = jsonschema.Draft7Validator(_strict(schema))
    errors = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in validator.iter_errors(defaulted)
    ]
    if errors:  # the API server stops at schema errors before running CEL
        return errors
    return cel_errors(schema, defaulted)


def default_errors(schema: dict[str, Any], path: str = "") -> list[str]:
    """Why the API server would refuse the CRD's ``default`` values (empty when it takes them).

    kube-apiserver (apiextensions ``schema/defaulting/validation.go``) checks every ``default``
    as written: against its own node's schema and then that node's CEL rules, recursing into
    the values it holds, with no nested default filled in first.
    """
    errors = []
    here = path or "<root>"
    if "default" in schema:
        value = schema["default"]
        validator = jsonschema.Draft7Validator(_strict(schema))
        schema_errors = [
            f"{here}.default{''.join(f'.{p}' for p in e.absolute_path)}: {e.message}"
            for e in validator.iter_errors(value)
        ]
        errors += schema_errors or cel_errors(schema, value, f"{here}.default")
    if "items" in schema:
        errors += default_errors(schema["items"], f"{path}[]")
    for key, sub in schema.get("properties", {}).items():
        errors += default_errors(sub, f"{path}.{key}" if path else key)
    return errors
