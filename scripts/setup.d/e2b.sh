# Sourced by scripts/setup.sh: the official E2B Python SDKs (pinned) and pytest, in a venv
# under target/venvs/e2b, for scripts/suites/e2b.sh. Quick when already done.
sbx_setup_e2b() {
  local root venv want
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  venv="$root/target/venvs/e2b"
  want="e2b==2.63.0 e2b-code-interpreter==2.11.5 pytest==9.2.0 pytest-asyncio==1.5.0"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.installed" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
  fi
  mkdir -p "$root/target/venvs"
  python3 -m venv "$venv" || return 1
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q --disable-pip-version-check $want || return 1
  echo "$want" >"$venv/.installed"
}
sbx_setup_e2b
