"""resctrl: groups removed while a scrape walks the tree are skipped, the others still reported."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.exporter.conftest import FIXTURES, node_collector, samples_of, scrape, tree_paths


def groups_and_success(tree: Path) -> tuple[set[tuple[str, str]], float]:
    samples = samples_of(scrape(node_collector(tree_paths(tree), names=("resctrl",))))
    groups = {
        (dict(labels)["group"], dict(labels)["type"])
        for (name, labels), _ in samples.items()
        if name in ("mco_llc_occupancy_bytes", "mco_memory_bandwidth_bytes_total")
    }
    success = samples[("mco_exporter_collector_success", frozenset({("collector", "resctrl")}))]
    return groups, success


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(FIXTURES / "linux-6.1-metal", root)
    return root


def test_recorded_tree_has_every_group(tree: Path) -> None:
    groups, success = groups_and_success(tree)
    assert success == 1
    assert groups == {
        ("/", "ctrl_mon"),
        ("/mon_groups/web", "mon"),
        ("/batch", "ctrl_mon"),
        ("/batch/mon_groups/job1", "mon"),
    }


def test_groups_removed_mid_scrape_are_skipped(tree: Path, monkeypatch) -> None:
    """The kernel removes a group between the collector listing it and reading its data."""
    resctrl = tree / "sys/fs/resctrl"
    real_listdir = os.listdir
    removed: list[str] = []

    def listdir_then_remove(path: str) -> list[str]:
        names = real_listdir(path)
        # Right after the root's MON groups are listed (the CTRL_MON groups were listed
        # before), `rmdir` a listed MON group and a listed CTRL_MON group.
        if Path(path) == resctrl / "mon_groups" and not removed:
            for gone in (resctrl / "mon_groups/web", resctrl / "batch"):
                shutil.rmtree(gone)
                removed.append(str(gone))
        return names

    monkeypatch.setattr(os, "listdir", listdir_then_remove)
    groups, success = groups_and_success(tree)
    monkeypatch.undo()
    assert len(removed) == 2, "the scrape never listed the root's MON groups"
    assert success == 1
    assert groups == {("/", "ctrl_mon")}
