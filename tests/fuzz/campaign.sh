#!/usr/bin/env bash
# campaign.sh - the fuzzing campaign (`make fuzz`): runs every harness in turn, each with
# FUZZ_JOBS libFuzzer processes (-jobs/-workers: they share the corpus directory), starting from
# the committed seeds (tests/fuzz/seeds/NAME), and prints the executions of each harness in a
# summary table. Exits 1 when any harness crashed, leaked, timed out, ran out of memory or
# reported a sanitizer error (the reproducer is left in the work directory), or ran not at all.
#
# Usage: tests/fuzz/campaign.sh [BIN_DIR] [NAME...]      (BIN_DIR: build/fuzz, NAME: all)
#        tests/fuzz/campaign.sh --flags NAME             (prints NAME's libFuzzer limits)
# Environment:
#   FUZZ_SECONDS  seconds per harness (default 60): the campaign lasts NAMES x FUZZ_SECONDS, and
#                 each harness gets an equal share of what is left when it starts, so time a
#                 harness leaves (FUZZ_RUNS reached) goes to the ones after it
#   FUZZ_JOBS     processes per harness (default: the number of CPUs)
#   FUZZ_RUNS     stop a harness once it has this many executions (default 0: no target)
#   FUZZ_WORK     work directory (default BIN_DIR/campaign): NAME/corpus holds the new units
#                 (merge them into the seeds with `make -C tests/fuzz merge-NAME FROM=DIR`),
#                 NAME/fuzz-N.log each process's log, NAME/crash-* and friends the reproducers
# Order: the whole-server harness first (it stays far below the others' rates: one connection
# per input), then the fast harnesses, so that what they leave goes to the slow ones.
set -u
here=$(cd "$(dirname "$0")" && pwd)
all_names="http parse_float npy json csv raw request edf wfdb"

# Per-harness limits: the largest input worth its time, the time one input may take, memory.
flags() {
    case $1 in
        parse_float) echo "-max_len=256 -timeout=10 -rss_limit_mb=2048" ;;
        npy|request) echo "-max_len=4096 -timeout=10 -rss_limit_mb=2048" ;;
        raw|wfdb)    echo "-max_len=8192 -timeout=10 -rss_limit_mb=2048" ;;
        csv|json|edf) echo "-max_len=16384 -timeout=10 -rss_limit_mb=2048" ;;
        # the server's log lines go to stderr: closed for the target
        http)        echo "-max_len=65536 -timeout=20 -rss_limit_mb=4096 -close_fd_mask=2" ;;
        *) echo "campaign.sh: no harness $1" >&2; return 1 ;;
    esac
}

if [ "${1:-}" = "--flags" ]; then
    flags "${2:?usage: campaign.sh --flags NAME}"
    exit
fi

bin_dir=$(cd "${1:-$here/../../build/fuzz}" && pwd) || exit 2
shift $(( $# > 0 ? 1 : 0 ))
names=${*:-$all_names}
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-$(nproc)}
runs=${FUZZ_RUNS:-0}
work=${FUZZ_WORK:-$bin_dir/campaign}
mkdir -p "$work"
work=$(cd "$work" && pwd)

count=$(echo $names | wc -w)
deadline=$(( $(date +%s) + count * seconds ))
status=0
rows=()
left=$count
for name in $names; do
    bin=$bin_dir/fuzz_$name
    limits=$(flags "$name") || { status=1; continue; }
    if [ ! -x "$bin" ]; then
        echo "campaign: $bin is missing" >&2
        rows+=("$name|0|0|0|0|missing")
        status=1
        left=$((left - 1))
        continue
    fi
    share=$(( ($deadline - $(date +%s)) / left ))
    [ "$share" -ge 1 ] || share=1
    left=$((left - 1))
    dir=$work/$name
    rm -rf "$dir"
    mkdir -p "$dir/corpus"
    per_job_runs=""
    [ "$runs" -gt 0 ] && per_job_runs="-runs=$(( (runs + jobs - 1) / jobs ))"
    echo "== $name: $jobs processes, up to $share s${per_job_runs:+, $per_job_runs each}"
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    (cd "$dir" && timeout -k 10 $((share + 120)) "$bin" -jobs="$jobs" -workers="$jobs" \
        -max_total_time="$share" $per_job_runs $limits -print_final_stats=1 \
        -artifact_prefix="$dir/" corpus "$here/seeds/$name" >"$dir/main.log" 2>&1)
    rc=$?
    wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
    execs=$(cat "$dir"/fuzz-*.log 2>/dev/null | awk '/^stat::number_of_executed_units:/ {s += $2} END {print s + 0}')
    added=$(cat "$dir"/fuzz-*.log 2>/dev/null | awk '/^stat::new_units_added:/ {s += $2} END {print s + 0}')
    finished=$(cat "$dir"/fuzz-*.log 2>/dev/null | grep -c '^stat::number_of_executed_units:')
    found=$(cd "$dir" && ls -d crash-* leak-* timeout-* oom-* slow-unit-* 2>/dev/null | grep -v '^slow-unit' | wc -l)
    errors=$(cat "$dir"/fuzz-*.log 2>/dev/null | grep -cE '^==[0-9]+==ERROR|runtime error:|deadly signal|ERROR: libFuzzer')
    verdict=ok
    if [ "$found" -gt 0 ] || [ "$errors" -gt 0 ]; then
        verdict="FAILED: $found reproducer(s), $errors error report(s) in $dir"
        status=1
    elif [ "$finished" -lt "$jobs" ] || [ "$rc" -ne 0 ]; then
        verdict="FAILED: $finished of $jobs processes finished (exit $rc), see $dir"
        status=1
    fi
    rate=$(awk -v e="$execs" -v w="$wall" 'BEGIN {printf "%d", e / w}')
    rows+=("$name|$execs|$rate|$((rate / jobs))|$added|$verdict")
    echo "   $execs executions in $(printf '%.0f' "$wall") s: $verdict"
done

echo
target=""
[ "$runs" -gt 0 ] && target=", stop at $runs executions"
echo "fuzzing campaign: $jobs processes per harness, $seconds s per harness$target, $(date -u +%FT%TZ)"
printf '| %-11s | %14s | %10s | %12s | %9s | %s\n' harness executions "exec/s" "exec/s/proc" "new units" result
printf '|-------------|----------------|------------|--------------|-----------|--------\n'
for row in "${rows[@]}"; do
    IFS='|' read -r name execs rate per added verdict <<<"$row"
    printf '| %-11s | %14s | %10s | %12s | %9s | %s\n' "$name" \
        "$execs" "$rate" "$per" "$added" "$verdict"
done
exit $status
