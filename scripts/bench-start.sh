#!/usr/bin/env bash
# Start-up and tear-down of the one-shot CLI, paired: two `sandboxio` binaries (before and
# after a change) measured in alternating rounds of one script, so load from other work
# falls on both alike. Per binary and case (a denied run: `--tier process`, exit 120; an
# allowed run: `run -- /bin/true`, namespace tier), it prints what load barely moves:
# CPU time (task-clock) and context switches from `perf stat`, and the fsync-family calls
# and thread creations per run from `strace -f -c`; wall-clock p50 is printed too, but on a
# loaded machine only the ratios within a round mean anything.
#
#   scripts/bench-start.sh BEFORE_BIN AFTER_BIN [ROUNDS] [RUNS_PER_ROUND]
#
# Each binary gets its own fresh state directory (warmed up first). Both binaries (and the
# `sandboxio-helper` beside each, when there is one) are first copied into the script's
# own directory, the same way and just before the runs: two byte-identical copies of one
# CLI differed by a quarter when one of them had been read by `perf report` (BENCHMARKS.md,
# 2026-12-06). Needs perf and strace.
set -euo pipefail
before=${1:?usage: $0 BEFORE_BIN AFTER_BIN [ROUNDS] [RUNS]}
after=${2:?usage: $0 BEFORE_BIN AFTER_BIN [ROUNDS] [RUNS]}
rounds=${3:-5}
runs=${4:-20}
for t in perf strace; do
    command -v "$t" >/dev/null || { echo "skipped: $t is not installed"; exit 0; }
done
work=$(mktemp -d /tmp/sbx-bench-start.XXXXXX)
trap 'rm -rf "$work"' EXIT
fresh() { # source binary, label -> path of a fresh copy (with its helper, if beside it)
    mkdir "$work/bin-$2"
    cp "$1" "$work/bin-$2/sandboxio"
    if [ -e "$(dirname "$1")/sandboxio-helper" ]; then
        cp "$(dirname "$1")/sandboxio-helper" "$work/bin-$2/"
    fi
    echo "$work/bin-$2/sandboxio"
}
before=$(fresh "$before" before)
after=$(fresh "$after" after)

case_args() {
    case "$1" in
        denied) echo "run --tier process -- /bin/true" ;;
        allowed) echo "run -- /bin/true" ;;
    esac
}
want() { [ "$1" = denied ] && echo 120 || echo 0; }

one() { # bin label case -> appends "task_ms ctx wall_ms" for one perf stat -r block
    local bin=$1 label=$2 c=$3 out
    # perf stat exits with the program's status (120 for a denial): not a failure here.
    out=$({ SBX_STATE_DIR="$work/$label" perf stat -r "$runs" -x, \
        -e task-clock,context-switches "$bin" $(case_args "$c") 2>&1 >/dev/null || true; } |
        awk -F, '/task-clock/ {t=$1} /context-switches/ {s=$1} END {print t, s}')
    echo "$out" >>"$work/$label.$c.perf"
}

wall() { # bin label case -> p50 of $runs wall-clock runs, ms
    local bin=$1 label=$2 c=$3 i s e
    for ((i = 0; i < runs; i++)); do
        s=$(date +%s%N)
        SBX_STATE_DIR="$work/$label" "$bin" $(case_args "$c") >/dev/null 2>&1 || true
        e=$(date +%s%N)
        echo $(((e - s) / 1000))
    done | sort -n | awk '{a[NR]=$1} END {printf "%.2f\n", a[int((NR+1)/2)]/1000}' >>"$work/$label.$c.wall"
}

for label in before after; do
    bin=$before
    [ "$label" = after ] && bin=$after
    for c in denied allowed; do
        for _ in 1 2 3; do
            SBX_STATE_DIR="$work/$label" "$bin" $(case_args "$c") >/dev/null 2>&1 || true
        done
        st=$(SBX_STATE_DIR="$work/$label" "$bin" $(case_args "$c") >/dev/null 2>&1; echo $?) || true
        [ "$st" = "$(want "$c")" ] || { echo "$label $c: exit $st, want $(want "$c")"; exit 1; }
    done
done

for ((r = 1; r <= rounds; r++)); do
    for c in denied allowed; do
        one "$before" before "$c"
        one "$after" after "$c"
        wall "$before" before "$c"
        wall "$after" after "$c"
    done
done

syscalls() { # bin label case -> "fsync-family clone3" per run (one traced run)
    SBX_STATE_DIR="$work/$1-trace" "$2" $(case_args "$3") >/dev/null 2>&1 || true
    SBX_STATE_DIR="$work/$1-trace" strace -f -c -o "$work/$1.$3.strace" "$2" $(case_args "$3") >/dev/null 2>&1 || true
    awk '$NF ~ /^(fsync|fdatasync|sync_file_range)$/ {f+=$4} $NF ~ /^(clone3|clone)$/ {c+=$4}
         END {print f+0, c+0}' "$work/$1.$3.strace"
}

echo "rounds $rounds x $runs runs per binary and case, alternating; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| case | binary | task-clock ms (median of rounds) | context switches | wall p50 ms (median of rounds) | fsync-family calls | threads+processes created |"
echo "|---|---|---:|---:|---:|---:|---:|"
med() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for c in denied allowed; do
    for label in before after; do
        bin=$before
        [ "$label" = after ] && bin=$after
        t=$(awk '{print $1}' "$work/$label.$c.perf" | med)
        s=$(awk '{print $2}' "$work/$label.$c.perf" | med)
        w=$(med <"$work/$label.$c.wall")
        read -r f cl < <(syscalls "$label" "$bin" "$c")
        echo "| $c | $label | $t | $s | $w | $f | $cl |"
    done
done
