"""bcc's compiler: its memory handed back after loading, and what it prints caught."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from exporter.compiler_memory import captured_output, compiler_mappings

ROOT = Path(__file__).resolve().parents[2]
MAPS = """\
55d0c0a00000-55d0c0a2a000 r--p 00000000 fd:01 1 /usr/bin/python3.11
7f00aa000000-7f00ab000000 r-xp 00100000 fd:01 2 /usr/lib/x86_64-linux-gnu/libLLVM-14.so.1
7f00ab000000-7f00ab100000 r--p 00000000 fd:01 3 /usr/lib/llvm-14/lib/libclang-cpp.so.14
7f00ac000000-7f00ac010000 rw-p 00000000 fd:01 4 /usr/lib/x86_64-linux-gnu/libbcc.so.0.26.0
7f00ad000000-7f00ad010000 r--p 00000000 fd:01 5 /usr/lib/x86_64-linux-gnu/libbccnot/libc.so.6
7f00ae000000-7f00ae001000 rw-p 00000000 00:00 0
zzzz-yyyy r--p 00000000 fd:01 6 /usr/lib/libbcc.so.0
7f00af000000-7f00af000000 r--p 00000000 fd:01 7 /usr/lib/libLLVM-15.so
"""


def test_only_the_compiler_libraries_are_selected() -> None:
    assert compiler_mappings(MAPS) == [
        (0x7F00AA000000, 0x1000000),
        (0x7F00AB000000, 0x100000),
        (0x7F00AC000000, 0x10000),
    ]


def test_native_output_is_caught_and_the_descriptors_restored() -> None:
    with captured_output() as printed:
        os.write(1, b"to stdout\n")
        os.write(2, b"Unable to find kernel headers.\n")
    assert printed.text == "to stdout\nUnable to find kernel headers.\n"
    assert os.write(2, b"") == 0  # fd 2 is usable again


# Run in a fresh interpreter: the test process's own memory says nothing about the exporter's.
PROBE = """
import json, os, re, sys
from exporter.collectors.biolatency import BiolatencyCollector
from exporter.errors import UnavailableError
from exporter.paths import Paths
from exporter.registry import CollectorConfig, specs
options = {o.name: o.default for o in specs()["biolatency"].options}
reason = ""
try:
    BiolatencyCollector(CollectorConfig(Paths(), options)).close()
except UnavailableError as exc:
    reason = str(exc)
# Pages this process holds alone: a page another process maps too (another exporter's or
# test's bcc) stays resident whatever this one does, and is that process's cost as much.
PRIVATE = ("Private_Clean:", "Private_Dirty:")
lib, rss, path = 0, 0, ""
for line in open("/proc/self/smaps"):
    head = line.split()
    if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", head[0]):
        path = head[5] if len(head) > 5 else ""
    elif head[0] in PRIVATE and re.search(r"/lib(LLVM|clang|clang-cpp|bcc)[-.]", path):
        lib += int(head[1]) * 1024
for line in open("/proc/self/smaps_rollup"):
    if line.split()[0] in PRIVATE:
        rss += int(line.split()[1]) * 1024
print(json.dumps({"reason": reason, "compiler_rss": lib, "rss": rss}))
"""


def _probe(kernel_source: str) -> dict[str, Any]:
    env = {**os.environ, "BCC_KERNEL_SOURCE": kernel_source}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
@pytest.mark.root
def test_the_compiler_memory_is_handed_back_after_loading(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("loading BPF programs needs root (CAP_BPF, CAP_PERFMON)")
    loaded = _probe(os.environ.get("BCC_KERNEL_SOURCE", ""))
    if loaded["reason"]:
        pytest.skip(f"biolatency cannot load on this host: {loaded['reason']}")
    # Without the release: ~90 MiB of compiler pages, ~150 MiB in all (docs/benchmarks.md).
    # Counted as pages the probe holds alone: MADV_PAGEOUT leaves a page another process maps
    # too, and under xdist another test's bcc kept 44-89 MiB of them resident.
    assert loaded["compiler_rss"] < 16 << 20, loaded
    assert loaded["rss"] < 64 << 20, loaded
    # A failed compile (no kernel headers) also hands it back, and says why in bcc's words.
    failed = _probe(str(tmp_path))
    assert "bcc said:" in str(failed["reason"]), failed
    assert failed["compiler_rss"] < 16 << 20, failed
