#!/usr/bin/env bash
# Runs every scripts/suites/*.sh in parallel, each with its log under target/suites/, and
# fails if any of them fails. A suite that cannot run here prints why and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=target/suites
mkdir -p "$logs"
declare -A pids=()
for s in scripts/suites/*.sh; do
  [ -e "$s" ] || continue
  name=$(basename "$s" .sh)
  bash "$s" >"$logs/$name.log" 2>&1 &
  pids[$name]=$!
done
failed=()
for name in "${!pids[@]}"; do
  if wait "${pids[$name]}"; then
    echo "suite $name: passed"
  else
    failed+=("$name")
    echo "suite $name: FAILED, its log follows"
  fi
  tail -n 80 "$logs/$name.log" | sed "s/^/  [$name] /"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed suites: ${failed[*]}"
  exit 1
fi
