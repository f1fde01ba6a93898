"""`make bench BENCH_ARGS=shards` runs to the end and prints every figure.

A smoke run of bench/shards.py through its own flags (20 nodes on 1 and 2 shards, no settling,
2 s of sampling and 2 reporter cycles per layout: seconds, where ``--quick`` takes minutes and
stays in ``make bench``), with each engine, as a real process: it exits 0 (every node reported in
every layout) and its table has one row per layout with a number in every column, and the model
lines follow. The values are this machine's and its load's, so only their presence and form are
checked.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
NUMBER = r"\d+(?:\.\d+)?"
COLUMNS = (
    "shards",
    "nodes/shard",
    "eval ms (slowest)",
    "x base",
    "per shard ms",
    "missed",
    "engine cores",
    "cycle ms",
    "cycle CPU ms",
    "answer KiB",
    "live",
    "data age s",
    "--once s",
    "load 1m",
)
# One table row: shards, nodes/shard, slowest eval, x base, per-shard evals (a/b), missed,
# cores per shard (a/b), cycle ms, x base, cycle CPU ms, answer KiB, live/reported,
# data age median/max, --once s, load before/after.
ROW = re.compile(
    rf"\s*(?P<shards>\d+)\s+(?P<per>\d+)\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}(?:/{NUMBER})*\s+"
    rf"{NUMBER}\s+{NUMBER}(?:/{NUMBER})*\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+"
    rf"(?P<live>\d+)/(?P<reported>\d+)\s+{NUMBER}/{NUMBER}\s+{NUMBER}\s+{NUMBER}/{NUMBER}\s*"
)


NODES = 20  # 8 targets per vmagent member: all 16 on one member has odds 2 in 2^16
SMOKE = (f"--nodes={NODES}", "--shards=1,2", "--seconds=2s", "--settle=0s", "--cycles=2")
ENGINES = {
    "prometheus": ("prometheus",),
    "victoriametrics": ("victoria-metrics", "vmagent", "vmalert"),
}


@pytest.mark.parametrize("engine", ENGINES)
def test_quick_shards_benchmark_prints_every_figure(engine: str) -> None:
    missing = [b for b in ENGINES[engine] if shutil.which(b) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    done = subprocess.run(
        [sys.executable, "-m", "bench", "shards", *SMOKE, f"--engine={engine}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    lines = out.splitlines()
    assert "=== bench shards ===" in lines
    intro = rf"{engine}: {NODES} nodes at a 1s scrape and evaluation interval, on \d+ CPUs"
    assert any(re.match(intro, s) for s in lines), out
    (header,) = [s for s in lines if s.lstrip().startswith("shards ")]
    for column in COLUMNS:
        assert column in header, column
    rows = [m for s in lines if (m := ROW.fullmatch(s))]
    assert [int(m["shards"]) for m in rows] == [1, 2], out
    # Prometheus shards get even shares; vmagent members the share its hash gives them.
    assert int(rows[0]["per"]) == NODES and NODES / 2 <= int(rows[1]["per"]) < NODES, out
    if engine == "prometheus":
        assert int(rows[1]["per"]) == NODES / 2
    assert all(int(m["reported"]) == NODES for m in rows), out
    assert any(re.match(rf"model: evaluation per shard ~ {NUMBER} us x N/M", s) for s in lines)
    assert any(re.match(rf"\s+2 shards: slowest shard {NUMBER} ms against", s) for s in lines)
    assert lines[-1] == "every node reported in every layout: yes"
