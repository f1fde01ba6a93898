"""Structured logs: logfmt (node_exporter's default) or JSON lines, one record per line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any, ClassVar

LEVELS = ("debug", "info", "warn", "error")
FORMATS = ("logfmt", "json")

# Attributes every LogRecord has; anything else came from ``extra=`` and is a structured field.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": "warn" if record.levelno == logging.WARNING else record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    for key, value in vars(record).items():
        if key not in _STANDARD and not key.startswith("_"):
            fields[key] = value
    if record.exc_info:
        fields["err"] = logging.Formatter().formatException(record.exc_info)
    return fields


class LogfmtFormatter(logging.Formatter):
    _NEEDS_QUOTES: ClassVar[frozenset[str]] = frozenset(' ="\n\t')

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={self._value(v)}" for k, v in _fields(record).items())

    def _value(self, value: object) -> str:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        if not text or any(c in self._NEEDS_QUOTES for c in text):
            return json.dumps(text)
        return text


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str)


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log.level", dest="log_level", choices=LEVELS, default="info")
    parser.add_argument("--log.format", dest="log_format", choices=FORMATS, default="logfmt")


def setup_logging(level: str = "info", fmt: str = "logfmt") -> None:
    """Send every record to stderr in the chosen format; replaces earlier handlers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel("WARNING" if level == "warn" else level.upper())
