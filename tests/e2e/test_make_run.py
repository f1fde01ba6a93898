"""`make run` itself, through the real Makefile target: the live view refreshes every second with
this node and the URLs, `STRESS=io` starts stress-ng, and Ctrl-C (SIGINT to make's process
group, as a terminal sends it) stops everything and leaves nothing running."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from scripts.procs import wait_until
from tests.e2e.conftest import processes_with_marker, stack_processes

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.host_load]

ROOT = Path(__file__).resolve().parents[2]
FRAME = re.compile(r"^MCO local stack — (\d\d):(\d\d):(\d\d)")
URL_NAMES = (
    "Prometheus",
    "extender /v1/nodes",
    "exporter /metrics",
    "reporter /metrics",
    "extender /metrics",
)


class Output:
    """Lines of a child's stdout with their arrival time, read on a thread (never blocks a wait)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        assert proc.stdout is not None
        self._stdout = proc.stdout
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stdout:
            with self._lock:
                self.lines.append((time.monotonic(), line.rstrip("\n")))

    def snapshot(self) -> list[tuple[float, str]]:
        with self._lock:
            return list(self.lines)

    def text(self) -> str:
        return "\n".join(line for _, line in self.snapshot())

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


def frames(lines: list[tuple[float, str]]) -> list[tuple[float, int, list[str]]]:
    """(arrival, seconds of the day shown, lines) of each complete frame of the live view."""
    found: list[tuple[float, int, list[str]]] = []
    for arrival, line in lines:
        match = FRAME.match(line)
        if match:
            h, m, s = (int(g) for g in match.groups())
            found.append((arrival, h * 3600 + m * 60 + s, []))
        elif found:
            found[-1][2].append(line)
    # The last frame may still be arriving: complete ones end with the URL list.
    return [f for f in found if any(line.startswith("report file") for line in f[2])]


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        parent = parent_of(pid)
        if parent == ancestor:
            return True
        if parent is None:
            return False
        pid = parent
    return False


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def test_make_run_live_view_then_ctrl_c_stops_everything(tmp_path: Path) -> None:
    node = os.uname().nodename
    run_args = f"--free-ports --workdir {tmp_path / 'stack'} --duration 600"
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "run", "STRESS=io", f"RUN_ARGS={run_args}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # make leads its own process group, like a terminal's job
    )
    output = Output(proc)
    marker: str | None = None
    try:

        def view_with_this_node() -> bool:
            if proc.poll() is not None:
                return True  # exited early: reported below
            shown = frames(output.snapshot())
            return len(shown) >= 3 and any(
                line.startswith(f"{node[:16]} ") for line in shown[-1][2]
            )

        try:
            wait_until(view_with_this_node, timeout=150, interval=0.2, what="three live frames")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{output.text()[-4000:]}") from exc
        assert proc.poll() is None, f"make run exited early:\n{output.text()[-4000:]}"

        shown = frames(output.snapshot())
        arrivals = [a for a, _, _ in shown]
        clock = [t for _, t, _ in shown]
        gaps = [b - a for a, b in itertools.pairwise(arrivals)]
        ticks = [(b - a) % 86400 for a, b in itertools.pairwise(clock)]
        # Every refresh shows a later time and comes no sooner than a second after the last...
        assert all(t >= 1 for t in ticks), (ticks, output.text()[-3000:])
        assert all(g >= 0.9 for g in gaps), gaps
        # ...and at least two of them came about a second later (the machine may be busy).
        assert sum(1 for g, t in zip(gaps, ticks, strict=True) if g <= 2.5 and t <= 3) >= 2, (
            gaps,
            ticks,
        )
        last = shown[-1][2]
        for name in URL_NAMES:
            assert any(line.startswith(name) and "http://127.0.0.1:" in line for line in last)
        # RUN_ARGS reached the program: its work directory is ours, its ports not the defaults.
        report = tmp_path / "stack" / "report.json"
        assert any(line.startswith("report file") and str(report) in line for line in last)
        assert report.is_file()
        assert not any(":9847/" in line or ":19090" in line for line in last), last

        ours = {
            m for pid, m in stack_processes().items() if descends_from(pid, proc.pid)
        }  # other sessions may run stacks of their own right now
        assert len(ours) == 1, ours
        (marker,) = ours
        running = processes_with_marker(marker)
        assert running, "the stack's processes should be running"
        assert "stress-ng" in {comm(pid) for pid in running}, "STRESS=io did not reach make run"
        assert "driving real io load with stress-ng" in output.text()

        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        proc.wait(timeout=60)
        output.join(timeout=10)
        text = output.text()
        assert "stopped; nothing left running" in text, text[-3000:]
        assert "make run failed" not in text, text[-3000:]
        wait_until(
            lambda: processes_with_marker(marker) == [], timeout=10, what="the stack to be gone"
        )
        with pytest.raises(ProcessLookupError):
            os.killpg(proc.pid, 0)  # nothing left in make's process group either
    finally:
        # A failed test still leaves nothing: Ctrl-C first (the program stops its children),
        # then kill whatever carries the stack's marker.
        markers = {marker} if marker else set()
        if proc.poll() is None:
            markers |= {m for pid, m in stack_processes().items() if descends_from(pid, proc.pid)}
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for pid in [p for m in markers for p in processes_with_marker(m)]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # each child leads its own process group
