# The Python package's suite: a venv under target/venvs/python with maturin, pytest, mypy
# and the OpenTelemetry API and SDK (the SDK only for the tests' in-memory exporter).
# Sourced by scripts/setup.sh; quick when already done.
_sbx_py_setup() {
  local root venv stamp want
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  venv="$root/target/venvs/python"
  want="maturin>=1.5,<2 pytest>=7 mypy>=1.8 opentelemetry-api>=1.20 opentelemetry-sdk>=1.20 e2b==2.63.0"
  stamp="$venv/.sandboxio-setup"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  if ! command -v python3 >/dev/null 2>&1; then
    echo "python setup: python3 is missing" >&2
    return 0
  fi
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-dev >/dev/null
  fi
  mkdir -p "$root/target/venvs"
  python3 -m venv "$venv" || return 0
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q --disable-pip-version-check $want && echo "$want" >"$stamp"
}
_sbx_py_setup
unset -f _sbx_py_setup
