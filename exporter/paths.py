"""Filesystem roots, so every collector can run against a recorded tree instead of the host."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Paths:
    """Where the host's /proc, /sys, / and cgroup file system are mounted (node_exporter's
    --path.* flags; the cgroupfs is apart from /sys because a pod may get it as its own mount)."""

    procfs: str = "/proc"
    sysfs: str = "/sys"
    rootfs: str = "/"
    cgroupfs: str = "/sys/fs/cgroup"

    def proc(self, *parts: str) -> str:
        return os.path.join(self.procfs, *parts)

    def sys(self, *parts: str) -> str:
        return os.path.join(self.sysfs, *parts)

    def cgroup(self, *parts: str) -> str:
        return os.path.join(self.cgroupfs, *parts)

    def root(self, path: str) -> str:
        """Map an absolute host path (``/dev/kvm``) under the configured rootfs."""
        return os.path.join(self.rootfs, path.lstrip("/"))


MAX_READ_BYTES: Final = 1 << 20  # per file; the largest kernel file read is ~100 KiB
_CHUNK: Final = 64 << 10
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class RefusedFileError(OSError):
    """A source that is not a regular file, or larger than ``MAX_READ_BYTES``.

    An ``OSError``, so a collector fails with this reason like with any unreadable source; it
    is never mistaken for an absent one (its errno is not ENOENT).
    """


_KINDS: Final = (
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISDIR, "directory"),
)


def _refuse_irregular(mode: int, path: str) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise RefusedFileError(errno.EINVAL, f"not a regular file ({kind})", path)


def read_text(path: str, limit: int = MAX_READ_BYTES) -> str:
    """A kernel (or recorded) text file, whole; every read of the exporter goes through here.

    A ``--path.*`` tree can hold anything, and a scrape holds the scrape lock while it reads:
    a FIFO would block it forever, a device could do anything on open, a huge file would make
    every scrape slow. So only regular files are read (checked before opening, and again on
    the open descriptor, which is opened non-blocking), at most ``limit`` bytes, and the bytes
    are decoded as UTF-8 with U+FFFD for anything else (a kernel release string is free text).
    Raises OSError (RefusedFileError for what is refused).
    """
    _refuse_irregular(os.stat(path).st_mode, path)
    return read_listed(path, limit)


def read_listed(path: str, limit: int = MAX_READ_BYTES) -> str:
    """``read_text`` for a file its directory listing gave as a regular file (``d_type``), so
    without the stat before the open: a hot loop reading a few files in each of many
    directories (pod cgroups) lists each directory once instead of stat-ing every file."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        info = os.fstat(fd)
        _refuse_irregular(info.st_mode, path)
        if info.st_size > limit:
            raise RefusedFileError(errno.EFBIG, f"larger than {limit} bytes", path)
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, _CHUNK):
            size += len(chunk)
            if size > limit:  # procfs and sysfs files report a size of 0 or 4096
                raise RefusedFileError(errno.EFBIG, f"larger than {limit} bytes", path)
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace")


def host_text(text: str) -> str:
    """Text the OS gave as ``str`` (hostname, environment, argv, directory names) made valid
    UTF-8: Python decodes undecodable bytes to lone surrogates, which cannot be encoded when a
    scrape writes them out, so they become U+FFFD as in ``read_text``."""
    if text.isascii():
        return text
    try:
        raw = text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:  # a surrogate that stands for no byte
        raw = text.encode("utf-8", errors="replace")
    return raw.decode("utf-8", errors="replace")
