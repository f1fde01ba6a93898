#!/usr/bin/env bash
# Installs the real components MCO's tests and local stack run against (Prometheus, promtool,
# VictoriaMetrics, stress-ng, bcc with kernel headers, load generators, buildah and mmdebstrap
# for the container image, Node.js and npm for the dashboards' schema check) and prepares the
# kernel interfaces eBPF needs. Idempotent: a second run changes nothing and takes well under a
# second.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
headers_dir="${MCO_KERNEL_HEADERS_DIR:-$here/.cache/kernel-headers}"

packages=(
  python3-venv python3-pip  # the project's virtualenv on a fresh Debian/Ubuntu
  prometheus                # server + promtool (2.42 on bookworm)
  prometheus-node-exporter  # the exporter benchmark's baseline
  victoria-metrics          # second PromQL engine + vmalert
  stress-ng                 # real interference
  python3-bpfcc bpfcc-tools # eBPF block-latency collector (kernel headers: further down)
  wrk hey hyperfine         # load generators for the benchmarks
  shellcheck                # lints scripts/kind-e2e.sh (tests/chart)
  buildah mmdebstrap        # `make image`: the base from Debian packages, the image (tests/image)
)

# Node.js and npm type-check the dashboards against Grafana's schema (tests/dashboards). Asked
# for by command, not by package: a Node.js from elsewhere (NodeSource's bundles npm, and
# Debian's npm package would conflict with it) is used as it is.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); else
    echo "setup-system: not root and no sudo; install these yourself: ${packages[*]}" >&2
  fi
fi

can_install() { [ "$(id -u)" -eq 0 ] || [ ${#sudo_cmd[@]} -gt 0 ]; }
# (Output captured, not piped into grep -q: with pipefail an early grep exit reads as failure.)
installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == *"install ok installed"* ]]; }
# A package apt can install here: known in its lists, with a candidate version.
installable() { [[ $(apt-cache policy "$1" 2>/dev/null) =~ Candidate:\ [^\(] ]]; }
apt_install() {
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ] && can_install; then
  echo "setup-system: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  apt_install "${missing[@]}"
fi

# The packaged prometheus service may start on install where an init system runs; MCO starts
# its own servers on its own ports, so nothing here depends on it.

# bcc needs one kernel headers tree, which the Makefile names in BCC_KERNEL_SOURCE ($headers_dir).
# Best: the running kernel's own headers (Ubuntu, Debian, any arch), found where kbuild puts
# them, /lib/modules/$(uname -r)/build. Fallback: Debian's newest headers for this architecture
# (a kernel with no headers package, e.g. a VM's custom kernel). Without any, nothing fails:
# the biolatency collector turns itself off with its reason and diskstats carries the signal.
release=$(uname -r)
build="/lib/modules/$release/build"
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)

# Debian splits headers into a -common source tree and a per-flavour build tree; bcc takes one
# directory, so copy source, then build over it.
merge_headers() { # source build
  rm -rf "$headers_dir"
  mkdir -p "$headers_dir"
  cp -a "$1/." "$headers_dir/"
  cp -a --remove-destination "$2/." "$headers_dir/"
  # Relative links (scripts, tools -> linux-kbuild) break when copied: point them home again.
  find "$headers_dir" -maxdepth 1 -xtype l -print0 | while IFS= read -r -d '' link; do
    ln -sfn "$(readlink -f "$2/$(basename "$link")")" "$link"
  done
  touch "$headers_dir/.complete"
}

# A tree from the running kernel's build dir: a link to it, or a merge when it is split.
use_build_dir() {
  local source="/lib/modules/$release/source" real_build real_source=""
  real_build=$(readlink -f "$build")
  [ -d "$source" ] && real_source=$(readlink -f "$source")
  if [ -n "$real_source" ] && [ "$real_source" != "$real_build" ]; then
    merge_headers "$real_source" "$real_build"
  else
    rm -rf "$headers_dir"
    mkdir -p "$(dirname "$headers_dir")"
    ln -sfn "$real_build" "$headers_dir"
  fi
  echo "$real_build" >"$headers_dir.from"
  echo "setup-system: kernel headers for $release in $headers_dir"
}

headers_ready() {
  if [ -d "$build" ]; then
    # Up to date only when made from this kernel's build dir (a new kernel needs a new tree).
    [ -f "$headers_dir.from" ] && [ "$(cat "$headers_dir.from")" = "$(readlink -f "$build")" ] \
      && [ -e "$headers_dir/include" ]
  else
    [ -f "$headers_dir/.complete" ]
  fi
}

if ! headers_ready; then
  if [ ! -d "$build" ] && can_install && ! installed "linux-headers-$release" \
    && installable "linux-headers-$release"; then
    echo "setup-system: installing linux-headers-$release"
    apt_install "linux-headers-$release" || echo "setup-system: linux-headers-$release failed to install" >&2
  fi
  if [ -d "$build" ]; then
    use_build_dir
  else
    if can_install && ! installed "linux-headers-$arch" && installable "linux-headers-$arch"; then
      echo "setup-system: no headers package for kernel $release; installing linux-headers-$arch"
      apt_install "linux-headers-$arch" || echo "setup-system: linux-headers-$arch failed to install" >&2
    fi
    common=$(find /usr/src -maxdepth 1 -name 'linux-headers-*-common' 2>/dev/null | sort -V | tail -n 1)
    flavour=$(find /usr/src -maxdepth 1 -name "linux-headers-*-$arch" 2>/dev/null | sort -V | tail -n 1)
    if [ -n "$common" ] && [ -n "$flavour" ]; then
      rm -f "$headers_dir.from"
      merge_headers "$common" "$flavour"
      echo "setup-system: kernel headers merged from $common and $flavour into $headers_dir" \
        "(not kernel $release's own: bcc may warn about the version)"
    else
      echo "setup-system: no kernel headers for $release (tried linux-headers-$release and" \
        "linux-headers-$arch); the biolatency collector will fall back to diskstats" >&2
    fi
  fi
fi

# eBPF tracepoints need tracefs; mounting it needs root and may be refused in a container.
if [ ! -d /sys/kernel/tracing/events ] && [ "$(id -u)" -eq 0 ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null \
    || echo "setup-system: could not mount tracefs; eBPF tests will be skipped with that reason" >&2
fi
exit 0
