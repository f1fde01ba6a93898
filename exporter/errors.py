"""The outcomes of one collector update other than success."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


class ParseError(ValueError):
    """A kernel file did not have the shape its parser expects."""


class NoDataError(Exception):
    """The source does not exist on this host (feature not built in, file absent).

    Distinct from a failure: logged once at debug level, not at every scrape. ``metrics`` are
    still exposed, so a collector can say "unavailable" as data (``mco_pressure_available 0``).
    """

    def __init__(self, reason: str, metrics: Sequence[Metric] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.metrics = metrics


class UnavailableError(Exception):
    """A collector cannot work on this host at all (no PMU, no permission, no bcc).

    Raised by a constructor; the collector is then off for the life of the process and reports
    ``mco_exporter_collector_success 0`` with this reason logged once.
    """
