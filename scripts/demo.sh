#!/usr/bin/env bash
# The main job: build sandboxio and run agent code in a sandbox under the default policy
# (namespace tier, no network, limits on), then show the audit record it left.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
# The CLI, and beside it the small helper it starts for each sandbox (same build only).
cargo build --release -q -p sandboxio-cli -p sandboxio-sandbox --bins
export SBX_STATE_DIR="${SBX_STATE_DIR:-$PWD/target/demo-state}"
bin=target/release/sandboxio
echo "== sandboxio doctor"
"$bin" doctor
echo
echo "== a sandboxed run under the default policy"
"$bin" run -- python3 -c 'import os, socket
print("hello from the sandbox, uid", os.getuid(), "pid", os.getpid())
print("output dir:", os.environ["SANDBOX_OUTPUT"])
try:
    socket.create_connection(("127.0.0.1", 22), timeout=1)
    print("network: reachable (unexpected)")
except OSError as e:
    print("network: blocked ->", e)
try:
    open("/etc/shadow").read()
except OSError as e:
    print("/etc/shadow: blocked ->", e)
'
echo
echo "== the process tier is not allowed by the default policy: denied, and recorded"
"$bin" run --tier process -- true || echo "(exit status $?: denied)"
echo
echo "== audit trail"
"$bin" audit tail -n 2
"$bin" audit verify --key "$SBX_STATE_DIR/audit.pub" "$SBX_STATE_DIR/audit.jsonl"
