"""``--output FILE|-``: the whole report as JSON, rewritten every cycle.

Cluster layout: one NodeInterferenceReport. Per-node layout: a Kubernetes ``List`` (``apiVersion:
v1, kind: List, items: [...]``) holding the ``cluster`` object first, then one object per node.
A file is replaced atomically (a temporary file in the same directory, fsync, rename), so a
reader sees the old version or the new one, never half of one. A writer killed mid-write leaves
its temporary behind; ``load`` (the sink's start) removes those. ``-`` writes one JSON document
per line to stdout.

The file is rewritten whole anyway, so live entries carry the time of their node's newest
sample rather than the time their values last moved: a reader that looks only at ``sampleTime``
is then right too (both satisfy the freshness rule of ``reporter.schema``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
from pathlib import Path

import msgspec

from reporter.layout import PER_NODE, LayoutChooser, whole_objects
from reporter.schema import (
    CLUSTER_REPORT_NAME,
    NodeEntry,
    ReportList,
    WorkloadProfile,
    decode_reports,
    format_time,
)
from reporter.sink import Medium, SinkResult
from reporter.tracker import ReportView

_encoder = msgspec.json.Encoder()
log = logging.getLogger("mco.reporter.file")
WRITE_FAILED = "write"  # the error kind (mco_reporter_errors_total{kind="file_write"})


class FileSink:
    """The ``Sink`` that writes the report as one JSON document (``--output``)."""

    medium: Medium = "file"
    loaded_profiles: list[WorkloadProfile]

    def __init__(self, target: str, chooser: LayoutChooser) -> None:
        self.target = target
        self.chooser = chooser
        self.loaded_profiles = []
        self.bytes_written = 0
        self.last_size = 0  # bytes of the last document
        self.largest_object = 0
        self._times: dict[float, str] = {}

    async def load(self) -> dict[str, NodeEntry]:
        """The entries of an existing report file (a restart must not drop them); {} when there
        is none or it is not a report."""
        if self.target == "-":
            return {}
        remove_temporaries(Path(self.target))
        try:
            data = Path(self.target).read_bytes()
        except FileNotFoundError:
            return {}
        try:
            items = decode_reports(data)
        except ValueError as exc:
            log.warning(
                "existing --output file is not a report; starting empty", extra={"err": str(exc)}
            )
            return {}
        entries: dict[str, NodeEntry] = {}
        for item in items:
            entries.update(item.status.nodes)
            if item.metadata.name == CLUSTER_REPORT_NAME:
                self.loaded_profiles = list(item.status.profiles or ())
        return entries

    def forget(self) -> None:
        """Nothing to forget: the whole file is written every cycle."""

    def document(self, view: ReportView) -> bytes:
        entries = self._fresh(view.entries, view.last_seen)
        layout = self.chooser.choose(view.entries)
        objects = whole_objects(view, layout, entries)
        if layout == PER_NODE:
            encoded = [_encoder.encode(o) for o in objects]
            self.largest_object = max(len(e) for e in encoded)
            return _encoder.encode(ReportList(items=objects))
        data = _encoder.encode(objects[0])
        self.largest_object = len(data)
        return data

    def _fresh(
        self, entries: dict[str, NodeEntry], last_seen: dict[str, float]
    ) -> dict[str, NodeEntry]:
        times = self._times
        if len(times) > 4096:
            times.clear()
        out: dict[str, NodeEntry] = {}
        for node, entry in entries.items():
            ts = last_seen.get(node)
            if entry.live and ts is not None:
                text = times.get(ts)
                if text is None:
                    text = times[ts] = format_time(ts)
                if text != entry.sample_time:
                    entry = msgspec.structs.replace(entry, sample_time=text)
            out[node] = entry
        return out

    async def write(self, view: ReportView) -> SinkResult:
        """Write the report; a failure is in the result (kind ``write``), not raised."""
        data = self.document(view)
        result = SinkResult(
            layout=self.chooser.current,
            object_bytes=self.largest_object,
            over_limit=self.chooser.over_limit,
        )
        try:
            if self.target == "-":
                sys.stdout.buffer.write(data + b"\n")
                sys.stdout.buffer.flush()
            else:
                write_atomically(Path(self.target), data)
        except OSError as exc:
            result.errors.append(WRITE_FAILED)
            result.message = f"cannot write {self.target}: {exc}"
            return result
        result.writes = {"write": 1}
        result.bytes = len(data)
        self.bytes_written += len(data)
        self.last_size = len(data)
        return result


def _temporary(path: Path) -> tuple[str, str]:
    """(prefix, suffix) of ``write_atomically``'s temporaries for ``path``."""
    return f".{path.name}.", ".tmp"


def write_atomically(path: Path, data: bytes) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    prefix, suffix = _temporary(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_temporaries(path: Path) -> int:
    """Remove the temporaries a killed ``write_atomically`` left next to ``path``: regular files
    named exactly as it names them (``.<name>.<8 random characters>.tmp``), nothing else.
    Returns how many; a directory that cannot be listed or a file that cannot be removed is
    logged, not fatal (the write that follows reports what matters)."""
    directory = path.parent if str(path.parent) else Path(".")
    prefix, suffix = _temporary(path)
    # mkstemp's random part: 8 characters of [a-z0-9_].
    own = re.compile(re.escape(prefix) + r"[a-z0-9_]{8}" + re.escape(suffix))
    removed = 0
    try:
        with os.scandir(directory) as entries:
            stale = [
                e.path
                for e in entries
                if own.fullmatch(e.name) and e.is_file(follow_symlinks=False)
            ]
    except OSError as exc:
        log.warning("cannot look for stale temporaries", extra={"err": str(exc)})
        return 0
    for name in stale:
        try:
            os.unlink(name)
            removed += 1
        except OSError as exc:
            log.warning("cannot remove a stale temporary", extra={"err": str(exc)})
    if removed:
        log.info(
            "removed temporaries of an interrupted write",
            extra={"count": removed, "dir": str(directory)},
        )
    return removed
