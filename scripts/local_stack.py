"""`make run`: MCO's main job on this host.

For now this runs mco-exporter on this machine and says where its metrics are; the full local
stack (Prometheus with the generated rules, the reporter, the extender and a live view) builds
on it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make run")
    parser.add_argument("--exporter-port", type=int, default=9847)
    parser.add_argument("--stress", choices=["io", "memory"], default=None)
    args = parser.parse_args(argv)
    url = f"http://127.0.0.1:{args.exporter_port}/metrics"
    print(f"mco-exporter on this host: metrics at {url} (Ctrl-C stops it)", flush=True)
    env = dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", f"--web.listen-address=127.0.0.1:{args.exporter_port}"],
        env=env,
    )
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
