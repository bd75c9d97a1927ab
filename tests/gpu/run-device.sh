#!/usr/bin/env bash
# run-device.sh - everything the GPU machine runs, in one go: the CUDA parity tests, the same
# under compute-sanitizer (memcheck, racecheck) on a quick subset, then the GPU benchmark.
#
# Usage (on the device, from the repository root, after copying a bundle made here):
#   LD_LIBRARY_PATH=.gpu-run/lib bash tests/gpu/run-device.sh [DIR] [parts]
# DIR (default .gpu-run) holds the binaries (test_gpu_parity, bench_gpu, ecgd) and data/ (a
# copy of the shared mitdb records). parts: any of "tests http sanitize bench" (default all):
# "http" runs the service's HTTP suite (tests/e2e/test_http.sh) against a CUDA-backed server.
# Logs and tables go to $OUT when it is set, else to DIR/out.
set -u
dir=${1:-.gpu-run}
parts=${2:-"tests http sanitize bench"}
out=${OUT:-$dir/out}
mkdir -p "$out"
export ECG_GPU_DATA=$dir/data
status=0

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
echo "== commit $(cat "$dir/COMMIT" 2>/dev/null || echo unknown)"

if [[ " $parts " == *" tests "* ]]; then
    echo "== parity tests"
    CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_parity" 2>&1 | tee "$out/parity.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [[ " $parts " == *" tests "* ]] && [ -x "$dir/test_gpu_host_memory" ]; then
    echo "== pinned request bodies (engine host memory)"
    CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_host_memory" 2>&1 | tee "$out/host-memory.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [[ " $parts " == *" http "* ]] && [ -x "$dir/ecgd" ] && command -v curl >/dev/null; then
    echo "== HTTP suite against a CUDA-backed server"
    ECGD=$dir/ecgd ECGD_TEST_BACKEND=cuda ECG_SHARED_DATA=$dir/data timeout 300 \
        bash tests/e2e/test_http.sh >"$out/http.log" 2>&1
    rc=$?
    grep -E '^not ok' "$out/http.log" | head -20
    echo "http: $(grep -c '^ok' "$out/http.log") ok, $(grep -c '^not ok' "$out/http.log") not ok, exit $rc"
    [ "$rc" -eq 0 ] || status=1
fi

if [[ " $parts " == *" sanitize "* ]]; then
    if command -v compute-sanitizer >/dev/null; then
        for tool in memcheck racecheck; do
            echo "== compute-sanitizer --tool $tool (quick subset)"
            ECG_GPU_QUICK=1 ECG_GPU_NO_OOM=1 CMOCKA_MESSAGE_OUTPUT=stdout \
                timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 42 \
                --leak-check no "$dir/test_gpu_parity" >"$out/sanitize-$tool.log" 2>&1
            rc=$?
            tail -n 25 "$out/sanitize-$tool.log"
            echo "sanitizer $tool exit $rc"
            [ "$rc" -eq 0 ] || status=1
        done
    else
        echo "compute-sanitizer not found"
    fi
fi

if [[ " $parts " == *" bench "* ]] && [ -x "$dir/bench_gpu" ]; then
    echo "== benchmark"
    bash bench/gpu.sh "$dir" 2>&1 | tee "$out/bench.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
echo "== done, status $status"
exit $status
