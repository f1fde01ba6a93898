"""The last accepted DetectionRuleConfig specs, kept in the object's own status.

A bad edit that passes validation (a threshold a factor of ten too low) is undone with
``mco-rulegen rollback`` even when nobody saved the old YAML: the controller records each spec
it accepts, with its generation, hash and time, newest first, in ``status.history``. The list
is bounded (a spec is a few KiB; ten of them stay far below etcd's object size limit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

DEFAULT_LIMIT: Final = 10
MAX_LIMIT: Final = 50


def remember(
    history: Sequence[Mapping[str, Any]],
    *,
    generation: int,
    digest: str,
    spec: Mapping[str, Any],
    now: str,
    limit: int = DEFAULT_LIMIT,
) -> list[dict[str, Any]]:
    """``history`` with this accepted spec first (replacing an entry of the same generation)."""
    older = [dict(h) for h in history if h.get("generation") != generation]
    entry = {"generation": generation, "acceptedTime": now, "hash": digest, "spec": dict(spec)}
    return [entry, *older][:limit]


def generations(history: Sequence[Mapping[str, Any]]) -> list[int]:
    return [int(h["generation"]) for h in history if isinstance(h.get("generation"), int)]


def pick(
    history: Sequence[Mapping[str, Any]], *, to_generation: int | None, applied_hash: str | None
) -> Mapping[str, Any] | None:
    """The entry to restore: ``to_generation``'s, or (None) the newest whose rules differ from
    the ones in force, i.e. the last good config before the current one."""
    for entry in history:
        if to_generation is not None:
            if entry.get("generation") == to_generation:
                return entry
        elif entry.get("hash") != applied_hash:
            return entry
    return None


def merge_patch(current: Any, target: Any) -> Any:
    """The RFC 7386 merge patch that turns ``current`` into ``target`` (keys to drop are
    ``None``), so a rollback restores the old spec exactly instead of merging into the new."""
    if not isinstance(current, Mapping) or not isinstance(target, Mapping):
        return target
    patch: dict[str, Any] = {k: None for k in current if k not in target}
    for key, value in target.items():
        if key not in current:
            patch[key] = value
        elif current[key] != value:
            patch[key] = merge_patch(current[key], value)
    return patch
