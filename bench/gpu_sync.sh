#!/usr/bin/env bash
# gpu_sync.sh - the CUDA backend under 64 clients (bench_http.sh STRIPS=c64: 10- and 80-second
# ECG strips) with each host wait policy of ECG_CUDA_SYNC (gpu/cuda_backend.cu) and worker
# count, in one run, so that the default can be chosen on measurements.
# Usage (device, repository root): LD_LIBRARY_PATH=DIR/lib bash bench/gpu_sync.sh [DIR]
# DIR (default .gpu-run) holds ecgd, wrk and data/ (see tests/gpu/bundle.sh).
set -u
dir=${1:-.gpu-run}
cpus=$(nproc)
for config in "auto $cpus" "spin $cpus" "yield $cpus" "block $cpus" "block $((2 * cpus))"; do
    set -- $config
    echo "== ECG_CUDA_SYNC=$1, $2 workers"
    env $( [ "$1" != auto ] && echo "ECG_CUDA_SYNC=$1" ) PATH="$dir:$PATH" ECGD=$dir/ecgd \
        BACKEND=cuda WORKERS=$2 STRIPS=c64 DURATION=10s BIG_SAMPLES=100000 ROUNDS=1 \
        ECG_SHARED_DATA=$dir/data bash bench/bench_http.sh 2>&1 | grep -E '_c64'
done
