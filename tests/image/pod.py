"""Run a container of the chart's workloads in the real image, as the kubelet would run it.

The rendered Deployment or DaemonSet says what runs: command, args (``$(VAR)`` expanded as the
kubelet expands them), env (downward API filled in), user and group, capabilities and volumes.
Here that becomes ``buildah run --isolation chroot`` (podman run cannot set RLIMIT_NPROC in this
sandbox): hostPath volumes are bind-mounted with their ``readOnly``, an emptyDir is a fresh
directory, and ``readOnlyRootFilesystem`` is honoured by binding every top-level directory of
the image read-only over itself (buildah itself needs the container's ``/`` and ``/run``
writable, which are root-owned and so still closed to UID 65532).

chroot isolation shares the host's network and PID namespaces: a server in the container
listens on the host's 127.0.0.1, which is what the tests scrape and call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The image's own directories that stay writable to root (buildah writes /run/.containerenv)
# or are mounted over by the runtime.
_NOT_BOUND = frozenset({"run", "tmp", "dev", "proc", "sys"})
# Marks every process started here, so a leftover one can be found (and is a failure).
MARKER_ENV = "MCO_IMAGE_TEST"


@dataclass
class PodRun:
    """One container of a rendered workload, translated for buildah run."""

    command: list[str]
    env: dict[str, str]
    user: str
    read_only_root: bool
    cap_drop: list[str]
    cap_add: list[str]
    seccomp_unconfined: bool = False
    # (host path, container path, read-only)
    binds: list[tuple[Path, str, bool]] = field(default_factory=list)

    def with_args(self, *extra: str) -> PodRun:
        """The same container with arguments appended; an appended ``--flag=value`` replaces
        the chart's ``--flag=...`` (a repeatable flag such as --prometheus-url would add)."""
        names = {arg.split("=", 1)[0] for arg in extra if arg.startswith("--") and "=" in arg}
        kept = [a for a in self.command if not (a.startswith("--") and a.split("=", 1)[0] in names)]
        return self.running(*kept, *extra)

    def running(self, *command: str) -> PodRun:
        """Another command in the same container: same user, mounts and restrictions."""
        return dataclasses.replace(
            self, command=list(command), env=dict(self.env), binds=list(self.binds)
        )


def _field(path: str, downward: Mapping[str, str]) -> str:
    if path not in downward:
        raise KeyError(f"downward API field {path} is not filled in by this test")
    return downward[path]


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion in command and args (``$$`` escapes)."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        text,
    )


def from_workload(
    workload: dict[str, Any],
    *,
    scratch: Path,
    downward: Mapping[str, str],
    container: str | None = None,
) -> PodRun:
    """Translate one container of a rendered Deployment/DaemonSet.

    ``downward`` fills ``fieldRef`` env (``metadata.name``, ``spec.nodeName``...). emptyDirs are
    created under ``scratch``; a hostPath missing here whose type lets the kubelet create it
    gets an empty directory instead (a test must not create it on the host).
    """
    spec = workload["spec"]["template"]["spec"]
    (c,) = [x for x in spec["containers"] if container is None or x["name"] == container]
    env: dict[str, str] = {}
    for item in c.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(str(item["value"]), env)
        else:
            env[item["name"]] = _field(item["valueFrom"]["fieldRef"]["fieldPath"], downward)
    command = [expand(x, env) for x in [*c.get("command", []), *c.get("args", [])]]

    pod_sc = spec.get("securityContext", {})
    sc = c.get("securityContext", {})
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup", uid))
    if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) and uid in (None, 0):
        raise AssertionError("runAsNonRoot with no non-zero runAsUser: the kubelet refuses it")
    caps = sc.get("capabilities", {})

    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    binds: list[tuple[Path, str, bool]] = []
    for mount in c.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        read_only = bool(mount.get("readOnly", False))
        if "hostPath" in volume:
            host = Path(volume["hostPath"]["path"])
            if not host.exists():
                # The kubelet checks nothing for an empty type, and creates the directory.
                if volume["hostPath"].get("type", "") not in ("", "DirectoryOrCreate"):
                    raise FileNotFoundError(f"hostPath {host} (volume {mount['name']})")
                host = scratch / "hostpath" / mount["name"]
                host.mkdir(parents=True, exist_ok=True)
        elif "emptyDir" in volume:
            host = scratch / "emptydir" / mount["name"]
            host.mkdir(parents=True, exist_ok=True)
            host.chmod(0o1777)  # an emptyDir is world-writable
        else:
            raise ValueError(
                f"volume {mount['name']} of a kind this test does not mount: {sorted(volume)}"
            )
        binds.append((host, mount["mountPath"], read_only))

    return PodRun(
        command=command,
        env=env,
        user=f"{uid if uid is not None else 65532}:{gid if gid is not None else 65532}",
        read_only_root=bool(sc.get("readOnlyRootFilesystem", False)),
        cap_drop=[str(x) for x in caps.get("drop", [])],
        cap_add=[str(x) for x in caps.get("add", [])],
        seccomp_unconfined=sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        == "Unconfined",
        binds=binds,
    )


class Sandbox:
    """A working container of ``image``; every run gets its own mounts, the same files."""

    def __init__(self, image: str, *, seccomp_unconfined: bool = False) -> None:
        self.name = f"mco-image-test-{uuid.uuid4().hex[:12]}"
        self.marker = uuid.uuid4().hex
        # Otherwise buildah's default profile (containers-common's seccomp.json), as a pod's
        # RuntimeDefault is the container runtime's.
        self.seccomp_unconfined = seccomp_unconfined
        security = ["--security-opt", "seccomp=unconfined"] if seccomp_unconfined else []
        subprocess.run(
            ["buildah", "from", "--quiet", *security, "--name", self.name, image],
            check=True,
            capture_output=True,
        )
        self.root = Path(
            subprocess.run(
                ["buildah", "mount", self.name], check=True, capture_output=True, text=True
            ).stdout.strip()
        )
        # The image's own directories, before any mount point is made beside them.
        self.image_dirs = sorted(
            top.name
            for top in self.root.iterdir()
            if top.is_dir() and not top.is_symlink() and top.name not in _NOT_BOUND
        )

    def argv(self, pod: PodRun) -> list[str]:
        argv = ["buildah", "run", "--isolation", "chroot", "--user", pod.user]
        # buildah 1.28 turns `--cap-drop all --cap-add X` into no capabilities at all, which is
        # all a non-root user has anyway; root keeps buildah's defaults plus what is added.
        if [c.upper() for c in pod.cap_drop] == ["ALL"] and not pod.cap_add:
            argv += ["--cap-drop", "all"]
        for cap in pod.cap_add:
            argv += ["--cap-add", cap if cap.startswith("CAP_") else f"CAP_{cap}"]
        if pod.seccomp_unconfined != self.seccomp_unconfined:
            raise ValueError("buildah sets seccomp per container: use sandbox(seccomp_unconfined=)")
        for key, value in {**pod.env, MARKER_ENV: self.marker}.items():
            argv += ["--env", f"{key}={value}"]
        if pod.read_only_root:
            for top in self.image_dirs:
                argv += ["--volume", f"{self.root / top}:/{top}:ro"]
        for host, target, read_only in pod.binds:
            # A runtime makes mount points before the root turns read-only; so does this.
            point = self.root / target.lstrip("/")
            if host.is_dir():
                point.mkdir(parents=True, exist_ok=True)
            argv += ["--volume", f"{host}:{target}{':ro' if read_only else ''}"]
        return [*argv, self.name, "--", *pod.command]

    def run(
        self, pod: PodRun, *, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            self.argv(pod), capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{pod.command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
            )
        return result

    def leftovers(self) -> list[int]:
        """PIDs of processes this sandbox started that still run."""
        found = []
        needle = f"{MARKER_ENV}={self.marker}".encode()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and entry.name != str(os.getpid()):
                with contextlib.suppress(OSError):
                    if needle in (entry / "environ").read_bytes().split(b"\0"):
                        found.append(int(entry.name))
        return found

    def remove(self) -> None:
        subprocess.run(["buildah", "umount", self.name], capture_output=True, check=False)
        subprocess.run(["buildah", "rm", self.name], capture_output=True, check=False)


@contextlib.contextmanager
def sandbox(image: str, *, seccomp_unconfined: bool = False) -> Iterator[Sandbox]:
    box = Sandbox(image, seccomp_unconfined=seccomp_unconfined)
    try:
        yield box
    finally:
        box.remove()
