"""``--output FILE|-``: the whole object, atomically; a List in the per-node layout; the
extender's decoder reads both; a restart keeps the entries the file holds."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import msgspec
import pytest

from reporter.entries import EntryBuilder, Epsilon
from reporter.filesink import FileSink
from reporter.layout import LayoutChooser
from reporter.query import Kind, Plan
from reporter.schema import decode_reports, entry_time, heartbeat_of, parse_time
from reporter.tracker import Tracker
from rulegen.model import DetectionRuleConfig
from tests.reporter.conftest import validate_object
from tests.reporter.helpers import T0, quiet_values, snapshot

PLAN = Plan(compact=False)


def tracker() -> Tracker:
    return Tracker(
        EntryBuilder(PLAN, DetectionRuleConfig.default(), Epsilon()), stale_after=30, live_within=5
    )


def fleet(n: int) -> dict[str, dict[tuple[Kind, str], float]]:
    return {f"n{i}": quiet_values(PLAN) for i in range(n)}


async def test_cluster_layout_writes_one_object_with_fresh_sample_times(tmp_path: Path) -> None:
    t = tracker()
    out = tmp_path / "report.json"
    sink = FileSink(str(out), LayoutChooser("cluster"))
    t.apply(snapshot(PLAN, fleet(3), T0))
    await sink.write(t.view())
    t.apply(snapshot(PLAN, fleet(3), T0 + 10, {f"n{i}": T0 + 9.5 for i in range(3)}))
    await sink.write(t.view())
    obj = json.loads(out.read_bytes())
    validate_object(obj)
    assert obj["metadata"]["name"] == "cluster" and len(obj["status"]["nodes"]) == 3
    # Unchanged values, but the file is rewritten anyway: it carries the newest sample time,
    # so a reader that only looks at sampleTime is right too.
    assert parse_time(obj["status"]["nodes"]["n0"]["sampleTime"]) == T0 + 9.5
    (report,) = decode_reports(out.read_bytes())
    assert set(report.status.nodes) == {"n0", "n1", "n2"}
    assert not list(tmp_path.glob(".report.json.*"))  # no temporary file left behind


async def test_per_node_layout_writes_a_list(tmp_path: Path) -> None:
    t = tracker()
    out = tmp_path / "report.json"
    sink = FileSink(str(out), LayoutChooser("per-node"))
    t.apply(snapshot(PLAN, fleet(4), T0))
    await sink.write(t.view())
    doc = json.loads(out.read_bytes())
    assert doc["apiVersion"] == "v1" and doc["kind"] == "List"
    names = [o["metadata"]["name"] for o in doc["items"]]
    assert names[0] == "cluster" and sorted(names[1:]) == ["n0", "n1", "n2", "n3"]
    for obj in doc["items"]:
        validate_object(obj)
    reports = decode_reports(out.read_bytes())
    heartbeat = heartbeat_of(reports)
    assert heartbeat == T0
    node = next(r for r in reports if r.metadata.name == "n2").status.nodes["n2"]
    assert entry_time(node, heartbeat) == T0


async def test_auto_layout_follows_the_size(tmp_path: Path) -> None:
    t = tracker()
    out = tmp_path / "report.json"
    sink = FileSink(str(out), LayoutChooser("auto", max_bytes=8000))
    t.apply(snapshot(PLAN, fleet(2), T0))
    await sink.write(t.view())
    assert json.loads(out.read_bytes())["kind"] == "NodeInterferenceReport"
    t.apply(snapshot(PLAN, fleet(20), T0 + 1))
    await sink.write(t.view())
    assert json.loads(out.read_bytes())["kind"] == "List"
    assert sink.largest_object < 8000


async def test_readers_never_see_a_partial_file(tmp_path: Path) -> None:
    t = tracker()
    out = tmp_path / "report.json"
    sink = FileSink(str(out), LayoutChooser("cluster"))
    t.apply(snapshot(PLAN, fleet(100), T0))
    await sink.write(t.view())
    stop = threading.Event()
    bad: list[str] = []

    def read() -> None:
        while not stop.is_set():
            try:
                decode_reports(out.read_bytes())
            except ValueError as exc:
                bad.append(str(exc))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(20):
            t.apply(snapshot(PLAN, fleet(100), T0 + 1 + i))
            await sink.write(t.view())
    finally:
        stop.set()
        reader.join()
    assert bad == []


async def test_a_restart_keeps_the_entries_of_the_file(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    t = tracker()
    sink = FileSink(str(out), LayoutChooser("per-node"))
    t.apply(snapshot(PLAN, fleet(3), T0))
    await sink.write(t.view())
    again = FileSink(str(out), LayoutChooser("cluster"))
    entries = await again.load()
    assert set(entries) == {"n0", "n1", "n2"}
    (tmp_path / "junk.json").write_text("{]")
    assert (await FileSink(str(tmp_path / "junk.json"), LayoutChooser("cluster")).load()) == {}
    assert (await FileSink(str(tmp_path / "none.json"), LayoutChooser("cluster")).load()) == {}


async def test_stdout_gets_one_document_per_line(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    t = tracker()
    sink = FileSink("-", LayoutChooser("cluster"))
    t.apply(snapshot(PLAN, fleet(2), T0))
    await sink.write(t.view())
    await sink.write(t.view())
    lines = capfdbinary.readouterr().out.splitlines()
    assert len(lines) == 2
    assert msgspec.json.decode(lines[1])["metadata"]["name"] == "cluster"


async def test_unwritable_target_is_a_failed_result_not_an_exception(tmp_path: Path) -> None:
    """The file sink answers like the Kubernetes sink: a SinkResult that says what failed."""
    t = tracker()
    t.apply(snapshot(PLAN, fleet(1), T0))
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    sink = FileSink(str(not_a_dir / "report.json"), LayoutChooser("cluster"))
    result = await sink.write(t.view())
    assert not result.ok and not result.delivered and result.errors == ["write"]
    assert str(not_a_dir / "report.json") in result.message and result.bytes == 0
    fine = FileSink(str(tmp_path / "report.json"), LayoutChooser("cluster"))
    result = await fine.write(t.view())
    assert result.delivered and result.writes == {"write": 1}
    assert result.bytes == (tmp_path / "report.json").stat().st_size
    assert result.layout == "cluster" and result.object_bytes == result.bytes
