"""Why an online pod was exposed: each exposed pod-second, put down to one cause.

The benchmark keeps what the pipeline showed for a node when each pod was bound to it (the
extender's level and triggered detections, from its ``/v1/nodes`` a second before at most).
An online pod-second is exposed when its node's detection for the pod's resource is triggered;
the cause is read from the pods on that node:

- ``online-late``: the online pod was bound while that detection was already triggered (MCO
  let it onto an interfered node);
- ``unseen``: every aggressor of that resource on the node was bound while the node's level
  read 0 (the load that triggered it was under every warn threshold when each came: nothing
  for MCO to see);
- ``piled-on``: at least one aggressor came while that detection was already triggered there
  (MCO's score let more load onto an interfered node, which keeps it triggered longer);
- ``seen``: otherwise, at least one aggressor came while the level was above 0 (MCO saw
  some pressure and the node still won the score);
- ``other``: no aggressor of that resource runs there (other pods' side effects);
- ``pending``: the online pod was waiting to be bound (a pod MCO keeps pending is not
  protected, so each of its pending seconds counts as exposed).

Aggressors are batch and best-effort pods whose profile loads the resource (``AGGRESSOR_OF``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.placement.trace import PodSpec

AGGRESSOR_OF = {"io": "io-heavy", "memory": "memory-heavy", "cache": "cache-heavy"}
CAUSES = ("online-late", "unseen", "piled-on", "seen", "other", "pending")


@dataclass(frozen=True)
class Seen:
    """What the pipeline showed for the node a pod was bound to, at the bind."""

    level: float | None
    triggered: frozenset[str]


def seen(entry: dict[str, Any] | None) -> Seen:
    if entry is None:
        return Seen(None, frozenset())
    detections = entry.get("detections") or {}
    triggered = frozenset(d for d, s in detections.items() if (s or {}).get("triggered"))
    level = entry.get("level")
    return Seen(float(level) if level is not None else None, triggered)


@dataclass
class Causes:
    at_bind: dict[str, Seen] = field(default_factory=dict)  # pod name -> its node at its bind
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))

    def bound(self, pod: PodSpec, entry: dict[str, Any] | None) -> None:
        self.at_bind[pod.name] = seen(entry)

    def exposed(self, pod: PodSpec, detection: str, running: list[PodSpec], dt: float) -> None:
        mine = self.at_bind.get(pod.name)
        if mine is not None and detection in mine.triggered:
            self.seconds["online-late"] += dt
            return
        aggressors = [p for p in running if p.profile == AGGRESSOR_OF[pod.sensitivity]]
        if not aggressors:
            self.seconds["other"] += dt
        elif any(detection in self.at_bind[p.name].triggered for p in aggressors):
            self.seconds["piled-on"] += dt
        elif all((self.at_bind[p.name].level or 0.0) <= 0.0 for p in aggressors):
            self.seconds["unseen"] += dt
        else:
            self.seconds["seen"] += dt

    def pending(self, dt: float) -> None:
        self.seconds["pending"] += dt

    def shares(self) -> dict[str, float]:
        total = sum(self.seconds.values())
        return {c: round(self.seconds[c] / total, 3) if total else 0.0 for c in CAUSES}
