#!/usr/bin/env bash
# Sets up (system packages, toolchain) and runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo test --workspace --no-fail-fast
# The escape suite again as an unprivileged user (uid 65534), where this host allows it:
# the namespace tier must hold for everyone, not only for root.
if [ "$(id -u)" = 0 ] && setpriv --reuid=65534 --regid=65534 --clear-groups unshare -Urm true 2>/dev/null; then
  SBXESC_UID=65534 cargo test -p sandboxio-cli --test escape
else
  echo "skipping the escape suite as uid 65534: not root, or user namespaces are not allowed for it"
fi
# Suites outside cargo (Python, browser, PostgreSQL, ...): each scripts/suites/*.sh runs after
# the workspace is built, in parallel, with its own log; any failure fails the run.
exec ./scripts/suites.sh
