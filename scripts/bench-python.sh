#!/usr/bin/env bash
# The Python overhead bench (issue 14, BENCHMARKS.md "Python"): `await sbx.run_code("1+1")`
# from Python against the same operation from Rust, paired in one process. Builds the
# extension in release (`maturin develop --release`) into the python suite's venv
# (target/venvs/python, made by scripts/setup.d/python.sh) with the release sandbox
# helper, then runs python/bench/run_code.py. `--dev` measures a dev build instead.
#
#   scripts/bench-python.sh [--dev] [ROUNDS] [PER_ROUND]     (defaults 30 10)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=$root/target/venvs/python
profile=release
if [ "${1:-}" = --dev ]; then
  profile=dev
  shift
fi
if [ ! -x "$venv/bin/maturin" ]; then
  # shellcheck source=/dev/null
  source scripts/setup.d/python.sh
fi
export VIRTUAL_ENV=$venv PATH="$venv/bin:$PATH"
if [ "$profile" = release ]; then
  cargo build -q --release -p sandboxio-sandbox --bin sandboxio-helper
  export SBX_HELPER=$root/target/release/sandboxio-helper
  (cd python && maturin develop -q --release)
else
  cargo build -q -p sandboxio-sandbox --bin sandboxio-helper
  export SBX_HELPER=$root/target/debug/sandboxio-helper
  (cd python && maturin develop -q)
fi
python python/bench/run_code.py "${1:-30}" "${2:-10}"
