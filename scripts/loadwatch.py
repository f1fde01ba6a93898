"""A stress load that dies is noticed, said and restarted (`make run STRESS=...`).

The kernel may kill a load: `STRESS=memory` runs stress-ng in a pod with a 64 MiB limit, and
in one run of two the OOM killer chose stress-ng's parent after ~55 s. Without a watch the
live view kept showing a "stressed" pod at stall 0.000, saying nothing. ``LoadWatch`` polls the
process, records how it ended (exit code, signal, and the OOM kills its memory cgroups counted
meanwhile), restarts it a few times, and then gives up and says the load is gone, so the view
stops claiming stress.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from scripts.procs import Managed

MAX_RESTARTS: Final = 3


def oom_kills(cgroups: Sequence[Path]) -> int:
    """The most OOM kills any of ``cgroups`` counted: ``oom_kill`` of cgroup v2's
    ``memory.events`` or of v1's ``memory.oom_control`` (kernel 4.13+); 0 where neither is."""
    most = 0
    for d in cgroups:
        for name in ("memory.events", "memory.oom_control"):
            with contextlib.suppress(OSError, ValueError):
                for line in (d / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        most = max(most, int(value))
    return most


@dataclass(frozen=True, slots=True)
class LoadExit:
    """How one run of a load ended."""

    returncode: int
    seconds: float  # how long it ran
    oom_kills: int  # OOM kills its memory cgroups counted while it ran

    def describe(self) -> str:
        if self.returncode < 0:
            name = signal.Signals(-self.returncode).name
            how = f"killed by {name}"
            if self.oom_kills:
                how += f", by the kernel's OOM killer ({self.oom_kills} OOM kill(s) in its cgroup)"
        else:
            how = f"exited with code {self.returncode}"
            if self.oom_kills:
                how += f" after {self.oom_kills} OOM kill(s) in its cgroup"
        return f"{how} after {self.seconds:.0f} s"


@dataclass
class LoadWatch:
    """One load process, watched: ``check()`` notices its end and restarts it, up to
    ``max_restarts`` times; then it is ``gone``."""

    load: Managed
    cgroups: Sequence[Path] = ()  # its memory cgroups, for the OOM kills the kernel counts
    max_restarts: int = MAX_RESTARTS
    exits: list[LoadExit] = field(default_factory=list)
    gone: bool = False
    _started: float = 0.0
    _oom_at_start: int = 0

    @property
    def name(self) -> str:
        return self.load.name

    def start(self) -> None:
        self._oom_at_start = oom_kills(self.cgroups)
        self._started = time.monotonic()
        self.load.start()

    def check(self) -> LoadExit | None:
        """The load's end, once, when it has ended since the last call (restarted unless it
        has been restarted ``max_restarts`` times already); None while it runs."""
        proc = self.load.proc
        if self.gone or proc is None or proc.poll() is None:
            return None
        ended = LoadExit(
            proc.returncode,
            time.monotonic() - self._started,
            oom_kills(self.cgroups) - self._oom_at_start,
        )
        self.exits.append(ended)
        self.load.stop()  # its workers, orphaned in its process group, go with it
        if len(self.exits) > self.max_restarts:
            self.gone = True
        else:
            self.start()
        return ended

    def status(self) -> str:
        """One line for the live view."""
        if not self.exits:
            return f"load {self.name}: running"
        last = self.exits[-1].describe()
        if self.gone:
            return (
                f"load {self.name}: GONE, {last}; not restarted after {self.max_restarts} "
                "restarts: no stress any more"
            )
        return f"load {self.name}: restarted {len(self.exits)}x (last {last})"
