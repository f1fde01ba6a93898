"""JSON merge patches (RFC 7386) between what is written and what should be.

A merge patch merges objects key by key and replaces everything else, and ``null`` deletes a
key. So a key that disappears from a node entry must be sent as ``null`` (else the old value
would stay), and a node that leaves the report is patched to ``null``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The smallest merge patch that turns ``old`` into ``new`` (neither holds nulls)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if before == value:
            continue
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            patch[key] = merge_diff(before, value)
        else:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 ``MergePatch``: what an API server does with the patch (used by tests and by the
    sinks' bookkeeping)."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result
