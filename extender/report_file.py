"""Reports from a file written by ``mco-reporter --output FILE`` (local runs and tests).

The reporter replaces the file atomically (write, then rename), so a change of inode, mtime or
size means a new version. A file that cannot be read or decoded keeps the last good data in
force: its entries simply age and go stale.

The reporter rewrites the file every cycle (once a second or so), so a reload is logged at info
level only when it tells a person something: the first load, a new DetectionRuleConfig
generation in the report's ``status.config``, or a reload after an error; other reloads go to
debug level.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from extender.metrics import ExtenderMetrics
from extender.reports import ReportStore
from reporter.schema import NodeInterferenceReport, decode_reports

log = logging.getLogger("mco.extender.report_file")


def _load(path: Path) -> list[NodeInterferenceReport]:
    return decode_reports(path.read_bytes())


async def follow_file(
    path: Path, store: ReportStore, metrics: ExtenderMetrics, poll_interval: float
) -> None:
    """Load ``path`` now and again whenever it changes; runs until cancelled."""
    seen: tuple[int, int, int, int] | None = None
    missing_logged = False
    # What the last reload said at info level: a reload is news when it is the first, follows
    # an error, or carries another generation.
    news, generation = True, None
    while True:
        try:
            st = os.stat(path)
        except OSError as exc:
            if not missing_logged:
                log.warning("report file unreadable", extra={"path": str(path), "err": str(exc)})
                missing_logged = news = True
        else:
            missing_logged = False
            version = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
            if version != seen:
                seen = version
                try:
                    reports = await asyncio.to_thread(_load, path)
                except (OSError, ValueError) as exc:
                    metrics.report_loads.labels("file", "error").inc()
                    news = True
                    log.error(
                        "report file rejected; keeping the last good data",
                        extra={"path": str(path), "err": str(exc)},
                    )
                else:
                    store.replace_all(reports)
                    metrics.report_loads.labels("file", "ok").inc()
                    before = generation
                    generation = store.config.generation if store.config is not None else None
                    log.log(
                        logging.INFO if news or generation != before else logging.DEBUG,
                        "report file loaded",
                        extra={
                            "path": str(path),
                            "objects": len(reports),
                            "nodes": len(store.nodes),
                            "generation": generation,
                        },
                    )
                    news = False
        await asyncio.sleep(poll_interval)
