#!/usr/bin/env bash
# Time to interactive (create, then `node -v`) and exec round trip over loopback against
# `sandboxio serve`, release build, in a temporary state directory. Usage:
#   scripts/bench-server.sh [tier]        # namespace (default) or process
#   SBX_BENCH_PROFILE=debug scripts/bench-server.sh process
#   SBX_BENCH_PHASES=load SBX_BENCH_SANDBOXES=100 SBX_BENCH_COMMANDS=20 scripts/bench-server.sh process
#   SBX_BENCH_PHASES=overhead scripts/bench-server.sh process   # only the exec round trip
#   SBX_BENCH_EXECS=200 ...                                     # its execs (default 60)
#   SBX_BENCH_BIN=/path/to/sandboxio scripts/bench-server.sh    # another build, not rebuilt
set -euo pipefail
cd "$(dirname "$0")/.."
TIER="${1:-namespace}"
# SBX_BENCH_PROFILE=debug reuses the debug build (for a look on a machine where a release
# build does not fit; such figures are not the server's speed).
PROFILE="${SBX_BENCH_PROFILE:-release}"
if [ -n "${SBX_BENCH_BIN:-}" ]; then
  B=$SBX_BENCH_BIN
elif [ "$PROFILE" = release ]; then
  cargo build --release -q -p sandboxio-cli
  B=target/release/sandboxio
else
  cargo build -q -p sandboxio-cli
  B=target/debug/sandboxio
fi
D=$(mktemp -d)
cleanup() { [ -n "${PID:-}" ] && kill -TERM "$PID" 2>/dev/null; wait "${PID:-}" 2>/dev/null || true; rm -rf "$D"; }
trap cleanup EXIT
cat > "$D/policy.toml" <<POL
[settings]
name = "bench"
description = "exec in the $TIER tier without network"

[[rule]]
id = "bench-$TIER"
effect = "allow"
kind = ["exec", "run_code"]
tier = "$TIER"
network = "none"
reason = "benchmark"
POL
: > "$D/config.toml"
KEY=$("$B" keys create --state-dir "$D/state" --config "$D/config.toml" --tenant bench --scopes all 2>/dev/null)
# A sandbox with env would seal it under the secrets key: one of this run's own.
SBX_SECRETS_KEY_FILE="$D/secrets.key" \
"$B" serve --state-dir "$D/state" --config "$D/config.toml" --policy "$D/policy.toml" \
  --listen 127.0.0.1:0 --max-sandboxes 256 --max-concurrent 256 > "$D/out" 2>"$D/err" &
PID=$!
for _ in $(seq 100); do [ -s "$D/out" ] && break; sleep 0.1; done
ADDR=$(awk '{print $NF}' "$D/out")
python3 scripts/bench-server.py "http://$ADDR" "$KEY" "$TIER" "$PID"
