"""CPU per scrape of the collectors that read per-CPU files, on a synthetic 256-CPU node.

Both read files with one row or column per CPU; this measures what that costs where it is
largest, and prints the series each exposes (bounded: it must not grow with the CPU count).
Target: under 5 ms of CPU per scrape for the two together at 256 CPUs.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from exporter.paths import Paths
from exporter.registry import CollectorConfig, specs

SOFTIRQ_TYPES = [
    "HI",
    "TIMER",
    "NET_TX",
    "NET_RX",
    "BLOCK",
    "IRQ_POLL",
    "TASKLET",
    "SCHED",
    "HRTIMER",
    "RCU",
]
TARGET_SECONDS = 0.005


def write_tree(root: Path, cpus: int, rng: random.Random) -> None:
    proc = root / "proc"
    proc.mkdir(parents=True)
    rows = [[rng.randrange(10**9) for _ in range(10)] for _ in range(cpus)]
    total = [sum(col) for col in zip(*rows, strict=True)]
    stat = [f"cpu  {' '.join(map(str, total))}"]
    stat += [f"cpu{i} {' '.join(map(str, row))}" for i, row in enumerate(rows)]
    # The intr line lists every IRQ number: on a large node it is the longest line of the file.
    stat += [
        f"intr {rng.randrange(10**12)} " + " ".join(str(rng.randrange(10**6)) for _ in range(4096))
    ]
    stat += ["ctxt 123456789", "btime 1764531000", "processes 4321", "procs_running 3"]
    (proc / "stat").write_text("\n".join(stat) + "\n")
    header = " " * 20 + "".join(f"CPU{i:<8d}" for i in range(cpus))
    lines = [header] + [
        f"{name:>12}:" + "".join(f" {rng.randrange(10**9):>10}" for _ in range(cpus))
        for name in SOFTIRQ_TYPES
    ]
    (proc / "softirqs").write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wide_node")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cpus", type=int, default=256)
    args = parser.parse_args(argv)
    scrapes = 50 if args.quick else 500
    all_specs = specs()
    with tempfile.TemporaryDirectory() as tmp:
        write_tree(Path(tmp), args.cpus, random.Random(18))
        paths = Paths(procfs=str(Path(tmp) / "proc"), sysfs=str(Path(tmp) / "sys"), rootfs=tmp)
        spent = 0.0
        for name in ("cpu", "softirqs"):
            collector = all_specs[name].factory(CollectorConfig(paths))
            series = sum(len(m.samples) for m in collector.update())
            start = time.process_time()
            for _ in range(scrapes):
                collector.update()
            per_scrape = (time.process_time() - start) / scrapes
            spent += per_scrape
            print(
                f"{name:9} {args.cpus} CPUs: {per_scrape * 1e3:.2f} ms CPU per scrape,",
                f"{series} series",
            )
    ok = spent <= TARGET_SECONDS
    print(f"together: {spent * 1e3:.2f} ms per scrape (target <= {TARGET_SECONDS * 1e3:.0f} ms)")
    return 0 if ok else 1


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
