"""scripts/loadwatch.py with real processes: a stress-ng whose parent is killed is noticed,
said and restarted, then given up; a process the kernel OOM-kills in a real memory cgroup is
said to be. And the live view of `make run` says so instead of claiming stress."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from scripts.loadwatch import LoadWatch
from scripts.local_stack import LocalStack, render_view
from scripts.procs import Managed, wait_until
from scripts.stress import StressUnavailableError, memory_cgroup


def _ended(watch: LoadWatch, timeout: float = 30.0) -> Any:
    found: list[Any] = []

    def noticed() -> bool:
        ended = watch.check()
        if ended is not None:
            found.append(ended)
        return bool(found)

    wait_until(noticed, timeout=timeout, interval=0.1, what=f"{watch.name} to end")
    return found[0]


def _gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.skipif(shutil.which("stress-ng") is None, reason="stress-ng not installed")
def test_a_killed_stress_ng_is_said_restarted_and_at_last_given_up(tmp_path: Path) -> None:
    argv = [shutil.which("stress-ng") or "", "--cpu", "1", "--cpu-load", "5", "--quiet"]
    watch = LoadWatch(Managed(argv, name="pod-stressed", log_path=tmp_path / "s.log"),
                      max_restarts=2)  # fmt: skip
    watch.start()
    try:
        assert watch.check() is None and watch.status() == "load pod-stressed: running"
        for run in range(1, 4):
            wait_until(lambda: watch.load.alive, timeout=10, what="stress-ng to run")
            time.sleep(0.5)  # its workers forked
            parent = watch.load.pid
            os.kill(parent, signal.SIGKILL)  # what the OOM killer did to stress-ng's parent
            ended = _ended(watch)
            assert ended.returncode == -signal.SIGKILL and ended.oom_kills == 0
            assert ended.describe().startswith("killed by SIGKILL after ")
            # The orphaned workers went with it: nothing of that run stresses on unseen.
            wait_until(partial(_gone, parent), timeout=10, what="the old workers to go")
            if run <= 2:
                assert watch.load.alive and watch.load.pid != parent and not watch.gone
                assert watch.status().startswith(f"load pod-stressed: restarted {run}x (last "
                                                 "killed by SIGKILL")  # fmt: skip
        assert watch.gone and not watch.load.alive
        assert watch.status().startswith("load pod-stressed: GONE, killed by SIGKILL")
        assert "no stress any more" in watch.status()
        assert watch.check() is None  # said once; not restarted again
    finally:
        watch.load.stop()


def test_a_process_the_kernel_oom_kills_is_said_to_be(tmp_path: Path) -> None:
    """A real 32 MiB memory cgroup (no swap on these machines) and a process that wants
    256 MiB in it: the kernel kills it, and the watch reads the cgroup's own count."""
    try:
        with memory_cgroup(32 << 20) as cgroup:
            grab = "b = bytearray(256 << 20); import time; time.sleep(60)"
            load = Managed(
                ["/bin/sh", "-c", f'echo $$ > "{cgroup.procs}" && exec "$0" "$@"',
                 sys.executable, "-c", grab],
                name="pod-stressed", log_path=tmp_path / "oom.log",
            )  # fmt: skip
            watch = LoadWatch(load, [cgroup.path], max_restarts=0)
            watch.start()
            try:
                ended = _ended(watch)
            finally:
                load.stop()
    except StressUnavailableError as exc:
        pytest.skip(f"no memory cgroup here: {exc}")
    assert ended.returncode == -signal.SIGKILL, load.log_tail()
    assert ended.oom_kills >= 1
    assert "by the kernel's OOM killer" in ended.describe()
    assert watch.gone and "GONE, killed by SIGKILL, by the kernel's OOM killer" in watch.status()


def test_the_live_view_says_the_load_is_gone(tmp_path: Path) -> None:
    app = tmp_path / "kubepods" / "burstable" / "pod1234" / "app"
    load = Managed(["true"], name="pod-stressed", log_path=tmp_path / "t.log")
    watch = LoadWatch(load, [app.parent, app], max_restarts=0)
    watch.start()
    stack = cast(LocalStack, SimpleNamespace(pods=[], loads=[watch], urls=dict))
    assert not LocalStack.load_gone(stack, "1234")  # running (or not yet noticed): stressing
    _ended(watch)
    view = render_view(stack, None, None)
    assert "load pod-stressed: GONE, exited with code 0" in view
    # The pod's role then says the load is gone, not "stressed" (scripts/local_stack.py).
    assert LocalStack.load_gone(stack, "1234") and not LocalStack.load_gone(stack, "5678")
