# Set-up of the dashboard suite (scripts/suites/dashboard.sh): Debian's Chromium (driven
# headless by playwright-core from npm, pinned in scripts/suites/dashboard/package.json),
# Prometheus and promtool. Sourced by scripts/setup.sh from the repository's root.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  dash_need=()
  for p in chromium prometheus; do
    dpkg -s "$p" >/dev/null 2>&1 || dash_need+=("$p")
  done
  if [ ${#dash_need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${dash_need[@]}" >/dev/null
    # The package enables a Prometheus service of its own; the suite runs its own on loopback.
    if command -v systemctl >/dev/null 2>&1; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
  fi
  unset dash_need
fi
if command -v npm >/dev/null 2>&1 && [ ! -d target/dashboard-node/node_modules/playwright-core ]; then
  mkdir -p target/dashboard-node
  cp scripts/suites/dashboard/package.json target/dashboard-node/
  (cd target/dashboard-node && npm install --no-audit --no-fund --loglevel=error >/dev/null 2>&1) ||
    echo "dashboard set-up: npm could not install playwright-core (the suite retries)"
fi
