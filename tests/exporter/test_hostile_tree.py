"""A hostile ``--path.*`` tree: FIFOs, devices, sockets, huge files and non-UTF-8 text.

Each must fail only the collector that reads it, with a reason, and fast: a scrape holds the
scrape lock, so one blocking read would hang every later scrape.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.cli import build_collector, parse_settings
from exporter.paths import MAX_READ_BYTES, RefusedFileError, read_text
from exporter.registry import specs
from exporter.scrape import NodeCollector
from tests.exporter.conftest import FIXTURES, node_collector, samples_of, scrape, tree_paths

SUCCESS = "mco_exporter_collector_success"


def _unblock(fifo: Path) -> None:
    """Give a reader stuck on ``fifo`` (the code before the fix) its end of file."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return  # no reader waiting
    os.close(fd)


@pytest.fixture
def hostile_tree(tmp_path: Path) -> Iterator[Path]:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "linux-6.1-metal", tree)
    (tree / "proc/vmstat").unlink()
    os.mkfifo(tree / "proc/vmstat")  # a recorded tree taken with a FIFO in it
    with open(tree / "proc/meminfo", "r+b") as f:
        f.truncate(100 << 20)  # 100 MB, sparse: costs no disk
    (tree / "proc/diskstats").unlink()
    (tree / "proc/diskstats").symlink_to("/dev/zero")  # an endless character device
    (tree / "proc/schedstat").unlink()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tree / "proc/schedstat"))
    try:
        yield tree
    finally:
        server.close()
        _unblock(tree / "proc/vmstat")


def _scrape_within(collector: NodeCollector, seconds: float) -> str:
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(scrape(collector)), daemon=True)
    start = time.perf_counter()
    thread.start()
    thread.join(seconds)
    assert result, f"the scrape did not finish within {seconds} s"
    assert time.perf_counter() - start < seconds
    return result[0]


def test_a_bad_tree_fails_only_its_collectors_and_never_blocks_a_scrape(hostile_tree, caplog):
    collector = node_collector(tree_paths(hostile_tree))
    for _ in range(3):  # and again: nothing is left stuck or open
        samples = samples_of(_scrape_within(collector, 1.0))
        success = {
            dict(labels)["collector"]: v for (n, labels), v in samples.items() if n == SUCCESS
        }
        assert success == {
            "cpu": 1,
            "kata": 1,
            "pressure": 1,
            "resctrl": 1,
            "diskstats": 0,  # /dev/zero
            "meminfo": 0,  # 100 MB
            "schedstat": 0,  # socket
            "softirqs": 1,
            "vmstat": 0,  # FIFO
        }
    # The good collectors' samples are all there, exactly as without the bad files.
    clean = samples_of(scrape(node_collector(tree_paths(FIXTURES / "linux-6.1-metal"))))
    for (name, labels), value in clean.items():
        if name.startswith(("mco_cpu_", "mco_pressure_", "mco_llc_", "mco_memory_bandwidth")):
            assert samples[(name, labels)] == value, name
    reasons = {r.collector: r.reason for r in caplog.records if hasattr(r, "reason")}
    assert "not a regular file (FIFO)" in reasons["vmstat"]
    assert "not a regular file (character device)" in reasons["diskstats"]
    assert "not a regular file (socket)" in reasons["schedstat"]
    assert f"larger than {MAX_READ_BYTES} bytes" in reasons["meminfo"]


def test_read_text_refuses_what_is_not_a_small_regular_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    try:
        for path, reason in ((fifo, "FIFO"), (tmp_path, "directory"), ("/dev/null", "device")):
            with pytest.raises(RefusedFileError, match=reason) as caught:
                read_text(str(path))
            assert caught.value.errno == errno.EINVAL
    finally:
        _unblock(fifo)
    exact = tmp_path / "exact"
    exact.write_bytes(b"x" * 4096)
    assert read_text(str(exact), limit=4096) == "x" * 4096
    with pytest.raises(RefusedFileError, match="larger than 4095 bytes") as caught:
        read_text(str(exact), limit=4095)
    assert caught.value.errno == errno.EFBIG
    # An absent file stays absent (collectors treat ENOENT as "not on this host").
    with pytest.raises(FileNotFoundError):
        read_text(str(tmp_path / "absent"))


def test_files_reporting_size_0_are_still_capped():
    """procfs files report st_size 0: the cap counts the bytes actually read."""
    text = read_text("/proc/self/maps")
    assert text and len(text.encode()) <= MAX_READ_BYTES
    with pytest.raises(RefusedFileError, match="larger than 16 bytes"):
        read_text("/proc/self/maps", limit=16)


def test_text_that_is_not_utf8_is_decoded_with_replacement(tmp_path):
    path = tmp_path / "osrelease"
    path.write_bytes(b"6.1.0-\xff\xfe-\xc3\xa9t\xc3\xa9\n")
    assert read_text(str(path)) == "6.1.0-\ufffd\ufffd-\u00e9t\u00e9\n"


def test_non_utf8_kernel_release_and_node_name_do_not_stop_the_exporter(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "linux-6.1-metal", tree)
    (tree / "proc/sys/kernel/osrelease").write_bytes(b"6.1.0-\xff\xfe-custom\n")
    all_specs = specs()
    # What argv or $NODE_NAME hold when the bytes are not UTF-8 (Python's surrogateescape).
    hostname = os.fsdecode(b"node-\xff")
    settings = parse_settings(
        [f"--path.procfs={tree}/proc", f"--path.sysfs={tree}/sys", f"--node-name={hostname}"],
        all_specs,
    )
    collector = build_collector(settings, all_specs)
    try:
        samples = samples_of(scrape(collector))
    finally:
        collector.close()
    info = {
        dict(labels)["kernel"]: dict(labels)
        for (n, labels), _ in samples.items()
        if n == "mco_node_info"
    }
    assert list(info) == ["6.1.0-\ufffd\ufffd-custom"]
    assert info["6.1.0-\ufffd\ufffd-custom"]["nodename"] == "node-\ufffd"


def test_a_non_utf8_directory_name_fails_no_scrape(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "linux-6.1-metal", tree)
    domain = os.path.join(os.fsencode(tree / "sys/fs/resctrl"), b"b\xffd", b"mon_data/mon_L3_00")
    os.makedirs(domain)
    with open(os.path.join(domain, b"llc_occupancy"), "wb") as f:
        f.write(b"65536\n")
    samples = samples_of(scrape(node_collector(tree_paths(tree))))
    groups = {dict(labels).get("group") for (n, labels), _ in samples.items()}
    assert {"/batch", "/b\ufffdd"} <= groups
    assert samples[(SUCCESS, frozenset({("collector", "resctrl")}))] == 1
