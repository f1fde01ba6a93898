"""Measure the contention model's points on this machine (`python -m bench.placement.measure`).

Two sweeps; each step holds its load ``--hold`` seconds, then reads ``--windows`` windows of
10 s one after the other and keeps each figure's median (one busy window on a shared machine
must not set a point):
- I/O: ``stress-ng --hdd K`` for K writers; PSI io some (``/proc/pressure/io``) and the mean
  block request latency of the busiest disk (``/proc/diskstats``: ms spent / requests done).
- Memory: a writer whose file is R times a 64 MiB memory cgroup's limit, rewritten in a loop
  (page cache that does not fit: reclaim, refaults); PSI memory some and full.
The machine is shared: the load average of each step is recorded with it, and the range over
the sweep in ``conditions``, so a reader can tell a quiet measurement from a busy one. Writes
JSON that ``model.py`` reads.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.procs import Managed
from scripts.stress import io_stress, memory_cgroup, require_stress_ng

LIMIT = 64 * 2**20
WINDOW = 10.0
IO_WORKERS = [0, 1, 2, 4, 6, 8]
# Denser around 1x: the knee where the working set stops fitting.
MEMORY_RATIOS = [0.5, 0.75, 0.9, 1.0, 1.25, 2.0, 4.0, 6.0]


def _psi(resource: str) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/pressure/{resource}").read_text().splitlines():
        kind, *fields = line.split()
        out[kind] = float(dict(f.split("=") for f in fields)["total"]) / 1e6
    return out


def _disks() -> dict[str, tuple[float, float]]:
    """Per disk: (requests completed, ms spent on them) since boot."""
    out = {}
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if f[2].startswith(("loop", "ram", "zram")) or len(f) < 11:
            continue
        out[f[2]] = (float(f[3]) + float(f[7]), float(f[6]) + float(f[10]))
    return out


def _window() -> dict[str, float]:
    load_before = os.getloadavg()[0]
    io0, mem0, d0 = _psi("io"), _psi("memory"), _disks()
    time.sleep(WINDOW)
    io1, mem1, d1 = _psi("io"), _psi("memory"), _disks()
    latency = 0.0
    for disk, (done, ms) in d1.items():
        dn = done - d0[disk][0]
        if dn > 0:
            latency = max(latency, (ms - d0[disk][1]) / dn / 1000)
    return {
        "psi_io_some": (io1["some"] - io0["some"]) / WINDOW,
        "psi_io_full": (io1["full"] - io0["full"]) / WINDOW,
        "psi_memory_some": (mem1["some"] - mem0["some"]) / WINDOW,
        "psi_memory_full": (mem1["full"] - mem0["full"]) / WINDOW,
        "block_latency_mean_seconds": latency,
        "loadavg1": round((load_before + os.getloadavg()[0]) / 2, 2),
    }


def _sample(hold: float, windows: int) -> dict[str, float]:
    """Each figure's median over ``windows`` consecutive windows, after ``hold - WINDOW`` s."""
    time.sleep(max(0.0, hold - WINDOW))
    taken = [_window() for _ in range(windows)]
    return {key: statistics.median(w[key] for w in taken) for key in taken[0]}


def io_sweep(workdir: Path, workers: list[int], hold: float, windows: int) -> list[dict[str, Any]]:
    points = []
    for k in workers:
        load = io_stress(workdir / f"io{k}", workers=k) if k else None
        if load:
            load.start()
        try:
            points.append({"hdd_workers": k, **_sample(hold, windows)})
        finally:
            if load:
                load.stop()
        print(points[-1], flush=True)
        time.sleep(3)
    return points


def memory_sweep(
    workdir: Path, ratios: list[float], hold: float, windows: int
) -> list[dict[str, Any]]:
    require_stress_ng()
    points = []
    for ratio in ratios:
        size_mib = int(ratio * LIMIT / 2**20)
        with memory_cgroup(LIMIT) as cgroup:
            target = workdir / f"ws{size_mib}"
            script = (
                f'echo $$ > "{cgroup.procs}"; while :; do '
                f'dd if=/dev/zero of="{target}" bs=1M count={size_mib} status=none; done'
            )
            load = Managed(["/bin/sh", "-c", script], name="ws", log_path=workdir / "ws.log")
            load.start()
            try:
                points.append({"working_set_over_limit": ratio, **_sample(hold, windows)})
            finally:
                load.stop()
                target.unlink(missing_ok=True)
        print(points[-1], flush=True)
        time.sleep(3)
    return points


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.placement.measure")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("measured.json"))
    parser.add_argument("--hold", type=float, default=14.0)
    parser.add_argument("--windows", type=int, default=3, help="10 s windows per step (median)")
    parser.add_argument(
        "--sweeps",
        default="io,memory",
        help="sweeps to run; the others keep their points from --out",
    )
    args = parser.parse_args(argv)
    sweeps = set(args.sweeps.split(","))
    kept = json.loads(args.out.read_text()) if args.out.exists() else {}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        io = (
            io_sweep(Path(tmp), IO_WORKERS, args.hold, args.windows)
            if "io" in sweeps
            else kept["io"]
        )
        memory = (
            memory_sweep(Path(tmp), MEMORY_RATIOS, args.hold, args.windows)
            if "memory" in sweeps
            else kept["memory"]["points"]
        )
    loads = [p["loadavg1"] for p in [*io, *memory]]
    result = {
        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs, Linux {platform.release()}",
        "conditions": (
            f"median of {args.windows} windows of {WINDOW:.0f} s per step; "
            f"loadavg1 {min(loads)}-{max(loads)} over the sweep (the load includes the step's own)"
        ),
        "io": io,
        "memory": {"cgroup_limit_bytes": LIMIT, "points": memory},
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
