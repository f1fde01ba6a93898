"""`make bench`: run every benchmark (or those named) and print ratios against in-run baselines.

Each benchmark module exposes ``main(argv: list[str]) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

BENCHMARKS = {
    "exporter": "bench.exporter",
    "rules": "bench.rules",
    "reporter": "bench.reporter",
    "extender": "bench.extender",
    "detection": "bench.detection",
    "wide_node": "bench.wide_node",
    "irq_detection": "bench.irq_detection",
    "cgroup_pods": "bench.cgroup_pods",
    "shards": "bench.shards",
    "hysteresis": "bench.hysteresis",
    "placement": "bench.placement.run",
    "taint": "bench.taint",
    # 20 minutes (4 with --quick); `make soak DURATION=24h` for the long run.
    "soak": "bench.soak",
    "volcano": "bench.volcano",
}
# Not in a plain `make bench`: they run for minutes (docs/benchmarks.md). Name them to run them.
ON_REQUEST = {"placement", "volcano"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench")
    parser.add_argument("names", nargs="*", choices=[*BENCHMARKS, []], help="default: all")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    # Flags after the names (`placement --nodes 50 --seed 3`) go to the benchmarks named.
    args, extra = parser.parse_known_args(argv)
    failed = []
    for name in args.names or [n for n in BENCHMARKS if n not in ON_REQUEST]:
        print(f"\n=== bench {name} ===", flush=True)
        module = importlib.import_module(BENCHMARKS[name])
        if module.main([*(["--quick"] if args.quick else []), *extra]) != 0:
            failed.append(name)
    if failed:
        print(f"\nbenchmarks missing their targets: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
