#!/usr/bin/env bash
# The official Python MCP SDK (pinned, scripts/setup.d/mcp.sh) against `sandboxio mcp`
# (stdio) and `sandboxio serve` (/mcp, streamable HTTP): tool list, a call, a denial, an
# ask approved from the CLI, a cancellation; and the proxy with an upstream on the SDK's
# MCPServer (confined in the namespace tier, resources and prompts under policy).
# Relies on the workspace being built.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/venvs/mcp
upstream_venv=target/venvs/mcp-upstream
if [ ! -x "$venv/bin/pytest" ] || [ ! -x "$upstream_venv/bin/python" ]; then
  # shellcheck source=/dev/null
  source scripts/setup.d/mcp.sh || true
fi
if [ ! -x "$venv/bin/pytest" ]; then
  echo "mcp suite: skipped: the Python MCP SDK could not be installed in $venv (no PyPI?)"
  exit 0
fi
# Built by scripts/test.sh before the suites; rebuilding here would swap the binary
# under the other suites' running servers (their helper path would read "(deleted)").
[ -x target/debug/sandboxio ] || cargo build -q -p sandboxio-cli
SANDBOXIO_BIN="$PWD/target/debug/sandboxio" SBX_MCP_UPSTREAM_VENV="$PWD/$upstream_venv" \
  "$venv/bin/pytest" -q -p no:cacheprovider \
  crates/sandboxio-mcp/tests/python "$@"
