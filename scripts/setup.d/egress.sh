# What the egress suite (scripts/suites/egress.sh) needs: tools to build the test internet
# (iproute2, openssl, python3, util-linux's unshare and setpriv) and the clients it drives
# (curl, pip, Python requests); jq reads the answers. Sourced by scripts/setup.sh as root on Debian.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  egress_need=()
  for p in curl jq iproute2 openssl python3 python3-pip python3-requests util-linux; do
    dpkg -s "$p" >/dev/null 2>&1 || egress_need+=("$p")
  done
  if [ ${#egress_need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${egress_need[@]}" >/dev/null
  fi
  unset egress_need
fi
