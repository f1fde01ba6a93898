"""``mco-rulegen rollback``: restore an accepted DetectionRuleConfig spec from its history.

The history is the controller's (``status.history``, see ``rulegen.history``). The restore is a
merge patch of ``spec`` guarded by the object's resourceVersion, so an edit made meanwhile is
never overwritten (409: run it again); the API server gives the restored spec a new generation,
which the controller validates and applies like any edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from rulegen import history, model


class RollbackError(Exception):
    """The rollback cannot be done as asked; the message says why (exit 2)."""


@dataclass(frozen=True, slots=True)
class Restored:
    from_generation: int  # the generation whose spec was restored
    previous_generation: int  # the object's generation before the restore


def _history(name: str, obj: object) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The object and its ``status.history``, checked: anything else than what the controller
    writes (an answer that is not an object, a history that is not a list of entries with an
    integer generation) is refused, never read as "no history" or half-read."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata") or {}, dict):
        raise RollbackError(
            f"the API server's answer for DetectionRuleConfig {name} is not a "
            f"DetectionRuleConfig object ({type(obj).__name__}): refusing to restore from it"
        )
    status = obj.get("status") or {}
    if not isinstance(status, dict):
        raise RollbackError(f"DetectionRuleConfig {name}: status is not an object: refusing")
    past = status.get("history") or []
    if not isinstance(past, list):
        raise RollbackError(
            f"DetectionRuleConfig {name}: status.history is not a list "
            f"({type(past).__name__}): refusing to restore from it"
        )
    for i, entry in enumerate(past):
        if not isinstance(entry, dict) or type(entry.get("generation")) is not int:
            raise RollbackError(
                f"DetectionRuleConfig {name}: status.history entry {i} has no integer "
                "generation: refusing to restore from a history the controller did not write"
            )
    return obj, past


async def rollback(api: client.ApiClient, *, name: str, to_generation: int | None) -> Restored:
    custom = client.CustomObjectsApi(api)
    answer: object = await custom.get_cluster_custom_object(
        model.API_GROUP, model.API_VERSION, model.PLURAL, name
    )
    obj, past = _history(name, answer)
    status = obj.get("status") or {}
    entry = history.pick(
        past, to_generation=to_generation, applied_hash=status.get("appliedRulesHash")
    )
    have = ", ".join(str(g) for g in history.generations(past)) or "none"
    if entry is None:
        if to_generation is None:
            raise RollbackError(
                f"DetectionRuleConfig {name} has no earlier accepted spec to restore "
                f"(history: {have})"
            )
        raise RollbackError(
            f"generation {to_generation} is not in the history of DetectionRuleConfig {name}; "
            f"it has: {have}"
        )
    generation = int(entry["generation"])
    spec = entry.get("spec")
    if not isinstance(spec, dict):
        # Restoring it as {} would silently drop every setting of the config.
        raise RollbackError(
            f"the history entry of generation {generation} has no spec (a "
            f"{type(spec).__name__}): refusing to restore it; pick another with --to-generation "
            f"(history: {have})"
        )
    current = obj.get("spec") or {}
    if not isinstance(current, dict):
        raise RollbackError(f"DetectionRuleConfig {name}: its spec is not an object: refusing")
    metadata = obj.get("metadata") or {}
    patch = {
        "metadata": {"resourceVersion": metadata.get("resourceVersion")},
        "spec": history.merge_patch(current, spec),
    }
    try:
        await custom.patch_cluster_custom_object(
            model.API_GROUP,
            model.API_VERSION,
            model.PLURAL,
            name,
            patch,
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]
        )
    except ApiException as exc:
        if exc.status == 409:
            raise RollbackError(
                f"DetectionRuleConfig {name} changed while restoring; run rollback again"
            ) from exc
        raise
    previous = metadata.get("generation")
    return Restored(generation, previous if type(previous) is int else 0)
