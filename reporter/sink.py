"""What the reporter's engine writes to: one ``Sink`` protocol, one ``SinkResult``.

The Kubernetes sink (``reporter.kubesink``) and the file sink (``reporter.filesink``) both
answer every write with a ``SinkResult``, failures included (neither raises), and carry in it
everything the engine's self-metrics need, so the engine never looks inside a sink.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from reporter.schema import NodeEntry, WorkloadProfile
from reporter.tracker import ReportView

Medium = Literal["api", "file"]


@dataclass(slots=True)
class SinkResult:
    skipped: bool = False  # backing off, or not allowed to write: nothing was sent
    errors: list[str] = field(default_factory=list)  # error kinds (``mco.apierrors``, "write")
    message: str = ""  # why it failed, for the log and ``--once``
    layout: str = ""  # the layout written ("" when nothing was)
    object_bytes: int = 0  # estimated JSON size of the largest object of that layout
    over_limit: bool = False  # an explicit cluster layout above --max-object-bytes
    writes: dict[str, int] = field(default_factory=dict)  # requests sent, by verb
    bytes: int = 0  # bytes sent

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def delivered(self) -> bool:
        """This cycle's report (its heartbeat) reached the readers."""
        return not self.errors and not self.skipped


class Sink(Protocol):
    # The prefix of its error kinds in mco_reporter_errors_total, and which bytes counter moves.
    medium: Medium
    # status.profiles as ``load`` found it on the object named cluster (learning goes on from it)
    loaded_profiles: list[WorkloadProfile]

    async def load(self) -> dict[str, NodeEntry]:
        """The entries already written (a restart must not drop them); raises when they cannot
        be read (the engine then tries again next cycle)."""
        ...

    async def write(self, view: ReportView) -> SinkResult:
        """Bring what readers see in line with ``view``."""
        ...

    def forget(self) -> None:
        """Drop what is known of the written state (leadership lost: another replica writes)."""
        ...
