"""The collector interface and the registry collectors add themselves to (node_exporter style).

A collector is a class with a ``update()`` that reads its source fresh and returns metric
families. It registers itself by name with a default on/off state, a help line and its own
options; the CLI turns those into ``--collector.NAME``, ``--no-collector.NAME`` and
``--collector.NAME.OPTION`` flags.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from exporter.paths import Paths


@dataclass(frozen=True, slots=True)
class Option:
    """A collector-specific flag: ``--collector.<collector>.<name>``."""

    name: str
    default: str
    help: str
    # Refuses a bad value at start (raises ValueError: exit 2 with its message), so a typo in a
    # DaemonSet's args fails the rollout instead of quietly turning a collector off on every node.
    check: Callable[[str], object] | None = None
    # An on/off option (default "false" or "true"): a bare ``--collector.<collector>.<name>``
    # means "true", ``=false`` turns it off again, as node_exporter's boolean flags.
    switch: bool = False


def parse_switch(text: str) -> bool:
    """The value of a ``switch`` option: ``true`` or ``false``."""
    if text not in ("true", "false"):
        raise ValueError("not true or false")
    return text == "true"


@dataclass(frozen=True, slots=True)
class CollectorConfig:
    paths: Paths
    options: dict[str, str] = field(default_factory=dict)

    def option(self, name: str) -> str:
        return self.options[name]


class Collector(Protocol):
    def update(self) -> Sequence[Metric]:
        """Read the source now. Raise ``NoDataError`` when it does not exist on this host."""

    def close(self) -> None:
        """Release kernel resources (perf fds, BPF programs)."""


class FileCollector:
    """Base for collectors that only read files and so hold nothing to release."""

    def close(self) -> None:
        return None


CollectorFactory = Callable[[CollectorConfig], Collector]


@dataclass(frozen=True, slots=True)
class CollectorSpec:
    name: str
    factory: CollectorFactory
    default_enabled: bool
    help: str
    options: tuple[Option, ...] = ()


_SPECS: dict[str, CollectorSpec] = {}


def register(
    name: str, *, default_enabled: bool, help: str, options: tuple[Option, ...] = ()
) -> Callable[[CollectorFactory], CollectorFactory]:
    """Class decorator: make a collector available under ``name``."""

    def add(factory: CollectorFactory) -> CollectorFactory:
        if name in _SPECS:
            raise ValueError(f"collector {name!r} registered twice")
        _SPECS[name] = CollectorSpec(name, factory, default_enabled, help, options)
        return factory

    return add


def specs() -> dict[str, CollectorSpec]:
    """Every registered collector, importing the built-in ones first."""
    import exporter.collectors  # noqa: F401  (registers on import)

    return dict(sorted(_SPECS.items()))
