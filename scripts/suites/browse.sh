#!/usr/bin/env bash
# The browse suite: `sandboxio browse` end to end against a test site, inside a network
# namespace (and pid namespace) this suite creates to play the internet: a site under a
# test name whose page embeds a resource from an unlisted host, that host's own server, and
# the egress suite's test resolver. Nothing can reach a real address. Runs as root and as
# uid 65534 where the host allows it. Set-up: scripts/setup.d/browse.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=$root/target/suites/browse
if [ "$(id -u)" != 0 ]; then
  echo "skipping the browse suite: creating the test network namespace needs root"
  exit 0
fi
if ! unshare -n -p -f --mount-proc true 2>/dev/null; then
  echo "skipping the browse suite: this host refuses new network or pid namespaces"
  exit 0
fi
if [ ! -x /usr/lib/chromium/chromium ]; then
  echo "skipping the browse suite: no Chromium at /usr/lib/chromium/chromium (scripts/setup.d/browse.sh installs it)"
  exit 0
fi
for tool in jq ip python3 setpriv ps; do
  if ! command -v "$tool" >/dev/null; then
    echo "browse suite: $tool is missing (scripts/setup.d/browse.sh installs it)"
    exit 1
  fi
done
# Built by scripts/test.sh before the suites; rebuilding here would swap the binary under
# the other suites' running servers.
[ -x target/debug/sandboxio ] || cargo build -q -p sandboxio-cli || exit 1
rm -rf "$out" && mkdir -p "$out" && chmod 755 "$out"
# Its own network namespace (the test internet) and pid namespace (so the process list
# below is this suite's alone: a browser of another suite is never mistaken for ours).
exec unshare -n -p -f --mount-proc bash scripts/suites/browse/inside.sh "$out" "$root/target/debug/sandboxio"
