"""One scrape: run every enabled collector, isolate its failures, add the self-metrics."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import GaugeMetricFamily

from exporter.errors import NoDataError, UnavailableError
from exporter.paths import host_text
from exporter.registry import CollectorConfig, CollectorSpec
from mco import selfmetrics

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from exporter.registry import Collector

log = logging.getLogger("mco.exporter")


@dataclass(slots=True)
class _Slot:
    name: str
    collector: Collector | None
    unavailable: str | None = None
    last_problem: str | None = None


class NodeCollector:
    """A prometheus_client custom collector over MCO's collectors.

    Nothing is cached between scrapes: each ``collect()`` reads every source again. A collector
    that raises reports ``mco_exporter_collector_success 0`` for that scrape and the others are
    untouched; its log line is written when the problem first appears or changes, not on every
    scrape.
    """

    def __init__(
        self,
        specs: list[CollectorSpec],
        config: CollectorConfig,
        *,
        node_name: str,
        kernel: str,
    ) -> None:
        self._node_name = host_text(node_name)
        self._kernel = host_text(kernel)
        self._lock = threading.Lock()
        self._slots: list[_Slot] = []
        for spec in specs:
            options = {
                o.name: config.options.get(f"{spec.name}.{o.name}", o.default) for o in spec.options
            }
            try:
                collector = spec.factory(CollectorConfig(config.paths, options))
            except UnavailableError as exc:
                log.warning(
                    "collector disabled for this run",
                    extra={"collector": spec.name, "reason": str(exc)},
                )
                self._slots.append(_Slot(spec.name, None, unavailable=str(exc)))
                continue
            log.info("collector enabled", extra={"collector": spec.name})
            self._slots.append(_Slot(spec.name, collector))

    @property
    def collectors(self) -> dict[str, str | None]:
        """Collector name -> why it is off (None when it runs)."""
        return {s.name: s.unavailable for s in self._slots}

    def describe(self) -> list[Metric]:
        return []  # register without collecting

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            yield from self._collect()

    def _collect(self) -> Iterator[Metric]:
        success = GaugeMetricFamily(
            selfmetrics.EXPORTER_COLLECTOR_SUCCESS,
            "1 when the collector read its source on this scrape, 0 when it is off, "
            "its source is absent here, or the read failed.",
            labels=["collector"],
        )
        duration = GaugeMetricFamily(
            selfmetrics.EXPORTER_COLLECTOR_DURATION,
            "Seconds the collector took on this scrape.",
            labels=["collector"],
        )
        for slot in self._slots:
            start = time.perf_counter()
            ok = 0.0
            if slot.collector is not None:
                try:
                    metrics = slot.collector.update()
                except NoDataError as exc:
                    self._note(slot, logging.DEBUG, "source absent on this host", exc.reason)
                    metrics = exc.metrics
                except Exception as exc:  # one failing source never takes the others down
                    self._note(
                        slot, logging.WARNING, "collector failed", f"{type(exc).__name__}: {exc}"
                    )
                    metrics = ()
                else:
                    ok = 1.0
                    if slot.last_problem is not None:
                        log.info("collector recovered", extra={"collector": slot.name})
                        slot.last_problem = None
                yield from _valid_labels(metrics)
            success.add_metric([slot.name], ok)
            duration.add_metric([slot.name], time.perf_counter() - start)
        yield success
        yield duration
        info = GaugeMetricFamily(
            selfmetrics.EXPORTER_NODE_INFO,
            "Always 1; names the node this exporter runs on and its kernel release.",
            labels=["nodename", "kernel"],
        )
        info.add_metric([self._node_name, self._kernel], 1.0)
        yield info

    def _note(self, slot: _Slot, level: int, message: str, reason: str) -> None:
        if reason != slot.last_problem:
            log.log(level, message, extra={"collector": slot.name, "reason": reason})
            slot.last_problem = reason

    def close(self) -> None:
        for slot in self._slots:
            if slot.collector is not None:
                slot.collector.close()


def _valid_labels(metrics: Sequence[Metric]) -> Sequence[Metric]:
    """``metrics`` with every label value valid UTF-8.

    Label values can come from directory names (resctrl groups), which Python decodes with
    lone surrogates for bytes that are not UTF-8; one such value would make the whole
    exposition fail to encode, taking every collector's samples down with it.
    """
    for metric in metrics:
        for i, sample in enumerate(metric.samples):
            if not all(v.isascii() for v in sample.labels.values()):
                labels = {k: host_text(v) for k, v in sample.labels.items()}
                metric.samples[i] = sample._replace(labels=labels)
    return metrics
