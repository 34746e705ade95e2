# Set-up of the dashboard suite (scripts/suites/dashboard.sh): Debian's Chromium (driven
# headless by playwright-core, which the suite installs from npm with the Node that
# scripts/setup.sh provides), Prometheus and promtool. Sourced by scripts/setup.sh as root.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  dash_need=()
  for p in chromium prometheus; do
    dpkg -s "$p" >/dev/null 2>&1 || dash_need+=("$p")
  done
  if [ ${#dash_need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${dash_need[@]}" >/dev/null
    # The package starts a Prometheus of its own; the suite runs its own on loopback.
    if command -v systemctl >/dev/null 2>&1; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
  fi
  unset dash_need
fi
