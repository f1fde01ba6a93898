"""The asyncio tasks alive in a server's event loop, as a gauge: what ``go_goroutines`` is to a
Go server. A task leak (a watch restarted without cancelling the old one, a handler that never
returns) shows here as steady growth long before it shows in memory; the soak benchmark
(``bench/soak.py``) fails on it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class AsyncioTasks(Collector):
    """Counts the tasks of the loop that serves the scrape (the handler runs in it). Outside a
    running loop the family is described without a sample rather than guessed."""

    def __init__(self, name: str) -> None:
        self.name = name

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            self.name, "Asyncio tasks alive in the event loop that serves this scrape."
        )
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            family.add_metric([], len(asyncio.all_tasks(loop)))
        yield family
