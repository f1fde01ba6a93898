#!/usr/bin/env bash
# Try the perf_llc collector on a lent host that may have a real PMU (see docs/exporter.md).
# Run from the repo root with a python3 that has prometheus_client; writes to $OUT if set.
set -u
out=${OUT:-/tmp/mco-device-check}; mkdir -p "$out"
{
  echo "== host"; uname -a; nproc
  echo "== PMU"; ls /sys/bus/event_source/devices 2>&1
  echo "perf_event_paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2>&1)"
  echo "== collector"
  PYTHONPATH=. python3 - <<'PY'
import time
from exporter.paths import Paths
from exporter.registry import CollectorConfig
from exporter.errors import UnavailableError
from exporter.collectors.perf_llc import PerfLLCCollector
for events in ("generic", "ll-read"):
    try:
        c = PerfLLCCollector(CollectorConfig(Paths(), {"events": events}))
    except UnavailableError as exc:
        print(events, "unavailable:", exc)
        continue
    a = [m.samples[0].value for m in c.update()]
    x = sum(i * i for i in range(3_000_000))  # some work to count
    time.sleep(1)
    b = [m.samples[0].value for m in c.update()]
    print(events, "references/misses delta:", b[0] - a[0], b[1] - a[1],
          "miss ratio:", (b[1] - a[1]) / max(b[0] - a[0], 1))
    c.close()
PY
  echo "== full scrape"
  PYTHONPATH=. timeout 20 python3 -m exporter --web.listen-address=127.0.0.1:19847 --no-collector.biolatency &
  sleep 4
  python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:19847/metrics').read().decode())" | grep -v '^#'
  kill %1 2>/dev/null
} 2>&1 | tee "$out/perf-check.txt"
