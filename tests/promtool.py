"""``promtool test rules`` on a suite written beside its rule files: the one runner the tests
share (the installed promtool, Prometheus 2.42's semantics)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

import yaml


def assert_promtool_passes(
    workdir: Path, suite: Mapping[str, object], name: str = "suite.yaml"
) -> None:
    """Write ``suite`` as ``workdir/name`` (its ``rule_files`` relative to ``workdir``) and
    assert that promtool reports no failure, showing its output where it does."""
    (workdir / name).write_text(yaml.safe_dump(dict(suite), sort_keys=False))
    result = subprocess.run(
        ["promtool", "test", "rules", name],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
