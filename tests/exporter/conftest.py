from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.paths import Paths
from exporter.registry import CollectorConfig, specs
from exporter.scrape import NodeCollector

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# Collectors that read only files; perf_llc and biolatency talk to the running kernel.
FILE_COLLECTORS = (
    "cpu",
    "diskstats",
    "kata",
    "meminfo",
    "pressure",
    "resctrl",
    "schedstat",
    "softirqs",
    "vmstat",
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples_of(text: str, *, skip: tuple[str, ...] = ()) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in skip:
                continue
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate sample {key}"
            out[key] = s.value
    return out


def tree_paths(tree: Path) -> Paths:
    return Paths(procfs=str(tree / "proc"), sysfs=str(tree / "sys"), rootfs=str(tree))


def node_collector(paths: Paths, names=FILE_COLLECTORS, options=None) -> NodeCollector:
    all_specs = specs()
    return NodeCollector(
        [all_specs[n] for n in names],
        CollectorConfig(paths, options or {}),
        node_name="fixture-node",
        kernel=_kernel(paths),
    )


def _kernel(paths: Paths) -> str:
    try:
        return Path(paths.proc("sys", "kernel", "osrelease")).read_text().strip()
    except OSError:
        return "unknown"


def scrape(collector: NodeCollector) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
