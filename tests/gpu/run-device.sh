#!/usr/bin/env bash
# run-device.sh - everything the GPU machine runs, in one go: the CUDA parity tests, the same
# under compute-sanitizer (memcheck, racecheck) on a quick subset, the streaming-upload tests
# (and memcheck on them), then the GPU benchmark.
#
# Usage (on the device, from the repository root, after copying a bundle made here):
#   LD_LIBRARY_PATH=.gpu-run/lib bash tests/gpu/run-device.sh [DIR] [parts]
# DIR (default .gpu-run) holds the binaries (test_gpu_parity, bench_gpu, ecgd) and data/ (a
# copy of the shared mitdb records). parts: any of "tests http uploads hostile sanitize bench batch strips"
# (default all): "batch" runs bench/bench_batch.c (the batched CUDA path's ceiling on 10-s strips
# without HTTP, lanes 1/2/4/8); "uploads" runs issue 12's HTTP suites (uploads, reload, metrics, annotations)
# against a CUDA-backed server; "hostile" runs the hostile-client suite (tests/hostile/hostile.py, quick mode) against a
# CUDA-backed server; "http" runs the service's HTTP suite (tests/e2e/test_http.sh) against a CUDA-backed
# server; "strips" runs bench/bench_strips.sh (wrk and http_sink bundled in DIR): for 1 s (the
# shortest recording analysed), 10 s, 80 s, 30 min and 20 h recordings as CSV and float32, the
# HTTP sink, a CUDA-backed server as shipped (dynamic batching on: --max-batch 64, 2 batchers
# per GPU, fronts as CUDA graphs, workers at least 64), one without batching (--max-batch 1),
# and a CPU-backed server on the same machine in one run, every figure also as a ratio to the sink, then one client's p50 on
# 10-s strips (server time and wall) on each (STRIP_SIZES (default "1 10 80": 30 min and 20 h,
# "1800 72000", are never batched and take long), STRIP_BACKENDS, STRIP_DURATION (default 5s
# per cell), BIG_CONNS, WRK_THREADS, ONE_CLIENT=0 override). "tests" includes test_gpu_batch (batched answers against lone ones;
# also with one batcher, and with the batched pass's side branch in line);
# "sanitize" runs memcheck and racecheck over it.
# "fuzz" (not in the default set) runs the fuzzing campaign of the libFuzzer harnesses
# (tests/fuzz/campaign.sh; FUZZ_SECONDS per harness (50), FUZZ_RUNS (10 M), FUZZ_JOBS (all CPUs)).
# "depth" (not in the default set) sweeps --batch-depth (batches in flight per batcher) and
# --batch-window-us over bench_batch and the 10-s strips (DEPTH_ROUNDS; DEPTH_CELLS, each
# DEPTH:WINDOW_US or DEPTH:WINDOW_US:BATCHERS; bench_batch's depths and batchers:
# DEPTH_BATCH_DEPTHS, DEPTH_BATCH_LANES).
# "tests" includes test_gpu_trace (kept traces, min/max decimation on the device); "http"
# includes tests/e2e/test_analyses.sh (/v1/analyses) against a CUDA-backed server; "dashboard"
# (not in the default set) runs bench/bench_dashboard.sh against a CUDA- and a CPU-backed server.
# Logs and tables go to $OUT when it is set, else to DIR/out.
set -u
dir=${1:-.gpu-run}
parts=${2:-"tests http uploads hostile sanitize bench batch strips"}
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

if [[ " $parts " == *" tests "* ]] && [ -x "$dir/test_gpu_leads" ]; then
    echo "== the noise-robust detector: several leads, stress-test mixtures (parity)"
    CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_leads" 2>&1 | tee "$out/leads.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [[ " $parts " == *" tests "* ]] && [ -x "$dir/test_gpu_quality" ]; then
    echo "== signal-quality features and verdict (bit-identical to the CPU)"
    CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_quality" 2>&1 | tee "$out/quality.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [[ " $parts " == *" tests "* ]] && [ -x "$dir/test_gpu_host_memory" ]; then
    echo "== pinned request bodies (engine host memory)"
    CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_host_memory" 2>&1 | tee "$out/host-memory.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [[ " $parts " == *" tests "* ]] && [ -x "$dir/test_gpu_upload" ]; then
    echo "== request bodies streamed to the device as they arrive (uploads)"
    CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_upload" 2>&1 | tee "$out/upload.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [[ " $parts " == *" tests "* ]] && [ -x "$dir/test_gpu_trace" ]; then
    echo "== kept traces: min/max decimation on the device against the CPU reference"
    CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_trace" 2>&1 | tee "$out/trace.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [[ " $parts " == *" tests "* ]] && [ -x "$dir/test_gpu_batch" ]; then
    echo "== dynamic batching: 64 concurrent mixed requests batched, each against its lone answer"
    CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_batch" 2>&1 | tee "$out/batch.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    echo "== dynamic batching, one batcher per device (ECG_CUDA_BATCH_LANES=1: the widest batches)"
    ECG_CUDA_BATCH_LANES=1 ECG_GPU_QUICK=1 CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_batch" 2>&1 |
        tee "$out/batch-lanes1.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    echo "== dynamic batching, one batch in flight per batcher (ECG_BATCH_DEPTH=1), and four (=4)"
    ECG_BATCH_DEPTH=1 ECG_GPU_QUICK=1 CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_batch" 2>&1 |
        tee "$out/batch-depth1.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ECG_BATCH_DEPTH=4 ECG_GPU_QUICK=1 CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_batch" 2>&1 |
        tee "$out/batch-depth4.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    echo "== dynamic batching, the pass's side branch in line (ECG_CUDA_BATCH_BRANCH=0)"
    ECG_CUDA_BATCH_BRANCH=0 ECG_GPU_QUICK=1 CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_batch" \
        2>&1 | tee "$out/batch-inline.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [[ " $parts " == *" http "* ]] && [ -x "$dir/ecgd" ] && command -v curl >/dev/null; then
    echo "== analyses resource (/v1/analyses) against a CUDA-backed server"
    ECGD=$dir/ecgd ECGD_TEST_BACKEND=cuda ECG_SHARED_DATA=$dir/data timeout 400 \
        bash tests/e2e/test_analyses.sh >"$out/analyses.log" 2>&1
    rc=$?
    grep -E '^not ok' "$out/analyses.log" | head -20
    echo "analyses: $(grep -c '^ok' "$out/analyses.log") ok, $(grep -c '^not ok' "$out/analyses.log") not ok, exit $rc"
    [ "$rc" -eq 0 ] || status=1
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

if [[ " $parts " == *" http "* ]] && [ -x "$dir/ecgd" ] && command -v curl >/dev/null; then
    echo "== dynamic batching through the service against a CUDA-backed server"
    ECGD=$dir/ecgd ECGD_TEST_BACKEND=cuda ECG_SHARED_DATA=$dir/data timeout 300 \
        bash tests/e2e/test_batching.sh >"$out/batching.log" 2>&1
    rc=$?
    grep -E '^not ok|^# ' "$out/batching.log" | head -20
    echo "batching: $(grep -c '^ok' "$out/batching.log") ok, $(grep -c '^not ok' "$out/batching.log") not ok, exit $rc"
    [ "$rc" -eq 0 ] || status=1
fi

if [[ " $parts " == *" uploads "* ]] && [ -x "$dir/ecgd" ] && command -v curl >/dev/null; then
    # Issue 12's suites against a CUDA-backed server: forms, WFDB over HTTP, compressed bodies,
    # CSV time columns and decimal commas (the CUDA CSV parser hands those to the host reader),
    # hot reload under 32 analyses, metrics, WFDB annotation export.
    for suite in test_uploads test_reload test_metrics test_annotations; do
        echo "== $suite against a CUDA-backed server"
        PATH="$dir:$PATH" ECGD=$dir/ecgd ECGD_TEST_BACKEND=cuda ECG_SHARED_DATA=$dir/data \
            timeout 600 bash "tests/e2e/$suite.sh" >"$out/$suite.log" 2>&1
        rc=$?
        grep -E '^not ok|^skip' "$out/$suite.log" | head -20
        echo "$suite: $(grep -c '^ok' "$out/$suite.log") ok, $(grep -c '^not ok' "$out/$suite.log") not ok, exit $rc"
        [ "$rc" -eq 0 ] || status=1
    done
fi

if [[ " $parts " == *" hostile "* ]] && [ -x "$dir/ecgd" ]; then
    echo "== hostile-client suite against a CUDA-backed server"
    ECGD=$dir/ecgd ECGD_TEST_BACKEND=cuda ECG_SHARED_DATA=$dir/data timeout 600 \
        bash tests/hostile/test_hostile.sh >"$out/hostile.log" 2>&1
    rc=$?
    grep -E '^not ok|^skip' "$out/hostile.log" | head -20
    echo "hostile: $(grep -c '^ok' "$out/hostile.log") ok, $(grep -c '^not ok' "$out/hostile.log") not ok, exit $rc"
    [ "$rc" -eq 0 ] || status=1
fi

if [[ " $parts " == *" sanitize "* ]]; then
    if command -v compute-sanitizer >/dev/null; then
        for tool in memcheck racecheck; do
            echo "== compute-sanitizer --tool $tool (quick subset)"
            ECG_GPU_QUICK=1 ECG_GPU_NO_OOM=1 CMOCKA_MESSAGE_OUTPUT=stdout \
                timeout 480 compute-sanitizer --tool "$tool" --error-exitcode 42 \
                --leak-check no "$dir/test_gpu_parity" >"$out/sanitize-$tool.log" 2>&1
            rc=$?
            tail -n 25 "$out/sanitize-$tool.log"
            echo "sanitizer $tool exit $rc"
            if [ "$rc" -ne 0 ] && [ "$tool" = racecheck ] &&
                grep -q "Internal Sanitizer Error" "$out/sanitize-$tool.log" &&
                ! grep -qE "Race reported|hazard[s]? displayed \([1-9]" "$out/sanitize-$tool.log"; then
                # The tool lost track of a launch (not a race). racecheck checks shared-memory
                # hazards inside each kernel, which launch order cannot change: run the tests
                # that launch from several host threads at once with launches serialised.
                echo "== racecheck: the tool failed internally; multi-threaded tests again with CUDA_LAUNCH_BLOCKING=1"
                ECG_GPU_QUICK=1 ECG_GPU_NO_OOM=1 CUDA_LAUNCH_BLOCKING=1 CMOCKA_MESSAGE_OUTPUT=stdout \
                    timeout 240 compute-sanitizer --tool racecheck --error-exitcode 42 \
                    --leak-check no "$dir/test_gpu_parity" >"$out/sanitize-racecheck-serial.log" 2>&1
                rc=$?
                tail -n 8 "$out/sanitize-racecheck-serial.log"
                echo "sanitizer racecheck, launches serialised, exit $rc"
            fi
            [ "$rc" -eq 0 ] || status=1
        done
        # the batcher: memcheck and racecheck over batches of 64 on contexts of their own;
        # racecheck takes each test alone (it instruments every kernel of ~1,000 analyses), the
        # graph test with one lane and 16 requests per round (ECG_PARITY_REQUESTS), so that its
        # contexts capture and replay within the rounds and the call ends in time
        if [ -x "$dir/test_gpu_batch" ]; then
            for run in "memcheck all" "racecheck test_cuda_batches_match_lone_answers" \
                       "racecheck test_cuda_batch_graphs_match_lone_answers"; do
                read -r tool only <<<"$run"
                lanes= requests=
                [ "$only" = test_cuda_batch_graphs_match_lone_answers ] && lanes=1 requests=16
                log=$out/sanitize-batch-$tool${only#all}.log
                echo "== compute-sanitizer --tool $tool, dynamic batching ($only${lanes:+, $lanes lane})"
                ECG_GPU_QUICK=1 ECG_GPU_ONLY=${only#all} ECG_CUDA_BATCH_LANES=$lanes \
                    ECG_PARITY_REQUESTS=$requests \
                    CMOCKA_MESSAGE_OUTPUT=stdout timeout "${SANITIZE_BATCH_S:-480}" \
                    compute-sanitizer --tool "$tool" --error-exitcode 42 --leak-check no \
                    "$dir/test_gpu_batch" >"$log" 2>&1
                rc=$?
                tail -n 12 "$log"
                echo "sanitizer $tool (batch, $only) exit $rc"
                [ "$rc" -eq 0 ] || status=1
            done
        fi
        # uploads: the parsers reading a streamed body in place (exactly its bytes, no slack
        # after them); quality: the per-window features kernel
        for part in upload quality; do
            [ -x "$dir/test_gpu_$part" ] || continue
            echo "== compute-sanitizer --tool memcheck, $part (quick subset)"
            ECG_GPU_QUICK=1 CMOCKA_MESSAGE_OUTPUT=stdout \
                timeout 240 compute-sanitizer --tool memcheck --error-exitcode 42 \
                --leak-check no "$dir/test_gpu_$part" >"$out/sanitize-$part.log" 2>&1
            rc=$?
            tail -n 25 "$out/sanitize-$part.log"
            echo "sanitizer memcheck ($part) exit $rc"
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
if [[ " $parts " == *" batch "* ]] && [ -x "$dir/bench_batch" ]; then
    # the batched path's ceiling with no HTTP in front of it: 64 threads, lanes 1/2/4/8, each
    # lane's time by step (bench/bench_batch.c)
    echo "== the CUDA batcher without HTTP (bench_batch)"
    ECG_SHARED_DATA=$dir/data ECG_CUDA_BATCH_TIMES=1 timeout 120 "$dir/bench_batch" \
        >"$out/bench_batch.log" 2>&1
    rc=$?
    grep -E "^10-s|lane 0:" "$out/bench_batch.log"
    [ "$rc" -eq 0 ] || status=1
fi

if [[ " $parts " == *" strips "* ]] && [ -x "$dir/ecgd" ] && [ -x "$dir/wrk" ] &&
    [ -x "$dir/http_sink" ]; then
    # One run, one table: each length and format against the HTTP sink, then the CUDA and the
    # CPU backend (bench/bench_strips.sh); 64 clients up to 80 s, BIG_CONNS beyond.
    echo "== strips: 1 s, 10 s, 80 s (STRIP_SIZES); CSV and float32; sink, CUDA as shipped (batched), CUDA unbatched, CPU"
    PATH="$dir:$PATH" ECGD=$dir/ecgd SINK=$dir/http_sink \
        BACKENDS="${STRIP_BACKENDS:-cuda cuda-unbatched cpu}" \
        ONE_CLIENT=${ONE_CLIENT:-1} SIZES="${STRIP_SIZES:-1 10 80}" CONNS=64 BIG_CONNS=${BIG_CONNS:-4} \
        DURATION=${STRIP_DURATION:-5s} WRK_THREADS=${WRK_THREADS:-4} ECG_SHARED_DATA=$dir/data \
        timeout 570 bash bench/bench_strips.sh 2>&1 | tee "$out/strips.log" |
        grep -E '^# |^\|'
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [[ " $parts " == *" depth "* ]] && [ -x "$dir/ecgd" ] && [ -x "$dir/wrk" ] &&
    [ -x "$dir/http_sink" ]; then
    # Batches in flight per batcher (--batch-depth; not in the default set): bench_batch at
    # depths 1-3, then the 10-s strips over HTTP (CUDA as shipped but for the depth and window,
    # each cell against its own sink) for depth x window, DEPTH_ROUNDS rounds (default 2)
    # alternating the settings, so that a drifting host hits each alike.
    echo "== batches in flight: bench_batch and 10-s strips by --batch-depth and --batch-window-us"
    for depth in ${DEPTH_BATCH_DEPTHS:-1 2 3}; do
        ECG_BATCH_DEPTH=$depth BENCH_LANES="${DEPTH_BATCH_LANES:-1 2 4}" BENCH_SECONDS=3 ECG_SHARED_DATA=$dir/data \
            timeout 60 "$dir/bench_batch" 2>&1 | sed "s/^RESULT /RESULT depth=$depth /" |
            tee -a "$out/depth-batch.log" | grep RESULT
    done
    for round in $(seq 1 "${DEPTH_ROUNDS:-2}"); do
        for cell in ${DEPTH_CELLS:-"1:100" "2:100" "2:30" "3:30" "2:0"}; do
            # a cell is DEPTH:WINDOW_US, or DEPTH:WINDOW_US:BATCHERS (--batch-lanes)
            IFS=: read -r c_depth c_window c_lanes <<<"$cell"
            echo "== round $round, --batch-depth $c_depth, --batch-window-us $c_window${c_lanes:+, --batch-lanes $c_lanes}"
            PATH="$dir:$PATH" ECGD=$dir/ecgd SINK=$dir/http_sink BACKENDS=cuda SIZES=10 \
                CONNS=64 DURATION=${STRIP_DURATION:-4s} WRK_THREADS=${WRK_THREADS:-4} \
                ECG_SHARED_DATA=$dir/data BATCH_DEPTH=$c_depth BATCH_WINDOW_US=$c_window \
                BATCH_LANES=${c_lanes:-} timeout 120 bash bench/bench_strips.sh 2>&1 |
                tee "$out/depth-r$round-${cell//:/-}.log" | grep -E '^# ecgd|^RESULT name=strip '
        done
    done
fi
if [[ " $parts " == *" dashboard "* ]] && [ -x "$dir/ecgd" ]; then
    # GET .../signal of a 20-hour recording at 2,000 points, CUDA then CPU backend (the page-load
    # half needs chromium and is skipped where there is none)
    for backend in cuda cpu; do
        echo "== dashboard signal windows, $backend backend"
        ECGD=$dir/ecgd BACKEND=$backend ECG_SHARED_DATA=$dir/data timeout 300 \
            bash bench/bench_dashboard.sh 2>&1 | tee "$out/dashboard-$backend.log"
    done
fi
if [[ " $parts " == *" fuzz "* ]]; then
    # The fuzzing campaign (issue 9, tests/fuzz/campaign.sh): every harness in turn, one
    # libFuzzer process per CPU, FUZZ_SECONDS each (default 50: 9 harnesses in about 8 minutes),
    # stopping a harness at FUZZ_RUNS executions (default 10 M) so that the time it leaves goes
    # to the slower ones after it. The binaries travel compressed (DIR/fuzz.tar.xz, bundle.sh);
    # the new corpus units and any reproducer come back in $out/fuzz-found.tar.gz.
    [ -x "$dir/fuzz/fuzz_request" ] || tar xJf "$dir/fuzz.tar.xz" -C "$dir"
    work=$(mktemp -d /tmp/fuzz-campaign.XXXXXX)
    echo "== fuzzing campaign: $(nproc) processes per harness"
    FUZZ_WORK=$work FUZZ_SECONDS=${FUZZ_SECONDS:-50} FUZZ_RUNS=${FUZZ_RUNS:-10000000} \
        FUZZ_JOBS=${FUZZ_JOBS:-$(nproc)} bash tests/fuzz/campaign.sh "$dir/fuzz" 2>&1 |
        tee "$out/fuzz.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    (cd "$work" && tar czf "$out/fuzz-found.tar.gz" --exclude='*/fuzz-*.log' --exclude='*/main.log' \
        $(ls -d */corpus */crash-* */leak-* */timeout-* */oom-* 2>/dev/null))
    ls -la "$out/fuzz-found.tar.gz"
fi
echo "== done, status $status"
exit $status
