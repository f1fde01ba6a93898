"""Strict integer fields: ``int()`` also accepts ``1_000``, `` 7``, ``+3`` and non-ASCII digits."""

from __future__ import annotations

from exporter.errors import ParseError

MAX_DIGITS = 20  # 2**64 - 1 has 20 digits; longer text is garbage, and int() would refuse 4,300+


def uint(text: str, what: str) -> int:
    """A non-negative decimal integer of ASCII digits, or ``ParseError`` naming ``what``."""
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_DIGITS:
        raise ParseError(f"{what} is not a non-negative 64-bit integer: {text[:32]!r}")
    return int(text)


def sint(text: str, what: str) -> int:
    """A decimal integer that may carry a leading minus sign."""
    return -uint(text[1:], what) if text.startswith("-") else uint(text, what)
