#!/usr/bin/env bash
# The egress suite: network `allowlist` and `full` end to end, inside a network namespace
# this suite creates to play the internet (HTTP and HTTPS servers under test names, a test
# resolver that logs every query, a local package index). The whole sandboxio invocation
# runs inside it, so nothing can reach any real address. Runs as root and as uid 65534.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=$root/target/suites/egress
if [ "$(id -u)" != 0 ]; then
  echo "skipping the egress suite: creating the test network namespace needs root"
  exit 0
fi
if ! unshare -n true 2>/dev/null; then
  echo "skipping the egress suite: this host refuses new network namespaces"
  exit 0
fi
for tool in curl jq openssl ip python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "egress suite: $tool is missing (scripts/setup.d/egress.sh installs it)"
    exit 1
  fi
done
# Built by scripts/test.sh before the suites; rebuilding here would swap the binary
# under the other suites' running servers (their helper path would read "(deleted)").
[ -x target/debug/sandboxio ] || cargo build -q -p sandboxio-cli || exit 1
rm -rf "$out" && mkdir -p "$out" && chmod 755 "$out"
exec unshare -n bash scripts/suites/egress/inside.sh "$out" "$root/target/debug/sandboxio"
