"""The soak benchmark: its verdict on recorded runs, its process figures, and short real runs
(one that passes, one where a process is killed and the run must fail)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.soak import MIB, Run, judge, proc_stats

ROOT = Path(__file__).resolve().parent.parent


def _run(
    seconds: int = 600,
    rss: float = 100 * MIB,
    rss_growth: float = 0.0,
    restart_at: float | None = None,
    events: list[dict[str, Any]] | None = None,
) -> Run:
    """One sample every 10 s of two processes: a steady one and ``prometheus``, whose RSS grows
    by ``rss_growth`` over the run and which is restarted at ``restart_at`` (CPU from 0)."""
    samples = []
    for t in range(0, seconds + 1, 10):
        pid = 2 if restart_at is not None and t >= restart_at else 1
        since = t - restart_at if pid == 2 and restart_at is not None else t
        samples.append(
            {
                "elapsed": float(t),
                "procs": {
                    "mco-extender": {"pid": 7, "anon": 80 * MIB, "cpu": 0.01 * t, "fds": 9,
                                     "threads": 2, "tasks": 6},
                    "prometheus": {"pid": pid, "anon": rss + rss_growth * t / seconds,
                                   "cpu": 0.05 * since, "fds": 14, "threads": 8},
                },
            }
        )  # fmt: skip
    return Run(samples, events or [])


def test_a_steady_run_passes_and_every_figure_is_judged() -> None:
    verdict = judge(_run(), warmup=60)
    assert verdict.ok, verdict.table()
    judged = {(g.process, g.metric) for g in verdict.growth}
    assert ("mco-extender", "tasks") in judged and ("prometheus", "cpu_rate") in judged
    cpu = next(g for g in verdict.growth if (g.process, g.metric) == ("prometheus", "cpu_rate"))
    assert cpu.start == pytest.approx(0.05) and cpu.end == pytest.approx(0.05)


def test_memory_growth_beyond_the_bound_fails_and_within_it_passes() -> None:
    # Prometheus: x1.5 + 64 MiB from the first window's median.
    assert judge(_run(rss_growth=40 * MIB), warmup=60).ok
    verdict = judge(_run(rss_growth=200 * MIB), warmup=60)
    assert not verdict.ok
    bad = [(g.process, g.metric) for g in verdict.growth if not g.ok]
    assert bad == [("prometheus", "anon")]
    assert "-> FAIL" in verdict.table()


def test_a_restarted_process_cpu_is_measured_per_process_not_across_the_reset() -> None:
    verdict = judge(_run(restart_at=400), warmup=60)
    cpu = next(g for g in verdict.growth if (g.process, g.metric) == ("prometheus", "cpu_rate"))
    assert cpu.end == pytest.approx(0.05)
    assert verdict.ok, verdict.table()


@pytest.mark.parametrize("kind", ["restart", "5xx", "fresh-while-down", "not-recovered"])
def test_each_failing_event_fails_the_run(kind: str) -> None:
    verdict = judge(_run(events=[{"t": 0, "elapsed": 300, "kind": kind}]), warmup=60)
    assert not verdict.ok and verdict.failures[kind] == 1


def test_too_few_samples_after_warm_up_is_no_pass() -> None:
    assert not judge(_run(seconds=600), warmup=590).ok


def test_process_figures_follow_a_real_process(tmp_path: Path) -> None:
    before = proc_stats(os.getpid())
    files = [(tmp_path / f"f{i}").open("w") for i in range(20)]
    ballast = bytearray(64 * MIB)
    ballast[::4096] = b"x" * len(ballast[::4096])
    try:
        after = proc_stats(os.getpid())
    finally:
        for f in files:
            f.close()
    assert after["fds"] - before["fds"] == 20
    assert after["rss"] - before["rss"] >= 60 * MIB
    assert after["anon"] - before["anon"] >= 60 * MIB and after["anon"] <= after["rss"]
    assert after["threads"] >= 1 and after["cpu"] >= before["cpu"] > 0


def _soak(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.soak", "--quick", "--nodes=10", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.host_load  # its stress-ng
def test_a_short_soak_through_the_api_with_stress_and_an_outage_passes(tmp_path: Path) -> None:
    # A smoke run of 30 s (`make soak` runs hours): staleAfter 5 s, so a 13 s outage is checked
    # for fresh nodes for ~3 s (staleAfter + 5 s of slack first); two config edits, the second
    # after the recovery, so that the judged run ends with ~5 s of steady samples. The report
    # goes through the API stand-in: the extender can only know the nodes from its watch.
    proc = _soak("--api", f"--out={tmp_path}", "--duration=30s", "--warmup=5s", "--sample=1s",
                 "--stale-after=5s", "--outage-every=2s", "--outage-for=13s",
                 "--stress-every=60s", "--stress-for=4s", "--config-every=10s")  # fmt: skip
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    events = _events(tmp_path)
    kinds = [e["kind"] for e in events]
    assert "stress-start" in kinds and "recovered" in kinds
    # The controller applied each edit of the DetectionRuleConfig, in order.
    edits = [e["generation"] for e in events if e["kind"] == "config-edit"]
    assert edits and [e["generation"] for e in events if e["kind"] == "config-applied"] == edits
    ended = next(e for e in events if e["kind"] == "outage-end")
    assert ended["freshness_checks"] >= 2
    calls = next(e for e in events if e["kind"] == "scheduler-calls")
    assert set(calls["statuses"]) == {"200"} and calls["statuses"]["200"] > 100
    samples = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    for name in ("mco-extender", "mco-reporter", "mco-rulegen"):
        assert all("tasks" in s["procs"][name] for s in samples[1:]), name
    assert json.loads((tmp_path / "verdict.json").read_text())["ok"] is True
    assert "-> PASS" in out
    assert not (tmp_path / "stack" / "report.json").exists()


def _child(parent: int, module: str) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == parent and cmdline[1:3] == [b"-m", module.encode()]:
            return int(entry.name)
    return None


@pytest.mark.slow
def test_a_killed_process_fails_the_soak(tmp_path: Path) -> None:
    proc = _soak(f"--out={tmp_path}", "--duration=90s", "--warmup=10s", "--sample=2s")
    try:
        deadline = time.monotonic() + 120
        while (reporter := _child(proc.pid, "reporter")) is None or not (
            tmp_path / "samples.jsonl"
        ).exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the soak never started"
            time.sleep(1)
        os.kill(reporter, 9)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, out
    restart = next(e for e in _events(tmp_path) if e["kind"] == "restart")
    assert restart["process"] == "mco-reporter"
    assert "-> FAIL" in out
