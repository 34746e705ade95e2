# PostgreSQL for the shared state store's tests: Debian's server binaries (initdb, postgres).
# The tests start a throwaway cluster of their own (crates/sandboxio-gateway/tests/support/
# pgcluster.rs); nothing here starts a server. Sourced by scripts/setup.sh as root.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v setpriv >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql util-linux >/dev/null
  fi
fi
