#!/usr/bin/env bash
# The `sandboxio` Python package: builds the extension into target/venvs/python (made by
# scripts/setup.d/python.sh), then runs its pytest suite and `mypy --strict`. Relies on the
# workspace being built (the sandbox helper binary); artefacts under target/suites/.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
venv=$root/target/venvs/python
if [ ! -x "$venv/bin/python" ]; then
  # shellcheck source=/dev/null
  source scripts/setup.d/python.sh
fi
if [ ! -x "$venv/bin/maturin" ]; then
  echo "skipping the python suite: the venv $venv could not be made (no python3 or no PyPI here)"
  exit 0
fi
if ! unshare -Urm true 2>/dev/null && [ "$(id -u)" != 0 ]; then
  echo "skipping the python suite: this host allows no user namespaces, so the namespace tier cannot run"
  exit 0
fi
export VIRTUAL_ENV=$venv PATH="$venv/bin:$PATH"
cargo build -q -p sandboxio-sandbox --bin sandboxio-helper
export SBX_HELPER=$root/target/debug/sandboxio-helper
(cd python && maturin develop -q)
mkdir -p target/suites
cd python
cache="$root/target/suites/pytest-cache"
rm -rf "$cache"
python -m pytest -q -o cache_dir="$cache" --junitxml="$root/target/suites/python-junit.xml" tests
mypy --strict --cache-dir "$root/target/suites/mypy-cache" sandboxio examples
