"""The ``perf_event_open`` system call, behind a small interface tests can replace."""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from dataclasses import dataclass
from typing import Protocol

# struct perf_event_attr, PERF_ATTR_SIZE_VER0: the fields below are all we set.
_ATTR = struct.Struct("=IIQQQQQIIQ")
PERF_TYPE_HARDWARE = 0
PERF_TYPE_HW_CACHE = 3
PERF_COUNT_HW_CACHE_REFERENCES = 2
PERF_COUNT_HW_CACHE_MISSES = 3
PERF_COUNT_HW_CACHE_LL = 2
PERF_COUNT_HW_CACHE_OP_READ = 0
PERF_COUNT_HW_CACHE_RESULT_ACCESS = 0
PERF_COUNT_HW_CACHE_RESULT_MISS = 1
PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FORMAT_GROUP = 1 << 3
PERF_FLAG_FD_CLOEXEC = 1 << 3
READ_FORMAT = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING

_SYSCALL_NUMBERS = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331, "riscv64": 241}


@dataclass(frozen=True, slots=True)
class Event:
    type: int
    config: int


def hw_cache_config(cache: int, op: int, result: int) -> int:
    return cache | (op << 8) | (result << 16)


def encode_attr(event: Event, read_format: int) -> bytes:
    # type, size, config, sample_period, sample_type, read_format, flag bits (all 0: enabled,
    # counting user, kernel and hypervisor), wakeup_events, bp_type, config1
    return _ATTR.pack(event.type, _ATTR.size, event.config, 0, 0, read_format, 0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class GroupReading:
    time_enabled: int
    time_running: int
    values: tuple[int, ...]


def decode_group_read(data: bytes) -> GroupReading:
    """``{u64 nr; u64 time_enabled; u64 time_running; u64 value[nr]}``."""
    if len(data) < 24:
        raise ValueError(f"short perf group read: {len(data)} bytes")
    nr, enabled, running = struct.unpack_from("=QQQ", data)
    if len(data) != 24 + 8 * nr:
        raise ValueError(f"perf group read has {len(data)} bytes for {nr} values")
    return GroupReading(enabled, running, struct.unpack_from(f"={nr}Q", data, 24))


class PerfSyscalls(Protocol):
    def open(self, attr: bytes, pid: int, cpu: int, group_fd: int, flags: int) -> int:
        """Return a file descriptor or raise OSError with the kernel's errno."""

    def read(self, fd: int, size: int) -> bytes: ...

    def close(self, fd: int) -> None: ...


class LinuxPerfSyscalls:
    """The real system calls, through libc's ``syscall(2)``."""

    def __init__(self) -> None:
        machine = platform.machine()
        if machine not in _SYSCALL_NUMBERS:
            raise OSError(0, f"perf_event_open syscall number unknown on {machine}")
        self._nr = _SYSCALL_NUMBERS[machine]
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long

    def open(self, attr: bytes, pid: int, cpu: int, group_fd: int, flags: int) -> int:
        buf = ctypes.create_string_buffer(attr, len(attr))
        fd = int(
            self._libc.syscall(
                ctypes.c_long(self._nr),
                buf,
                ctypes.c_int(pid),
                ctypes.c_int(cpu),
                ctypes.c_int(group_fd),
                ctypes.c_ulong(flags),
            )
        )
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return fd

    def read(self, fd: int, size: int) -> bytes:
        return os.read(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)
