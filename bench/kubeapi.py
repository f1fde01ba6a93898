"""The Kubernetes API stand-in of the reporter's tests (tests/reporter/kapi.py: kmock with
resourceVersion semantics) as a process, for benchmarks that run MCO's parts against an API.

``python -m bench.kubeapi --kubeconfig FILE`` serves on a free port and writes a kubeconfig that
points at it once it serves. It knows the resources the reporter and the extender use
(NodeInterferenceReports, DetectionRuleConfigs, Leases). kmock keeps every request for tests'
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

from rulegen.model import API_GROUP, API_VERSION, PLURAL
from tests.reporter.kapi import versioned_kubernetes

CONFIGS = kmock.resource(API_GROUP, API_VERSION, PLURAL)
KEPT_REQUESTS = 256


def kubeconfig(url: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "standin", "cluster": {"server": url}}],
        "users": [{"name": "mco", "user": {"token": "standin"}}],
        "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "mco"}}],
        "current-context": "standin",
    }


async def serve(path: Path) -> None:
    async with versioned_kubernetes() as k:
        k.resources[CONFIGS] = kmock.ResourceInfo(
            kind="DetectionRuleConfig", namespaced=False, subresources={"status"}
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
    args = p.parse_args(argv)
    asyncio.run(serve(args.kubeconfig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
