#!/usr/bin/env bash
# Namespace-tier benchmarks, side by side in one run: cold `exec /bin/true` and
# `python3 -c pass` through the namespace tier (cgroup limits on), plain fork+exec and
# Debian's bwrap with equivalent flags; then 100 concurrent `sleep 1` sandboxes with host
# memory per sandbox. Prints markdown (machine and load first). Needs root.
#   SBX_BENCH_ITERS=100 SBX_BENCH_CONCURRENT=100 scripts/bench-namespace.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v bwrap >/dev/null 2>&1; then
    echo "installing bubblewrap" >&2
    apt-get install -y bubblewrap >&2
fi
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), \
$(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r), $(bwrap --version)"
echo "load before: $(uptime)"
echo
cargo bench -p sandboxio-sandbox --bench namespace 2>/dev/null
echo
echo "load after: $(uptime)"
