"""The Kubernetes API stand-in of the tests (kmock with resourceVersion semantics and
server-side apply: testkit/kapi.py) as a process, for
benchmarks that run MCO's controllers against an API.

``python -m bench.kubeapi --kubeconfig FILE`` serves on a free port and writes a kubeconfig that
points at it once it serves. It knows the resources MCO reads and writes (NodeInterferenceReports,
DetectionRuleConfigs, PrometheusRules, Leases) and holds one DetectionRuleConfig, ``default``,
with the default spec or that of ``--rule-config FILE``. kmock keeps every request for tests'
assertions; a process that serves for hours keeps only the latest ones.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import kmock
import yaml

from rulegen.model import API_GROUP, API_VERSION, DEFAULT_NAME, KIND, PLURAL
from testkit.kapi import DRC, LEASES, REPORTS, RULES, Cluster

KEPT_REQUESTS = 256
CONFIG_PATH = f"/apis/{API_GROUP}/{API_VERSION}/{PLURAL}"


def kubeconfig(url: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "standin", "cluster": {"server": url}}],
        "users": [{"name": "mco", "user": {"token": "standin"}}],
        "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "mco"}}],
        "current-context": "standin",
    }


async def serve(path: Path, spec: dict[str, object]) -> None:
    # Not strict: a missing object (the Lease before its first holder) is a 404.
    async with Cluster(strict=False) as k, kmock.Server(k):
        k.resources[REPORTS] = kmock.ResourceInfo(
            kind="NodeInterferenceReport", namespaced=False, subresources={"status"}
        )
        k.resources[DRC] = kmock.ResourceInfo(kind=KIND, namespaced=False, subresources={"status"})
        k.resources[RULES] = kmock.ResourceInfo(kind="PrometheusRule", namespaced=True)
        k.resources[LEASES] = kmock.ResourceInfo(kind="Lease", namespaced=True)
        await k.post(
            CONFIG_PATH,
            json={
                "apiVersion": f"{API_GROUP}/{API_VERSION}",
                "kind": KIND,
                "metadata": {"name": DEFAULT_NAME, "generation": 1},
                "spec": spec,
            },
        )
        partial = path.with_suffix(".partial")
        partial.write_text(yaml.safe_dump(kubeconfig(str(k.url).rstrip("/"))))
        os.replace(partial, path)
        while True:
            await asyncio.sleep(10)
            del k._requests[:-KEPT_REQUESTS]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kubeapi")
    p.add_argument("--kubeconfig", type=Path, required=True, help="written once serving")
    p.add_argument(
        "--rule-config",
        type=Path,
        help="a DetectionRuleConfig YAML whose spec the held object starts with (default: {})",
    )
    args = p.parse_args(argv)
    spec = yaml.safe_load(args.rule_config.read_text())["spec"] if args.rule_config else {}
    asyncio.run(serve(args.kubeconfig, spec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
