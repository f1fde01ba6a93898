"""Every `sh test` block of docs/user-guide.md runs, against a live local stack.

The guide spells MCO's default local ports and paths; the test runs the stack on free ports and
a temporary directory and rewrites those in the commands, nothing else.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.local_stack import LocalStack, Ports, StackSettings

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "user-guide.md"
BLOCK = re.compile(r"^```sh test\n(.*?)^```", re.S | re.M)


def blocks() -> list[str]:
    found = BLOCK.findall(GUIDE.read_text())
    assert len(found) >= 7, "the guide lost its runnable examples"
    return found


def test_guide_blocks_run_against_the_local_stack(tmp_path: Path) -> None:
    stack = LocalStack(StackSettings(workdir=tmp_path / "stack", ports=Ports(0, 0, 0, 0)))
    with stack:
        substitutions = {
            "127.0.0.1:9847": f"127.0.0.1:{stack.ports.exporter}",
            "127.0.0.1:9848": f"127.0.0.1:{stack.ports.extender}",
            "127.0.0.1:9849": f"127.0.0.1:{stack.ports.reporter}",
            "127.0.0.1:19090": f"127.0.0.1:{stack.ports.prometheus}",
            ".cache/local-stack/": f"{stack.workdir}/",
        }
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        work = tmp_path / "work"
        work.mkdir()
        outputs: list[str] = []
        for block in blocks():
            script = block
            for default, actual in substitutions.items():
                script = script.replace(default, actual)
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert result.returncode == 0, (
                f"{block}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
            )
            assert result.stdout.strip(), f"no output from:\n{block}"
            outputs.append(result.stdout)
        rejected = outputs[-2]
        assert "spec.window" in rejected and "psiIOSome" in rejected
