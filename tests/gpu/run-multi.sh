#!/usr/bin/env bash
# run-multi.sh - the multi-GPU checks, on a machine with two or more GPUs: one worker pool per
# visible device and CUDA_VISIBLE_DEVICES respected.
#   1. test_multi_device (test_gpu_parity.c): an engine on every visible device, 4 threads;
#      results identical to the first device's; an engine on the second device alone.
#   2. The same with CUDA_VISIBLE_DEVICES set to one device: it must skip (one visible).
#   3. test_gpu_upload on every visible device: streamed bodies spread over the devices, the
#      engine preferring a worker on the upload's device.
#   4. ecgd serve on every device (4 workers): /v1/info names the devices; 16 concurrent POSTs
#      of 30-minute records as float32 (streamed) give the answer of a single request; then
#      with CUDA_VISIBLE_DEVICES=1, /v1/info names one device.
# Usage (repository root, after tests/gpu/bundle.sh and unpacking data.tar.xz into DIR):
#   LD_LIBRARY_PATH=DIR/lib bash tests/gpu/run-multi.sh [DIR]
set -u
dir=${1:-.gpu-run}
export ECG_GPU_DATA=$dir/data
status=0
fail() { echo "FAIL: $*"; status=1; }

echo "== devices"
nvidia-smi -L
n=$(nvidia-smi -L | grep -c '^GPU')
[ "$n" -ge 2 ] || { echo "fewer than 2 GPUs: nothing to check"; exit 1; }

echo "== 1. test_multi_device, every visible device"
CMOCKA_MESSAGE_OUTPUT=stdout ECG_GPU_ONLY=test_multi_device "$dir/test_gpu_parity" 2>&1 |
    grep -E '^# (devices|multi)|PASSED|FAILED|SKIP|Failure|error' || true
CMOCKA_MESSAGE_OUTPUT=stdout ECG_GPU_ONLY=test_multi_device "$dir/test_gpu_parity" >/dev/null 2>&1 ||
    fail "test_multi_device"

echo "== 2. CUDA_VISIBLE_DEVICES=1: one device visible"
out=$(CUDA_VISIBLE_DEVICES=1 CMOCKA_MESSAGE_OUTPUT=stdout ECG_GPU_ONLY=test_multi_device \
      "$dir/test_gpu_parity" 2>&1)
echo "$out" | grep -E 'SKIP|PASSED|FAILED'
echo "$out" | grep -q "only 1 visible" || fail "CUDA_VISIBLE_DEVICES=1 did not leave one device"

echo "== 3. streamed uploads over every visible device"
CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_upload" 2>&1 | grep -E '^# |PASSED|FAILED' || true
CMOCKA_MESSAGE_OUTPUT=stdout "$dir/test_gpu_upload" >/dev/null 2>&1 || fail "test_gpu_upload"

echo "== 4. the service on every visible device"
work=$(mktemp -d)
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
server=
serve() { # serve PORT [env...]: starts ecgd, waits for /readyz
    env "${@:2}" "$dir/ecgd" serve --bind 127.0.0.1 --port "$1" --backend cuda --workers 4 \
        --max-body-mb 64 2>"$work/serve-$1.log" &
    server=$!
    for _ in $(seq 1 500); do
        curl -sf -o /dev/null "http://127.0.0.1:$1/readyz" && return 0
        sleep 0.02
    done
    tail "$work/serve-$1.log"
    return 1
}
python3 - "$ECG_GPU_DATA/mitdb" "$work" <<'PY'
import struct, sys
# lead 0 of four records, WFDB format 212, as float32 millivolts (gain 200, baseline 1024)
for rec in ("101", "106", "203", "208"):
    raw = open(f"{sys.argv[1]}/{rec}.dat", "rb").read()
    out = []
    for i in range(0, len(raw) - 2, 3):
        b0, b1 = raw[i], raw[i + 1]
        v = b0 | ((b1 & 0x0F) << 8)
        if v >= 2048:
            v -= 4096
        out.append((v - 1024) / 200.0)
    open(f"{sys.argv[2]}/{rec}.f32", "wb").write(struct.pack(f"<{len(out)}f", *out))
PY
if serve 18090; then
    info=$(curl -s http://127.0.0.1:18090/v1/info)
    echo "$info"
    echo "$info" | grep -q '"device":"[^"]* x[0-9]' || fail "/v1/info does not name several devices"
    for rec in 101 106 203 208; do
        curl -s -H "Content-Type: application/octet-stream" --data-binary @"$work/$rec.f32" \
            "http://127.0.0.1:18090/v1/analyze?fs=360" | sed 's/,"timing_ms".*//' >"$work/$rec.ref"
    done
    before=$(curl -s http://127.0.0.1:18090/metrics | awk '/^ecgd_uploads_streamed_total/ {print $2}')
    for round in 1 2 3 4; do
        for rec in 101 106 203 208; do
            (curl -s -H "Content-Type: application/octet-stream" --data-binary @"$work/$rec.f32" \
                "http://127.0.0.1:18090/v1/analyze?fs=360" | sed 's/,"timing_ms".*//' \
                >"$work/$rec.$round") &
        done
    done
    wait $(jobs -p | grep -v "^$server$") 2>/dev/null
    differ=0
    for round in 1 2 3 4; do
        for rec in 101 106 203 208; do
            cmp -s "$work/$rec.ref" "$work/$rec.$round" || differ=$((differ + 1))
        done
    done
    after=$(curl -s http://127.0.0.1:18090/metrics | awk '/^ecgd_uploads_streamed_total/ {print $2}')
    echo "16 concurrent POSTs: $differ differ from the single answers; streamed to the device: $((${after%.*} - ${before%.*})) of 16"
    [ "$differ" = 0 ] || fail "concurrent answers differ"
    head -c 200 "$work/101.ref"; echo
    kill -TERM $server; wait $server 2>/dev/null
else
    fail "the service did not start"
fi
if serve 18091 CUDA_VISIBLE_DEVICES=1; then
    info=$(curl -s http://127.0.0.1:18091/v1/info)
    echo "$info" | grep -o '"device":"[^"]*"'
    echo "$info" | grep -q '"device":"[^"]* x[0-9]' && fail "CUDA_VISIBLE_DEVICES=1 still shows several devices"
    kill -TERM $server; wait $server 2>/dev/null
else
    fail "the service did not start with CUDA_VISIBLE_DEVICES=1"
fi
echo "== done, status $status"
exit $status
