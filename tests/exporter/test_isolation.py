"""One failing collector never takes the others down, and its problem is logged once."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar

import pytest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from exporter.errors import NoDataError, UnavailableError
from exporter.paths import Paths
from exporter.registry import Collector, CollectorConfig, CollectorSpec, FileCollector
from exporter.scrape import NodeCollector
from tests.exporter.conftest import samples_of, scrape


class Scripted(FileCollector):
    """Raises the scripted outcomes in turn, then succeeds."""

    script: ClassVar[list[BaseException | None]] = []

    def __init__(self, config: CollectorConfig) -> None:
        self.outcomes = list(type(self).script)

    def update(self) -> Sequence[Metric]:
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome
        return [GaugeMetricFamily("mco_test_value", "test", value=1)]


class Healthy(FileCollector):
    def __init__(self, config: CollectorConfig) -> None:
        pass

    def update(self) -> Sequence[Metric]:
        return [GaugeMetricFamily("mco_healthy", "test", value=7)]


def never(config: CollectorConfig) -> Collector:
    raise UnavailableError("no such hardware")


def build(outcomes: Sequence[BaseException | None]) -> NodeCollector:
    Scripted.script = list(outcomes)
    return NodeCollector(
        [
            CollectorSpec("flaky", Scripted, True, "test"),
            CollectorSpec("healthy", Healthy, True, "test"),
            CollectorSpec("absent", never, True, "test"),
        ],
        CollectorConfig(Paths()),
        node_name="n",
        kernel="k",
    )


def success(text: str) -> dict[str, float]:
    return {
        dict(labels)["collector"]: v
        for (name, labels), v in samples_of(text).items()
        if name == "mco_exporter_collector_success"
    }


@pytest.mark.parametrize(
    "error", [OSError(5, "EIO"), ValueError("garbage"), KeyError("x"), ZeroDivisionError()]
)
def test_failure_is_contained(error: BaseException) -> None:
    text = scrape(build([error]))
    assert success(text) == {"flaky": 0, "healthy": 1, "absent": 0}
    assert samples_of(text)[("mco_healthy", frozenset())] == 7
    assert ("mco_test_value", frozenset()) not in samples_of(text)


def test_no_data_keeps_its_metrics_and_recovery_is_logged(caplog) -> None:
    marker = GaugeMetricFamily("mco_marker", "test", value=0)
    collector = build([NoDataError("absent here", [marker]), None])
    with caplog.at_level(logging.DEBUG, logger="mco.exporter"):
        first = scrape(collector)
        second = scrape(collector)
    assert samples_of(first)[("mco_marker", frozenset())] == 0
    assert success(first)["flaky"] == 0 and success(second)["flaky"] == 1
    messages = [r.getMessage() for r in caplog.records]
    assert "source absent on this host" in messages
    assert "collector recovered" in messages


def test_same_problem_is_logged_once(caplog) -> None:
    collector = build([OSError(5, "EIO")] * 5 + [OSError(2, "gone")])
    with caplog.at_level(logging.WARNING, logger="mco.exporter"):
        for _ in range(6):
            scrape(collector)
    reasons = [
        getattr(r, "reason", None) for r in caplog.records if r.getMessage() == "collector failed"
    ]
    assert reasons == ["OSError: [Errno 5] EIO", "FileNotFoundError: [Errno 2] gone"]


def test_unavailable_collector_is_listed_with_its_reason() -> None:
    assert build([]).collectors == {"flaky": None, "healthy": None, "absent": "no such hardware"}
