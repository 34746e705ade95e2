# What the browse suite (scripts/suites/browse.sh) needs: Debian's Chromium (run inside the
# namespace tier by `sandboxio browse`), tools to build its test internet (iproute2,
# python3, util-linux's unshare and setpriv, procps for the process list) and jq. Sourced
# by scripts/setup.sh as root on Debian.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  browse_need=()
  for p in chromium jq iproute2 python3 util-linux procps; do
    dpkg -s "$p" >/dev/null 2>&1 || browse_need+=("$p")
  done
  if [ ${#browse_need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${browse_need[@]}" >/dev/null
  fi
  unset browse_need
fi
