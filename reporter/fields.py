"""The report's fields, each declared once: what it is read from, when a change is worth a write,
the values it may take, and the name it has in an entry's ``missing`` list.

``reporter.query.Plan`` expands this table over a detection catalog (``rulegen.catalog``): one
slot per field, or per signal, detection or hard constraint for the fields that come in one per
each. The query, the parse, the change tolerance (``reporter.entries``) and the ``missing``
names all follow from the slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

from reporter.crd import BOUNDS
from rulegen import series


class Kind(Enum):
    """Where a value goes in a NodeEntry (``reporter.entries.EntryBuilder.build``)."""

    TIME = "time"
    SIGNAL = "signal"
    LEVEL = "level"
    SCORE = "score"
    FALLBACK = "fallback"
    POD_FALLBACK = "podFallback"
    KATA = "kata"
    INDEX = "index"
    TRIGGERED = "triggered"
    VIOLATED = "violated"


class Per(Enum):
    """How many slots a field has: one, or one per entry of a catalog table."""

    NODE = "node"  # one
    REPORTED = "reported"  # one per signal and context series (the signal snapshot)
    DETECTION = "detection"  # one per detection, selected by its ``detection`` label
    CONSTRAINT = "constraint"  # one per hard constraint, selected by its ``constraint`` label


class Query(Enum):
    RECORDED = "recorded"  # by name (and label) from the one selector over recorded series
    TAGGED = "tagged"  # from the second query, tagged by a ``k`` label (time, Kata readiness)


class Tolerance(Enum):
    """How far a value may move before the entry is rewritten (``reporter.entries.Epsilon``)."""

    ANY = "any"  # never a change by itself (the sample time)
    EXACT = "exact"  # any change (booleans)
    LEVEL = "level"  # absolute epsilon.level
    SCORE = "score"  # absolute epsilon.level × 100
    SIGNAL = "signal"  # relative epsilon.signal, with the signal's scale as the floor


@dataclass(frozen=True, slots=True)
class Field:
    kind: Kind
    per: Per
    series: str  # the series queried; "" where each catalog entry has its own
    missing: str  # its name in NodeEntry.missing when absent ("{key}": the slot's key)
    tolerance: Tolerance
    query: Query = Query.RECORDED
    boolean: bool = False  # 0 or 1
    bounds: tuple[float, float] | None = None  # the values it may take (None: any finite)


# In slot order; fields with the same ``per`` that follow each other are interleaved per key
# (a detection's index, then its trigger), so the order of an entry's maps and ``missing``
# follows this table.
FIELDS: Final[tuple[Field, ...]] = (
    Field(Kind.TIME, Per.NODE, "", "", Tolerance.ANY, Query.TAGGED),
    Field(Kind.SIGNAL, Per.REPORTED, "", "signals.{key}", Tolerance.SIGNAL),
    Field(
        Kind.LEVEL,
        Per.NODE,
        series.INTERFERENCE_LEVEL,
        "level",
        Tolerance.LEVEL,
        bounds=BOUNDS["level"],
    ),
    Field(
        Kind.SCORE,
        Per.NODE,
        series.SCHEDULE_SCORE,
        "score",
        Tolerance.SCORE,
        bounds=BOUNDS["score"],
    ),
    Field(
        Kind.FALLBACK,
        Per.NODE,
        series.MEMORY_PRESSURE_FALLBACK,
        "fallback",
        Tolerance.EXACT,
        boolean=True,
    ),
    Field(
        Kind.POD_FALLBACK,
        Per.NODE,
        series.POD_PRESSURE_FALLBACK,
        "podFallback",
        Tolerance.EXACT,
        boolean=True,
    ),
    Field(
        Kind.KATA,
        Per.NODE,
        series.KATA_READY,
        "kataReady",
        Tolerance.EXACT,
        Query.TAGGED,
        boolean=True,
    ),
    Field(
        Kind.INDEX,
        Per.DETECTION,
        series.DETECTION_INDEX,
        "detections.{key}",
        Tolerance.LEVEL,
        bounds=BOUNDS["index"],
    ),
    Field(
        Kind.TRIGGERED,
        Per.DETECTION,
        series.DETECTION_TRIGGERED,
        "detections.{key}.triggered",
        Tolerance.EXACT,
        boolean=True,
    ),
    Field(
        Kind.VIOLATED,
        Per.CONSTRAINT,
        series.HARD_CONSTRAINT_VIOLATED,
        "violations.{key}",
        Tolerance.EXACT,
        boolean=True,
    ),
)
