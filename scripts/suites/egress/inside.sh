#!/usr/bin/env bash
# Runs inside the suite's own network namespace (see ../egress.sh). Arguments: the
# artefact directory and the sandboxio binary.
set -uo pipefail
out=$1
bin=$2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/testnet.sh
source "$here/../lib/testnet.sh"

# --- the test internet --------------------------------------------------------------
testnet_up 203.0.113.10 203.0.113.20 203.0.113.53
www=$out/www && mkdir -p "$www" && echo "hello from the test internet" >"$www/index.html"
# a CA and a certificate for secure.test (the sandbox trusts the CA through --input)
pki=$out/pki && mkdir -p "$pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=egress test CA" \
  -keyout "$pki/ca.key" -out "$pki/ca.pem" >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -subj "/CN=secure.test" -keyout "$pki/srv.key" \
  -out "$pki/srv.csr" >/dev/null 2>&1
printf 'subjectAltName=DNS:secure.test\n' >"$pki/ext"
openssl x509 -req -in "$pki/srv.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial \
  -days 2 -extfile "$pki/ext" -out "$pki/srv.pem" >/dev/null 2>&1
# a package index with one wheel, for `pip download`
python3 "$here/index.py" "$out/index" >/dev/null
(cd "$www" && exec python3 -m http.server 80 --bind 203.0.113.10) >"$out/http.log" 2>&1 &
pids+=($!)
python3 "$here/https.py" 203.0.113.10 443 "$pki/srv.pem" "$pki/srv.key" "$www" >"$out/https.log" 2>&1 &
pids+=($!)
(cd "$out/index" && exec python3 -m http.server 80 --bind 203.0.113.20) >"$out/index.log" 2>&1 &
pids+=($!)
(cd "$www" && exec python3 -m http.server 8081 --bind 127.0.0.1) >"$out/internal.log" 2>&1 &
pids+=($!)
names="allowed.test=203.0.113.10,secure.test=203.0.113.10,denied.test=203.0.113.10"
names="$names,pdeny.test=203.0.113.10,relay.test=203.0.113.10,index.test=203.0.113.20"
names="$names,meta.test=169.254.169.254,loop.test=127.0.0.1"
python3 "$here/dns.py" 203.0.113.53 53 "$names" "$out/dns.log" >"$out/dns.err" 2>&1 &
pids+=($!)
wait_listening 203.0.113.10/80 203.0.113.10/443 203.0.113.20/80 127.0.0.1/8081

# --- configuration --------------------------------------------------------------------
cat >"$out/policy.toml" <<'P'
[settings]
name = "egress-suite"
description = "run code with network; each connection decided below and by the egress rules"

[[rule]]
id = "run"
effect = "allow"
kind = ["exec", "run_code"]
network = ["none", "allowlist", "full"]
reason = "running code is allowed"

[[rule]]
id = "connect"
effect = "allow"
kind = "net_connect"
reason = "the egress rules decide which hosts"

[[rule]]
id = "no-pdeny"
effect = "deny"
kind = "net_connect"
host = "pdeny.test"
reason = "pdeny.test is denied by policy"
P
allow='"allowed.test:80", "secure.test:443", "index.test:80", "pdeny.test:80", "meta.test:80", "loop.test:80", "relay.test:80", "127.0.0.1:8081"'
for mode in allowlist full; do
  cat >"$out/$mode.toml" <<C
[network]
mode = "$mode"
allow = [$allow]
resolver = ["203.0.113.53:53"]
[policy]
files = ["$out/policy.toml"]
C
done
# 127.0.0.1:8081 is named by a pattern, so it is allowed past the SSRF guard; the sandbox
# must still never reach the supervisor's loopback except through a decision.
sed -i 's/, "127.0.0.1:8081"//' "$out/allowlist.toml" "$out/full.toml"
mkdir -p "$out/in" && cp "$pki/ca.pem" "$out/in/ca.pem" && cp "$here/probe.py" "$out/in/"
chmod -R a+rX "$out"

explain() {
  echo "  stdout: $(jq -r .stdout "$last" 2>/dev/null | head -c 600)"
  echo "  stderr: $(jq -r .stderr "$last" 2>/dev/null | head -c 600) $(head -c 400 "$last.err")"
}
prepare_user() { :; }

# sbx MODE SCRIPT: runs SCRIPT under sh in a sandbox with network MODE, as $who.
sbx() {
  last=$out/$who-$((++n)).json
  $as "$bin" run --config "$out/$1.toml" --state-dir "$state" --input "$out/in" --json \
    --timeout 60s --env PIP_DISABLE_PIP_VERSION_CHECK=1 -- sh -c "$2" >"$last" 2>"$last.err"
}
# No `grep -q` at the end of a pipe: it exits at the first match, the writer then dies of
# SIGPIPE, and with pipefail a match reads as a failure (seen under load in CI).
stdout_has() { jq -r .stdout "$last" | grep -- "$1" >/dev/null; }
stdout_lacks() { ! jq -r .stdout "$last" | grep -- "$1" >/dev/null; }
denied_host() { jq -e --arg h "$1" '.denied_hosts | index($h) != null' "$last" >/dev/null; }
dns_never_asked() { ! grep -q "^$1 " "$out/dns.log"; }
trail_has() { grep '"event":"net_connect"' "$state/audit.jsonl" | grep -- "$1" >/dev/null; }
counted_denials() { jq -e '.network_denials >= 2 and .record.network_denials == .network_denials' "$last" >/dev/null; }

run_all() {
  n=0
  py=/usr/bin/python3
  sbx allowlist 'curl -sS -m 10 http://allowed.test/'
  check "curl over plain HTTP to an allowed host" stdout_has "hello from the test internet"
  sbx allowlist 'curl -sS -m 10 --cacert $SANDBOX_INPUT/ca.pem https://secure.test/'
  check "curl over HTTPS (CONNECT) to an allowed host, certificate verified" stdout_has "hello from the test internet"
  sbx allowlist "$py \$SANDBOX_INPUT/probe.py urllib"
  check "python urllib over HTTP and HTTPS" stdout_has "urllib ok"
  if $py -c 'import requests' 2>/dev/null; then
    sbx allowlist "REQUESTS_CA_BUNDLE=\$SANDBOX_INPUT/ca.pem $py -c \"import requests; a = requests.get('http://allowed.test/', timeout=20); b = requests.get('https://secure.test/', timeout=20); print('requests', a.status_code, b.status_code, 'hello from the test internet' in b.text)\""
    check "python requests over HTTP and HTTPS" stdout_has "requests 200 200 True"
  else
    echo "SKIP [$who] python requests: not installed for $py (scripts/setup.d/egress.sh installs python3-requests)"
  fi
  sbx allowlist 'node -e "console.log(\"node starts\")" 2>&1'
  if ! command -v node >/dev/null; then
    echo "SKIP [$who] node fetch: node is not installed on this host"
  elif stdout_has "Failed to reserve virtual memory"; then
    # Would mean the fallback memory limit is an address-space one again (V8 cannot
    # reserve its code range under it).
    echo "FAIL [$who] node fetch: node cannot start under the memory limit used without a delegated cgroup"
    fail=$((fail + 1))
  else
    sbx allowlist 'NODE_EXTRA_CA_CERTS=$SANDBOX_INPUT/ca.pem node -e "fetch(\"https://secure.test/\").then(r=>r.text()).then(t=>console.log(t))"'
    check "node fetch over HTTPS" stdout_has "hello from the test internet"
    sbx allowlist 'node -e "fetch(\"http://allowed.test/\").then(r=>r.text()).then(t=>console.log(t))"'
    check "node fetch over plain HTTP" stdout_has "hello from the test internet"
    sbx allowlist 'node -e "fetch(\"https://denied.test/\").then(r=>console.log(\"status\", r.status)).catch(e=>console.log(\"refused:\", String(e.cause && e.cause.message)))"'
    check "node fetch to an unlisted host is refused with the reason" stdout_has "refused: the egress proxy refused denied.test:443"
  fi
  sbx allowlist "$py -m pip download --no-deps --no-cache-dir --index-url http://index.test/simple/ --trusted-host index.test -d /tmp/dl demo-pkg && ls /tmp/dl"
  check "pip download from a local index through the proxy" stdout_has "demo_pkg-1.0-py3-none-any.whl"

  sbx allowlist 'curl -sS -m 10 http://denied.test/; curl -sS -m 10 https://denied.test/ 2>&1; true'
  check "an unlisted host gets a 403 with the reason" stdout_has "SBX_E2410"
  check "the caller gets the denied hosts" denied_host "denied.test:80"
  check "a refused tunnel is a denial too" denied_host "denied.test:443"
  check "network_denials is counted in the result and the record" counted_denials
  check "each refusal is a net_connect record" trail_has '"tenant_id":"default"'
  sbx allowlist 'curl -sS -m 10 http://pdeny.test/'
  check "policy decides each connection (deny rule)" stdout_has "denied at policy"
  sbx allowlist 'curl -sS -m 10 http://meta.test/; curl -sS -m 10 http://loop.test/'
  check "a name resolving to 169.254.169.254 is refused" stdout_has "169.254.169.254, a cloud metadata address"
  check "a name resolving to 127.0.0.1 is refused" stdout_has "127.0.0.1, a loopback address"
  sbx allowlist 'curl -sS -m 10 http://127.0.0.1:8081/; curl -sS -m 5 --noproxy "*" http://127.0.0.1:8081/ 2>&1; true'
  check "the supervisor's loopback is out of reach" stdout_lacks "hello from the test internet"

  tag=$(head -c6 /dev/urandom | od -An -tx1 | tr -d ' \n')
  sbx allowlist "getent hosts allowed.test; echo getent=\$?; $py \$SANDBOX_INPUT/probe.py dns exfil-$tag.test; curl -sS -m 10 http://unlisted-$tag.test/"
  check "DNS inside resolves nothing" stdout_has "getent=2"
  check "a lookup of an unlisted name fails" stdout_has "dns refused"
  check "no query for it reached the resolver" dns_never_asked "exfil-$tag.test"
  check "an unlisted name is not even looked up by the proxy" dns_never_asked "unlisted-$tag.test"
  sbx allowlist "$py \$SANDBOX_INPUT/probe.py raw leak-$tag.test"
  check "raw TCP to an internet address fails" stdout_has "tcp refused"
  check "raw UDP to the resolver fails" stdout_has "udp refused"
  check "no raw query reached the resolver" dns_never_asked "leak-$tag.test"
  sbx allowlist "$py \$SANDBOX_INPUT/probe.py connect-in-connect"
  check "CONNECT inside CONNECT is refused" stdout_has "inner connect refused"
  check "and recorded" trail_has "SBX_E2413"

  sbx allowlist "$py \$SANDBOX_INPUT/probe.py escape; curl -sS -m 10 http://allowed.test/"
  check "the program holds no socket of the relay (no inherited socket fd)" stdout_has "fds clean"
  check "the program cannot take the listener's port" stdout_has "port taken"
  check "the sandbox has loopback only" stdout_has "interfaces lo"
  check "no unix socket path leads out" stdout_has "no socket files"
  check "garbage sent to the proxy does not stop it" stdout_has "hello from the test internet"

  sbx full 'curl -sS -m 10 http://denied.test/; curl -sS -m 10 http://meta.test/'
  check "full: any public host" stdout_has "hello from the test internet"
  check "full: the SSRF guard still refuses metadata" stdout_has "SBX_E2411"
}

# --- secrets at the edge (issue 15, item 4) -------------------------------------------
# API_TOKEN (from the supervisor's environment) is bound to secure.test; OTHER_TOKEN (from
# a file) to allowed.test, so a tunnel there is terminated too and API_TOKEN's placeholder
# headed there can be seen and refused. The upstream is verified against the suite's CA.
canary_file=$out/other-token
printf 'other-%s\n' "$(head -c12 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$canary_file"
chmod 644 "$canary_file"
cat >"$out/secrets.toml" <<C
[network]
mode = "allowlist"
allow = [$allow, "allowed.test:443"]
resolver = ["203.0.113.53:53"]
upstream_ca = "$pki/ca.pem"
[policy]
files = ["$out/policy.toml"]
[[secrets]]
name = "API_TOKEN"
env = "SBX_SUITE_TOKEN"
hosts = ["secure.test"]
[[secrets]]
name = "OTHER_TOKEN"
file = "$canary_file"
hosts = ["allowed.test"]
C
sed -i 's/, "127.0.0.1:8081"//' "$out/secrets.toml"
chmod a+r "$out/secrets.toml"

# sbx_secret SCRIPT: like sbx, with the secrets configuration and the canary as the value.
sbx_secret() {
  last=$out/$who-$((++n)).json
  $as env SBX_SUITE_TOKEN="$canary" "$bin" run --config "$out/secrets.toml" --state-dir "$state" \
    --json --timeout 60s -- sh -c "$1" >"$last" 2>"$last.err"
}
canary_nowhere() {
  ! grep -rF -- "$canary" "$state" "$out/$who"-*.json "$out/$who"-*.json.err >/dev/null 2>&1
}
trail_injected() {
  grep '"event":"net_connect"' "$state/audit.jsonl" | grep '"egress.secrets":"API_TOKEN"' >/dev/null
}

secrets_all() {
  canary="canary$(head -c12 /dev/urandom | od -An -tx1 | tr -d ' \n')tail"
  half=${canary:0:18}
  want=$(printf 'Bearer %s' "$canary" | sha256sum | cut -c1-12)
  sbx_secret 'echo "var=$API_TOKEN"; curl -sS -m 10 -H "Authorization: Bearer $API_TOKEN" https://secure.test/echo-auth'
  check "secrets: the sandbox sees a placeholder" stdout_has "var=sbx-secret-API_TOKEN-"
  check "secrets: the bound host got the real value (curl, CA from CURL_CA_BUNDLE)" stdout_has "echo-digest $want"
  check "secrets: the injection is recorded by name" trail_injected
  sbx_secret "$py -c 'import os,urllib.request as u; r=u.Request(\"https://secure.test/echo-auth\", headers={\"Authorization\": \"Bearer \"+os.environ[\"API_TOKEN\"]}); print(u.urlopen(r, timeout=10).read().decode())'"
  check "secrets: python urllib trusts the sandbox CA (SSL_CERT_FILE) and gets it injected" stdout_has "echo-digest $want"
  sbx_secret 'curl -sS -m 10 -H "Authorization: Bearer $API_TOKEN" https://allowed.test/echo-auth; echo; curl -sS -m 10 -H "Authorization: Bearer $API_TOKEN" http://allowed.test/; true'
  check "secrets: a placeholder over HTTPS to a host it is not bound to is refused" stdout_has "SBX_E2417"
  check "secrets: a placeholder over plain HTTP is refused" stdout_has "SBX_E2416"
  check "secrets: no value reached the unbound host" stdout_lacks "echo-digest "
  check "secrets: both refusals are counted" counted_denials
  check "secrets: and recorded" trail_has "SBX_E2417"
  sbx_secret "env | grep -c -- '$half'; grep -rl -- '$half' /workspace /tmp 2>/dev/null | wc -l; cat \$SSL_CERT_FILE | grep -c 'BEGIN CERTIFICATE'"
  check "secrets: the value is in no variable or file inside the sandbox" \
    jq -e '.stdout | split("\n") | .[0] == "0" and .[1] == "0" and (.[2] | tonumber) >= 2' "$last"
  sbx_secret "curl -sS -m 10 -H \"Authorization: Bearer \$API_TOKEN\" https://secure.test/echo-auth-raw >/tmp/echo; grep -c -- '$half' /tmp/echo; grep -c sbx-secret-API_TOKEN- /tmp/echo"
  check "secrets: an upstream echoing the value hands the sandbox the placeholder" \
    jq -e '.stdout | split("\n") | .[0] == "0" and .[1] == "1"' "$last"
  check "secrets: the real value is in no file of the state dir, result or log" canary_nowhere
  last=$out/$who-$((++n)).json
  $as "$bin" run --config "$out/secrets.toml" --state-dir "$state" --json --timeout 60s \
    -- sh -c 'echo program-ran' >"$last" 2>"$last.err"
  check "secrets: a value that cannot be read stops the sandbox before it starts" \
    jq -e '.record.error_code == "SBX_E2408" and .record.exit_code == null and ((.stdout // "") | contains("program-ran") | not)' "$last"
}

as_each_user run_all secrets_all
summary egress
