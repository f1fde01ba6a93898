"""scripts/setup-system.sh finds kernel headers for bcc, never fails without them, is idempotent,
and asks apt for Node.js and npm only where they are missing.

The running kernel is faked (a ``uname``/``dpkg`` shim first on PATH) so each layout is seen
on this one machine; the headers tree goes to a temporary MCO_KERNEL_HEADERS_DIR.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "setup-system.sh"

pytestmark = pytest.mark.slow


def test_shellcheck_is_clean() -> None:
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck missing: make test installs it")
    result = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def _fake_host(tmp_path: Path, release: str, arch: str) -> dict[str, str]:
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "uname").write_text(
        f'#!/bin/sh\n[ "$1" = -r ] && {{ echo {release}; exit 0; }}\nexec /bin/uname "$@"\n'
    )
    (shims / "dpkg").write_text(
        f'#!/bin/sh\n[ "$1" = --print-architecture ] && {{ echo {arch}; exit 0; }}\n'
        'exec /usr/bin/dpkg "$@"\n'
    )
    for shim in shims.iterdir():
        shim.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{shims}:{os.environ['PATH']}",
        "MCO_KERNEL_HEADERS_DIR": str(tmp_path / "kh"),
    }


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if shutil.which("dpkg-query") is None:
        pytest.skip("setup-system.sh targets Debian/Ubuntu (no dpkg here)")
    return subprocess.run(
        [str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def _split_build_dir() -> Path:
    """An installed kernel whose build dir is split from its source dir (Debian's layout)."""
    for build in sorted(glob.glob("/lib/modules/*/build")):
        source = Path(build).with_name("source")
        if source.is_dir() and source.resolve() != Path(build).resolve():
            return Path(build)
    pytest.skip("no installed kernel headers with split build/source dirs here")


def test_running_kernels_split_headers_are_merged_once(tmp_path: Path) -> None:
    build = _split_build_dir()
    env = _fake_host(tmp_path, build.parent.name, "amd64")
    first = _run(env)
    assert first.returncode == 0, first.stderr
    tree = tmp_path / "kh"
    # build's files over source's: both trees' include dirs, one tree for BCC_KERNEL_SOURCE
    assert (tree / ".config").is_file() and (tree / "include" / "linux").is_dir()
    assert (tmp_path / "kh.from").read_text().strip() == str(build.resolve())
    assert all(p.exists() for p in tree.iterdir())  # no link left dangling by the copy
    second = _run(env)
    assert second.returncode == 0, second.stderr
    assert "kernel headers" not in second.stdout + second.stderr  # nothing redone


def test_no_headers_anywhere_is_not_a_failure(tmp_path: Path) -> None:
    # A kernel with no headers package and an architecture with no headers under /usr/src.
    env = _fake_host(tmp_path, "mco-test-no-such-kernel", "mco-test-arch")
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert "no kernel headers for mco-test-no-such-kernel" in result.stderr
    assert "fall back to diskstats" in result.stderr
    assert not (tmp_path / "kh").exists()


def _apt_get_log(tmp_path: Path, env: dict[str, str]) -> Path:
    """An apt-get first on ``env``'s PATH that logs its arguments instead of installing."""
    log = tmp_path / "apt-get.log"
    shim = Path(env["PATH"].split(":")[0]) / "apt-get"
    shim.write_text(f'#!/bin/sh\necho "$*" >>{log}\n')
    shim.chmod(0o755)
    return log


def _path_without(tmp_path: Path, hidden: set[str]) -> str:
    """This PATH's commands, ``hidden`` left out, as links in one directory."""
    bin_dir = tmp_path / "visible"
    bin_dir.mkdir()
    for directory in reversed(os.environ["PATH"].split(":")):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            if entry.name not in hidden:
                link = bin_dir / entry.name
                link.unlink(missing_ok=True)
                link.symlink_to(entry.path)
    return str(bin_dir)


def test_node_and_npm_come_from_apt_only_where_missing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("setup-system.sh installs only as root or with sudo")
    env = _fake_host(tmp_path, "mco-test-no-such-kernel", "mco-test-arch")
    log = _apt_get_log(tmp_path, env)
    present = _run(env)
    assert present.returncode == 0, present.stderr
    asked = log.read_text() if log.exists() else ""
    assert "nodejs" not in asked and " npm" not in asked  # a Node.js from elsewhere is kept

    shims = env["PATH"].split(":")[0]
    env["PATH"] = f"{shims}:{_path_without(tmp_path, {'node', 'nodejs', 'npm'})}"
    missing = _run(env)
    assert missing.returncode == 0, missing.stderr
    installs = [line.split() for line in log.read_text().splitlines() if "install" in line]
    # nodejs only where dpkg does not list it already (as NodeSource's package it may be there).
    wanted = {"npm"} | ({"nodejs"} if not _dpkg_installed("nodejs") else set())
    assert any(wanted <= set(args) for args in installs), log.read_text()


def _dpkg_installed(package: str) -> bool:
    status = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True
    )
    return "install ok installed" in status.stdout
