"""`make image`: MCO's container image built with buildah from Debian packages, no registry.

No container registry is reachable on MCO's machines, so the Dockerfile's base comes from
Debian's own packages: mmdebstrap writes a bookworm rootfs with python3, python3-venv and
python3-bpfcc from the configured apt sources, and buildah imports it as ``localhost/mco-base``.
``buildah bud --isolation chroot`` then builds the Dockerfile on it, with pip pinned to the
versions installed in the environment running this (the ones the tests ran with).

Both steps are cached: the rootfs under ``.cache/image`` keyed on its package list, the image in
buildah's storage tagged with a hash of everything the build reads. `make image` and the image
tests (tests/image) share this, so an unchanged tree is built once.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "image"
DEFAULT_ARCHIVE = CACHE / "mco.tar"
SUITE = "bookworm"
# The build stage needs python3-venv; the exporter imports Debian's bcc.
BASE_PACKAGES = ("python3", "python3-venv", "python3-bpfcc")
BASE_NAME = "localhost/mco-base"
LOCAL_NAME = "localhost/mco"
TOOLS = ("buildah", "mmdebstrap")


def chart_image_ref() -> str:
    """The reference the chart pulls by default: image.registry/image.repository:appVersion."""
    chart = yaml.safe_load((ROOT / "charts/mco/Chart.yaml").read_text())
    image = yaml.safe_load((ROOT / "charts/mco/values.yaml").read_text())["image"]
    return f"{image['registry']}/{image['repository']}:{image['tag'] or chart['appVersion']}"


def missing() -> list[str]:
    """What this machine lacks to build and run the image; empty when it can."""
    reasons = [
        f"{tool} is not installed (apt-get install {tool}; scripts/setup-system.sh does it)"
        for tool in TOOLS
        if shutil.which(tool) is None
    ]
    if os.geteuid() != 0:
        reasons.append(f"not root (uid {os.geteuid()}): buildah's chroot isolation needs root")
    return reasons


def engine_refusal() -> str | None:
    """Why buildah cannot make and mount a container here (a sandbox without overlay or mount
    rights), or None. Needs no image and no network, so a Dockerfile bug never hides behind it."""
    made = subprocess.run(["buildah", "from", "scratch"], capture_output=True, text=True)
    if made.returncode != 0:
        return f"buildah cannot create a container here: {made.stderr.strip()}"
    container = made.stdout.strip()
    try:
        mounted = subprocess.run(["buildah", "mount", container], capture_output=True, text=True)
        if mounted.returncode != 0:
            return f"buildah cannot mount a container here: {mounted.stderr.strip()}"
        return None
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)


def copied_sources(dockerfile: str | None = None) -> list[str]:
    """The paths the Dockerfile copies from the build context."""
    text = (ROOT / "Dockerfile").read_text() if dockerfile is None else dockerfile
    sources: list[str] = []
    for line in text.splitlines():
        match = re.match(r"COPY (?!--from)(.+) \S+$", line)
        if match:
            sources += match.group(1).split()
    return sources


def runtime_pins(distribution: str = "mco") -> list[str]:
    """``name==version`` for every package ``distribution`` needs at run time, as installed here.

    Walks the installed metadata from ``distribution``'s requirements (no extras), following
    only requirements whose markers hold on this interpreter, as pip would in the image.
    """
    pins: dict[str, str] = {}
    todo = [distribution]
    while todo:
        name = todo.pop()
        dist = importlib.metadata.distribution(name)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            key = re.sub(r"[-_.]+", "-", req.name).lower()
            if key in pins:
                continue
            pins[key] = importlib.metadata.version(req.name)
            todo.append(req.name)
    return sorted(f"{name}=={version}" for name, version in pins.items())


def _files(sources: list[str]) -> Iterator[Path]:
    for src in sources:
        path = ROOT / src
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                yield file


def source_key(pins: list[str], base: str) -> str:
    """A hash of everything the build reads: Dockerfile, copied files, pins and base image."""
    digest = hashlib.sha256()
    for part in (base, " ".join(pins)):
        digest.update(part.encode() + b"\0")
    for file in [ROOT / "Dockerfile", *_files(copied_sources())]:
        digest.update(str(file.relative_to(ROOT)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def host_ca_bundle() -> Path | None:
    """The CA bundle pip uses here, when one is configured: the build's pip needs it too
    where PyPI is reached through a TLS-intercepting proxy."""
    for var in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        value = os.environ.get(var)
        if value and Path(value).is_file():
            return Path(value)
    return None


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, text=True, **kwargs)  # type: ignore[call-overload,no-any-return]


def image_exists(ref: str) -> bool:
    return (
        subprocess.run(
            ["buildah", "inspect", "--type", "image", ref], capture_output=True, check=False
        ).returncode
        == 0
    )


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """One build at a time (make image beside a test run)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


class BaseUnavailableError(RuntimeError):
    """mmdebstrap could not build the base (typically: the apt sources are unreachable)."""


def base_image(log: bool = True) -> str:
    """``localhost/mco-base:KEY``: a Debian rootfs from mmdebstrap, imported into buildah."""
    key = hashlib.sha256(f"{SUITE} {' '.join(BASE_PACKAGES)}".encode()).hexdigest()[:12]
    ref = f"{BASE_NAME}:{key}"
    if image_exists(ref):
        return ref
    rootfs = CACHE / f"base-{SUITE}-{key}.tar"
    if not rootfs.exists():
        if log:
            print(f"image: mmdebstrap {SUITE} rootfs with {', '.join(BASE_PACKAGES)}", flush=True)
        partial = rootfs.with_suffix(".partial.tar")
        argv = [
            "mmdebstrap",
            "--quiet",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            SUITE,
            str(partial),
        ]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise BaseUnavailableError(
                f"mmdebstrap could not build the {SUITE} base from the configured apt sources"
                f" (exit {done.returncode}):\n{tail}"
            )
        partial.rename(rootfs)
    if log:
        print(f"image: importing {rootfs.name} as {ref}", flush=True)
    container = _run(["buildah", "from", "scratch"], capture_output=True).stdout.strip()
    try:
        _run(["buildah", "add", "--quiet", container, str(rootfs), "/"])
        _run(["buildah", "config", "--cmd", "/bin/sh", container])
        _run(["buildah", "commit", "--quiet", container, ref], capture_output=True)
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    return ref


@dataclass(frozen=True)
class Built:
    ref: str  # localhost/mco:src-KEY, also tagged as the chart's default reference
    seconds: float  # 0 when an earlier build was reused
    reused: bool


def build(*, log: bool = True) -> Built:
    """The image of this tree, built unless an identical build is already in buildah's store.

    Raises BaseUnavailableError when the base cannot be made (no apt sources reachable).
    """
    with _lock():
        start = time.monotonic()
        base = base_image(log)
        pins = runtime_pins()
        ref = f"{LOCAL_NAME}:src-{source_key(pins, base)}"
        if image_exists(ref):
            _run(["buildah", "tag", ref, chart_image_ref()])
            return Built(ref, 0.0, reused=True)
        if log:
            print(f"image: buildah bud {ref} on {base}", flush=True)
        ca = host_ca_bundle()
        _run(
            [
                "buildah",
                "bud",
                *(["--secret", f"id=pip-ca,src={ca}"] if ca else []),
                "--isolation",
                "chroot",
                "--layers",
                "--force-rm",  # no intermediate container left behind by a failed step
                "--quiet",
                "--build-arg",
                f"BASE_IMAGE={base}",
                "--build-arg",
                f"PIP_CONSTRAINTS={' '.join(pins)}",
                "--tag",
                ref,
                "--tag",
                chart_image_ref(),
                "--file",
                str(ROOT / "Dockerfile"),
                str(ROOT),
            ],
            stdout=subprocess.DEVNULL if not log else None,
        )
        seconds = time.monotonic() - start
        prune()
        return Built(ref, seconds, reused=False)


def prune(keep: int = 3, cache_days: float = 1.0) -> None:
    """Drop all but the newest ``keep`` builds of earlier trees, and `--layers` cache images
    older than ``cache_days``, so disk use stays bounded however often the tree changes
    (worktrees share buildah's store). The dependency layer is rebuilt at most once a day."""
    listing = json.loads(_run(["buildah", "images", "--json"], capture_output=True).stdout)
    builds = sorted(
        (
            (entry["created"], name)
            for entry in listing or []
            for name in entry.get("names") or []
            if name.startswith(f"{LOCAL_NAME}:src-")
        ),
        reverse=True,
    )
    stale = [name for _, name in builds[keep:]]
    cutoff = time.time() - cache_days * 86400
    stale += [
        entry["id"]
        for entry in listing or []
        if not entry.get("names") and entry.get("created", cutoff) < cutoff
    ]
    for name in stale:
        # Fails harmlessly for an image another one still builds on.
        subprocess.run(["buildah", "rmi", name], capture_output=True, check=False)


def image_size(ref: str) -> str:
    """buildah's own figure for the image (uncompressed layers), e.g. ``530 MB``."""
    out = _run(["buildah", "images", "--json", ref], capture_output=True).stdout
    size: str = json.loads(out)[0]["size"]
    return size


def write_archive(ref: str, path: Path, name: str) -> None:
    """A docker-archive tarball holding ``ref`` as ``name`` (for `kind load image-archive`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    _run(["buildah", "push", "--quiet", ref, f"docker-archive:{path}:{name}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive", type=Path, default=DEFAULT_ARCHIVE, help="docker-archive path")
    parser.add_argument("--tag", default=chart_image_ref(), help="name inside the archive")
    args = parser.parse_args(argv)
    reasons = missing()
    if reasons:
        print("image: cannot build here: " + "; ".join(reasons), file=sys.stderr)
        return 1
    try:
        built = build()
    except BaseUnavailableError as exc:
        print(f"image: {exc}", file=sys.stderr)
        return 1
    write_archive(built.ref, args.archive, args.tag)
    how = "reused (unchanged tree)" if built.reused else f"built in {built.seconds:.0f}s"
    print(
        f"image: {built.ref} {how}, {image_size(built.ref)}\n"
        f"image: {args.archive} ({args.archive.stat().st_size / 2**20:.0f} MiB) holds {args.tag}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
