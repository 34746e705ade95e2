#!/usr/bin/env bash
# Runs inside the suite's own network and pid namespaces (see ../browse.sh). Arguments:
# the artefact directory and the sandboxio binary.
set -uo pipefail
out=$1
bin=$2
here=$(cd "$(dirname "$0")" && pwd)
chromium=/usr/lib/chromium/chromium
last=/dev/null
# shellcheck source=../lib/testnet.sh
source "$here/../lib/testnet.sh"

# --- the test internet ----------------------------------------------------------------
testnet_up 203.0.113.10 203.0.113.30 203.0.113.53
www=$out/www && mkdir -p "$www" "$out/unlisted"
cat >"$www/index.html" <<'H'
<!doctype html>
<html><head><title>Browse test site</title><style>h1 { color: #a00 }</style></head>
<body><h1>Welcome to the test site</h1>
<p>Plain text &amp; an entity.</p>
<p><a href="http://unlisted.test/">a link to an unlisted host</a></p>
<img src="http://unlisted.test/pixel.png" alt="">
<script>document.body.insertAdjacentHTML("beforeend", "<p>written by script</p>")</script>
</body></html>
H
printf 'not an image' >"$out/unlisted/pixel.png"
echo "the unlisted host answered" >"$out/unlisted/index.html"
release=$out/release
python3 "$here/site.py" 203.0.113.10 80 "$www" "$out/site.log" "$release" 2>"$out/site.err" &
pids+=($!)
python3 "$here/site.py" 203.0.113.30 80 "$out/unlisted" "$out/unlisted.log" "$release" 2>"$out/unlisted.err" &
pids+=($!)
# A server on the suite's loopback. A browser that bypassed the proxy for loopback would
# reach only the sandbox's own loopback: a denial naming it shows the request went through
# the proxy, and this server's log that it never arrived.
python3 "$here/site.py" 127.0.0.1 8081 "$www" "$out/loop.log" "$release" 2>"$out/loop.err" &
pids+=($!)
python3 "$here/../egress/dns.py" 203.0.113.53 53 "site.test=203.0.113.10,unlisted.test=203.0.113.30" "$out/dns.log" >"$out/dns.err" 2>&1 &
pids+=($!)
wait_listening 203.0.113.10/80 203.0.113.30/80 127.0.0.1/8081
: >"$out/site.log"
: >"$out/unlisted.log"
: >"$out/loop.log"

# --- configuration --------------------------------------------------------------------
cat >"$out/policy.toml" <<'P'
[settings]
name = "browse-suite"
description = "browse with network; each connection decided below and by the egress rules"

[[rule]]
id = "browse"
effect = "allow"
kind = "browse"
network = ["allowlist", "full"]
reason = "browsing is allowed"

[[rule]]
id = "connect"
effect = "allow"
kind = "net_connect"
reason = "the egress rules decide which hosts"
P
for mode in allowlist none; do
  cat >"$out/$mode.toml" <<C
[network]
mode = "$mode"
allow = ["site.test:80"]
resolver = ["203.0.113.53:53"]
[policy]
files = ["$out/policy.toml"]
C
done
sed -i '/^allow = /d; /^resolver = /d' "$out/none.toml"
chmod -R a+rX "$out"

explain() {
  echo "  answer: $(jq -c 'del(.record.enforcement)' "$last" 2>/dev/null | head -c 1500)"
  echo "  stderr: $(head -c 600 "$last.err")"
}
# Each user's own TMPDIR and screenshot directory.
prepare_user() {
  tmp=$out/tmp-$who
  shots=$out/shots-$who
  mkdir -p "$tmp" "$shots"
  if [ "$who" != root ]; then
    chown 65534:65534 "$tmp" "$shots"
    chmod 700 "$tmp"
  fi
}

# browse CONFIG URL [FLAGS...]: one `sandboxio browse --json`, as $who.
browse() {
  last=$out/$who-$((++n)).json
  local cfg=$1 url=$2
  shift 2
  # A generous timeout: the suites run in parallel on a loaded machine.
  $as env TMPDIR="$tmp" "$bin" browse --config "$out/$cfg.toml" --state-dir "$state" --json \
    --timeout 120s "$@" "$url" >"$last" 2>"$last.err"
  echo $? >"$last.rc"
}
# No `grep -q` at the end of a pipe: with pipefail, the writer's SIGPIPE reads as a failure.
text_has() { jq -r .text "$last" | grep -F -- "$1" >/dev/null; }
rc_is() { [ "$(cat "$last.rc")" = "$1" ]; }
answer_is() { jq -e "$1" "$last" >/dev/null; }
denied_host() { jq -e --arg h "$1" '(.denied_hosts | index($h) != null) and (.record.denied_hosts | index($h) != null)' "$last" >/dev/null; }
counted() { jq -e '.network_denials >= 1 and .record.network_denials == .network_denials' "$last" >/dev/null; }
png_ok() { python3 "$here/pngcheck.py" "$1" | grep -Fx "png 1280x800" >/dev/null; }
never_reached() { ! grep -F -- "$1" "$out/unlisted.log" >/dev/null; }
loop_never_reached() { ! grep GET "$out/loop.log" >/dev/null; }
never_asked() { ! grep "^$1 " "$out/dns.log" >/dev/null; }
# The net_connect records the browse caused, from the trail (labelled with its operation).
connects() {
  local id
  id=$(jq -r .record.operation_id "$last")
  jq -c --arg id "$id" 'select(.event == "net_connect" and .labels["egress.parent_operation"] == $id)' "$state/audit.jsonl"
}
# (`jq -s ... | length > 0`: `jq -e` alone answers 0 on empty input.)
connect_denied() { connects | jq -s -e --arg h "$1" 'map(select(.decision == "deny" and .arguments.host == $h and .error_code == "SBX_E2410")) | length > 0' >/dev/null; }
connect_allowed() { connects | jq -s -e --arg h "$1" 'map(select(.decision == "allow" and .status == "ok" and .arguments.host == $h)) | length > 0' >/dev/null; }
browse_recorded() {
  jq -s -e --arg u "$1" 'map(select(.event == "browse" and .arguments.url == $u and .decision == "allow" and .status == "ok")) | length > 0' "$state/audit.jsonl" >/dev/null
}
# Browser processes in this suite's pid namespace (every sandbox's is nested in it).
browsers() { ps -eo pid=,args= | awk -v c="$chromium" '$2 == c { print $1 }'; }
no_browser_left() { [ -z "$(browsers)" ]; }
# In the shared temporary directories only a sandbox's own (`sandboxio-*`) counts: other
# suites run a browser of their own in parallel (the dashboard's), with its own profile.
profiles_on_host() {
  {
    find "$tmp" "$out" -xdev -name 'Local State' -newer "$marker"
    find /tmp /var/tmp /dev/shm -xdev -path '*sandboxio*' -name 'Local State' -newer "$marker"
  } 2>/dev/null
}
no_profile_left() { [ -z "$(profiles_on_host)" ]; }
tmp_empty() { [ -z "$(ls -A "$tmp")" ]; }

# Refusals and leftovers: the same whether or not the browser could start.
refusals_and_leftovers() {
  check "no browser process is left" no_browser_left
  check "no profile directory is left on the host" no_profile_left
  check "no scratch directory is left" tmp_empty
  browse allowlist http://site.test/ --tier process
  check "the process tier is refused with a code" answer_is '.record.error_code == "SBX_E1560"'
  check "as a denial (exit 120)" rc_is 120
  browse none http://site.test/
  check "network none is refused with a code" answer_is '.record.error_code == "SBX_E1561"'
  browse allowlist file:///etc/passwd
  check "a url that is not http(s) is refused" answer_is '.record.error_code == "SBX_E1005"'
}

run_all() {
  n=0
  marker=$out/marker-$who && touch "$marker"
  browse allowlist http://site.test/ --screenshot "$shots/page.png"
  if [ "$who" != root ] && jq -e '.record.error_code == "SBX_E1565"' "$last" >/dev/null; then
    # Without a memory cgroup for this user the sandbox bounds memory with an address-space
    # rlimit, under which Chromium cannot start: the browse must say so, cleanly.
    echo "SKIP [$who] loading pages: $(jq -r .record.reason "$last")"
    check "without a memory cgroup the browse fails with the reason (exit 125)" rc_is 125
    check "and the unlisted host still never saw a request" never_reached "GET"
    refusals_and_leftovers
    return
  fi
  check "browse exits 0" rc_is 0
  check "the page's text is returned" text_has "Welcome to the test site"
  check "the text is the page as rendered (its script ran)" text_has "written by script"
  check "entities are decoded and markup dropped" text_has "Plain text & an entity."
  check "the title is returned" answer_is '.title == "Browse test site"'
  check "the screenshot is a valid 1280x800 PNG" png_ok "$shots/page.png"
  check "the answer names the screenshot file and its digest" answer_is '.screenshot.file != null and (.screenshot.sha256 | length) == 64'
  check "the embedded resource's unlisted host is denied" denied_host "unlisted.test:80"
  check "network_denials is counted in the answer and the record" counted
  check "the unlisted host never saw a request" never_reached "GET"
  check "the unlisted name was never looked up" never_asked "unlisted.test"
  check "the denial is a net_connect record of this browse" connect_denied "unlisted.test"
  check "the page's own navigation is a net_connect record too" connect_allowed "site.test"
  check "the browse is one record with its url" browse_recorded "http://site.test/"
  check "no browser process is left" no_browser_left
  check "no profile directory is left on the host" no_profile_left
  check "no scratch directory is left" tmp_empty

  # A page held open by the server: the browser is certainly running while the watcher
  # looks; it releases the page once it has seen the browser (or gives up).
  local seen=$out/seen-$who
  (
    for _ in $(seq 900); do
      if [ -n "$(browsers)" ]; then echo yes >"$seen"; break; fi
      sleep 0.1
    done
    touch "$release"
  ) &
  local watcher=$!
  browse allowlist http://site.test/hold
  wait "$watcher"
  rm -f "$release"
  check "the process list sees the sandboxed browser while it runs" [ -s "$seen" ]
  check "the held page is answered once released" text_has "held and released"
  check "and afterwards no browser process is left" no_browser_left

  browse allowlist http://unlisted.test/
  check "navigating to an unlisted host shows the proxy's refusal" text_has "SBX_E2410"
  check "and names the host" denied_host "unlisted.test:80"
  check "and the host never saw it" never_reached "GET"

  browse allowlist http://127.0.0.1:8081/
  check "loopback goes through the proxy too, which refuses it" denied_host "127.0.0.1:8081"
  check "and the suite's loopback server never saw it" loop_never_reached

  refusals_and_leftovers
}

# The profile check can see a profile: Chromium run directly with one under $out.
marker=$out/marker-control && touch "$marker"
tmp=$out/control
mkdir -p "$tmp"
timeout 60 "$chromium" --headless --no-sandbox --disable-gpu --user-data-dir="$out/control/profile" \
  --dump-dom about:blank >/dev/null 2>&1
who=control
check "the profile check finds a profile left on the host" [ -n "$(profiles_on_host)" ]
rm -rf "$out/control"

as_each_user run_all
summary browse
