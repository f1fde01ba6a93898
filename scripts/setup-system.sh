#!/usr/bin/env bash
# Installs the real components MCO's tests and local stack run against (Prometheus, promtool,
# VictoriaMetrics, stress-ng, bcc with kernel headers, load generators) and prepares the kernel
# interfaces eBPF needs. Idempotent: a second run changes nothing and takes well under a second.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
headers_dir="${MCO_KERNEL_HEADERS_DIR:-$here/.cache/kernel-headers}"

packages=(
  python3-venv python3-pip  # the project's virtualenv on a fresh Debian/Ubuntu
  prometheus                # server + promtool (2.42 on bookworm)
  prometheus-node-exporter  # the exporter benchmark's baseline
  victoria-metrics          # second PromQL engine + vmalert
  stress-ng                 # real interference
  python3-bpfcc bpfcc-tools # eBPF block-latency collector
  linux-headers-amd64       # bcc compiles against these
  wrk hey hyperfine         # load generators for the benchmarks
  shellcheck                # lints scripts/kind-e2e.sh (tests/chart)
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); else
    echo "setup-system: not root and no sudo; install these yourself: ${packages[*]}" >&2
  fi
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] && { [ "$(id -u)" -eq 0 ] || [ ${#sudo_cmd[@]} -gt 0 ]; }; then
  echo "setup-system: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  # linux-headers-amd64 exists only on amd64 Debian; let the rest install without it elsewhere.
  if ! "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
    others=()
    for p in "${missing[@]}"; do [ "$p" = linux-headers-amd64 ] || others+=("$p"); done
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${others[@]}" >/dev/null
  fi
fi

# The packaged prometheus service may start on install where an init system runs; MCO starts
# its own servers on its own ports, so nothing here depends on it.

# bcc needs one kernel source tree; Debian splits headers into -common and -amd64 trees.
if [ ! -f "$headers_dir/.complete" ]; then
  common=$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | sort -V | tail -n 1 || true)
  arch=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$common" ] && [ -n "$arch" ]; then
    rm -rf "$headers_dir"
    mkdir -p "$headers_dir"
    cp -a "$common/." "$headers_dir/"
    cp -a --remove-destination "$arch/." "$headers_dir/"
    # Relative links (scripts, tools -> linux-kbuild) break when copied: point them home again.
    for link in $(find "$headers_dir" -maxdepth 1 -xtype l); do
      name=$(basename "$link")
      ln -sfn "$(readlink -f "$arch/$name")" "$link"
    done
    touch "$headers_dir/.complete"
    echo "setup-system: kernel headers merged into $headers_dir"
  else
    echo "setup-system: no kernel headers under /usr/src; the biolatency collector will fall back to diskstats" >&2
  fi
fi

# eBPF tracepoints need tracefs; mounting it needs root and may be refused in a container.
if [ ! -d /sys/kernel/tracing/events ] && [ "$(id -u)" -eq 0 ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null \
    || echo "setup-system: could not mount tracefs; eBPF tests will be skipped with that reason" >&2
fi
exit 0
