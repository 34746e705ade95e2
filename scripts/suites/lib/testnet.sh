# Sourced by the network suites' inside.sh (egress, browse), which run in a network
# namespace of their own: the test internet on loopback, the servers' lifetimes, the
# PASS/FAIL bookkeeping and the run as root then as uid 65534.
#
# The sourcing script sets `out` and defines `explain` (what to print for a failed check)
# and `prepare_user` (per-user set-up after `who`, `as` and `state` are set).

pass=0
fail=0
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

# testnet_up ADDR...: loopback up, with each ADDR (a /32) on it.
testnet_up() {
  ip link set lo up
  local a
  for a in "$@"; do ip addr add "$a/32" dev lo; done
}

# serve CMD...: starts a test server in the background, stopped when the suite exits.
serve() {
  "$@" &
  pids+=($!)
}

# wait_listening HOST/PORT...: waits (up to 10 s each) until each accepts connections.
wait_listening() {
  local hp
  for hp in "$@"; do
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/${hp%/*}/${hp#*/}") 2>/dev/null && break; sleep 0.1; done
  done
}

# check NAME CMD...: one PASS or FAIL line for user $who; `explain` details a failure.
check() {
  local name=$1
  shift
  if "$@"; then
    echo "PASS [$who] $name"
    pass=$((pass + 1))
  else
    echo "FAIL [$who] $name"
    explain
    fail=$((fail + 1))
  fi
}

# as_each_user FN...: runs the FNs as root, then as uid 65534 where the host lets that
# user create namespaces (a SKIP line says so otherwise), each with a state dir of its own.
as_each_user() {
  who=root
  as=""
  state=$out/state-root
  mkdir -p "$state"
  prepare_user
  local f
  for f in "$@"; do "$f"; done
  if setpriv --reuid=65534 --regid=65534 --clear-groups unshare -Urm true 2>/dev/null; then
    who=uid65534
    as="setpriv --reuid=65534 --regid=65534 --clear-groups"
    state=$out/state-65534
    mkdir -p "$state" && chown 65534:65534 "$state" && chmod 700 "$state"
    prepare_user
    for f in "$@"; do "$f"; done
  else
    echo "SKIP [uid65534] this host does not allow user namespaces for uid 65534"
  fi
}

# summary SUITE: the totals; the exit status says whether every check passed.
summary() {
  echo "$1 suite: $pass passed, $fail failed"
  [ "$fail" = 0 ]
}
