#!/usr/bin/env bash
# bench_http.sh - HTTP service benchmarks: wrk runs of DURATION (requests/s, p50 and p99
# latency) posting 10-, 20- and 80-second ECG strips, and one 20M-sample recording, as CSV and as float32, analysed end to end compared
# with a raw loopback transfer of the same bytes to a trivial sink, in the same run. For the big
# ones it also prints the service's own overhead: end to end minus the engine's total from the
# answer's timing_ms (upload, receiving and holding the body, queueing, answering).
#
# Usage: bench/bench_http.sh [BUILD_DIR]      (from the repository root; default build)
# Environment: ECGD (binary), BACKEND (default auto), WORKERS, DURATION (default 10s),
#              MODEL (a .ecgm file or none; default models/default.ecgm when it exists, else
#              none), BIG_SAMPLES (default 20000000), ROUNDS (big POSTs, default 3, median
#              reported), STRIPS (0 skips the wrk strips, c64 runs only the 64-client
#              analysis strips), ECG_SHARED_DATA (default
#              ../shared/data).
# Prints one "RESULT ..." line per strip and a closing summary; the figures go to
# bench/RESULTS.md by hand.
set -u
BUILD=${1:-build}
ECGD=${ECGD:-$BUILD/ecgd}
BACKEND=${BACKEND:-auto}
DURATION=${DURATION:-10s}
BIG_SAMPLES=${BIG_SAMPLES:-20000000}
export ECG_SHARED_DATA=${ECG_SHARED_DATA:-../shared/data}
HELP="python3 tests/e2e/http_helpers.py"
LUA=bench/http_bench.lua
cpus=$(nproc)
WORKERS=${WORKERS:-$cpus}

for tool in curl python3; do
    command -v "$tool" >/dev/null || { echo "bench_http: $tool is not installed" >&2; exit 1; }
done
have_wrk=1
command -v wrk >/dev/null || { have_wrk=0; echo "# wrk is not installed: the wrk runs are skipped"; }
[ -x "$ECGD" ] || { echo "bench_http: $ECGD is not built" >&2; exit 1; }

tmp=$(mktemp -d)
server_pid=
sink_pid=
cleanup() {
    [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    [ -n "$sink_pid" ] && kill "$sink_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

MODEL=${MODEL:-models/default.ecgm}
model_args=(--model none)
[ "$MODEL" != none ] && [ -f "$MODEL" ] && model_args=(--model "$MODEL")
ROUNDS=${ROUNDS:-3}
[ "${STRIPS:-1}" = 0 ] && have_wrk=0

# Fixtures: a 20 s and an 80 s recording of real ECG (UCR, 250 Hz) as CSV and float32.
mkdir -p "$tmp/fx"
$HELP fixtures "$ECG_SHARED_DATA" "$tmp/fx" || exit 1
head -n 5000 "$tmp/fx/ucr.csv" >"$tmp/short.csv"
# 10-second strips (a standard rhythm strip): 2,500 samples at 250 Hz
head -n 2500 "$tmp/fx/ucr.csv" >"$tmp/strip10.csv"
head -c 10000 "$tmp/fx/ucr.f32" >"$tmp/strip10.f32"

"$ECGD" serve --bind 127.0.0.1 --port 0 --backend "$BACKEND" --workers "$WORKERS" \
    --max-body-mb 1024 --queue-depth 256 --timeout-s 120 "${model_args[@]}" 2>"$tmp/server.log" &
server_pid=$!
port=
for _ in $(seq 1 600); do
    port=$(grep -m1 '"event":"listening"' "$tmp/server.log" 2>/dev/null | grep -o '"port":[0-9]*' |
           head -1 | cut -d: -f2)
    [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ] && break
    sleep 0.1
done
[ -n "$port" ] || { echo "bench_http: server did not start" >&2; cat "$tmp/server.log" >&2; exit 1; }
base=http://127.0.0.1:$port
info=$(curl -s "$base/v1/info")
echo "# ecgd $(echo "$info" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["version"], "backend", d["backend"], "on", d["device"])'), $WORKERS workers, $cpus CPUs, model ${model_args[1]}"

strip() { # strip NAME CONNECTIONS PATH [METHOD FILE TYPE]
    [ "$have_wrk" = 1 ] || return 0
    local name=$1 conns=$2 path=$3
    shift 3
    BENCH_NAME=$name wrk -t 2 -c "$conns" -d "$DURATION" --timeout 30s -s "$LUA" "$base$path" -- "$name" "$@" |
        grep '^RESULT'
}

# STRIPS=c64: only the analysis strips with 64 concurrent clients (the GPU-vs-CPU comparison).
if [ "${STRIPS:-1}" = c64 ]; then
    strip analyze_csv_10s_c64 64 "/v1/analyze?fs=250" POST "$tmp/strip10.csv" text/csv
    strip analyze_f32_10s_c64 64 "/v1/analyze?fs=250" POST "$tmp/strip10.f32" application/octet-stream
    strip analyze_csv_80s_c64 64 "/v1/analyze?fs=250" POST "$tmp/fx/ucr.csv" text/csv
    strip analyze_f32_80s_c64 64 "/v1/analyze?fs=250" POST "$tmp/fx/ucr.f32" application/octet-stream
    have_wrk=0
fi
strip healthz_c32 32 /healthz
strip metrics_c8 8 /metrics
strip analyze_csv_10s_c4 4 "/v1/analyze?fs=250" POST "$tmp/strip10.csv" text/csv
strip analyze_csv_20s_c4 4 "/v1/analyze?fs=250" POST "$tmp/short.csv" text/csv
strip analyze_csv_80s_c4 4 "/v1/analyze?fs=250" POST "$tmp/fx/ucr.csv" text/csv
strip analyze_f32_80s_c4 4 "/v1/analyze?fs=250" POST "$tmp/fx/ucr.f32" application/octet-stream
strip analyze_csv_20s_summary_c4 4 "/v1/analyze?fs=250&include=summary" POST "$tmp/short.csv" text/csv
if [ "${model_args[1]}" != none ]; then
    printf '{"grid": {"n": 8, "range": 3}}' >"$tmp/grid.json"
    model_name=$(basename "${model_args[1]}" .ecgm)
    strip decode_grid8_c4 4 "/v1/models/$model_name/decode" POST "$tmp/grid.json" application/json
fi

# The big ones: BIG_SAMPLES samples as CSV and as float32, streamed by the same client to ecgd
# and to a trivial sink that only reads and discards the bytes, alternately.
$HELP bigcsv "$tmp/big.csv" "$BIG_SAMPLES" || exit 1
python3 -c '
import array, sys
a = array.array("f", (float(line) for line in open(sys.argv[1])))
open(sys.argv[2], "wb").write(a.tobytes())' "$tmp/big.csv" "$tmp/big.f32" || exit 1
$HELP sink "$tmp/sink.port" &
sink_pid=$!
for _ in $(seq 1 100); do [ -s "$tmp/sink.port" ] && break; sleep 0.05; done
sink=http://127.0.0.1:$(cat "$tmp/sink.port")/sink
cat "$tmp/big.csv" "$tmp/big.f32" >/dev/null   # warm the page cache for both

post_time() { # post_time URL FILE TYPE: status and seconds for the whole exchange
    curl -s -o "$tmp/answer" -w '%{http_code} %{time_total}\n' -H 'Expect:' -H "Content-Type: $3" \
        -T "$2" -X POST "$1"
}

for kind in csv f32; do
    if [ $kind = csv ]; then type=text/csv; else type=application/octet-stream; fi
    file=$tmp/big.$kind
    rows=$tmp/rows.$kind
    : >"$rows"
    post_time "$base/v1/analyze?fs=250&include=summary" "$file" "$type" >/dev/null  # warm-up
    for _ in $(seq 1 "$ROUNDS"); do
        read -r code raw <<<"$(post_time "$sink" "$file" "$type")"
        [ "$code" = 200 ] || { echo "bench_http: the sink answered $code" >&2; exit 1; }
        read -r code e2e <<<"$(post_time "$base/v1/analyze?fs=250&include=summary,timing" "$file" "$type")"
        [ "$code" = 200 ] || { echo "bench_http: big POST answered $code: $(head -c 300 "$tmp/answer")" >&2; exit 1; }
        python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], sys.argv[3], d["timing_ms"]["total"] / 1e3, d["summary"]["beats"])' \
            "$tmp/answer" "$raw" "$e2e" >>"$rows"
    done
    python3 - "$kind" "$BIG_SAMPLES" "$(stat -c %s "$file")" "$rows" <<'PYTHON'
import statistics, sys
kind, n, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [[float(x) for x in line.split()] for line in open(sys.argv[4])]
raw = statistics.median(r[0] for r in rows)
e2e = statistics.median(r[1] for r in rows)
engine = statistics.median(r[2] for r in rows)
service = statistics.median(r[1] - r[2] for r in rows)
print("RESULT name=big_%s_end_to_end samples=%d bytes=%d beats=%d rounds=%d ecgd_s=%.3f "
      "raw_loopback_s=%.3f ratio=%.2f engine_s=%.3f service_overhead_s=%.3f "
      "service_over_raw_s=%.3f ecgd_MB_per_s=%.1f raw_MB_per_s=%.1f" % (
          kind, n, nbytes, int(rows[-1][3]), len(rows), e2e, raw, e2e / raw, engine, service,
          service - raw, nbytes / e2e / 1e6, nbytes / raw / 1e6))
PYTHON
done
# The same CSV through the CLI (read + analyse + JSON, plus engine start-up), for reference.
cli_start=$EPOCHREALTIME
"$ECGD" analyze "$tmp/big.csv" --format csv --fs 250 --include summary --backend "$BACKEND" \
    --model "${model_args[1]}" >/dev/null 2>&1
python3 -c "print('RESULT name=big_csv_cli analyze_s=%.3f' % ($EPOCHREALTIME - $cli_start))"
# What the engine and the body pool did (from the server's metrics).
curl -s "$base/metrics" | grep -E '^ecgd_engine_stage_seconds_sum|^ecgd_body_' | sed 's/^/# /'
