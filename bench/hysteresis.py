"""Flips per hour of the hard constraints on this machine, raw and held, and how fast real
memory stress is still filtered (docs/benchmarks.md, "hysteresis").

A real Prometheus scrapes a real mco-exporter every second and evaluates the generated default
rules. Two phases of equal length (5 minutes each; 2 with --quick): idle (whatever else runs
on the machine, stated in the output), then under `stress-ng --hdd 2` (I/O load). For each
phase and constraint it counts the changes, evaluation by evaluation, of:

- ``seed``: the seed's rule for memory (``psi_memory_full > 0``, no hold), for the memory row;
- ``seed held``: the same held as the rules hold (testkit/rule_reference.py ``held``, on the
  seed's values second by second): what the hold alone does at the seed's limit;
- ``exceeded``: ``node:mco_hard_constraint_exceeded:bool``, the raw comparison (new limits);
- ``violated``: ``node:mco_hard_constraint_violated:bool``, the held one the extender filters on.

Then `stress-ng` memory load in a 64 MiB cgroup (scripts/stress.py, as `make run STRESS=memory`)
must set ``violated{constraint="psi_memory_full"}`` within window + holdFor + 5 s of its
onset (median of the runs). Target: that bound met, and violated flipping less than exceeded.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

from mco.flags import duration
from rulegen import series as S
from rulegen.model import DetectionRuleConfig
from rulegen.render import render_rules
from scripts.procs import Managed, Prometheus, ScrapeTarget, free_port, running, wait_until
from scripts.stress import StressUnavailableError, io_stress, memory_cgroup, memory_stress
from testkit.rule_reference import held

ROOT = Path(__file__).resolve().parents[1]
NODE = "local"
MEMORY = "psi_memory_full"
MEMORY_VIOLATED = f'{S.HARD_CONSTRAINT_VIOLATED}{{node="{NODE}",constraint="{MEMORY}"}}'


def _values(prom: Prometheus, expr: str, start: float, end: float) -> list[float]:
    """``expr`` at every second of [start, end] (one series), as Prometheus answers it."""
    body = requests.get(
        f"{prom.url}/api/v1/query_range",
        params={"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1"},
        timeout=60,
    ).json()
    result = body["data"]["result"]
    return [float(v) for _, v in result[0]["values"]] if result else []


def _changes(values: list[float]) -> int:
    return sum(1 for a, b in itertools.pairwise(values) if a != b)


def _row(values: list[float]) -> tuple[int, float]:
    return _changes(values), (sum(values) / len(values) if values else 0.0)


def flips(
    prom: Prometheus, start: float, end: float, config: DetectionRuleConfig
) -> dict[str, dict[str, tuple[int, float]]]:
    """constraint -> column -> (changes, share of seconds at 1) over [start, end]."""
    memory_smoothed = S.CONTEXT_SERIES["psiMemoryFull"]
    out: dict[str, dict[str, tuple[int, float]]] = {}
    for constraint in S.HARD_CONSTRAINTS.values():
        where = f'{{node="{NODE}",constraint="{constraint}"}}'
        columns = {
            "exceeded": f"{S.HARD_CONSTRAINT_EXCEEDED}{where}",
            "violated": f"{S.HARD_CONSTRAINT_VIOLATED}{where}",
        }
        if constraint == MEMORY:
            columns = {"seed": f'{memory_smoothed}{{node="{NODE}"}} > bool 0', **columns}
        row = {}
        for column, expr in columns.items():
            if column == "seed":
                # A clear period before the phase, so the replay starts from a settled state.
                hold, clear = config.hysteresis.ranges(config.evaluation_interval)
                before = _values(prom, expr, start - clear, end)
                replay = held(list(enumerate(before)), hold, clear)
                row["seed"] = _row(before[clear:])
                row["seed held"] = _row([v for _, v in replay][clear:])
            else:
                row[column] = _row(_values(prom, expr, start, end))
        out[constraint] = row
    return out


def print_flips(phase: str, seconds: float, table: dict[str, dict[str, tuple[int, float]]]) -> None:
    print(f"{phase} ({seconds:.0f} s):")
    for constraint, row in table.items():
        cells = ", ".join(
            f"{column} {n} changes = {n * 3600 / seconds:.0f}/h ({share:.0%} of the time at 1)"
            for column, (n, share) in row.items()
        )
        print(f"  {constraint}: {cells}", flush=True)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def filtered_after(prom: Prometheus, workdir: Path, timeout: float) -> float | None:
    """Seconds from the onset of memory stress to violated{psi_memory_full} = 1."""
    with memory_cgroup(64 * 2**20) as cgroup:
        load = memory_stress(workdir, cgroup)
        start = time.monotonic()
        with running(load):
            while time.monotonic() - start < timeout:
                if prom.value(MEMORY_VIOLATED) == 1:
                    return time.monotonic() - start
                time.sleep(0.2)
    return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.hysteresis")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--phase-seconds", type=duration, default=None, help="each phase (300, 5m)")
    parser.add_argument("--runs", type=int, default=None, help="memory stress runs")
    args = parser.parse_args(argv)
    phase = args.phase_seconds or (120 if args.quick else 300)
    runs = args.runs or (2 if args.quick else 3)
    config = DetectionRuleConfig.default()
    window, hold = config.window, config.hysteresis.hold_for
    clear = config.hysteresis.clear_after
    bound = window + hold + 5
    with tempfile.TemporaryDirectory(prefix="mco-bench-hysteresis-") as tmp:
        work = Path(tmp)
        rules = work / "rules.yaml"
        rules.write_text(render_rules(config))
        port = free_port()
        exporter = Managed(
            [
                sys.executable,
                "-m",
                "exporter",
                f"--web.listen-address=127.0.0.1:{port}",
                "--no-collector.biolatency",
                f"--node-name={NODE}",
            ],
            name="mco-exporter",
            log_path=work / "exporter.log",
            cwd=ROOT,
        )
        prom = Prometheus(
            work / "prom",
            targets=[ScrapeTarget("mco-exporter", f"127.0.0.1:{port}", {"node": NODE})],
            rule_files=[rules],
        )
        with running(exporter):
            exporter.wait_http(f"http://127.0.0.1:{port}/metrics", timeout=90)
            with running(prom):
                prom.wait_for_series(S.HARD_CONSTRAINT_VIOLATED, timeout=60)
                time.sleep(window + clear)  # the first window and clear period behind us
                print(f"load average before idle: {load_average()}", flush=True)
                start = time.time()
                time.sleep(phase)
                idle = flips(prom, start, time.time(), config)
                print_flips(f"idle, load average {load_average()}", phase, idle)
                try:
                    io = io_stress(work / "io")
                except StressUnavailableError as exc:
                    print(f"no I/O load here: {exc}", file=sys.stderr)
                    return 1
                with running(io):
                    time.sleep(window)
                    start = time.time()
                    time.sleep(phase)
                    loaded = flips(prom, start, time.time(), config)
                print_flips(f"stress-ng --hdd 2, load average {load_average()}", phase, loaded)
                times: list[float] = []
                skipped = 0
                for i in range(runs):
                    try:
                        wait_until(
                            lambda: prom.value(MEMORY_VIOLATED) == 0,
                            timeout=window + clear + 120,
                            what="psi_memory_full clear before the memory run",
                        )
                    except TimeoutError:
                        # Memory pressure from elsewhere on the machine: no onset to time.
                        print(f"memory run {i + 1}: skipped, the node stays filtered without it")
                        skipped += 1
                        continue
                    with contextlib.suppress(StressUnavailableError):
                        took = filtered_after(prom, work / f"mem{i}", timeout=bound + 30)
                        print(
                            f"memory run {i + 1}: "
                            + ("not filtered" if took is None else f"filtered after {took:.1f} s"),
                            flush=True,
                        )
                        if took is not None:
                            times.append(took)
    ok = len(times) == runs - skipped and bool(times) and statistics.median(times) <= bound
    for table in (idle, loaded):
        for row in table.values():
            ok = ok and row["violated"][0] <= row["exceeded"][0]
    median = f"{statistics.median(times):.1f} s" if times else "none"
    print(
        f"\nmemory stress (stress-ng --vm in a 64 MiB cgroup) filtered: median {median} of "
        f"{len(times)}/{runs} runs, {skipped} skipped (target <= window {window} + holdFor "
        f"{hold} + 5 = {bound} s); holdFor {hold} s, clearAfter {clear} s"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
