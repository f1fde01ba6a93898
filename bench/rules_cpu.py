"""CPU per evaluation of rule files, measured in promtool: a comparison that load cannot blur.

On a shared machine, a live Prometheus' wall clock and even its CPU per evaluation vary by
tens of percent from run to run (scraping, GC and compaction interleave with the rules, and
missed evaluations change how much history each read walks). ``promtool test rules``
evaluates the same rule group over the same synthetic fleet (testkit/fleet.py, the
``typical`` profile and the exporter's default latency buckets) once per second of a fixed
history, in one process that does nothing else: its CPU time is the same work every time. A
run with only the node-set rule is subtracted (loading the input series), and the rest is
divided by the evaluations and scaled to 1,000 nodes.

The figure is promtool's, not Prometheus': same engine and head storage, no scraping, no WAL.
It ranks rule files and measures a change's share; ``bench.rules`` measures the target.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import yaml

from bench.rules import GROUP
from mco.flags import duration
from rulegen.model import DetectionRuleConfig
from rulegen.render import render_rules
from rulegen.series import NODE_INFO, NODE_SET
from testkit.fleet import Fleet, assign, node_names

# The input series load and the node set, with nothing else: subtracted from every run.
EMPTY_GROUP = {
    "groups": [
        {
            "name": GROUP,
            "interval": "1s",
            "rules": [{"record": NODE_SET, "expr": f"group by (node) ({NODE_INFO})"}],
        }
    ]
}


def suite(nodes: int, seconds: int) -> dict[str, object]:
    """A promtool suite: every node's raw series over ``seconds``, one check that the rules ran."""
    inputs = []
    for prefix, base, slope in Fleet(assign(node_names(nodes), ["typical"]), 0).lines:
        name, labels = prefix.strip().removesuffix("}").split("{", 1)
        inputs.append(
            {
                "series": f'{name}{{{labels},job="mco-fleet",instance="fleet:9847"}}',
                "values": f"{base!r}+{slope!r}x{seconds}",
            }
        )
    check = {
        "expr": f"count({NODE_SET})",
        "eval_time": f"{seconds}s",
        "exp_samples": [{"value": nodes}],
    }
    return {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1s",
        "tests": [{"interval": "1s", "input_series": inputs, "promql_expr_test": [check]}],
    }


def measured_group(rules_text: str) -> str:
    """The ``mco.rules`` group alone (the thresholds and alerts are not per node)."""
    groups = [g for g in yaml.safe_load(rules_text)["groups"] if g["name"] == GROUP]
    return yaml.safe_dump({"groups": groups})


def promtool_cpu(workdir: Path, rules_text: str) -> float:
    """CPU seconds (user + system) promtool spends on the suite in ``workdir`` with these rules."""
    (workdir / "rules.yaml").write_text(rules_text)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(
        ["promtool", "test", "rules", "suite.yaml"],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"promtool failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.rules_cpu", description=__doc__)
    parser.add_argument(
        "rules", nargs="*", type=Path, help="rule files (default: the default render)"
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument(
        "--seconds", type=duration, default=duration("2m"),
        help="history (one evaluation a second): 120, 2m, 5m",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="runs per file, alternating")
    args = parser.parse_args(argv)
    files: dict[str, str] = (
        {str(p): measured_group(p.read_text()) for p in args.rules}
        if args.rules
        else {"default render": measured_group(render_rules(DetectionRuleConfig.default()))}
    )
    with tempfile.TemporaryDirectory(prefix="bench-rules-cpu-") as tmp:
        workdir = Path(tmp)
        (workdir / "suite.yaml").write_text(yaml.safe_dump(suite(args.nodes, int(args.seconds))))
        empty: list[float] = []
        runs: dict[str, list[float]] = {name: [] for name in files}
        for _ in range(args.rounds):
            empty.append(promtool_cpu(workdir, yaml.safe_dump(EMPTY_GROUP)))
            for name, text in files.items():
                runs[name].append(promtool_cpu(workdir, text))
            print(f"round done, load 1m {os.getloadavg()[0]:.1f}", flush=True)
    floor = min(empty)
    scale = 1000 / args.nodes / args.seconds * 1e3  # ms per evaluation at 1,000 nodes
    print(
        f"\npromtool CPU per evaluation of {GROUP}, scaled to 1,000 nodes ({args.nodes} nodes, "
        f"{int(args.seconds)} evaluations, {args.rounds} rounds; "
        f"input load {floor:.2f} s subtracted):"
    )
    for name, values in runs.items():
        per = sorted((v - floor) * scale for v in values)
        print(f"  min {per[0]:7.0f} ms  median {per[len(per) // 2]:7.0f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
