"""Real servers as child processes: Prometheus, VictoriaMetrics, MCO's own components.

Used by `make run`, the integration tests and the benchmarks, so all three start the same real
parts the same way. Every child runs in its own process group and is killed with it, so nothing
is left running after a test or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

# Ports are handed out below the kernel's ephemeral range, so that no client socket (ours or
# another process's) takes one between the check and the server's bind, and each xdist worker
# draws from its own lane, so that two workers never pick the same port at the same moment.
_PORTS_FLOOR = 10000
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_next_port: int | None = None


def _lane() -> tuple[int, int]:
    """[low, high) for this process: a share of the ports below the ephemeral range."""
    try:
        ceiling = int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ceiling = 32768
    ceiling = max(ceiling, _PORTS_FLOOR + 1000)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    lanes = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
    index = int(worker) if worker.isdigit() else 0
    count = max(int(lanes) if lanes.isdigit() else 1, index + 1)
    width = (ceiling - _PORTS_FLOOR) // count
    return _PORTS_FLOOR + index * width, _PORTS_FLOOR + (index + 1) * width


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and that no other xdist worker and no
    outgoing connection will pick meanwhile. Successive calls walk the lane from a random start
    (a benchmark a test runs as a subprocess starts elsewhere from its parent)."""
    global _next_port
    low, high = _lane()
    if _next_port is None or not low <= _next_port < high:
        _next_port = low + int.from_bytes(os.urandom(2), "big") % (high - low)
    for _ in range(high - low):
        port = _next_port
        _next_port = low + (port + 1 - low) % (high - low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free TCP port in {low}-{high - 1}")


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    interval: float = 0.1,
    what: str = "condition",
    retry_on: tuple[type[Exception], ...] = (OSError,),
) -> None:
    """Call ``check`` every ``interval`` seconds until it returns true.

    An exception in ``retry_on`` means "not yet": the default, OSError, covers a server that is
    still starting (requests' connection errors, timeouts, HTTP errors and unparsable answers
    are all OSErrors) and a file not written yet. Any other exception is a bug in the check or
    a real failure, and propagates at once. TimeoutError after ``timeout`` seconds names the
    last retried error.
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
            last = None
        except retry_on as exc:
            last = exc
        time.sleep(interval)
    reason = f" (last error: {type(last).__name__}: {last})" if last is not None else ""
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{reason}") from last


class Managed:
    """A child process in its own session; ``stop()`` kills its whole process group."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.name = name
        self.log_path = log_path
        self.env = dict(os.environ, **(env or {}))
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )
        log.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)
        # Children that outlived the leader (a shell's children) go with the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def wait_http(self, url: str, *, timeout: float = 30.0, **kwargs: Any) -> None:
        def ready() -> bool:
            if not self.alive:
                raise RuntimeError(f"{self.name} exited:\n{self.log_tail()}")
            return requests.get(url, timeout=1, **kwargs).status_code == 200

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except RuntimeError:
                raise
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise TimeoutError(
            f"{self.name} not ready at {url} after {timeout:.0f}s:\n{self.log_tail()}"
        )

    def __enter__(self) -> Managed:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class ScrapeTarget:
    job: str
    address: str  # host:port
    labels: dict[str, str] = field(default_factory=dict)
    scheme: str = "http"
    metrics_path: str = "/metrics"


def scrape_configs(targets: Sequence[ScrapeTarget], **extra: Any) -> list[dict[str, Any]]:
    """One static scrape config per job, in the shape Prometheus and VictoriaMetrics share."""
    jobs: dict[str, list[ScrapeTarget]] = {}
    for t in targets:
        jobs.setdefault(t.job, []).append(t)
    return [
        {
            "job_name": job,
            "scheme": ts[0].scheme,
            "metrics_path": ts[0].metrics_path,
            **extra,
            "static_configs": [{"targets": [t.address], "labels": t.labels} for t in ts],
        }
        for job, ts in jobs.items()
    ]


class _PromQLServer(Managed):
    """A server answering PromQL over HTTP (``/api/v1/query``) on 127.0.0.1:``port``."""

    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, str] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        response = requests.get(f"{self.url}/api/v1/query", params=params, timeout=10)
        try:
            body = response.json()
        except requests.JSONDecodeError as exc:
            # Still an OSError (retried by wait_until), but one that says who answered what.
            raise requests.JSONDecodeError(
                f"HTTP {response.status_code} from {self.url} is not JSON: {response.text[:200]!r}",
                exc.doc,
                exc.pos,
            ) from exc
        if body.get("status") != "success":
            raise RuntimeError(f"query {expr!r} failed: {body.get('error', response.text)}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The single value of a one-series query, or None when it returns nothing."""
        result = self.query(expr, at)
        if not result:
            return None
        if len(result) > 1:
            raise RuntimeError(f"{expr!r} returned {len(result)} series")
        return float(result[0]["value"][1])

    def wait_for_series(self, expr: str, *, timeout: float = 60.0) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []

        def check() -> bool:
            found[:] = self.query(expr)
            return bool(found)

        wait_until(check, timeout=timeout, what=f"{expr!r} in {self.url}")
        return found


class Prometheus(_PromQLServer):
    """A real Prometheus (Debian's package) with a generated config."""

    def __init__(
        self,
        workdir: Path,
        *,
        targets: Sequence[ScrapeTarget] = (),
        rule_files: Sequence[Path] = (),
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        port: int | None = None,
        binary: str = "prometheus",
        extra_args: Sequence[str] = (),
    ) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.config_path = workdir / "prometheus.yml"
        self.targets = list(targets)
        self.rule_files = list(rule_files)
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.write_config()
        super().__init__(
            [
                binary,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
                "--log.level=warn",
                *extra_args,
            ],
            name="prometheus",
            log_path=workdir / "prometheus.log",
        )

    def write_config(self) -> None:
        config = {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "evaluation_interval": self.evaluation_interval,
            },
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": scrape_configs(self.targets),
        }
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def start(self) -> None:
        super().start()
        self.wait_http(f"{self.url}/-/ready")

    def reload(self) -> None:
        self.write_config()
        requests.post(f"{self.url}/-/reload", timeout=10).raise_for_status()


@contextlib.contextmanager
def running(*servers: Managed) -> Iterator[None]:
    """Start servers in order, stop them in reverse, whatever happens in between."""
    started: list[Managed] = []
    try:
        for server in servers:
            server.start()
            started.append(server)
        yield
    finally:
        for server in reversed(started):
            server.stop()


class VictoriaMetrics(_PromQLServer):
    """A real single-node VictoriaMetrics (Debian's package) that scrapes its targets itself.

    New samples are visible to queries after ``latency_offset`` (VictoriaMetrics' default is
    30 s; tests want them at once), and the response cache is off so a query sees fresh data.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        targets: Sequence[ScrapeTarget] = (),
        scrape_interval: str = "1s",
        port: int | None = None,
        latency_offset: str = "1s",
        binary: str = "victoria-metrics",
        extra_args: Sequence[str] = (),
    ) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.config_path = workdir / "scrape.yml"
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        self.write_config()
        super().__init__(
            [
                binary,
                f"-storageDataPath={workdir / 'data'}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-promscrape.config={self.config_path}",
                f"-search.latencyOffset={latency_offset}",
                "-search.disableCache",
                "-retentionPeriod=1d",
                "-loggerLevel=WARN",
                *extra_args,
            ],
            name="victoria-metrics",
            log_path=workdir / "victoria-metrics.log",
        )

    def write_config(self) -> None:
        config = {
            "global": {"scrape_interval": self.scrape_interval},
            # honor_timestamps as Prometheus does by default
            "scrape_configs": scrape_configs(self.targets, honor_timestamps=True),
        }
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def start(self) -> None:
        super().start()
        self.wait_http(f"{self.url}/health")


class _VMServer(Managed):
    """A VictoriaMetrics tool serving on 127.0.0.1:``port``, ready once ``/health`` answers."""

    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        super().start()
        self.wait_http(f"{self.url}/health")


class VMAgent(_VMServer):
    """A real vmagent scraping ``targets`` and remote-writing everything to each of
    ``remote_write_urls``; with ``members`` > 1, member ``member`` of a scraper cluster keeps
    only its share of the targets (``-promscrape.cluster.*``: each target goes to one member,
    by a hash of its labels)."""

    def __init__(
        self,
        workdir: Path,
        *,
        targets: Sequence[ScrapeTarget],
        remote_write_urls: Sequence[str],
        members: int = 1,
        member: int = 0,
        scrape_interval: str = "1s",
        port: int | None = None,
        binary: str = "vmagent",
    ) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "scrape.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": scrape_interval},
                    "scrape_configs": scrape_configs(targets, honor_timestamps=True),
                },
                sort_keys=False,
            )
        )
        cluster = (
            [
                f"-promscrape.cluster.membersCount={members}",
                f"-promscrape.cluster.memberNum={member}",
            ]
            if members > 1
            else []
        )
        super().__init__(
            [
                binary,
                f"-promscrape.config={config}",
                *cluster,
                *(f"-remoteWrite.url={url}/api/v1/write" for url in remote_write_urls),
                f"-remoteWrite.tmpDataPath={workdir / 'buffer'}",
                "-remoteWrite.flushInterval=100ms",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                "-loggerLevel=WARN",
            ],
            name="vmagent",
            log_path=workdir / "vmagent.log",
        )

    def scraped(self) -> set[str]:
        """The addresses of the targets this member scrapes."""
        body = requests.get(f"{self.url}/api/v1/targets", timeout=10).json()
        return {t["discoveredLabels"]["__address__"] for t in body["data"]["activeTargets"]}


class VMAlert(_VMServer):
    """A real vmalert evaluating rule files against a PromQL datasource, writing results back."""

    def __init__(
        self,
        workdir: Path,
        *,
        rule_files: Sequence[Path],
        datasource_url: str,
        remote_write_url: str,
        evaluation_interval: str = "1s",
        notifier_url: str | None = None,
        port: int | None = None,
        binary: str = "vmalert",
        extra_args: Sequence[str] = (),
    ) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(
            [
                binary,
                *(f"-rule={p}" for p in rule_files),
                f"-datasource.url={datasource_url}",
                f"-remoteWrite.url={remote_write_url}",
                "-remoteWrite.flushInterval=100ms",
                f"-evaluationInterval={evaluation_interval}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                # Alerts need a notifier; a port nobody listens on is enough when only the
                # recording rules are of interest.
                f"-notifier.url={notifier_url or f'http://127.0.0.1:{free_port()}'}",
                "-loggerLevel=WARN",
                *extra_args,
            ],
            name="vmalert",
            log_path=workdir / "vmalert.log",
        )

    @staticmethod
    def check(
        rule_files: Sequence[Path], binary: str = "vmalert"
    ) -> subprocess.CompletedProcess[str]:
        """``vmalert -dryRun``: parse the rules (MetricsQL and templates) without running."""
        return subprocess.run(
            [binary, "-dryRun", *(f"-rule={p}" for p in rule_files)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
