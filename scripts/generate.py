"""`make generate`: write every checked-in generated file; `--check` fails on drift instead.

Each generator module exposes ``generated_files() -> dict[str, str]`` (repo-relative path ->
content). One detection model drives the rules, alerts, CRDs and dashboards, so they are all
produced here and CI (tests/test_generated.py) fails when a checked-in copy differs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATORS = (
    "rulegen.generate",  # recording rules, alerts, DetectionRuleConfig CRD
    "reporter.crd",  # NodeInterferenceReport CRD
    "rulegen.dashboards",  # Grafana dashboards
)


def all_generated() -> dict[str, str]:
    files: dict[str, str] = {}
    for name in GENERATORS:
        module = importlib.import_module(name)
        for path, content in module.generated_files().items():
            if path in files:
                raise RuntimeError(f"{path} generated twice (second time by {name})")
            files[path] = content
    return files


def drifted(files: dict[str, str]) -> list[str]:
    """Paths whose checked-in content differs from a fresh generation."""
    out = []
    for rel, content in sorted(files.items()):
        path = ROOT / rel
        if not path.exists() or path.read_text() != content:
            out.append(rel)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make generate")
    parser.add_argument("--check", action="store_true", help="fail if a checked-in file drifted")
    args = parser.parse_args(argv)
    files = all_generated()
    stale = drifted(files)
    if args.check:
        for rel in stale:
            print(f"drift: {rel} differs from a fresh `make generate`", file=sys.stderr)
        return 1 if stale else 0
    for rel in stale:
        path = ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[rel])
        print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
