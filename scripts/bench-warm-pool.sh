#!/usr/bin/env bash
# Warm pool against cold starts and plain fork+exec (`/bin/true`), release build, one
# binary run twice back to back: as the current user (root: with cgroup limits), then as
# uid 65534 (its own user namespace first, rlimits instead of cgroups) where the host
# allows unprivileged user namespaces. Prints markdown, machine and load first. Compare
# the "p50 vs plain" column within one table; absolute numbers move with the load.
#   SBX_BENCH_ITERS=300 scripts/bench-warm-pool.sh
set -euo pipefail
cd "$(dirname "$0")/.."
iters="${SBX_BENCH_ITERS:-300}"
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), \
$(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r)"
echo "load before: $(uptime)"
echo
bin=$(cargo bench -p sandboxio-sandbox --bench warm_pool --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "warm_pool" and m.get("executable"):
        print(m["executable"])')
SBX_BENCH_ITERS="$iters" "$bin" --bench
echo
if [ "$(id -u)" = 0 ] && setpriv --reuid=65534 --regid=65534 --clear-groups unshare -Urm true 2>/dev/null; then
    echo "as uid 65534:"
    echo
    # The helper is found next to the bench binary's crate (CARGO_BIN_EXE at build time).
    setpriv --reuid=65534 --regid=65534 --clear-groups -- \
        env -i PATH=/usr/local/bin:/usr/bin:/bin TMPDIR=/tmp SBX_BENCH_ITERS="$iters" "$bin" --bench
else
    echo "as uid 65534: skipped (not root, or user namespaces are not allowed for it)"
fi
echo
echo "load after: $(uptime)"
