#!/usr/bin/env bash
# Time to interactive (create, then `node -v` done) through the official E2B SDK beside the
# server's own API, same run, same server (scripts/bench-e2b.py). Usage:
#   scripts/bench-e2b.sh [debug|release] [tier] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE="${1:-release}"
TIER="${2:-namespace}"
ROUNDS="${3:-20}"
if [ ! -x target/venvs/e2b/bin/python ]; then
  # shellcheck source=/dev/null
  source scripts/setup.d/e2b.sh
fi
if [ "$PROFILE" = release ]; then
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
printf '[sandbox]\ntier = "%s"\n\n[e2b]\nenabled = true\n' "$TIER" > "$D/config.toml"
KEY=$("$B" keys create --state-dir "$D/state" --config "$D/config.toml" --tenant bench --scopes exec,run_code,files,read 2>/dev/null)
"$B" serve --state-dir "$D/state" --config "$D/config.toml" --policy "$D/policy.toml" \
  --listen 127.0.0.1:0 --max-sandboxes 256 > "$D/out" 2>"$D/err" &
PID=$!
for _ in $(seq 100); do [ -s "$D/out" ] && break; sleep 0.1; done
ADDR=$(awk '{print $NF}' "$D/out")
echo "profile=$PROFILE tier=$TIER load=$(cut -d' ' -f1-3 /proc/loadavg)"
target/venvs/e2b/bin/python scripts/bench-e2b.py "http://$ADDR" "$KEY" "$ROUNDS"
echo "load after=$(cut -d' ' -f1-3 /proc/loadavg)"
