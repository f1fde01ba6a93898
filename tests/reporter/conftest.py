from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import yaml

from reporter.crd import CRD_PATH
from scripts.generate import ROOT


def crd_schema() -> dict[str, Any]:
    """The openAPIV3Schema of the checked-in CRD file (what a cluster would enforce); a copy
    the caller may change."""
    return copy.deepcopy(_crd_schema())


@functools.cache
def _crd_schema() -> dict[str, Any]:
    """Parsed once per run and only read: the file takes ~0.1 s to parse, and validating every
    object a property test writes parsed it again each time (most of that test's 2 minutes)."""
    doc = yaml.safe_load((ROOT / CRD_PATH).read_text())
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("date-time")  # type: ignore[untyped-decorator]
def _date_time(value: object) -> bool:
    """RFC 3339, as the API server checks ``format: date-time`` (jsonschema needs an extra
    package for it)."""
    return not isinstance(value, str) or bool(_RFC3339.match(value))


@functools.cache
def _validator() -> Any:
    schema = _crd_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=FORMATS)


def validate_object(obj: Any) -> None:
    """Raise when ``obj`` would be rejected by the CRD's schema (JSON round trip first, as an
    API server sees it), ``x-kubernetes-list-type: map`` (unique keys) included."""
    data = json.loads(json.dumps(obj))
    error = jsonschema.exceptions.best_match(_validator().iter_errors(data))
    if error is not None:
        raise error
    _unique_map_keys(_crd_schema(), data, "")


def _unique_map_keys(schema: dict[str, Any], value: Any, path: str) -> None:
    """What the API server adds to the schema for a list of type map: no two items with the
    same ``x-kubernetes-list-map-keys``."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                _unique_map_keys(sub, item, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = [tuple(i.get(k) for k in schema["x-kubernetes-list-map-keys"]) for i in value]
            for i, key in enumerate(keys):
                if key in keys[:i]:
                    raise jsonschema.ValidationError(f"{path}[{i}]: Duplicate value: {key}")
        for i, item in enumerate(value):
            _unique_map_keys(schema["items"], item, f"{path}[{i}]")


def write_kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "secret-token-do-not-log"}}],
                "contexts": [{"name": "c", "context": {"cluster": "kmock", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path
