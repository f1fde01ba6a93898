"""CPU per scrape and RSS: mco-exporter against node_exporter with the matching collectors.

Both exporters run side by side and are scraped alternately, round after round, the way
Prometheus scrapes (gzip, keep-alive where the server allows it), so the machine's noise hits
both alike. Also measured: the same collectors behind an aiohttp handler, the alternative to
prometheus_client's built-in server. Targets (issue 2): CPU ratio <= 1.0 with biolatency off,
RSS <= 40 MiB.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import requests

from bench.cpu import cpu_seconds, rss_bytes
from scripts.procs import Managed, free_port

NODE_EXPORTER_ARGS = [
    "--collector.disable-defaults",
    "--collector.pressure",
    "--collector.meminfo",
    "--collector.vmstat",
    "--collector.stat",
    "--collector.diskstats",
]
MCO_ARGS = ["--no-collector.biolatency", "--log.level=warn"]
ACCEPT = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.1"
RSS_TARGET = 40 * 1024 * 1024


def start(argv: list[str], name: str, workdir: Path) -> tuple[Managed, str]:
    port = free_port()
    proc = Managed(
        [*argv, f"--web.listen-address=127.0.0.1:{port}"],
        name=name,
        log_path=workdir / f"{name}.log",
    )
    proc.start()
    url = f"http://127.0.0.1:{port}/metrics"
    proc.wait_http(url, timeout=30)
    return proc, url


def scrape_cpu(proc: Managed, url: str, session: requests.Session, scrapes: int) -> float:
    """CPU seconds the server spent per scrape over ``scrapes`` scrapes."""
    headers = {"Accept": ACCEPT, "Accept-Encoding": "gzip"}
    before = cpu_seconds(proc.pid)
    for _ in range(scrapes):
        response = session.get(url, headers=headers, timeout=10)
        response.raise_for_status()
    return (cpu_seconds(proc.pid) - before) / scrapes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.exporter")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--scrapes", type=int, default=None, help="scrapes per exporter per round")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 10)
    scrapes = args.scrapes or (100 if args.quick else 400)
    node_exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if node_exporter is None:
        print("node_exporter not installed (apt-get install prometheus-node-exporter)")
        return 1
    with tempfile.TemporaryDirectory(prefix="mco-bench-") as tmp:
        workdir = Path(tmp)
        servers = {
            "node_exporter": start([node_exporter, *NODE_EXPORTER_ARGS], "node_exporter", workdir),
            "mco (prometheus_client server)": start(
                [sys.executable, "-m", "exporter", *MCO_ARGS], "mco", workdir
            ),
            "mco (aiohttp handler)": start(
                [sys.executable, "-m", "bench.exporter_aiohttp", *MCO_ARGS], "mco-aiohttp", workdir
            ),
        }
        # Informational: the default configuration, eBPF collector on (more series per scrape,
        # and the memory bcc's compiler leaves behind, see exporter/compiler_memory.py).
        with_ebpf = "mco, biolatency on (default; informational)"
        servers[with_ebpf] = start(
            [sys.executable, "-m", "exporter", "--log.level=warn"], "mco-ebpf", workdir
        )
        try:
            sessions = {name: requests.Session() for name in servers}
            for name, (proc, url) in servers.items():  # warm up
                scrape_cpu(proc, url, sessions[name], 20)
            per_scrape: dict[str, list[float]] = {name: [] for name in servers}
            for _ in range(rounds):
                for name, (proc, url) in servers.items():
                    per_scrape[name].append(scrape_cpu(proc, url, sessions[name], scrapes))
            rss = {name: rss_bytes(proc.pid) for name, (proc, _) in servers.items()}
            sizes = {
                name: len(requests.get(url, timeout=10).content)
                for name, (_, url) in servers.items()
            }
        finally:
            for proc, _ in servers.values():
                proc.stop()
    baseline = statistics.median(per_scrape["node_exporter"])
    print(f"{rounds} rounds x {scrapes} scrapes per exporter, alternating; gzip as Prometheus asks")
    print(f"{'server':46} {'CPU/scrape':>11} {'ratio':>7} {'RSS':>9} {'body':>8}")
    for name, values in per_scrape.items():
        median = statistics.median(values)
        print(
            f"{name:46} {median * 1e3:9.3f}ms {median / baseline:7.2f} "
            f"{rss[name] / 2**20:7.1f}Mi {sizes[name]:7d}B"
        )
    mco = statistics.median(per_scrape["mco (prometheus_client server)"])
    mco_rss = rss["mco (prometheus_client server)"]
    ok = mco / baseline <= 1.0 and mco_rss <= RSS_TARGET
    print(
        f"target: CPU ratio <= 1.00 (got {mco / baseline:.2f}), RSS <= 40 MiB "
        f"(got {mco_rss / 2**20:.1f} MiB): {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
