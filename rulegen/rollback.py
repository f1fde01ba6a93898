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


async def rollback(api: client.ApiClient, *, name: str, to_generation: int | None) -> Restored:
    custom = client.CustomObjectsApi(api)
    obj: dict[str, Any] = await custom.get_cluster_custom_object(
        model.API_GROUP, model.API_VERSION, model.PLURAL, name
    )
    status = obj.get("status") or {}
    past = status.get("history") or []
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
    metadata = obj.get("metadata") or {}
    patch = {
        "metadata": {"resourceVersion": metadata.get("resourceVersion")},
        "spec": history.merge_patch(obj.get("spec") or {}, entry.get("spec") or {}),
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
    return Restored(int(entry["generation"]), int(metadata.get("generation") or 0))
