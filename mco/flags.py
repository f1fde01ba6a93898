"""Command-line values every MCO console script spells the same way: durations, sizes and
listen addresses. Each function is an argparse ``type=`` (its message is what argparse prints)
and raises ``FlagError``, a ValueError, when called directly.
"""

from __future__ import annotations

import argparse
import re
from typing import Final

_NUM = r"(\d+(?:\.\d+)?)"
# Weeks down to milliseconds, each unit at most once and in that order (Prometheus's rule).
_DURATION: Final = re.compile(
    rf"(?:{_NUM}w)?(?:{_NUM}d)?(?:{_NUM}h)?(?:{_NUM}m(?!s))?(?:{_NUM}s)?(?:{_NUM}ms)?"
)
_BARE: Final = re.compile(_NUM)
_UNITS: Final = (7 * 86400.0, 86400.0, 3600.0, 60.0, 1.0, 0.001)
_SIZE: Final = re.compile(r"\s*(\d+)\s*(Ki|Mi|Gi|KiB|MiB|GiB|K|M|G|B)?\s*")
_BYTES: Final = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class FlagError(ValueError, argparse.ArgumentTypeError):
    """A flag value that does not parse; the message says what was expected."""


def duration(text: str) -> float:
    """Seconds in a Prometheus/Go-style duration: ``250ms``, ``1.5s``, ``1m30s``, ``1h2m3.5s``,
    ``7d``, ``2w``, or a bare number of seconds. The one duration parser of every MCO flag."""
    body = text.strip()
    if _BARE.fullmatch(body):
        return float(body)
    match = _DURATION.fullmatch(body)
    if not body or match is None:
        raise FlagError(f"{text!r} is not a duration like 500ms, 1s, 2m or 1m30s")
    return sum(float(n) * unit for n, unit in zip(match.groups(), _UNITS, strict=True) if n)


def go_duration(seconds: float) -> str:
    """``seconds`` spelled as Go's ``time.ParseDuration`` reads it (``500ms``, ``1s``, ``1m30s``):
    how a parsed flag goes back into a scheduler's configuration."""
    millis = round(seconds * 1000)
    if millis < 1000:
        return f"{millis}ms"
    minutes, ms = divmod(millis, 60_000)
    hours, minutes = divmod(minutes, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    if ms or not text:
        text += f"{ms / 1000:g}s"
    return text


def size(text: str) -> int:
    """Bytes in ``1048576``, ``900Ki``, ``1Mi``, ``64MiB``, ``1GiB`` (K, M, G: binary units)."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise FlagError(f"{text!r} is not a size like 1048576, 900Ki, 1Mi or 64MiB")
    unit = (match.group(2) or "").removesuffix("B").removesuffix("i")
    return int(match.group(1)) * _BYTES[unit or "B"]


def listen_address(text: str) -> tuple[str, int]:
    """``[host]:port`` -> (host, port). No host (node_exporter's ``:9847``) gives ``""``: every
    interface, IPv4 and IPv6, so the servers work in IPv6-only and dual-stack clusters too."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise FlagError(f"listen address must be [host]:port, got {text!r}")
    return host.strip("[]"), int(port)
