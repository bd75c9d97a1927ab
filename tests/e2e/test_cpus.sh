#!/usr/bin/env bash
# test_cpus.sh - the default worker count is the CPUs the process may really use: its affinity
# mask (taskset) capped by the cgroup v2 cpu.max quota (a fake cgroup hierarchy through
# ECGD_CGROUP_ROOT), not the host's CPU count; --workers still wins; a running server reports it.
# Usage: ECGD=build/ecgd tests/e2e/test_cpus.sh   (run from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"

require_ecgd
if ! command -v taskset >/dev/null; then echo "not ok 1 - taskset (util-linux) is missing"; exit 1; fi

# workers_with [ENV=VALUE...] [-- PREFIX...]: the default workers of --print-config
workers_with() {
    local envs=() prefix=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    prefix=("$@")
    env -i PATH="$PATH" "${envs[@]}" "${prefix[@]}" "$ECGD" serve --print-config |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["workers"])'
}
mkdir -p "$tmp/cg"
CG=ECGD_CGROUP_ROOT=$tmp/cg
all=$(nproc --all)
mine=$(nproc)     # nproc counts the affinity mask

check "no quota: workers = the CPUs of the affinity mask ($mine)" \
    test "$(workers_with "$CG" --)" = "$mine"
check "taskset -c 0: 1 worker (the host has $all CPUs)" \
    test "$(workers_with "$CG" -- taskset -c 0)" = 1
echo "50000 100000" >"$tmp/cg/cpu.max"
check "cgroup cpu.max 0.5 CPU: 1 worker" test "$(workers_with "$CG" --)" = 1
echo "150000 100000" >"$tmp/cg/cpu.max"
want=$((mine < 2 ? mine : 2))
check "cgroup cpu.max 1.5 CPUs: $want workers (rounded up, at most the affinity)" \
    test "$(workers_with "$CG" --)" = "$want"
check "cgroup cpu.max 1.5 CPUs and taskset -c 0: 1 worker" \
    test "$(workers_with "$CG" -- taskset -c 0)" = 1
echo "max 100000" >"$tmp/cg/cpu.max"
check "cgroup cpu.max \"max\" (no quota): $mine workers" test "$(workers_with "$CG" --)" = "$mine"
echo "50000 100000" >"$tmp/cg/cpu.max"
check "--workers 3 wins over the quota" bash -c \
    "[ \$(env -i PATH='$PATH' '$CG' '$ECGD' serve --workers 3 --print-config | grep -o '\"workers\":[0-9]*') = '\"workers\":3' ]"
check "--print-config says where the count came from" bash -c \
    "env -i PATH='$PATH' '$CG' '$ECGD' serve --print-config | grep -q 'cgroup cpu.max 50000/100000 -> 1'"

# A server under taskset -c 0 runs 1 worker and says so.
if taskset -c 0 env "$CG" "$ECGD" serve --bind 127.0.0.1 --port 0 --backend "$BACKEND" \
        --model none 2>"$tmp/server.log" & then
    SERVER_PID=$!
    server_pids+=("$SERVER_PID")
    for _ in $(seq 1 100); do
        PORT=$(grep -m1 '"event":"listening"' "$tmp/server.log" | grep -o '"port":[0-9]*' | head -1 | cut -d: -f2)
        [ -n "$PORT" ] && [ "$(req GET /readyz)" = 200 ] && break
        sleep 0.1
    done
    req GET /v1/info >/dev/null
    check "the server under taskset -c 0 reports 1 worker (/v1/info)" \
        grep -q '"workers":1[,}]' "$tmp/body"
    req GET /metrics >/dev/null
    check "and ecgd_workers 1" grep -q '^ecgd_workers 1$' "$tmp/body"
fi

echo "# $n tests, $failures failed"
[ "$failures" -eq 0 ]
