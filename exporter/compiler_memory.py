"""Living with bcc's in-process compiler: give back its memory once the program is loaded, and
catch what it prints.

bcc compiles the biolatency program with clang/LLVM inside the exporter: ~60 MiB of heap and
~90 MiB of touched library pages (libLLVM, libclang-cpp, libbcc) stay resident although the
compiler never runs again. On every node of a fleet that is most of the exporter's memory. Two
calls hand it back: ``malloc_trim`` returns the freed heap to the kernel, and
``madvise(MADV_PAGEOUT)`` (Linux 5.4) drops the library pages; pages touched again later (the
map reads) simply fault back in. Both are advice: failures change nothing and are ignored.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from exporter.paths import read_text

log = logging.getLogger("mco.exporter.compiler_memory")

MADV_PAGEOUT: Final = 21
COMPILER_LIBRARIES: Final = re.compile(r"/lib(LLVM|clang|clang-cpp|bcc)[-.][^/]*$")


def compiler_mappings(maps_text: str) -> list[tuple[int, int]]:
    """(start, length) of every mapping of the compiler's libraries in a /proc/PID/maps text."""
    out = []
    for line in maps_text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not COMPILER_LIBRARIES.search(parts[5].strip()):
            continue
        start, _, end = parts[0].partition("-")
        try:
            first, last = int(start, 16), int(end, 16)
        except ValueError:
            continue  # not a maps line
        if last > first:
            out.append((first, last - first))
    return out


def release_compiler_memory(maps_path: str = "/proc/self/maps") -> int:
    """Trim the heap and page out the compiler's libraries; the bytes of mappings advised."""
    name = ctypes.util.find_library("c")
    if name is None:
        return 0
    libc = ctypes.CDLL(name, use_errno=True)
    trim = getattr(libc, "malloc_trim", None)  # glibc only
    if trim is not None:
        trim(0)
    try:
        mappings = compiler_mappings(read_text(maps_path))
    except OSError:
        return 0
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    advised = 0
    for start, length in mappings:
        if libc.madvise(start, length, MADV_PAGEOUT) == 0:
            advised += length
    if mappings and not advised:
        log.info("kernel ignores MADV_PAGEOUT (before 5.4): compiler pages stay resident")
    return advised


@dataclass
class Printed:
    text: str = ""


@contextlib.contextmanager
def captured_output() -> Iterator[Printed]:
    """What native code (bcc, clang) writes to file descriptors 1 and 2 inside the block; it
    does not go through ``sys.stderr``, so without this it bypasses the structured logs."""
    printed = Printed()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    try:
        with tempfile.TemporaryFile() as sink:
            for fd in saved:
                os.dup2(sink.fileno(), fd)
            try:
                yield printed
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                for fd, copy in saved.items():
                    os.dup2(copy, fd)
                # The end holds the error; warnings before it can be long.
                sink.seek(max(0, os.fstat(sink.fileno()).st_size - (1 << 16)))
                printed.text = sink.read().decode("utf-8", "replace")
    finally:
        for copy in saved.values():
            os.close(copy)
