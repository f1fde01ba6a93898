"""`make run`'s program: the live view shows this node and the URLs; Ctrl-C leaves nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import processes_with_marker, stack_processes

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_live_view_then_ctrl_c_stops_everything(tmp_path: Path) -> None:
    before = set(stack_processes().values())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scripts.local_stack",
            "--free-ports",
            "--workdir",
            str(tmp_path / "stack"),
            "--stress",
            "io",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 90
    node_row = False
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen.append(line)
        if line.startswith(os.uname().nodename[:16]) and "yes" in line and "0." in line:
            node_row = True
        if node_row and "extender /v1/nodes" in line:
            break
    assert node_row, "".join(seen[-40:])
    markers = set(stack_processes().values()) - before
    assert len(markers) == 1, markers
    (marker,) = markers
    assert processes_with_marker(marker), "the stack's processes should be running"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "stopped; nothing left running" in out
    time.sleep(0.5)
    assert processes_with_marker(marker) == []
    text = "".join(seen)
    for name in (
        "Prometheus",
        "extender /v1/nodes",
        "exporter /metrics",
        "reporter /metrics",
        "extender /metrics",
    ):
        assert name in text
