#!/usr/bin/env bash
# The official E2B Python SDKs (pinned, scripts/setup.d/e2b.sh), unmodified, against
# `sandboxio serve` with `[e2b] enabled = true`: quick-start flows (create, commands with
# streamed output, background + kill, files, run_code keeping state, kill), a denial, an
# ask and a budget stop. Relies on the workspace being built; junit under target/suites/.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
venv=$root/target/venvs/e2b
if [ ! -x "$venv/bin/pytest" ]; then
  # shellcheck source=/dev/null
  source scripts/setup.d/e2b.sh || true
fi
if [ ! -x "$venv/bin/pytest" ]; then
  echo "e2b suite: skipped: the E2B SDKs could not be installed in $venv (no PyPI?)"
  exit 0
fi
tier=namespace
if ! unshare -Urm true 2>/dev/null && [ "$(id -u)" != 0 ]; then
  echo "e2b suite: this host allows no user namespaces; running in the process tier"
  tier=process
fi
# Built by scripts/test.sh before the suites; rebuilding here would swap the binary
# under the other suites' running servers (their helper path would read "(deleted)").
[ -x target/debug/sandboxio ] || cargo build -q -p sandboxio-cli
mkdir -p target/suites
SANDBOXIO_BIN="$root/target/debug/sandboxio" SBX_E2B_TIER=$tier \
  "$venv/bin/pytest" -q -p no:cacheprovider --junitxml="$root/target/suites/e2b-junit.xml" \
  crates/sandboxio-server/tests/e2b "$@"
