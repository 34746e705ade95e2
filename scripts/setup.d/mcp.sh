# Sourced by scripts/setup.sh: the official Python MCP SDK (pinned) and pytest, in a venv
# under target/venvs/mcp, for scripts/suites/mcp.sh; and the same SDK on the system's
# /usr/bin/python3 in target/venvs/mcp-upstream, for the upstream server the proxy tests
# run inside the sandbox (whose root holds /usr, not an interpreter installed elsewhere).
# Quick when already done.
sbx_setup_mcp_venv() {
  local python="$1" venv="$2" want="$3"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.installed" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
  fi
  rm -rf "$venv"
  "$python" -m venv "$venv" || return 1
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q --disable-pip-version-check $want || return 1
  echo "$want" >"$venv/.installed"
}

sbx_setup_mcp() {
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  mkdir -p "$root/target/venvs"
  sbx_setup_mcp_venv python3 "$root/target/venvs/mcp" "mcp==2.3.0 pytest==9.2.0" || return 1
  if [ -x /usr/bin/python3 ]; then
    sbx_setup_mcp_venv /usr/bin/python3 "$root/target/venvs/mcp-upstream" "mcp==2.3.0" || true
  fi
}
sbx_setup_mcp
