#!/usr/bin/env bash
# test_http.sh - the HTTP service end to end: starts the real `ecgd serve` on 127.0.0.1 (a free
# port chosen by the kernel, the backend of ECGD_TEST_BACKEND, cpu by default) and talks to it with curl.
#
# Covers every route and content type; answers byte-identical (apart from timing_ms) to
# `ecgd analyze` on the same real recordings; more than 30 hostile or wrong requests, each with its
# status and error code; body limits up front and while streaming; chunked uploads (streamed to
# the device like bodies with a Content-Length, counted by ecgd_uploads_streamed_total); 32 parallel
# clients with different inputs; the bearer token; overload; slow clients; access logs; metrics;
# the OpenAPI document against the route table; configuration from flags and environment; and a
# graceful shutdown with a request in flight.
#
# Prints `ok N - what` / `not ok N - what` / `skip N - what`; exits non-zero on any failure.
# Usage: ECGD=build/ecgd tests/e2e/test_http.sh   (run from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
DATA=${ECG_SHARED_DATA:-../shared/data}
HERE=$(cd "$(dirname "$0")" && pwd)
HELP="python3 $HERE/http_helpers.py"
# The backend every server and CLI run here uses: cpu by default (CI has no GPU); the GPU
# machine runs the same suite with ECGD_TEST_BACKEND=cuda.
BACKEND=${ECGD_TEST_BACKEND:-cpu}
tmp=$(mktemp -d)
server_pids=()
n=0
failures=0

cleanup() {
    for pid in "${server_pids[@]}"; do
        kill -KILL "$pid" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failures=$((failures + 1)); echo "not ok $n - $1"; }
skip() { n=$((n + 1)); echo "skip $n - $1"; }
# check DESC CMD...: ok when CMD succeeds.
check() {
    local desc=$1
    shift
    if "$@"; then ok "$desc"; else not_ok "$desc"; fi
}

if [ ! -x "$ECGD" ]; then
    echo "not ok 1 - $ECGD is not built"
    exit 1
fi
if [ ! -f "$DATA/ucr/ecg50T.txt" ]; then
    echo "skip 1 - shared data not found at $DATA"
    exit 0
fi

# The bundled model (or ECGD_TEST_MODEL) when there is one, copied as "default" and "other" into
# a model directory of our own; otherwise the signal-only engine (model tests skip).
MODEL=none
MODEL_ARGS=(--model none)
source_model=${ECGD_TEST_MODEL:-models/default.ecgm}
if [ -f "$source_model" ]; then
    mkdir -p "$tmp/models"
    cp "$source_model" "$tmp/models/default.ecgm"
    cp "$source_model" "$tmp/models/other.ecgm"
    MODEL=$tmp/models/default.ecgm
    MODEL_ARGS=(--model-dir "$tmp/models" --model default)
fi

# ------------------------------------------------------------------ helpers

# listen_port LOG: the port a server logged in its "listening" line (the first "port" of it).
listen_port() {
    grep -m1 '"event":"listening"' "$1" 2>/dev/null | grep -o '"port":[0-9]*' | head -1 | cut -d: -f2
}

# start_server LOG [ENV=VALUE...] -- [ARGS...]: starts a server, sets SERVER_PID and PORT.
start_server() {
    local log=$1
    shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    env "${envs[@]}" "$ECGD" serve --bind 127.0.0.1 --port 0 --backend "$BACKEND" "$@" 2>"$log" &
    SERVER_PID=$!
    server_pids+=("$SERVER_PID")
    PORT=
    for _ in $(seq 1 200); do
        PORT=$(listen_port "$log")
        [ -n "$PORT" ] && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.05
    done
    [ -n "$PORT" ]
}

# wait_ready PORT: until /readyz answers 200 (at most 30 s).
wait_ready() {
    for _ in $(seq 1 300); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz")" = 200 ] &&
            return 0
        sleep 0.1
    done
    return 1
}

# req METHOD PATH [CURL ARGS...]: body to $tmp/body, headers to $tmp/headers; prints the status.
req() {
    local method=$1 path=$2
    shift 2
    curl -s --max-time 60 -X "$method" -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' \
        "http://127.0.0.1:$PORT$path" "$@"
}

# stop_server PID: SIGTERM, then at most 40 s for the exit; prints the exit status (KILL: 137).
stop_server() {
    local pid=$1
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 400); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    echo $?
}

# wait_in_flight N: until the server counts at least N requests in flight (the /metrics request
# that asks counts itself), at most 10 s.
wait_in_flight() {
    local want=$1
    for _ in $(seq 1 200); do
        local got
        got=$(curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics" |
              sed -n 's/^ecgd_http_requests_in_flight \([0-9]*\)$/\1/p')
        [ -n "$got" ] && [ "$got" -ge "$want" ] && return 0
        sleep 0.05
    done
    return 1
}

header() { grep -i "^$1:" "$tmp/headers" | head -1 | cut -d' ' -f2- | tr -d '\r'; }

# expect_error DESC STATUS CODE METHOD PATH [CURL ARGS...]
expect_error() {
    local desc=$1 status=$2 code=$3 method=$4 path=$5
    shift 5
    local got
    got=$(req "$method" "$path" "$@")
    if [ "$got" = "$status" ] && $HELP error "$tmp/body" "$status" "$code"; then
        ok "$desc ($status $code)"
    else
        echo "# HTTP $got: $(head -c 300 "$tmp/body")"
        not_ok "$desc ($status $code)"
    fi
}

# analyze_same DESC FIXTURE CLI_FORMAT CONTENT_TYPE QUERY [CLI ARGS...]: the service and the CLI
# give the same answer for the same recording.
analyze_same() {
    local desc=$1 file=$2 format=$3 type=$4 query=$5
    shift 5
    "$ECGD" analyze "$fx/$file" --format "$format" --backend "$BACKEND" --model "$MODEL" "$@" \
        >"$tmp/cli.json" 2>"$tmp/cli.err"
    local got
    got=$(req POST "/v1/analyze?$query" -H "Content-Type: $type" --data-binary "@$fx/$file")
    if [ "$got" = 200 ] && $HELP same "$tmp/cli.json" "$tmp/body"; then
        ok "$desc: same answer as ecgd analyze"
    else
        echo "# HTTP $got: $(head -c 300 "$tmp/body") / cli: $(head -c 200 "$tmp/cli.err")"
        not_ok "$desc: same answer as ecgd analyze"
    fi
}

fx=$tmp/fx
mkdir -p "$fx"
$HELP fixtures "$DATA" "$fx" || { echo "not ok 1 - fixtures"; exit 1; }

# ------------------------------------------------------------------ configuration

check "serve --help documents every ECGD_* variable" bash -c \
    "'$ECGD' serve --help | grep -q ECGD_PORT && '$ECGD' serve --help | grep -q ECGD_TOKEN &&
     '$ECGD' serve --help | grep -q ECGD_QUEUE_DEPTH && '$ECGD' serve --help | grep -q ECGD_MODEL_DIR"
check "defaults: 0.0.0.0:8080, model dir models, model default" bash -c \
    "env -u ECGD_PORT -u ECGD_BIND -u ECGD_MODEL_DIR -u ECGD_MODEL '$ECGD' serve --print-config |
     grep -q '\"bind\":\"0.0.0.0\",\"port\":8080,.*\"model_dir\":\"models\",\"model\":\"default\"'"
check "environment sets options, flags win over it" bash -c \
    "ECGD_WORKERS=3 ECGD_PORT=9000 '$ECGD' serve --print-config | grep -q '\"port\":9000,.*\"workers\":3' &&
     ECGD_WORKERS=3 '$ECGD' serve --workers 5 --print-config | grep -q '\"workers\":5'"
check "bad option values exit 2" bash -c \
    "ECGD_PORT=99999 '$ECGD' serve --print-config 2>/dev/null; [ \$? = 2 ] &&
     { '$ECGD' serve --backend tpu 2>/dev/null; [ \$? = 2 ]; } &&
     { '$ECGD' serve --no-such-flag 2>/dev/null; [ \$? = 2 ]; }"

check "a missing model directory stops start-up with exit 1 and a logged reason" bash -c \
    "timeout 30 '$ECGD' serve --bind 127.0.0.1 --port 0 --backend "$BACKEND" --model-dir '$tmp/no-such-dir' \
         2>'$tmp/nomodel.log'; [ \$? = 1 ] && grep -q '\"event\":\"startup_failed\"' '$tmp/nomodel.log'"

# ------------------------------------------------------------------ main server

log=$tmp/server.log
if ! start_server "$log" -- "${MODEL_ARGS[@]}" --workers 2 --max-body-mb 1 --queue-depth 40 \
        --timeout-s 3; then
    echo "# $(cat "$log")"
    not_ok "server starts and logs its port"
    exit 1
fi
ok "server starts on a free port ($PORT)"
check "liveness answers" test "$(req GET /healthz)" = 200
check "a second server on the same port exits 1" bash -c \
    "timeout 30 '$ECGD' serve --bind 127.0.0.1 --port $PORT --backend "$BACKEND" --model none 2>/dev/null; [ \$? = 1 ]"
if wait_ready "$PORT"; then
    ok "/readyz turns ready once the engine is loaded"
else
    not_ok "/readyz turns ready once the engine is loaded"
    sed 's/^/# /' "$log"
    exit 1   # nothing else can pass without a ready server
fi

# health, readiness, info, metrics, openapi
check "GET /healthz is {status: ok}" bash -c "[ $(req GET /healthz) = 200 ] && grep -q '\"status\":\"ok\"' '$tmp/body'"
check "GET /v2/health/live (Open Inference Protocol)" test "$(req GET /v2/health/live)" = 200
check "GET /v2/health/ready (Open Inference Protocol)" test "$(req GET /v2/health/ready)" = 200
check "HEAD /healthz" test "$(curl -s -o /dev/null -w '%{http_code}' -I "http://127.0.0.1:$PORT/healthz")" = 200
code=$(req GET /v1/info)
check "GET /v1/info: version, backend cpu, device, build" bash -c \
    "[ $code = 200 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d[\"version\"] and d[\"backend\"]==\"$BACKEND\" and d[\"device\"] and \"build\" in d else 1)' '$tmp/body'"
code=$(req GET /openapi.json)
"$ECGD" serve --list-routes >"$tmp/routes"
check "GET /openapi.json is OpenAPI 3.1 and matches the route table" bash -c \
    "[ $code = 200 ] && $HELP openapi '$tmp/body' '$tmp/routes'"
check "X-Request-Id is echoed" bash -c \
    "[ $(req GET /healthz -H 'X-Request-Id: test-abc-123') = 200 ] && grep -qi '^X-Request-Id: test-abc-123' '$tmp/headers'"

# models
if [ "$MODEL" != none ]; then
    code=$(req GET /v1/models)
    check "GET /v1/models lists the default model and the other one" bash -c \
        "[ $code = 200 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); names=[m[\"name\"] for m in d[\"models\"]]; sys.exit(0 if d[\"default\"]==\"default\" and names==[\"default\",\"other\"] and d[\"models\"][0][\"default\"] and len(d[\"models\"][0][\"sha256\"])==64 else 1)' '$tmp/body'"
    code=$(req GET /v1/models/default)
    check "GET /v1/models/default: metadata as JSON" bash -c \
        "[ $code = 200 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if isinstance(d, dict) and d else 1)' '$tmp/body'"
    code=$(req POST /v1/models/default/decode -H 'Content-Type: application/json' \
        --data '{"latent": [[0, 0], [1.5, -0.5]]}')
    check "POST decode {latent}: one generated beat per point" bash -c \
        "[ $code = 200 ] && python3 -c 'import json,sys,math; d=json.load(open(sys.argv[1])); b=d[\"beats\"]; sys.exit(0 if d[\"n\"]==2 and len(b)==2 and len(b[0])==d[\"beat_len\"] and all(math.isfinite(v) for v in b[0]) and b[0]!=b[1] else 1)' '$tmp/body'"
    code=$(req POST /v1/models/default/decode -H 'Content-Type: application/json' \
        --data '{"grid": {"n": 8, "range": 3}}')
    check "POST decode {grid}: 8 x 8 beats from +3 to -3" bash -c \
        "[ $code = 200 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); l=d[\"latent\"]; sys.exit(0 if d[\"n\"]==64 and len(d[\"beats\"])==64 and l[0]==[-3,3] and l[63]==[3,-3] else 1)' '$tmp/body'"
else
    for what in "GET /v1/models" "GET /v1/models/default" "POST decode {latent}" "POST decode {grid}"; do
        skip "$what (no models/default.ecgm)"
    done
fi

# every format gives the same answer as the CLI on the same recording
analyze_same "text/csv (UCR, 250 Hz)" ucr.csv csv "text/csv" "fs=250" --fs 250
analyze_same "application/octet-stream float32" ucr.f32 f32 "application/octet-stream" "fs=250" --fs 250
analyze_same "octet-stream; dtype=int16 in Content-Type" ucr.i16 i16 "application/octet-stream; dtype=int16" "fs=250" --fs 250
analyze_same "octet-stream with dtype=float64 in the query" ucr.f64 f64 "application/octet-stream" "fs=250&dtype=float64" --fs 250
analyze_same "application/x-npy" ucr.npy npy "application/x-npy" "fs=250" --fs 250
analyze_same "application/json" ucr.json json "application/json" ""
analyze_same "application/edf (MIT-BIH 119, 360 Hz)" mit.edf edf "application/edf" ""
analyze_same "application/edf, lead by name V1" mit.edf edf "application/edf" "lead=V1" --lead V1
analyze_same "text/csv 2 leads, lead=1, include=beats,summary" mit.csv csv "text/csv; charset=utf-8" \
    "fs=360&lead=1&include=beats,summary" --fs 360 --lead 1 --include beats,summary

if [ "$MODEL" != none ]; then
    "$ECGD" analyze "$fx/ucr.csv" --format csv --fs 250 --backend "$BACKEND" --model "$tmp/models/other.ecgm" \
        >"$tmp/other.json" 2>/dev/null
    code=$(req POST "/v1/analyze?fs=250&model=other" -H "Content-Type: text/csv" --data-binary "@$fx/ucr.csv")
    check "model=other (engine made on first use): same answer as ecgd analyze --model other" bash -c \
        "[ $code = 200 ] && grep -q '\"name\":\"other\"' '$tmp/body' && $HELP same '$tmp/other.json' '$tmp/body'"
else
    skip "model=other (no models/default.ecgm)"
fi

# chunked upload: same answer as a plain one
"$ECGD" analyze "$fx/ucr.csv" --format csv --fs 250 --backend "$BACKEND" --model "$MODEL" >"$tmp/cli.json" 2>/dev/null
code=$(req POST "/v1/analyze?fs=250" -H "Content-Type: text/csv" -H "Transfer-Encoding: chunked" \
    --data-binary "@$fx/ucr.csv")
check "chunked upload: same answer as ecgd analyze" bash -c \
    "[ $code = 200 ] && $HELP same '$tmp/cli.json' '$tmp/body'"
code=$(cat "$fx/ucr.csv" | curl -s -o "$tmp/body" -w '%{http_code}' -H "Content-Type: text/csv" \
    -T - "http://127.0.0.1:$PORT/v1/analyze?fs=250" -X POST)
check "streamed upload from a pipe (chunked): same answer" bash -c \
    "[ $code = 200 ] && $HELP same '$tmp/cli.json' '$tmp/body'"

# body buffers: received into buffers from a pool reused across requests (service/body_pool.h),
# sized from Content-Length when there is one, grown by doubling for chunked uploads.
# metric NAME: the value of one line of /metrics (NAME with its labels).
metric() {
    curl -s "http://127.0.0.1:$PORT/metrics" | awk -v name="$1" '$1 == name {print $2}'
}
head -n 5000 "$fx/ucr.csv" >"$tmp/ucr20.csv"
cat "$fx/ucr.csv" "$fx/ucr.csv" "$fx/ucr.csv" "$fx/ucr.csv" >"$tmp/ucr320.csv"
for ref in ucr20.csv:csv "$fx/ucr.csv":csv "$fx/ucr.f32":f32 ucr320.csv:csv; do
    file=${ref%:*}
    [ -f "$file" ] || file=$tmp/$file
    "$ECGD" analyze "$file" --format "${ref#*:}" --fs 250 --backend "$BACKEND" --model "$MODEL" \
        >"$tmp/ref-$(basename "$file").json" 2>/dev/null
done
code=$(req POST "/v1/analyze?fs=250" -H "Content-Type: application/octet-stream" --data-binary "@$fx/ucr.f32")
cp "$tmp/body" "$tmp/f32-length.json"
code2=$(req POST "/v1/analyze?fs=250" -H "Content-Type: application/octet-stream" \
    -H "Transfer-Encoding: chunked" --data-binary "@$fx/ucr.f32")
check "float32 with Content-Length and chunked: identical answers, same as ecgd analyze" bash -c \
    "[ $code = 200 ] && [ $code2 = 200 ] && $HELP same '$tmp/f32-length.json' '$tmp/body' &&
     $HELP same '$tmp/ref-ucr.f32.json' '$tmp/body'"
reused0=$(metric 'ecgd_body_buffers_total{source="reused"}')
allocated0=$(metric 'ecgd_body_buffers_total{source="allocated"}')
bad=0
for i in $(seq 1 30); do
    chunked=()
    case $((i % 5)) in
    0) file=$fx/ucr.csv type=text/csv ;;
    1) file=$tmp/ucr20.csv type=text/csv ;;
    2) file=$fx/ucr.f32 type=application/octet-stream ;;
    3) file=$fx/ucr.csv type=text/csv chunked=(-H "Transfer-Encoding: chunked") ;;
    4) file=$tmp/ucr20.csv type=text/csv chunked=(-H "Transfer-Encoding: chunked") ;;
    esac
    code=$(req POST "/v1/analyze?fs=250" -H "Content-Type: $type" "${chunked[@]}" --data-binary "@$file")
    if [ "$code" != 200 ] || ! $HELP same "$tmp/ref-$(basename "$file").json" "$tmp/body" >/dev/null; then
        bad=$((bad + 1))
    fi
done
check "30 sequential uploads (CSV of 20 s and 80 s, float32; plain and chunked) through reused buffers: all the same as ecgd analyze" \
    test "$bad" = 0
reused1=$(metric 'ecgd_body_buffers_total{source="reused"}')
allocated1=$(metric 'ecgd_body_buffers_total{source="allocated"}')
check "body buffers: at least 28 of those 30 came from the pool ($reused0 -> $reused1 reused, $allocated0 -> $allocated1 allocated)" \
    bash -c "[ -n '$reused1' ] && [ \$(( $reused1 - $reused0 )) -ge 28 ] && [ \$(( $allocated1 - $allocated0 )) -le 2 ]"
check "body buffers: idle memory within the pool budget (2 x --max-body-mb)" bash -c \
    "v=\$(curl -s http://127.0.0.1:$PORT/metrics | awk '\$1 == \"ecgd_body_pool_idle_bytes\" {print \$2}'); [ -n \"\$v\" ] && [ \"\$v\" -gt 0 ] && [ \"\$v\" -le 2097152 ]"
# a chunked upload larger than every idle buffer grows from a reused one (copying what it holds)
code=$(req POST "/v1/analyze?fs=250" -H "Content-Type: text/csv" -H "Transfer-Encoding: chunked" \
    --data-binary "@$tmp/ucr320.csv")
cp "$tmp/body" "$tmp/320-chunked.json"
code2=$(req POST "/v1/analyze?fs=250" -H "Content-Type: text/csv" --data-binary "@$tmp/ucr320.csv")
check "320 s CSV chunked (grown past the pooled buffers) and with Content-Length: identical answers, same as ecgd analyze" \
    bash -c "[ $code = 200 ] && [ $code2 = 200 ] && $HELP same '$tmp/320-chunked.json' '$tmp/body' &&
             $HELP same '$tmp/ref-ucr320.csv.json' '$tmp/body'"
# streaming: an analysis body of 1 MiB or more with a Content-Length is copied to the device while
# it arrives (CUDA); the answer is the same either way, and ecgd_uploads_streamed_total counts the
# analyses that read the device copy: none on the CPU backend, which streams nothing. The body is
# exactly 1 MiB, both the smallest that streams and the largest this server (--max-body-mb 1) takes:
# whole rows of ucr.csv over and over, then blank lines (which both CSV readers skip).
python3 -c 'import sys
rows = open(sys.argv[1]).read().splitlines(True)
out, i = [], 0
size = 0
while size + len(rows[i % len(rows)]) <= 1048576 - 16:
    out.append(rows[i % len(rows)]); size += len(rows[i % len(rows)]); i += 1
open(sys.argv[2], "w").write("".join(out) + "\n" * (1048576 - size))' "$fx/ucr.csv" "$tmp/mib.csv"
"$ECGD" analyze "$tmp/mib.csv" --format csv --fs 250 --backend "$BACKEND" --model "$MODEL" \
    >"$tmp/ref-mib.json" 2>/dev/null
streamed0=$(metric ecgd_uploads_streamed_total)
code=$(req POST "/v1/analyze?fs=250" -H "Content-Type: text/csv" --data-binary "@$tmp/mib.csv")
streamed1=$(metric ecgd_uploads_streamed_total)
case $BACKEND in cpu) want_streamed=0 ;; cuda) want_streamed=1 ;; *) want_streamed= ;; esac
check "1 MiB CSV with Content-Length: same as ecgd analyze; ecgd_uploads_streamed_total $streamed0 -> $streamed1 (${want_streamed:-any} more on $BACKEND)" \
    bash -c "[ $code = 200 ] && [ \$(wc -c <'$tmp/mib.csv') = 1048576 ] &&
             $HELP same '$tmp/ref-mib.json' '$tmp/body' && [ -n '$streamed1' ] &&
             { [ -z '$want_streamed' ] || [ \$(( ${streamed1:-0} - ${streamed0:-0} )) = '$want_streamed' ]; }"
# the same body chunked (no Content-Length): its buffer grows by doubling up to the 1 MiB limit (or
# is a pooled buffer of 1 MiB from the start), and an upload is begun on each buffer of 1 MiB or
# more, so it streams as well. 1 MiB is also the largest chunked body this server takes: the limit
# counts the body's bytes, and the buffer never grows past it.
streamed0=$(metric ecgd_uploads_streamed_total)
code=$(req POST "/v1/analyze?fs=250" -H "Content-Type: text/csv" -H "Transfer-Encoding: chunked" \
    --data-binary "@$tmp/mib.csv" -v 2>"$tmp/trace")
streamed1=$(metric ecgd_uploads_streamed_total)
check "1 MiB CSV chunked (sent without Content-Length): same as ecgd analyze; ecgd_uploads_streamed_total $streamed0 -> $streamed1 (${want_streamed:-any} more on $BACKEND)" \
    bash -c "[ $code = 200 ] && grep -qi '^> Transfer-Encoding: chunked' '$tmp/trace' &&
             ! grep -qi '^> Content-Length' '$tmp/trace' &&
             $HELP same '$tmp/ref-mib.json' '$tmp/body' && [ -n '$streamed1' ] &&
             { [ -z '$want_streamed' ] || [ \$(( ${streamed1:-0} - ${streamed0:-0} )) = '$want_streamed' ]; }"

# ------------------------------------------------------------------ hostile and wrong requests
big=$tmp/big.csv
head -c 1500000 /dev/zero | tr '\0' '1' | fold -w 7 >"$big"   # 1.5 MB of "1111111\n"
printf '0.1\n0.2\nabc\n0.3\n' >"$tmp/letters.csv"
printf '0.1\n0.2\nnan\n0.3\n' >"$tmp/nan.csv"
printf '0.1\n0.2\ninf\n0.3\n' >"$tmp/inf.csv"
printf '\xff\xfe\x00\x01garbage\x80\x81\n' >"$tmp/binary.csv"
head -c 300 "$fx/ucr.csv" >"$tmp/short.csv"
head -c 4001 "$fx/ucr.f32" >"$tmp/odd.f32"
head -c 3 "$fx/ucr.i16" >"$tmp/odd.i16"
head -c 60 "$fx/ucr.npy" >"$tmp/trunc.npy"
printf 'NOTNUMPY-----------------------------' >"$tmp/magic.npy"
head -c 200 "$fx/mit.edf" >"$tmp/trunc.edf"
printf '{"fs": 250, "signal": [0.1, 0.2,' >"$tmp/trunc.json"
printf '{"fs": 250, "nothing": []}' >"$tmp/nosignal.json"
printf '{"fs": 250, "signal": [0.1, "x", 0.3]}' >"$tmp/string.json"
head -c 1000000 /dev/zero | tr '\0' '7' >"$tmp/hugeline.csv"
A="/v1/analyze"
CSV=(-H "Content-Type: text/csv")
expect_error "CSV with letters" 400 bad_csv POST "$A?fs=250" "${CSV[@]}" --data-binary "@$tmp/letters.csv"
expect_error "CSV with NaN" 400 nan_in_input POST "$A?fs=250" "${CSV[@]}" --data-binary "@$tmp/nan.csv"
expect_error "CSV with inf" 400 nan_in_input POST "$A?fs=250" "${CSV[@]}" --data-binary "@$tmp/inf.csv"
expect_error "binary garbage as CSV" 400 bad_csv POST "$A?fs=250" "${CSV[@]}" --data-binary "@$tmp/binary.csv"
expect_error "empty body" 400 empty_body POST "$A?fs=250" "${CSV[@]}" --data-binary ""
expect_error "CSV without fs" 400 fs_required POST "$A" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "fs not a number" 400 bad_fs POST "$A?fs=abc" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "fs negative" 400 bad_fs POST "$A?fs=-250" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "fs zero" 400 bad_fs POST "$A?fs=0" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "fs with trailing junk" 400 bad_fs POST "$A?fs=250Hz" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "fs too low for the engine" 422 bad_rate POST "$A?fs=50" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "fs too high for the engine" 422 bad_rate POST "$A?fs=5000" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "recording too short" 422 too_short POST "$A?fs=250" "${CSV[@]}" --data-binary "@$tmp/short.csv"
expect_error "one 1 MB number" 400 nan_in_input POST "$A?fs=250" "${CSV[@]}" --data-binary "@$tmp/hugeline.csv"
expect_error "unknown Content-Type" 415 unsupported_media_type POST "$A?fs=250" -H "Content-Type: image/png" --data-binary "@$fx/ucr.csv"
expect_error "missing Content-Type" 415 missing_content_type POST "$A?fs=250" -H "Content-Type:" --data-binary "@$fx/ucr.csv"
expect_error "unknown dtype" 400 bad_dtype POST "$A?fs=250&dtype=int8" -H "Content-Type: application/octet-stream" --data-binary "@$fx/ucr.f32"
expect_error "dtype in header and query disagree" 400 conflicting_dtype POST "$A?fs=250&dtype=float64" -H "Content-Type: application/octet-stream; dtype=int16" --data-binary "@$fx/ucr.i16"
expect_error "dtype on CSV" 400 dtype_not_applicable POST "$A?fs=250&dtype=int16" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "float32 body not a multiple of 4 bytes" 400 bad_raw POST "$A?fs=250" -H "Content-Type: application/octet-stream" --data-binary "@$tmp/odd.f32"
expect_error "int16 body of 3 bytes" 400 bad_raw POST "$A?fs=250" -H "Content-Type: application/octet-stream; dtype=int16" --data-binary "@$tmp/odd.i16"
expect_error "truncated .npy" 400 bad_npy POST "$A?fs=250" -H "Content-Type: application/x-npy" --data-binary "@$tmp/trunc.npy"
expect_error ".npy with a bad magic" 400 bad_npy POST "$A?fs=250" -H "Content-Type: application/x-npy" --data-binary "@$tmp/magic.npy"
expect_error "truncated EDF" 400 bad_edf POST "$A" -H "Content-Type: application/edf" --data-binary "@$tmp/trunc.edf"
expect_error "CSV sent as EDF" 400 bad_edf POST "$A" -H "Content-Type: application/edf" --data-binary "@$fx/ucr.csv"
expect_error "truncated JSON" 400 bad_json POST "$A" -H "Content-Type: application/json" --data-binary "@$tmp/trunc.json"
expect_error "JSON without a signal" 400 bad_json POST "$A" -H "Content-Type: application/json" --data-binary "@$tmp/nosignal.json"
expect_error "JSON signal with a string" 400 bad_json POST "$A" -H "Content-Type: application/json" --data-binary "@$tmp/string.json"
expect_error "unknown query parameter" 400 unknown_parameter POST "$A?fs=250&sampling=250" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
# overlap_s: a strip posted with the end of the one before it; the overlap's beats are not
# reported, the rest are the beats of the same body analysed without it (the same detection)
cp "$tmp/cli.json" "$tmp/cli.kept" # the UCR answer the checks after the bad requests compare with
analyze_same "text/csv 2 leads, overlap_s=2" mit.csv csv "text/csv" "fs=360&lead=all&overlap_s=2" \
    --fs 360 --lead all --overlap 2
cp "$tmp/body" "$tmp/overlap.json"
mv "$tmp/cli.kept" "$tmp/cli.json"
code=$(req POST "$A?fs=360&lead=all" -H "Content-Type: text/csv" --data-binary "@$fx/mit.csv")
check "overlap_s=2: the beats from sample 720 on, as without it; signal.overlap_s and overlap_samples" \
    python3 -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ra, rb = a["beats"]["r_peak"], b["beats"]["r_peak"]
assert b["signal"]["overlap_s"] == 2 and b["signal"]["overlap_samples"] == 720
assert "overlap_s" not in a["signal"] and ra[0] < 720 and rb == [r for r in ra if r >= 720]
k = len(ra) - len(rb)
assert b["beats"]["rr_ms"] == a["beats"]["rr_ms"][k:] and b["beats"]["rr_ms"][0] is not None
assert b["summary"]["beats"] == len(rb)' "$tmp/body" "$tmp/overlap.json"
expect_error "overlap_s not a number" 400 bad_overlap POST "$A?fs=250&overlap_s=two" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "overlap_s negative" 400 bad_overlap POST "$A?fs=250&overlap_s=-1" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "overlap_s as long as the recording" 400 bad_overlap POST "$A?fs=250&overlap_s=3600" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "unknown include part" 400 bad_include POST "$A?fs=250&include=beats,colour" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "unknown model" 404 model_not_found POST "$A?fs=250&model=nope" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "lead index out of range" 404 lead_not_found POST "$A?fs=360&lead=7" "${CSV[@]}" --data-binary "@$fx/mit.csv"
expect_error "EDF lead name that does not exist" 404 lead_not_found POST "$A?lead=V5" -H "Content-Type: application/edf" --data-binary "@$fx/mit.edf"
expect_error "lead name too long" 400 bad_lead POST "$A?fs=250&lead=$(printf 'x%.0s' $(seq 1 40))" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
expect_error "Content-Length over --max-body-mb" 413 body_too_large POST "$A?fs=250" "${CSV[@]}" --data-binary "@$big"
expect_error "chunked upload crossing --max-body-mb while streaming" 413 body_too_large POST "$A?fs=250" "${CSV[@]}" -H "Transfer-Encoding: chunked" --data-binary "@$big"
code=$(head -c 40000000 /dev/zero | tr '\0' '1' | curl -s --max-time 60 -o "$tmp/body" -w '%{http_code}' \
    -H "Content-Type: text/csv" -T - -X POST "http://127.0.0.1:$PORT$A?fs=250")
check "a 40 MB stream is cut off with 413 long before its end" bash -c \
    "[ '$code' = 413 ] && $HELP error '$tmp/body' 413 body_too_large"
expect_error "GET on /v1/analyze" 405 method_not_allowed GET "$A"
check "405 carries Allow: POST" test "$(header Allow)" = "POST"
expect_error "DELETE on /healthz" 405 method_not_allowed DELETE /healthz
expect_error "unknown route" 404 not_found GET /v1/nothing
expect_error "model name with a slash is no route" 404 not_found GET /v1/models/a/b
expect_error "unknown model metadata" 404 model_not_found GET /v1/models/nope
D=/v1/models/default/decode
J=(-H "Content-Type: application/json")
if [ "$MODEL" != none ]; then
    expect_error "decode: not JSON" 400 bad_json POST "$D" "${J[@]}" --data '{"latent": [[0,'
    expect_error "decode: neither latent nor grid" 400 bad_decode_request POST "$D" "${J[@]}" --data '{}'
    expect_error "decode: point of the wrong size" 400 bad_latent POST "$D" "${J[@]}" --data '{"latent": [[0, 1, 2]]}'
    expect_error "decode: non-numeric coordinate" 400 bad_latent POST "$D" "${J[@]}" --data '{"latent": [["a", 1]]}'
    expect_error "decode: grid of 0" 400 bad_grid POST "$D" "${J[@]}" --data '{"grid": {"n": 0}}'
    expect_error "decode: text/plain body" 415 unsupported_media_type POST "$D" -H "Content-Type: text/plain" --data '{}'
fi
expect_error "decode: unknown model" 404 model_not_found POST /v1/models/nope/decode "${J[@]}" --data '{"grid": {"n": 2}}'

# The server survived all of that and still answers correctly.
check "after the bad requests: still live" test "$(req GET /healthz)" = 200
code=$(req POST "/v1/analyze?fs=250" "${CSV[@]}" --data-binary "@$fx/ucr.csv")
check "after the bad requests: a good analysis is still identical" bash -c \
    "[ $code = 200 ] && $HELP same '$tmp/cli.json' '$tmp/body'"
check "a slow client is cut off by the connection timeout" $HELP slowloris "$PORT" 3

# ------------------------------------------------------------------ 32 parallel clients
# (wait on these pids only: a bare `wait` would also wait for the server)
pids=()
for k in $(seq -w 0 31); do
    "$ECGD" analyze "$fx/par$k.csv" --format csv --fs 250 --backend "$BACKEND" --model "$MODEL" \
        >"$tmp/par$k.cli" 2>/dev/null &
    pids+=($!)
done
wait "${pids[@]}"
pids=()
for k in $(seq -w 0 31); do
    curl -s --max-time 60 -o "$tmp/par$k.http" -w '%{http_code}' -H "Content-Type: text/csv" \
        --data-binary "@$fx/par$k.csv" "http://127.0.0.1:$PORT/v1/analyze?fs=250" >"$tmp/par$k.code" &
    pids+=($!)
done
wait "${pids[@]}"
bad=0
for k in $(seq -w 0 31); do
    if [ "$(cat "$tmp/par$k.code")" != 200 ] || ! $HELP same "$tmp/par$k.cli" "$tmp/par$k.http" >/dev/null; then
        bad=$((bad + 1))
    fi
done
distinct=$(for k in $(seq -w 0 31); do md5sum <"$tmp/par$k.cli"; done | sort -u | wc -l)
check "32 parallel clients: every answer 200 and identical to its own CLI run ($bad wrong)" test "$bad" = 0
check "32 parallel clients had 32 different inputs and answers" test "$distinct" = 32

# ------------------------------------------------------------------ metrics and logs
code=$(req GET /metrics)
check "metrics: requests by route and status" grep -q '^ecgd_http_requests_total{route="/v1/analyze",code="200"} [1-9]' "$tmp/body"
check "metrics: 4xx counted by status" grep -q '^ecgd_http_requests_total{route="/v1/analyze",code="400"} [1-9]' "$tmp/body"
check "metrics: duration histogram in seconds" grep -q '^ecgd_http_request_duration_seconds_bucket{route="/v1/analyze",le="+Inf"} [1-9]' "$tmp/body"
check "metrics: engine stage seconds" grep -q '^ecgd_engine_stage_seconds_sum{stage="filter"} [0-9]' "$tmp/body"
check "metrics: beats analysed" grep -q '^ecgd_beats_analysed_total{model="[a-z]*"} [1-9]' "$tmp/body"
check "metrics: bytes received and sent" bash -c \
    "grep -q '^ecgd_http_received_bytes_total [1-9]' '$tmp/body' && grep -q '^ecgd_http_sent_bytes_total [1-9]' '$tmp/body'"
check "metrics: in flight and queued gauges" bash -c \
    "grep -q '^ecgd_http_requests_in_flight ' '$tmp/body' && grep -q '^ecgd_analysis_queued 0' '$tmp/body'"
check "metrics: build info with backend and device" grep -q "^ecgd_build_info{version=\"[0-9.]*\",backend=\"$BACKEND\",device=\".*\"} 1" "$tmp/body"
check "access log: one JSON line per request with id, status, bytes, duration" python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
reqs = [l for l in lines if l.get("event") == "request"]
need = {"time", "method", "path", "status", "bytes_in", "bytes_out", "duration_ms", "request_id"}
sys.exit(0 if len(reqs) > 60 and all(need <= set(r) for r in reqs) and
         any(r["request_id"] == "test-abc-123" for r in reqs) else 1)' "$log"
check "access log: no signal data" bash -c "! grep -q '0.00[0-9]*,0.0\|\"signal\"' '$log'"

# ------------------------------------------------------------------ token
log_token=$tmp/token.log
if start_server "$log_token" ECGD_TOKEN=s3cret-token -- "${MODEL_ARGS[@]}" --workers 1 && wait_ready "$PORT"; then
    expect_error "token: /v1/info without a token" 401 unauthorized GET /v1/info
    check "401 carries WWW-Authenticate: Bearer" bash -c "grep -qi '^WWW-Authenticate: Bearer' '$tmp/headers'"
    expect_error "token: wrong token" 401 unauthorized GET /v1/info -H "Authorization: Bearer s3cret-tokex"
    expect_error "token: prefix of the token" 401 unauthorized POST "/v1/analyze?fs=250" -H "Authorization: Bearer s3cret" "${CSV[@]}" --data-binary "@$fx/ucr.csv"
    check "token: right token" test "$(req GET /v1/info -H 'Authorization: Bearer s3cret-token')" = 200
    check "token: analysis with the right token" test "$(req POST "/v1/analyze?fs=250" -H 'Authorization: Bearer s3cret-token' "${CSV[@]}" --data-binary "@$fx/ucr.csv")" = 200
    check "token: probes and metrics need none" bash -c "[ $(req GET /healthz) = 200 ] && [ $(req GET /readyz) = 200 ] && [ $(req GET /metrics) = 200 ]"
    stop_server "$SERVER_PID" >/dev/null
else
    not_ok "token server starts"
fi

# ------------------------------------------------------------------ a growing chunked body
# A 9 MiB CSV sent chunked to a server with the default body limit: its buffer doubles from 64 KiB
# to 16 MiB, and the upload to the device is begun again on each buffer of 1 MiB or more (the old
# one freed first, its copies waited for); at the 16 MiB buffer the 8 MiB prefix is copied at
# once. Same answer as ecgd analyze; on CUDA the analysis reads the last upload's device copy.
log_grow=$tmp/grow.log
for _ in $(seq 1 80); do cat "$fx/ucr.csv"; done >"$tmp/ucr6400.csv"
"$ECGD" analyze "$tmp/ucr6400.csv" --format csv --fs 250 --backend "$BACKEND" --model "$MODEL" \
    >"$tmp/ref-ucr6400.json" 2>/dev/null
if start_server "$log_grow" -- "${MODEL_ARGS[@]}" --workers 1 && wait_ready "$PORT"; then
    streamed0=$(metric ecgd_uploads_streamed_total)
    code=$(req POST "/v1/analyze?fs=250" -H "Content-Type: text/csv" -H "Transfer-Encoding: chunked" \
        --data-binary "@$tmp/ucr6400.csv" -v 2>"$tmp/trace")
    streamed1=$(metric ecgd_uploads_streamed_total)
    check "9 MiB CSV chunked, its buffer doubled up to 16 MiB: same as ecgd analyze; ecgd_uploads_streamed_total $streamed0 -> $streamed1 (${want_streamed:-any} more on $BACKEND)" \
        bash -c "[ $code = 200 ] && [ \$(wc -c <'$tmp/ucr6400.csv') -gt 9437184 ] &&
                 grep -qi '^> Transfer-Encoding: chunked' '$tmp/trace' &&
                 $HELP same '$tmp/ref-ucr6400.json' '$tmp/body' && [ -n '$streamed1' ] &&
                 { [ -z '$want_streamed' ] || [ \$(( ${streamed1:-0} - ${streamed0:-0} )) = '$want_streamed' ]; }"
    stop_server "$SERVER_PID" >/dev/null
else
    not_ok "server with the default body limit starts"
fi

# ------------------------------------------------------------------ overload
# One worker, no queue. A slow upload holds no admission slot (slots are taken when a body is
# complete): an analysis sent meanwhile is answered 200. Complete analyses beyond the one
# running get 503 + Retry-After.
log_busy=$tmp/busy.log
if start_server "$log_busy" -- "${MODEL_ARGS[@]}" --workers 1 --queue-depth 0 && wait_ready "$PORT"; then
    curl -s --max-time 60 -o "$tmp/slow1" -w '%{http_code}' --limit-rate 100k -H "Content-Type: text/csv" \
        --data-binary "@$fx/slow.csv" "http://127.0.0.1:$PORT/v1/analyze?fs=250" >"$tmp/slow1.code" &
    slow=$!
    wait_in_flight 2
    check "overload: a slow upload holds no slot (another analysis gets 200)" \
        test "$(req POST "$A?fs=250" "${CSV[@]}" --data-binary "@$fx/par00.csv")" = 200
    wait "$slow"
    check "overload: the slow upload completes with 200" test "$(cat "$tmp/slow1.code")" = 200
    # Eight analyses of 6 M samples sent at once to one worker and no queue: their bodies
    # arrive together, so while one runs the others find no slot. However fast the backend (an
    # H100 takes a few ms for one), some get 503 + Retry-After and none is lost.
    busy_pids=()
    for i in 1 2 3 4 5 6 7 8; do
        curl -s --max-time 120 -D "$tmp/busy$i.h" -o "$tmp/busy$i" -w '%{http_code}' \
            -H "Content-Type: application/octet-stream" --data-binary "@$fx/busy.f32" \
            "http://127.0.0.1:$PORT/v1/analyze?fs=250&include=summary" >"$tmp/busy$i.code" &
        busy_pids+=($!)
    done
    wait "${busy_pids[@]}"
    busy_ok=0 busy_503=0 busy_retry=0 busy_other=0
    for i in 1 2 3 4 5 6 7 8; do
        case $(cat "$tmp/busy$i.code") in
        200) busy_ok=$((busy_ok + 1)) ;;
        503)
            $HELP error "$tmp/busy$i" 503 overloaded && busy_503=$((busy_503 + 1))
            grep -qi '^Retry-After:' "$tmp/busy$i.h" && busy_retry=$((busy_retry + 1)) ;;
        *) busy_other=$((busy_other + 1)) ;;
        esac
    done
    echo "# overload: 8 concurrent analyses, one worker: $busy_ok answered 200, $busy_503 refused 503"
    check "overload: workers + queue depth exceeded (503 overloaded)" \
        test "$busy_503" -ge 1 -a "$busy_other" = 0
    check "overload: Retry-After given" test "$busy_retry" = "$busy_503"
    check "overload: the admitted requests complete with 200" \
        test "$busy_ok" -ge 1 -a $((busy_ok + busy_503)) = 8
    check "overload: capacity comes back" test "$(req POST "$A?fs=250" "${CSV[@]}" --data-binary "@$fx/par00.csv")" = 200
    stop_server "$SERVER_PID" >/dev/null
else
    not_ok "overload server starts"
fi

# ------------------------------------------------------------------ graceful shutdown
# The main server gets SIGTERM while a slow upload is in flight: the request completes with 200,
# readiness drops, new connections are refused, and the process exits 0.
curl -s --max-time 60 -o "$tmp/inflight" -w '%{http_code}' --limit-rate 100k -H "Content-Type: text/csv" \
    --data-binary "@$fx/slow.csv" "http://127.0.0.1:$(listen_port "$log")/v1/analyze?fs=250" \
    >"$tmp/inflight.code" &
inflight=$!
PORT=$(listen_port "$log")
main_pid=${server_pids[0]}
wait_in_flight 2
kill -TERM "$main_pid"
sleep 0.3
refused=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$PORT/healthz")
wait "$inflight"
rc=$(stop_server "$main_pid")
check "shutdown: the in-flight request completes with 200" test "$(cat "$tmp/inflight.code")" = 200
check "shutdown: its answer is a full analysis" grep -q '"summary"' "$tmp/inflight"
check "shutdown: no new connections after SIGTERM" test "$refused" = 000
check "shutdown: exit status 0" test "$rc" = 0
check "shutdown: logged drain and stop" bash -c "grep -q '\"event\":\"shutdown\"' '$log' && grep -q '\"event\":\"stopped\"' '$log'"

echo "# $n tests, $failures failed"
[ "$failures" = 0 ]
