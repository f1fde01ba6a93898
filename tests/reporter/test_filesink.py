"""``--output FILE|-``: the whole object, atomically; a List in the per-node layout; the
extender's decoder reads both; a restart keeps the entries the file holds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import msgspec
import pytest

from reporter.cli import parse_settings, run
from reporter.entries import EntryBuilder, Epsilon
from reporter.filesink import FileSink
from reporter.layout import LayoutChooser
from reporter.query import Kind, Plan
from reporter.schema import decode_reports, entry_time, heartbeat_of, parse_time
from reporter.tracker import Tracker
from rulegen.model import DetectionRuleConfig
from scripts.generate import ROOT
from testkit.answers import T0, quiet_values, snapshot
from testkit.fakeprom import fake_prometheus
from tests.reporter.conftest import validate_object

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


def _sink_temporary(directory: Path, name: str) -> Path:
    """A temporary named exactly as the sink names its own (mkstemp, same prefix and suffix)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    os.write(fd, b'{"apiVersion": "mco.io/v1alpha1", "status": {"nodes": {"a"')  # cut short
    os.close(fd)
    return Path(tmp)


async def test_start_removes_stale_temporaries_of_its_own_file_only(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    stale = [_sink_temporary(tmp_path, "report.json") for _ in range(3)]
    keep = [
        _sink_temporary(tmp_path, "other.json"),  # another sink's file
        tmp_path / "report.json.tmp",  # not the pattern
        tmp_path / ".report.json.abc.tmp",  # wrong random part
        tmp_path / ".report.json.abcdefgh.tmp.bak",
        tmp_path / "sub" / ".report.json.abcdefgh.tmp",  # not next to the output file
    ]
    for path in keep[1:]:
        path.parent.mkdir(exist_ok=True)
        path.write_text("keep")
    directory = tmp_path / ".report.json.dir_abcd.tmp"  # the pattern, but a directory
    directory.mkdir()
    outside = tmp_path / "sub" / "target"
    outside.write_text("keep")
    link = tmp_path / ".report.json.link_abc.tmp"  # the pattern, but a symlink
    link.symlink_to(outside)
    sink = FileSink(str(target), LayoutChooser("cluster"))
    assert await sink.load() == {}
    assert not [p for p in stale if p.exists()]
    assert all(p.exists() for p in [*keep, directory, outside]) and link.is_symlink()
    t = tracker()
    t.apply(snapshot(PLAN, fleet(2), T0))
    assert (await sink.write(t.view())).delivered  # and the sink writes as usual afterwards
    assert sorted(p.name for p in tmp_path.glob(".report.json.*.tmp")) == sorted(
        [keep[2].name, directory.name, link.name]
    )


@pytest.mark.slow
async def test_a_writer_killed_mid_write_leaves_nothing_after_a_restart(tmp_path: Path) -> None:
    """A real process SIGKILLed inside write_atomically (held in fsync) leaves its temporary;
    the next mco-reporter start removes it and writes a valid report."""
    target = tmp_path / "report.json"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, time\n"
            "from pathlib import Path\n"
            "from reporter import filesink\n"
            "def hang(fd):\n"
            "    print('writing', flush=True)\n"
            "    time.sleep(60)\n"
            "os.fsync = hang\n"
            f"filesink.write_atomically(Path({str(target)!r}), b'x' * 100000)\n",
        ],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"writing\n"
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    (left,) = tmp_path.glob(".report.json.*.tmp")
    assert left.stat().st_size > 0 and not target.exists()
    async with fake_prometheus() as prom:
        prom.nodes = fleet(2)
        settings = parse_settings(["--once", f"--prometheus-url={prom.url}", f"--output={target}"])
        assert await run(settings) == 0
    assert list(tmp_path.iterdir()) == [target]
    validate_object(json.loads(target.read_text()))
