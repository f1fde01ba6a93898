"""`make generate`: write every checked-in generated file; `--check` fails on drift instead.

Each generator module exposes ``generated_files() -> dict[str, str]`` (repo-relative path ->
content). One detection model drives the rules, alerts, CRDs and dashboards, so they are all
produced here and CI (tests/test_generated.py) fails when a checked-in copy differs. A
directory that holds a generated file holds only generated files: a file there that no
generator produces any more (a renamed dashboard, a dropped CRD) is an orphan, which
``--check`` reports and a plain run removes. A hand-written file can hold a generated part
between markers (the chart README's values table, ``scripts.values_table``): such files are
checked and rewritten the same way, and say nothing about what else sits beside them.
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


def all_spliced(root: Path = ROOT) -> dict[str, str]:
    """Hand-written files with their generated part regenerated (path -> whole content)."""
    from scripts.values_table import spliced_files

    return spliced_files(root)


def generated_dirs(files: dict[str, str]) -> list[str]:
    """The directories that hold generated files, and so only generated files."""
    return sorted({str(Path(rel).parent) for rel in files})


def drifted(files: dict[str, str], root: Path = ROOT) -> list[str]:
    """Paths whose checked-in content differs from a fresh generation."""
    out = []
    for rel, content in sorted(files.items()):
        path = root / rel
        if not path.exists() or path.read_text() != content:
            out.append(rel)
    return out


def orphaned(files: dict[str, str], root: Path = ROOT) -> list[str]:
    """Files in a generated directory that no generator produces (dotfiles aside)."""
    out = []
    for directory in generated_dirs(files):
        if not (root / directory).is_dir():
            continue
        for path in sorted((root / directory).iterdir()):
            rel = f"{directory}/{path.name}"
            if not path.name.startswith(".") and not path.is_dir() and rel not in files:
                out.append(rel)
    return out


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(prog="make generate")
    parser.add_argument("--check", action="store_true", help="fail if a checked-in file drifted")
    args = parser.parse_args(argv)
    files = all_generated()
    orphans = orphaned(files, root)
    files |= all_spliced(root)
    stale = drifted(files, root)
    if args.check:
        for rel in stale:
            print(f"drift: {rel} differs from a fresh `make generate`", file=sys.stderr)
        for rel in orphans:
            print(
                f"orphan: {rel} is no longer generated (`make generate` removes it)",
                file=sys.stderr,
            )
        return 1 if stale or orphans else 0
    for rel in stale:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[rel])
        print(f"wrote {rel}")
    for rel in orphans:
        (root / rel).unlink()
        print(f"removed {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
