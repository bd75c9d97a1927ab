#!/usr/bin/env bash
# test_hostile.sh - the hostile-client suite (tests/hostile/hostile.py) in its quick mode, as
# `make test` runs it: bounded counts, about half a minute. `make soak` runs hostile.py --soak.
# Raises the open-file limit for the 4,200 slow connections where the hard limit allows (the
# suite skips that case, saying why, where it cannot).
# Usage: ECGD=build/ecgd [ECGD_TEST_BACKEND=cuda] tests/hostile/test_hostile.sh
set -u
ECGD=${ECGD:-build/ecgd}
HERE=$(cd "$(dirname "$0")" && pwd)
ulimit -n 12000 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec python3 "$HERE/hostile.py" --ecgd "$ECGD" "$@"
