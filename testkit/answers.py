"""Building blocks for the reporter tests: answers shaped like the engine's, vectors by name."""

from __future__ import annotations

import math
from typing import Any, TypeVar

import msgspec

from mco.promql import Answer
from reporter.query import (
    MISSING,
    InfoSample,
    Kind,
    Plan,
    RecordedSample,
    Snapshot,
    TaggedSample,
    parse,
)

T0 = 1_800_000_000.0
T = TypeVar("T")


def slot_of(plan: Plan, kind: Kind, key: str = "") -> int:
    for i, slot in enumerate(plan.slots):
        if slot.kind is kind and slot.key == key:
            return i
    raise KeyError((kind, key))


def quiet_values(plan: Plan) -> dict[tuple[Kind, str], float]:
    """A healthy node: every series present, nothing triggered."""
    values: dict[tuple[Kind, str], float] = {}
    for slot in plan.slots:
        if slot.kind is Kind.TIME:
            continue
        values[(slot.kind, slot.key)] = {
            Kind.SIGNAL: 0.01,
            Kind.LEVEL: 0.1,
            Kind.SCORE: 90.0,
            Kind.KATA: 1.0,
        }.get(slot.kind, 0.0)
    return values


def _metric(plan: Plan, kind: Kind, key: str) -> dict[str, str]:
    slot = plan.slots[slot_of(plan, kind, key)]
    metric = {"__name__": slot.series}
    if kind in (Kind.INDEX, Kind.TRIGGERED):
        metric["detection"] = key
    elif kind is Kind.VIOLATED:
        metric["constraint"] = key
    return metric


def answers(
    plan: Plan,
    nodes: dict[str, dict[tuple[Kind, str], float]],
    times: dict[str, float],
    *,
    rules: list[tuple[str, str]] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The JSON ``result`` of each of the plan's three queries (values as strings, as an engine
    sends them): recorded series, tagged times and Kata readiness, rule-config info."""
    recorded: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    for node, values in nodes.items():
        if node in times:
            extra.append({"metric": {"k": "t", "node": node}, "value": [T0, _fmt(times[node])]})
        for (kind, key), v in values.items():
            if kind is Kind.KATA:
                extra.append({"metric": {"k": "kata", "node": node}, "value": [T0, _fmt(v)]})
                continue
            metric = {**_metric(plan, kind, key), "node": node}
            recorded.append({"metric": metric, "value": [T0, _fmt(v)]})
    info = [
        {
            "metric": {"__name__": "mco:rule_config:info", "generation": g, "hash": h},
            "value": [T0, "1"],
        }
        for g, h in (rules if rules is not None else [("3", "abc")])
    ]
    return recorded, extra, info


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def snapshot(
    plan: Plan,
    nodes: dict[str, dict[tuple[Kind, str], float]],
    at: float,
    times: dict[str, float] | None = None,
    rules: list[tuple[str, str]] | None = None,
) -> Snapshot:
    """What ``fetch`` returns for such answers (decoded and parsed by the real code)."""
    times = times if times is not None else {n: at - 0.5 for n in nodes}
    recorded, extra, info = answers(plan, nodes, times, rules=rules)
    return parse(
        plan,
        decode(recorded, RecordedSample),
        decode(extra, TaggedSample),
        decode(info, InfoSample),
        at,
    )


def decode(result: list[dict[str, Any]], sample: type[T]) -> list[T]:
    """Decode a ``result`` the way PromQLClient does (JSON, "+Inf" rewritten, strict=False)."""
    body = msgspec.json.encode(ok(result)).replace(b'"+Inf"', b'"Inf"')
    answer = msgspec.json.Decoder(Answer[sample], strict=False).decode(body)  # type: ignore[valid-type]
    assert answer.data is not None
    return answer.data.result


def ok(result: list[dict[str, Any]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def vector(plan: Plan, values: dict[tuple[Kind, str], float], ts: float) -> list[float]:
    v = [MISSING] * len(plan.slots)
    v[plan.time_slot] = ts
    for (kind, key), x in values.items():
        v[slot_of(plan, kind, key)] = x
    return v
