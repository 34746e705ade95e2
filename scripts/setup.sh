#!/usr/bin/env bash
# Installs what sandboxio needs to build and test on Debian: a C toolchain (for the
# bundled SQLite), Python and Node (for run-code), gcc for the escape suite's payloads,
# strace (a crash test kills the CLI at a chosen sync) and a Rust toolchain when none is
# present. Safe to run again.
set -euo pipefail
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  need=()
  for p in gcc python3 nodejs bubblewrap iproute2 ca-certificates curl pkg-config strace; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c clippy,rustfmt
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi
# Each scripts/setup.d/*.sh installs what one suite needs (a Python venv, a browser, a
# database server); they are sourced in name order.
for extra in "$(dirname "${BASH_SOURCE[0]}")"/setup.d/*.sh; do
  [ -e "$extra" ] || continue
  # shellcheck source=/dev/null
  source "$extra"
done
