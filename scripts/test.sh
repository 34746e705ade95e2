#!/usr/bin/env bash
# Sets up (system packages, toolchain) and runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo test --workspace --no-fail-fast
