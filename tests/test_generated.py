"""Checked-in generated files (rules, alerts, CRDs, dashboards) match a fresh generation."""

from __future__ import annotations

from scripts.generate import ROOT, all_generated, drifted


def test_no_generated_file_drifted() -> None:
    files = all_generated()
    assert files, "no generators produced any file"
    stale = drifted(files)
    assert not stale, f"run `make generate` and commit: {stale}"


def test_generated_files_are_tracked_paths_inside_the_repo() -> None:
    for rel in all_generated():
        path = (ROOT / rel).resolve()
        assert path.is_relative_to(ROOT), rel
