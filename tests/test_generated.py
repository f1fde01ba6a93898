"""Checked-in generated files (rules, alerts, CRDs, dashboards) match a fresh generation, are
all committed, and nothing else sits beside them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from scripts.generate import ROOT, all_generated, drifted, generated_dirs, main, orphaned


def test_no_generated_file_drifted_or_orphaned() -> None:
    files = all_generated()
    assert files, "no generators produced any file"
    stale = drifted(files)
    assert not stale, f"run `make generate` and commit: {stale}"
    orphans = orphaned(files)
    assert not orphans, f"no longer generated, run `make generate` and commit: {orphans}"


def _git(*args: str) -> list[str]:
    result = subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        pytest.skip(f"not a git checkout: {result.stderr.strip()}")
    return result.stdout.splitlines()


def test_every_generated_file_is_tracked_and_nothing_else_is_in_their_directories() -> None:
    files = all_generated()
    dirs = generated_dirs(files)

    def beside(paths: list[str]) -> set[str]:
        """Files directly in a generated directory, dotfiles aside."""
        return {
            p for p in paths if str(Path(p).parent) in dirs and not Path(p).name.startswith(".")
        }

    tracked = beside(_git("ls-files", "--", *dirs))
    untracked = beside(_git("ls-files", "--others", "--exclude-standard", "--", *dirs))
    assert set(files) - tracked == set(), "generated but not committed (git add them)"
    assert tracked - set(files) == set(), "committed in a generated directory, not generated"
    assert untracked == set(), "untracked files in a generated directory"


def test_the_check_fails_on_an_orphan_and_a_run_removes_it(tmp_path: Path, capsys) -> None:
    assert main(["--check"], root=tmp_path) == 1  # nothing generated there yet: all drifted
    assert main([], root=tmp_path) == 0
    assert main(["--check"], root=tmp_path) == 0
    capsys.readouterr()

    orphan = tmp_path / "dashboards" / "mco-renamed-away.json"
    orphan.write_text("{}")
    (tmp_path / "dashboards" / ".gitkeep").write_text("")  # dotfiles are not generated output
    (tmp_path / "charts" / "mco" / "crds" / "old").mkdir()  # nor are directories
    assert main(["--check"], root=tmp_path) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "orphan: dashboards/mco-renamed-away.json is no longer generated "
        "(`make generate` removes it)"
    ]

    assert main([], root=tmp_path) == 0
    assert "removed dashboards/mco-renamed-away.json" in capsys.readouterr().out
    assert not orphan.exists()
    assert (tmp_path / "dashboards" / ".gitkeep").exists()
    assert main(["--check"], root=tmp_path) == 0


def test_the_check_fails_on_a_changed_file(tmp_path: Path, capsys) -> None:
    main([], root=tmp_path)
    rules = tmp_path / "charts" / "mco" / "files" / "mco-rules.yaml"
    rules.write_text(rules.read_text() + "# edited by hand\n")
    capsys.readouterr()
    assert main(["--check"], root=tmp_path) == 1
    assert "drift: charts/mco/files/mco-rules.yaml" in capsys.readouterr().err
