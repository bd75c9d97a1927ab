#!/usr/bin/env bash
# Runs every benchmark binary in BUILD/bench and the HTTP benchmark if present, printing their
# tables with the machine, commit and date, for bench/RESULTS.md.
set -u
build=${1:-build}
echo "# ecgd benchmarks: $(date -u +%Y-%m-%d) commit $(git rev-parse --short HEAD 2>/dev/null)"
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for b in "$build"/bench/*; do
    [ -x "$b" ] || continue
    [ "$(basename "$b")" = http_sink ] && continue   # a server: bench_strips.sh drives it
    echo; echo "## $(basename "$b")"
    "$b"
done
if [ -x bench/bench_http.sh ]; then
    echo; echo "## bench_http.sh"
    ECGD="$build/ecgd" bench/bench_http.sh
fi
if [ -x bench/bench_strips.sh ]; then
    echo; echo "## bench_strips.sh (1 s to 30 min recordings, as ratios to the HTTP sink)"
    bench/bench_strips.sh "$build"
fi
if [ -x bench/bench_dashboard.sh ]; then
    echo; echo "## bench_dashboard.sh"
    ECGD="$build/ecgd" bench/bench_dashboard.sh
fi
