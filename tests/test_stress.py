"""scripts/stress.py's memory cgroup on fake cgroup trees: which hierarchy it picks, what it
writes, and that every way of failing is a StressUnavailableError with the reason (never a bare
OSError), leaving nothing it did not create behind and removing what it did."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scripts import stress
from scripts.stress import StressUnavailableError, memory_cgroup

LIMIT = 64 * 2**20


@pytest.fixture(autouse=True)
def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(stress, "_new_cgroup_name", lambda: "mco-stress-test")


def v2_tree(root: Path, *, subtree_control: str = "") -> Path:
    """A pure cgroup v2 mount: controllers at the root."""
    root.mkdir(exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (root / "cgroup.subtree_control").write_text(subtree_control)
    return root


def hybrid_tree(root: Path) -> Path:
    """systemd's hybrid layout: v1 controllers, a v2 `unified` mount without memory."""
    (root / "unified").mkdir(parents=True)
    (root / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    (root / "unified" / "cgroup.subtree_control").write_text("")
    (root / "memory").mkdir()
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    return root


def enter(root: Path) -> None:
    with memory_cgroup(LIMIT, root=root):
        pytest.fail("must not get a cgroup")


def empty_the_cgroup(path: Path) -> None:
    """What the kernel does on rmdir: its interface files go with it (here they are plain files)."""
    for child in path.iterdir():
        child.unlink()


def test_v2_enables_the_memory_controller_then_sets_memory_max(tmp_path: Path) -> None:
    root = v2_tree(tmp_path / "cg")
    with memory_cgroup(LIMIT, root=root) as cgroup:
        assert cgroup.version == 2
        assert cgroup.path == root / "mco-stress-test"
        assert (root / "cgroup.subtree_control").read_text() == "+memory"
        assert (cgroup.path / "memory.max").read_text() == str(LIMIT)
        assert cgroup.procs == cgroup.path / "cgroup.procs"
        empty_the_cgroup(cgroup.path)
    assert not cgroup.path.exists()


def test_v2_with_memory_already_delegated_writes_nothing_to_the_parent(tmp_path: Path) -> None:
    root = v2_tree(tmp_path / "cg", subtree_control="cpu memory pids\n")
    with memory_cgroup(LIMIT, root=root) as cgroup:
        assert (root / "cgroup.subtree_control").read_text() == "cpu memory pids\n"
        assert (cgroup.path / "memory.max").read_text() == str(LIMIT)
        assert not (cgroup.path / "memory.swap.max").exists()  # no swap accounting here
        empty_the_cgroup(cgroup.path)


def test_v2_turns_swap_off_where_the_kernel_offers_it(tmp_path: Path) -> None:
    root = v2_tree(tmp_path / "cg", subtree_control="memory")
    child = root / "mco-stress-test"
    original_mkdir = Path.mkdir

    def mkdir_like_the_kernel(self: Path, *args, **kwargs) -> None:
        original_mkdir(self, *args, **kwargs)
        if self == child:
            (self / "memory.swap.max").write_text("max\n")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "mkdir", mkdir_like_the_kernel)
        with memory_cgroup(LIMIT, root=root) as cgroup:
            assert (cgroup.path / "memory.swap.max").read_text() == "0"
            empty_the_cgroup(cgroup.path)


def test_hybrid_layout_without_v2_memory_uses_v1(tmp_path: Path) -> None:
    root = hybrid_tree(tmp_path / "cg")
    with memory_cgroup(LIMIT, root=root) as cgroup:
        assert cgroup.version == 1
        assert cgroup.path == root / "memory" / "mco-stress-test"
        assert (cgroup.path / "memory.limit_in_bytes").read_text() == str(LIMIT)
        assert not (cgroup.path / "memory.max").exists()
        assert (root / "unified" / "cgroup.subtree_control").read_text() == ""
        empty_the_cgroup(cgroup.path)
    assert not cgroup.path.exists()


def test_unified_mount_with_memory_is_preferred_to_v1(tmp_path: Path) -> None:
    root = hybrid_tree(tmp_path / "cg")
    (root / "unified" / "cgroup.controllers").write_text("memory hugetlb\n")
    with memory_cgroup(LIMIT, root=root) as cgroup:
        assert cgroup.version == 2
        assert cgroup.path == root / "unified" / "mco-stress-test"
        assert (root / "unified" / "cgroup.subtree_control").read_text() == "+memory"
        empty_the_cgroup(cgroup.path)


def test_no_memory_controller_anywhere(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    (root / "unified").mkdir(parents=True)
    (root / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    with pytest.raises(StressUnavailableError, match="no memory cgroup controller"):
        enter(root)
    assert sorted(p.name for p in root.iterdir()) == ["unified"]


def test_v2_parent_that_refuses_to_delegate_is_unavailable_not_oserror(tmp_path: Path) -> None:
    # A write the kernel refuses (EBUSY for a parent holding processes); here: a directory.
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("memory\n")
    (root / "cgroup.subtree_control").mkdir()
    with pytest.raises(StressUnavailableError) as caught:
        enter(root)
    message = str(caught.value)
    assert "cannot enable the memory controller" in message
    assert str(root / "cgroup.subtree_control") in message
    assert isinstance(caught.value.__cause__, OSError)
    assert not (root / "mco-stress-test").exists()


def test_refused_limit_write_removes_the_new_cgroup(tmp_path: Path) -> None:
    root = hybrid_tree(tmp_path / "cg")
    child = root / "memory" / "mco-stress-test"
    original_mkdir = Path.mkdir
    removed: list[Path] = []

    def mkdir_then_block_the_limit(self: Path, *args, **kwargs) -> None:
        original_mkdir(self, *args, **kwargs)
        if self == child:  # the limit file cannot be written (a directory stands in its place)
            original_mkdir(self / "memory.limit_in_bytes")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "mkdir", mkdir_then_block_the_limit)
        mp.setattr(stress, "_remove_cgroup", kernel_like_removal(removed))
        with pytest.raises(StressUnavailableError, match=r"cannot write '67108864' to .*limit"):
            enter(root)
    assert removed == [child]
    assert not child.exists()


def kernel_like_removal(removed: list[Path]):
    """The real removal, after dropping the interface files as the kernel's rmdir would."""
    real = stress._remove_cgroup

    def remove(path: Path, timeout: float = 10.0) -> None:
        removed.append(path)
        for entry in path.iterdir():
            entry.rmdir() if entry.is_dir() else entry.unlink()
        real(path, timeout)

    return remove


def test_existing_directory_of_the_same_name_is_left_alone(tmp_path: Path) -> None:
    root = hybrid_tree(tmp_path / "cg")
    theirs = root / "memory" / "mco-stress-test"
    theirs.mkdir()
    (theirs / "keep").write_text("not ours")
    with pytest.raises(StressUnavailableError, match="cannot create the cgroup"):
        enter(root)
    assert (theirs / "keep").read_text() == "not ours"


def test_not_root_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    root = v2_tree(tmp_path / "cg")
    with pytest.raises(StressUnavailableError, match="needs root"):
        enter(root)
    assert (root / "cgroup.subtree_control").read_text() == ""


def test_removal_kills_what_is_left_inside_and_gives_up_in_bounded_time(tmp_path: Path) -> None:
    path = tmp_path / "cg" / "mco-stress-test"
    path.mkdir(parents=True)
    (path / "cgroup.procs").write_text("")  # nothing to kill; rmdir keeps failing (not empty)
    stress._remove_cgroup(path, timeout=0.3)
    assert path.exists()  # gave up instead of hanging
    (path / "cgroup.procs").unlink()
    stress._remove_cgroup(path, timeout=0.3)
    assert not path.exists()
    stress._remove_cgroup(path, timeout=0.3)  # already gone: fine
