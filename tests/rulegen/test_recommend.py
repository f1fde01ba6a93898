"""``mco-rulegen recommend`` and ``--replay`` on a real Prometheus holding a day of history
backfilled with ``promtool tsdb create-blocks-from openmetrics``, with known episodes.

Three nodes, scraped every 15 s for 26 hours: node-1 and node-2 have PSI, quiet I/O stall
between 1.5 % and 2.5 % of the time, and one I/O episode each at 45 % (node-1 for an hour,
node-2 for half an hour); node-2 also stalls on memory (PSI memory full 1 %) for 20 minutes,
which the default hard constraint (``psiMemoryFullMax`` 0) filters. node-3 has no PSI, memory
available around half its memory and one hour down at 5 %. No other signal has any history.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mco.promql import PromQLClient, SourceConfig
from rulegen import recommend
from rulegen.catalog import CATALOG
from rulegen.cli import main
from rulegen.model import DetectionRuleConfig, from_spec
from scripts.procs import Prometheus

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed"),
]

SCRAPE = 15
HOURS = 26
STEP = 60
WINDOW = 30
GIB = 2**30
IO_EPISODES = {"node-1": (3 * 3600, 4 * 3600), "node-2": (10 * 3600, 10 * 3600 + 1800)}
MEMORY_FULL = ("node-2", 15 * 3600, 15 * 3600 + 1200)
LOW_MEMORY = ("node-3", 20 * 3600, 21 * 3600)


def _history(end: int, seconds: int = HOURS * 3600) -> str:
    """OpenMetrics text: each series' samples in time order, counters as running sums."""
    rng = random.Random(7)
    start = end - seconds
    times = range(start, end, SCRAPE)
    lines: list[str] = []
    lines += ["# TYPE mco_node_info gauge"]
    for node in ("node-1", "node-2", "node-3"):
        lines += [f'mco_node_info{{node="{node}",nodename="{node}"}} 1 {t}' for t in times]
    lines += ["# TYPE mco_pressure_available gauge"]
    for node, value in (("node-1", 1), ("node-2", 1), ("node-3", 0)):
        lines += [f'mco_pressure_available{{node="{node}"}} {value} {t}' for t in times]
    lines += ["# TYPE mco_pressure_stalled_seconds counter"]
    for node in ("node-1", "node-2"):
        total = 0.0
        begin, stop = IO_EPISODES[node]
        for t in times:
            rate = 0.45 if begin <= t - start < stop else rng.uniform(0.015, 0.025)
            total += rate * SCRAPE
            labels = f'node="{node}",resource="io",kind="some"'
            lines.append(f"mco_pressure_stalled_seconds_total{{{labels}}} {total:.6f} {t}")
        total = 0.0
        for t in times:
            node_, begin, stop = MEMORY_FULL
            if node == node_ and begin <= t - start < stop:
                total += 0.01 * SCRAPE
            labels = f'node="{node}",resource="memory",kind="full"'
            lines.append(f"mco_pressure_stalled_seconds_total{{{labels}}} {total:.6f} {t}")
    lines += ["# TYPE mco_memory_total_bytes gauge"]
    lines += [f'mco_memory_total_bytes{{node="node-3"}} {64 * GIB} {t}' for t in times]
    lines += ["# TYPE mco_memory_available_bytes gauge"]
    _, begin, stop = LOW_MEMORY
    for t in times:
        ratio = 0.05 if begin <= t - start < stop else rng.uniform(0.48, 0.52)
        lines.append(f'mco_memory_available_bytes{{node="node-3"}} {ratio * 64 * GIB:.0f} {t}')
    return "\n".join(lines) + "\n# EOF\n"


def _backfilled(workdir: Path, seconds: int) -> Iterator[tuple[Prometheus, int]]:
    end = int(time.time()) // STEP * STEP
    source = workdir / "history.om"
    source.write_text(_history(end, seconds))
    data = workdir / "data"
    done = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    server = Prometheus(workdir, extra_args=["--storage.tsdb.retention.time=30d"])
    server.start()
    try:
        server.wait_for_series("count(count by (node) (mco_node_info)) == 3")
        yield server, end
    finally:
        server.stop()


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, int]]:
    yield from _backfilled(tmp_path_factory.mktemp("history"), HOURS * 3600)


@pytest.fixture(scope="module")
def four_minutes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, int]]:
    """The issue's case: an engine that has held the exporters for four minutes."""
    yield from _backfilled(tmp_path_factory.mktemp("four-minutes"), 240)


async def _proposals(url: str, end: int) -> list[recommend.Proposal]:
    async with PromQLClient(SourceConfig(url, timeout=60)) as client:
        return await recommend.recommend(
            client,
            DetectionRuleConfig.default(),
            start=end - 25 * 3600,
            end=end,
            step=STEP,
            window=WINDOW,
        )


async def test_the_proposal_separates_the_episodes_from_the_quiet_time(history) -> None:
    server, end = history
    by_key = {p.signal.key: p for p in await _proposals(server.url, end)}
    io = by_key["psiIOSome"]
    assert io.proposed is not None, io.reasons
    # Above every quiet value (at most 2.5 %), below the episodes (45 %).
    assert 0.025 < io.proposed.warn < 0.1, io
    assert io.proposed.critical == pytest.approx(0.45, rel=0.05), io
    assert io.reasons[0].startswith("warn: median 0.02") and "robust σ" in io.reasons[0]
    assert "the episodes" in io.reasons[1]
    # Lower is worse: memory available around 50 %, one hour at 5 %.
    memory = by_key["memoryAvailableRatio"]
    assert memory.proposed is not None, memory.reasons
    assert 0.15 < memory.proposed.warn < 0.48, memory
    assert memory.proposed.critical == pytest.approx(0.05, rel=0.1), memory
    # What has no history is said, and left as it is.
    llc = by_key["llcMissRatio"]
    assert llc.proposed is None and llc.samples == 0
    assert llc.reasons == ("no history: kept the current thresholds",)
    # The proposal is a valid DetectionRuleConfig.
    recommend.proposed_config(DetectionRuleConfig.default(), list(by_key.values()))


async def test_replay_counts_match_the_injected_episodes(history) -> None:
    server, end = history
    config = DetectionRuleConfig.default()
    async with PromQLClient(SourceConfig(server.url, timeout=60)) as client:
        replayed = await recommend.replay(
            client, config, start=end - 25 * 3600, end=end, step=STEP, window=WINDOW
        )
    # By hand: the memory-full episode is 20 minutes on node-2 (one filtered stretch, so two
    # flips); a 30 s window reaching into an episode by one 15 s scrape adds at most one step.
    assert replayed["node-2"].filtered_seconds == pytest.approx(1200, abs=STEP)
    assert replayed["node-2"].flips == 2
    assert replayed["node-1"].filtered_seconds == 0 and replayed["node-1"].flips == 0
    # io_congestion triggers (warn 0.1) for each I/O episode: 1 h on node-1, 30 min on node-2.
    assert replayed["node-1"].triggered_seconds["io_congestion"] == pytest.approx(3600, abs=STEP)
    assert replayed["node-2"].triggered_seconds["io_congestion"] == pytest.approx(1800, abs=STEP)
    # ... and reaches critical (0.4) as well: the episodes are at 45 %, the quiet time far below.
    assert replayed["node-1"].critical_seconds["io_congestion"] == pytest.approx(3600, abs=STEP)
    assert replayed["node-2"].critical_seconds["io_congestion"] == pytest.approx(1800, abs=STEP)
    assert replayed["node-3"].critical_seconds["io_congestion"] == 0
    # memory_pressure on node-3 (no PSI: the fallback, memory available under 15 %): 1 h.
    assert replayed["node-3"].triggered_seconds["memory_pressure"] == pytest.approx(3600, abs=STEP)
    assert replayed["node-1"].triggered_seconds["memory_pressure"] == 0


def test_cli_writes_a_valid_patch_with_reasons_and_the_replay(history, tmp_path: Path) -> None:
    server, _ = history
    out = tmp_path / "patch.yaml"
    # --min-history below the range: the backfill ends when the module started, and the
    # engine's 5 min look-back covers only that much of the time since.
    argv = [
        "recommend", f"--prometheus-url={server.url}", "--range=1d", "--step=1m",
        "--window=30s", "--replay", "--min-history=20h", "-o", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    text = out.read_text()
    assert "of history on 3 nodes." in text and "Left out" not in text
    # No rules ran on the backfilled engine, so the guard has no live data to judge from.
    assert "# Guard, as the controller would run it on applying this now: guard not" in text
    assert "io_congestion warn s" in text and "io_congestion critical s" in text
    patch: dict[str, Any] = yaml.safe_load(text)
    assert patch["kind"] == "DetectionRuleConfig"
    io = patch["spec"]["detections"]["ioCongestion"]["signals"]["psiIOSome"]
    assert 0.025 < io["warn"] < 0.1
    assert "# warn: median" in text and "# critical: median of the node-time" in text
    assert "# llcMissRatio: not proposed: no history" in text
    # The patch is a spec the model accepts.
    from_spec(patch["spec"])
    (row,) = [line for line in text.splitlines() if line.startswith("#   node-2 ")]
    filtered, flips = (cell.strip() for cell in row.removeprefix("#   node-2").split("  ")[1:3])
    before, after = (float(x) for x in filtered.split(" → "))
    # The memory-full hard limit is not a signal: the same 20 minutes either way.
    assert before == after == pytest.approx(1200, abs=STEP) and flips == "2 → 2"


def test_four_minutes_of_history_are_refused_unless_the_minimums_are_lowered(
    four_minutes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default 7-day range against an engine holding 4 minutes: no patch, one line, exit 1;
    the flags lower the minimums (and then the proposal says how little it stands on)."""
    server, _ = four_minutes
    out = tmp_path / "patch.yaml"
    assert main(["recommend", f"--prometheus-url={server.url}", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("mco-rulegen: too little history")
    # 4 minutes of samples, plus the engine's 5 min look-back after the last one at most.
    assert re.search(r"seen for [4-9]m of the last 168h \(--min-history 24h\)", err), err
    assert "no node for 6h (--min-node-history; the longest, node-" in err
    assert not out.exists()
    lowered = [
        "recommend", f"--prometheus-url={server.url}", "--min-history=2m",
        "--min-node-history=2m", "--window=30s", "-o", str(out),
    ]  # fmt: skip
    assert main(lowered) == 0, capsys.readouterr().err
    assert "of history on 3 nodes." in out.read_text()
    # A minimum longer than the range it is looked for in is a usage error (exit 2).
    with pytest.raises(SystemExit) as exc:
        main(["recommend", f"--prometheus-url={server.url}", "--range=1h"])
    assert exc.value.code == 2
    assert "--min-history is longer than --range" in capsys.readouterr().err


def test_nodes_below_their_minimum_are_left_out_and_the_total_is_required() -> None:
    seen = recommend.Coverage(total=2 * 86400, per_node={"a": 2 * 86400, "b": 3600})
    kept = recommend.check_history(
        seen, range_seconds=7 * 86400, min_history=86400, min_node_history=6 * 3600
    )
    assert kept == {"a"}
    with pytest.raises(
        recommend.HistoryTooShort, match=r"no node for 72h .*the longest, a, for 48h"
    ):
        recommend.check_history(
            seen, range_seconds=7 * 86400, min_history=86400, min_node_history=3 * 86400
        )
    with pytest.raises(recommend.HistoryTooShort, match=r"seen for 48h of the last 168h") as exc:
        recommend.check_history(
            seen, range_seconds=7 * 86400, min_history=3 * 86400, min_node_history=3600
        )
    assert "no node" not in str(exc.value)
    # A signal with less history than one node's minimum keeps its thresholds.
    spec = CATALOG.signal("psiIOSome")
    few = recommend.propose(
        spec, DetectionRuleConfig.default().threshold("psiIOSome"), [0.1, 0.9], 360
    )
    assert few.proposed is None and "only 2 samples" in few.reasons[0]


@pytest.mark.parametrize("bound", ["warn", "critical"])
def test_the_replay_evaluates_every_threshold_a_proposal_can_move(bound: str) -> None:
    """Each signal's warn and critical reach the replay of its detection: moving one changes
    that detection's replayed expression, with the new value in it, and no other's."""
    default = DetectionRuleConfig.default()
    for sig in CATALOG.signals:
        if sig.lower_is_worse:
            moved = {"warn": 0.987654, "critical": 0.123456}
        else:
            moved = {"warn": 0.123456, "critical": 0.987654}
        spec = default.to_spec()
        spec["detections"][sig.detection]["fallback" if sig.fallback else "signals"][sig.key] = (
            moved
        )
        config = from_spec(spec)
        for d in CATALOG.detections:
            before = recommend.triggered_expr(default, d.key, "30s", CATALOG, bound)
            after = recommend.triggered_expr(config, d.key, "30s", CATALOG, bound)
            if d.key == sig.detection:
                assert before != after, (sig.key, bound)
                assert f"bool {moved[bound]:g}" in after, (sig.key, bound)
            else:
                assert before == after, (sig.key, d.key)


def test_an_engine_without_history_says_so_and_exits_nonzero_only_when_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["recommend", "--prometheus-url=http://127.0.0.1:1", "--range=1h", "--min-history=1h"]
    assert main([*argv, "--min-node-history=1h"]) == 1
    assert "cannot reach http://127.0.0.1:1" in capsys.readouterr().err


def test_proposals_on_synthetic_distributions() -> None:
    """The arithmetic, without an engine: a quiet normal stream with 2 % episodes."""
    rng = random.Random(1)
    spec = next(s for s in CATALOG.signals if s.key == "psiIOSome")
    quiet = [rng.gauss(0.02, 0.003) for _ in range(9800)]
    episodes = [rng.uniform(0.3, 0.5) for _ in range(200)]
    p = recommend.propose(
        spec, DetectionRuleConfig.default().threshold("psiIOSome"), quiet + episodes
    )
    assert p.proposed is not None
    assert max(quiet) < p.proposed.warn < 0.3 and 0.35 < p.proposed.critical < 0.45
    # Too few beyond warn: critical keeps the current critical/warn ratio (0.4 / 0.1 = 4).
    calm = recommend.propose(spec, DetectionRuleConfig.default().threshold("psiIOSome"), quiet)
    assert calm.proposed is not None
    assert calm.proposed.critical == pytest.approx(4 * calm.proposed.warn, rel=0.01)
    # A signal that never moved keeps its thresholds.
    flat = recommend.propose(
        spec, DetectionRuleConfig.default().threshold("psiIOSome"), [0.0] * 100
    )
    assert flat.proposed is None and "never moved" in flat.reasons[0]
