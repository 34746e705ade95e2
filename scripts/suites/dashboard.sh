#!/usr/bin/env bash
# The dashboard and metrics suite: promtool checks and unit-tests the alert rules; a real
# `sandboxio serve` on loopback gets generated traffic; Debian's Chromium (headless, driven
# by playwright-core) checks the five panels' values, approves an ask and engages the kill
# switch through the page; Debian's Prometheus scrapes /metrics and its HTTP API must return
# the expected series and evaluate every Grafana panel's query. Artefacts (screenshots, logs)
# go to target/dashboard/. Set-up: scripts/setup.d/dashboard.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=$root/target/dashboard
rm -rf "$out"
mkdir -p "$out"

missing=()
for tool in chromium prometheus promtool node npm curl python3; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "dashboard suite skipped: missing ${missing[*]} (scripts/setup.d/dashboard.sh installs them as root on Debian)"
  exit 0
fi

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAILED: $*"; }

# 1. The alert rules.
if promtool check rules deploy/prometheus/sandboxio-alerts.yml; then ok "promtool check rules"; else bad "promtool check rules"; fi
if (cd deploy/prometheus && promtool test rules sandboxio-alerts.test.yml); then ok "promtool test rules"; else bad "promtool test rules"; fi

# 2. The server, with a policy and a budget that give every panel something to show.
# The workspace is built before the suites run (scripts/test.sh); build the binary if not.
bin=$root/target/debug/sandboxio
[ -x "$bin" ] || cargo build -q -p sandboxio-cli
work=$(mktemp -d /tmp/sbx-dash-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # The run's audit trail is an artefact too.
  cp "$work/state/audit.jsonl" "$out/" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cat >"$work/policy.toml" <<'TOML'
[settings]
name = "dashboard-suite"
description = "process tier; rm is denied; touch needs a person"

[[rule]]
id = "no-rm"
effect = "deny"
kind = "exec"
argv_prefix = ["rm"]
reason = "deleting files is not allowed here"

[[rule]]
id = "run-in-process"
effect = "allow"
kind = ["exec", "run_code"]
tier = "process"
network = "none"
reason = "the suite runs commands in the process tier"

[[rule]]
id = "mark-needs-approval"
effect = "ask"
kind = "exec"
argv_prefix = ["sh", "-c", "echo approved > \"$SANDBOX_OUTPUT/approved-flag\""]
reason = "marking the run as approved needs a person's approval"

[[rule]]
id = "files-in-workspace"
effect = "allow"
kind = ["file_read", "file_write", "file_delete"]
in_workspace = true
reason = "files inside the workspace are allowed"
TOML
cat >"$work/config.toml" <<'TOML'
[budget]
currency = "USD"
global = "20.00"
per_tenant = "5.00"

[budget.rate_card]
cpu_second = "0.01"
gib_second = "0.001"
per_call = "0.01"
TOML
sbx() { "$bin" "$@" --state-dir "$work/state" --config "$work/config.toml"; }
"$bin" serve --listen 127.0.0.1:0 --state-dir "$work/state" --config "$work/config.toml" \
  --policy "$work/policy.toml" >"$work/serve.out" 2>"$out/serve.log" &
pids+=($!)
for _ in $(seq 1 100); do
  grep -q "sandboxio serving" "$work/serve.out" 2>/dev/null && break
  sleep 0.1
done
addr=$(awk '/sandboxio serving/ {print $NF}' "$work/serve.out")
[ -n "$addr" ] || { bad "the server started"; cat "$out/serve.log"; exit 1; }
base="http://$addr"
echo "server at $base"
admin=$(sbx keys create --tenant acme --scopes all)
agent=$(sbx keys create --tenant acme --scopes exec,run_code,files,read)
reader=$(sbx keys create --tenant acme --scopes read)
scraper=$(sbx keys create --tenant ops --scopes metrics)

# 3. Chromium.
suite=$root/target/dashboard-node
mkdir -p "$suite"
cp scripts/suites/dashboard/package.json scripts/suites/dashboard/browser.mjs scripts/suites/dashboard/bench.mjs "$suite/"
if [ ! -d "$suite/node_modules/playwright-core" ]; then
  (cd "$suite" && npm install --no-audit --no-fund --loglevel=error >"$out/npm.log" 2>&1) || { bad "npm install playwright-core"; cat "$out/npm.log"; }
fi
if BASE=$base ADMIN_KEY=$admin AGENT_KEY=$agent READER_KEY=$reader OUT=$out node "$suite/browser.mjs"; then
  ok "the dashboard in Chromium"
else
  bad "the dashboard in Chromium (log above; screenshots in $out)"
fi
# Page weight and time to first render (reported, not asserted; see BENCHMARKS.md).
if BASE=$base READER_KEY=$reader RUNS=${DASH_BENCH_RUNS:-5} node "$suite/bench.mjs" >"$out/bench.json" 2>"$out/bench.log"; then
  echo "page weight and first render: $(cat "$out/bench.json")"
else
  echo "the page benchmark did not run: $(tail -3 "$out/bench.log")"
fi

# 4. Prometheus scrapes the server; its HTTP API answers the expected series.
printf '%s' "$scraper" >"$work/scrape.key"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cp deploy/prometheus/sandboxio-alerts.yml "$work/"
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [sandboxio-alerts.yml]
scrape_configs:
  - job_name: sandboxio
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials_file: $work/scrape.key
    static_configs:
      - targets: ["$addr"]
YAML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$port" >"$out/prometheus.log" 2>&1 &
pids+=($!)
prom="http://127.0.0.1:$port"
query() { curl -sf --get "$prom/api/v1/query" --data-urlencode "query=$1"; }
up=""
for _ in $(seq 1 60); do
  up=$(query 'up{job="sandboxio"}' 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null || true)
  [ "$up" = "1" ] && break
  sleep 1
done
if [ "$up" = "1" ]; then ok "Prometheus scrapes /metrics with the metrics key"; else bad "Prometheus scrapes /metrics (up=$up)"; tail -20 "$out/prometheus.log"; fi
# What the server's own exposition says now, and what Prometheus stored.
expected=$(curl -sf -H "Authorization: Bearer $scraper" "$base/metrics" | awk '$1 == "sandboxio_operations_total{sandboxio_event=\"exec\",sandboxio_status=\"ok\"}" {print $2}')
got=""
for _ in $(seq 1 10); do
  got=$(query 'sandboxio_operations_total{job="sandboxio",sandboxio_event="exec",sandboxio_status="ok"}' | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")')
  [ -n "$expected" ] && [ "$got" = "$expected" ] && break
  sleep 1
done
if [ -n "$expected" ] && [ "$got" = "$expected" ] && [ "$got" != "0" ]; then ok "Prometheus has sandboxio_operations_total for exec ok = $got"; else bad "operations in Prometheus: got '$got', the server says '$expected'"; fi
for series in sandboxio_operation_duration_milliseconds_bucket sandboxio_denials_total sandboxio_kill_switch_engaged \
  sandboxio_approvals_pending sandboxio_budget_spent sandboxio_budget_ceiling sandboxio_sandboxes_active; do
  n=$(query "count($series{job=\"sandboxio\"})" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "0")')
  if [ "$n" != "0" ]; then ok "Prometheus has $series ($n series)"; else bad "Prometheus has no $series"; fi
done
denied=$(query 'sum(sandboxio_denials_total{sandboxio_layer="policy",sandboxio_rule="no-rm"})' | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")')
if [ "$denied" = "2" ]; then ok "the policy denials are counted by rule"; else bad "policy denials by rule: '$denied'"; fi
# Every query of the Grafana dashboard evaluates against the real series.
if python3 - "$prom" deploy/grafana/sandboxio-dashboard.json <<'PY'
import json, sys, urllib.parse, urllib.request
prom, path = sys.argv[1], sys.argv[2]
d = json.load(open(path))
subst = {"$class_events": "exec|run_code", "$target_p50": "300000", "$target_p99": "1800000"}
bad = 0
for p in d["panels"]:
    for t in p["targets"]:
        q = t["expr"]
        for k, v in subst.items():
            q = q.replace(k, v)
        url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
        try:
            r = json.load(urllib.request.urlopen(url))
            ok = r["status"] == "success"
        except Exception as e:  # a 400 is a query that does not parse
            ok, r = False, str(e)
        print(("ok" if ok else "FAILED") + f": grafana panel '{p['title']}' query {t['refId']}")
        bad += not ok
sys.exit(1 if bad else 0)
PY
then ok "every Grafana query evaluates"; else bad "a Grafana query failed"; fi
rules=$(curl -sf "$prom/api/v1/rules" | python3 -c 'import json,sys; print(sum(len(g["rules"]) for g in json.load(sys.stdin)["data"]["groups"]))')
if [ "$rules" = "7" ]; then ok "Prometheus loaded the 7 rules"; else bad "Prometheus loaded '$rules' rules"; fi

echo "dashboard suite: $passed passed, $failed failed"
[ "$failed" = 0 ]
