#!/usr/bin/env bash
# Runs every test binary (cmocka) and every end-to-end script, then prints one closing line
# "tests: N passed, N failed, N skipped". Exits non-zero if anything failed.
# Usage: tests/run.sh BUILD_DIR
set -u
build=${1:-build}
passed=0 failed=0 skipped=0
failures=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT

for bin in "$build"/tests/unit/test_* "$build"/tests/gpu/test_*; do
    [ -x "$bin" ] || continue
    name=${bin#"$build"/tests/}
    echo "== $name"
    CMOCKA_MESSAGE_OUTPUT=stdout "$bin" >"$log" 2>&1
    rc=$?
    cat "$log"
    p=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | awk '{s+=$NF} END {print s+0}')
    f=$(grep -Eo '^\[  FAILED  \] [0-9]+' "$log" | awk '{s+=$NF} END {print s+0}')
    s=$(grep -Eo '^\[  SKIPPED \] [0-9]+' "$log" | awk '{s+=$NF} END {print s+0}')
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        failed=$((failed + 1))   # crashed or exited non-zero without a cmocka failure
    fi
    [ "$rc" -ne 0 ] && failures+=("$name")
done

for script in tests/e2e/test_*.sh tests/hostile/test_*.sh; do
    [ -x "$script" ] || continue
    echo "== $script"
    ECGD="$build/ecgd" "$script" >"$log" 2>&1
    rc=$?
    cat "$log"
    p=$(grep -c '^ok ' "$log"); f=$(grep -c '^not ok ' "$log"); s=$(grep -c '^skip ' "$log")
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); fi
    [ "$rc" -ne 0 ] && failures+=("$script")
done

[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
