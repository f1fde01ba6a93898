"""`make reliability` must not rot: its runner reports each attack as one PASS/FAIL line and
exits non-zero on a failure, and a cheap attack runs end to end against the real processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import reliability
from bench.reliability import Outcome, Run

ROOT = Path(__file__).resolve().parent.parent


def test_a_failing_or_crashing_attack_is_a_fail_line_and_exit_1(monkeypatch, capsys):
    def holds(run: Run) -> Outcome:
        assert run.quick and run.workdir.is_dir()
        return Outcome(True, f"scale {run.scale(100, 3)}")

    def breaks(run: Run) -> Outcome:
        return Outcome(False, "RSS +900 MiB")

    def crashes(run: Run) -> Outcome:
        raise RuntimeError("server exited")

    monkeypatch.setattr(
        reliability, "ATTACKS", {"holds": holds, "breaks": breaks, "crashes": crashes}
    )
    assert reliability.main(["--quick", "holds"]) == 0
    assert capsys.readouterr().out.startswith("PASS holds (0 s): scale 3\n")
    assert reliability.main(["--quick"]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert [line.split(" ", 2)[:2] for line in lines] == [
        ["PASS", "holds"],
        ["FAIL", "breaks"],
        ["FAIL", "crashes"],
    ]
    assert lines[1].endswith(": RSS +900 MiB")
    assert lines[2].endswith(": RuntimeError: server exited")
    assert "breaks, crashes" in captured.err


def test_an_unknown_attack_is_a_usage_error():
    with pytest.raises(SystemExit) as caught:
        reliability.main(["no-such-attack"])
    assert caught.value.code == 2


@pytest.mark.slow
def test_quick_mode_runs_the_cheap_attacks_against_the_real_processes():
    names = [
        "rulegen-hostile-configs",
        "exporter-hostile-tree",
        # Issue 27's attacks on recommend, rollback and the shard merge (cheap at any scale).
        "rulegen-recommend-hostile",
        "rulegen-rollback-hostile",
        "reporter-shard-clock-skew",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "bench.reliability", "--quick", *names],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(" ", 2)[:2] for line in lines] == [["PASS", n] for n in names]
    assert "9x9 alias bomb: exit 1" in lines[0]
    assert "worst" in lines[1] and "'vmstat'" in lines[1]
    assert "changes() NaN: exit 1, 1 line(s)" in lines[2]
    assert "0 PATCH sent" in lines[3]
    assert "0 decided by the fast shard" in lines[4]
