#!/usr/bin/env bash
# test_analyses.sh - analyses as a resource (/v1/analyses), CORS and the dashboard's files, end
# to end: real `ecgd serve` processes on 127.0.0.1 (backend ECGD_TEST_BACKEND, cpu by default;
# the GPU machine runs it with cuda), driven with curl.
#
# Covers: create (201, Location, the /v1/analyze answer plus its id), fetch (include=), signal
# windows whose values equal a min/max reduction computed independently from the recording
# (analyses_helpers.py minmax), beats whose table, latent point and score equal the CLI's and
# whose reconstruction equals the decoder's, bad parameters, delete, expiry (404 "expired"), the
# memory cap under 64 parallel uploads, 202 with a progress document (Prefer: respond-async),
# CORS preflights and headers with and without the token, and the page's files.
#
# Prints `ok N - what` / `not ok N - what`; exits non-zero on any failure.
# Usage: ECGD=build/ecgd tests/e2e/test_analyses.sh   (run from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
HERE=$(cd "$(dirname "$0")" && pwd)
HELP="python3 $HERE/analyses_helpers.py"
source "$HERE/lib.sh"

require_ecgd
require_data mitdb/101.dat
MODEL=${ECGD_TEST_MODEL:-models/default.ecgm}
if [ ! -f "$MODEL" ]; then echo "skip 1 - no model at $MODEL"; exit 0; fi
mkdir -p "$tmp/models"
cp "$MODEL" "$tmp/models/default.ecgm"

stop_server() { kill -TERM "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

header() { grep -i "^$1:" "$tmp/headers" | head -1 | cut -d' ' -f2- | tr -d '\r'; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$tmp/body"; }
err_code() { json x "d['error']['code']" 2>/dev/null; }
export tmp
export -f json
metric() { curl -s "http://127.0.0.1:$PORT/metrics" >"$tmp/metrics"; $HELP metric "$tmp/metrics" "$1"; }

# ------------------------------------------------------------------ data
csv=$tmp/101.csv
$HELP mitcsv "$DATA" 101 "$csv"
for r in 106 108 109 112 114 115 116 118; do
    $HELP mitcsv "$DATA" "$r" "$tmp/$r-2min.csv" 120
done
"$ECGD" analyze "$csv" --fs 360 --model "$MODEL" >"$tmp/cli.json" 2>/dev/null

# ------------------------------------------------------------------ create, fetch
start_server "$tmp/a.log" --model-dir "$tmp/models" --workers 2 || { echo "not ok 1 - server did not start"; cat "$tmp/a.log"; exit 1; }
main_pid=$SERVER_PID
code=$(req POST '/v1/analyses?fs=360' -H 'Content-Type: text/csv' --data-binary @"$csv")
id=$(json x "d['id']" 2>/dev/null)
location=$(header Location)
check "POST /v1/analyses: 201 with Location /v1/analyses/{id} and the id in the answer" \
    test "$code" = 201 -a -n "$id" -a "$location" = "/v1/analyses/$id"
sed -e 's/^{"id":"[0-9a-f]*",/{/' "$tmp/body" >"$tmp/created.json"
req POST '/v1/analyze?fs=360' -H 'Content-Type: text/csv' --data-binary @"$csv" >/dev/null
cp "$tmp/body" "$tmp/analyze.json"
check "the created answer is /v1/analyze's plus its id" \
    python3 "$HERE/http_helpers.py" same "$tmp/created.json" "$tmp/analyze.json"
check "and /v1/analyze's equals the CLI's" \
    python3 "$HERE/http_helpers.py" same "$tmp/analyze.json" "$tmp/cli.json"
code=$(req GET "/v1/analyses/$id")
sed -e 's/^{"id":"[0-9a-f]*",/{/' "$tmp/body" >"$tmp/fetched.json"
check "GET /v1/analyses/{id}: 200, the same answer again" \
    bash -c "[ $code = 200 ] && python3 '$HERE/http_helpers.py' same '$tmp/fetched.json' '$tmp/analyze.json'"
code=$(req GET "/v1/analyses/$id?include=summary")
check "GET with include=summary: the summary without the beat table" \
    bash -c "[ $code = 200 ] && [ \"\$(json x \"'summary' in d and 'beats' not in d and d['id'] == '$id'\")\" = True ]"
code=$(req GET "/v1/analyses/$id?include=bogus")
check "GET with a bad include: 400" test "$code" = 400
code=$(req GET "/v1/analyses/$id?foo=1")
check "GET with an unknown parameter: 400 unknown_parameter" \
    test "$code" = 400 -a "$(err_code)" = unknown_parameter
code=$(req HEAD "/v1/analyses/$id")
check "HEAD /v1/analyses/{id}: 200" test "$code" = 200
code=$(req PUT "/v1/analyses/$id")
check "PUT /v1/analyses/{id}: 405 with Allow: GET, HEAD, DELETE" \
    test "$code" = 405 -a "$(header Allow)" = "GET, HEAD, DELETE"
code=$(req GET "/v1/analyses/0123456789abcdef0123456789abcdef")
check "an id that never existed: 404 not_found" test "$code" = 404 -a "$(err_code)" = not_found
code=$(req GET "/v1/analyses/nothex")
check "a malformed id: 404 not_found" test "$code" = 404 -a "$(err_code)" = not_found

# ------------------------------------------------------------------ signal windows
# window START_S END_S POINTS: GET the window and compare it with the reduction made here.
window() {
    local q="points=$3"
    [ "$1" != - ] && q="$q&start_s=$1"
    [ "$2" != - ] && q="$q&end_s=$2"
    local code
    code=$(req GET "/v1/analyses/$id/signal?$q")
    [ "$code" = 200 ] && $HELP minmax "$csv" "$tmp/body" "$1" "$2" "$3"
}
check "signal, whole recording at 2,000 points: equals an independent min/max reduction" \
    window - - 2000
check "signal, a 10-s window at 2,000 points (3,600 samples, decimated): equals the reduction" \
    window 600 610 2000
check "signal, 10 s at 1,000 points, odd bounds: equals the reduction" window 123.456 133.21 1000
check "signal, 1 s at 2,000 points: every sample, unreduced" window 1799 1800 2000
check "signal, past the end: clipped to the recording" window 1800 5000 50
code=$(req GET "/v1/analyses/$id/signal?lead=MLII&points=100")
check "signal with lead=MLII (the analysed lead): 200" test "$code" = 200
code=$(req GET "/v1/analyses/$id/signal?lead=V5")
check "signal with another lead: 404 lead_not_kept" test "$code" = 404 -a "$(err_code)" = lead_not_kept
code=$(req GET "/v1/analyses/$id/signal?points=1")
check "signal with points=1: 400 bad_parameter" test "$code" = 400 -a "$(err_code)" = bad_parameter
code=$(req GET "/v1/analyses/$id/signal?start_s=abc")
check "signal with start_s=abc: 400 bad_parameter" test "$code" = 400 -a "$(err_code)" = bad_parameter
code=$(req GET "/v1/analyses/$id/signal?start_s=20&end_s=10")
check "signal with end before start: 400 empty_window" test "$code" = 400 -a "$(err_code)" = empty_window
code=$(req GET "/v1/analyses/$id/signal?start_s=99999")
check "signal starting after the end: 400 empty_window" test "$code" = 400 -a "$(err_code)" = empty_window
code=$(req GET "/v1/analyses/$id/signal?pts=10")
check "signal with an unknown parameter: 400 unknown_parameter" \
    test "$code" = 400 -a "$(err_code)" = unknown_parameter

# ------------------------------------------------------------------ beats
k=$(python3 -c "import json; b=json.load(open('$tmp/cli.json'))['beats']; print(max((s, k) for k, s in enumerate(b['score']) if s is not None)[1])")
python3 -c "import json; b=json.load(open('$tmp/cli.json'))['beats']; print(json.dumps({'latent': [b['latent'][$k]]}))" >"$tmp/latent.json"
req POST /v1/models/default/decode -H 'Content-Type: application/json' --data-binary @"$tmp/latent.json" >/dev/null
cp "$tmp/body" "$tmp/decode.json"
code=$(req GET "/v1/analyses/$id/beats/$k")
check "beats/{k} (the top outlier, #$k): table, latent and score equal the CLI's; reconstruction equals the decoder's" \
    bash -c "[ $code = 200 ] && $HELP beat '$tmp/body' '$tmp/cli.json' '$tmp/decode.json' $k"
code=$(req GET "/v1/analyses/$id/beats/10")
check "beats/10: equal to the CLI's beat 10" \
    bash -c "[ $code = 200 ] && python3 -c \"import json; b=json.load(open('$tmp/body')); c=json.load(open('$tmp/cli.json'))['beats']; assert b['r_peak']==c['r_peak'][10] and b['kept']==c['kept'][10]\""
# overlap_s: the kept analysis of the same body with its first minute declared an overlap keeps
# the beats from sample 21,600 on, each beat (its samples, embedding, reconstruction, latent and
# score) the same as the whole analysis's beat of the same R peak
code=$(req POST '/v1/analyses?fs=360&overlap_s=60' -H 'Content-Type: text/csv' --data-binary @"$csv")
oid=$(json x "d['id']" 2>/dev/null)
k0=$(python3 -c "import json; r=json.load(open('$tmp/cli.json'))['beats']['r_peak']; print(next(k for k, v in enumerate(r) if v >= 21600))")
req GET "/v1/analyses/$id/beats/$((k0 + 5))" >/dev/null
cp "$tmp/body" "$tmp/whole_beat.json"
code2=$(req GET "/v1/analyses/$oid/beats/5")
check "overlap_s=60: 201, and its beat 5 is the whole analysis's beat $((k0 + 5)) (embedding and all)" \
    bash -c "[ $code = 201 ] && [ $code2 = 200 ] && python3 -c \"import json; a=json.load(open('$tmp/whole_beat.json')); b=json.load(open('$tmp/body')); [a.pop(x) for x in ('id', 'beat')]; [b.pop(x) for x in ('id', 'beat')]; assert a == b, [x for x in a if a[x] != b.get(x)]\""
req DELETE "/v1/analyses/$oid" >/dev/null # (one of the deletions the metrics count below)
code=$(req GET "/v1/analyses/$id/beats/999999")
check "beats/999999: 404 beat_not_found" test "$code" = 404 -a "$(err_code)" = beat_not_found
code=$(req GET "/v1/analyses/$id/beats/abc")
check "beats/abc: 404 (no such route)" test "$code" = 404 -a "$(err_code)" = not_found

# ------------------------------------------------------------------ delete
code=$(req DELETE "/v1/analyses/$id")
check "DELETE /v1/analyses/{id}: 204" test "$code" = 204
code=$(req GET "/v1/analyses/$id/signal")
check "after DELETE: 404 not_found" test "$code" = 404 -a "$(err_code)" = not_found
code=$(req DELETE "/v1/analyses/$id")
check "DELETE again: 404" test "$code" = 404
req POST '/v1/analyses?fs=360' -H 'Content-Type: text/csv' --data-binary @"$tmp/106-2min.csv" >/dev/null
id2=$(json x "d['id']")
code=$(req DELETE "/v1/analyses/$id2?include=summary")
check "DELETE with include=summary: 200 and the dropped analysis' summary, then 404" \
    bash -c "[ $code = 200 ] && [ \"\$(json x \"d['id'] == '$id2' and 'summary' in d and 'beats' not in d\")\" = True ] && \
             [ \$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$PORT/v1/analyses/$id2) = 404 ]"
check "metrics count the deletions and an empty store" \
    test "$(metric 'ecgd_analyses_removed_total{reason="deleted"}')" = 3 -a "$(metric ecgd_analyses_stored)" = 0

# ------------------------------------------------------------------ the page
code=$(req GET /)
check "GET /: the dashboard page (text/html, uPlot from /ui/)" \
    bash -c "[ $code = 200 ] && grep -q '/ui/uPlot.iife.min.js' '$tmp/body' && grep -qi '^content-type: text/html' '$tmp/headers'"
code=$(req GET /ui/uPlot.iife.min.js)
check "GET /ui/uPlot.iife.min.js: the library, embedded" \
    bash -c "[ $code = 200 ] && grep -q 'uPlot' '$tmp/body' && [ \$(stat -c %s '$tmp/body') -gt 20000 ]"
code=$(req GET /ui/example-mitdb-100.csv)
check "GET /ui/example-mitdb-100.csv: the bundled example" \
    cmp -s "$tmp/body" tests/data/mitdb_100s.csv
code=$(req GET /ui/nothing.js)
check "GET /ui/nothing.js: 404" test "$code" = 404
code=$(req OPTIONS /v1/analyses -H 'Origin: http://dash.example' -H 'Access-Control-Request-Method: POST')
check "no --cors-origin: OPTIONS answers 204 with Allow but no CORS header" \
    bash -c "[ $code = 204 ] && [ '$(header Allow)' = POST ] && ! grep -qi '^access-control-allow-origin' '$tmp/headers'"
stop_server "$main_pid"

# ------------------------------------------------------------------ 202 and progress, CORS, token
TOKEN=s3cret
start_server "$tmp/b.log" --model-dir "$tmp/models" --workers 1 --async-mb 1 --token "$TOKEN" \
    --cors-origin 'http://dash.example, http://other.example' ||
    { not_ok "server with --async-mb, --token, --cors-origin started"; cat "$tmp/b.log"; }
auth=(-H "Authorization: Bearer $TOKEN")
$HELP long_f32 "$DATA" "$tmp/long.f32" 1
cat "$tmp/long.f32" "$tmp/long.f32" "$tmp/long.f32" "$tmp/long.f32" >"$tmp/blocker.f32"
# The one worker busy with a 4-hour analysis first, so that the asynchronous one is still waiting
# when its Location is first read (on a GPU both may be done by then: 200 at once is accepted).
curl -s -o /dev/null -X POST "${auth[@]}" -H 'Content-Type: application/octet-stream' \
    --data-binary @"$tmp/blocker.f32" "http://127.0.0.1:$PORT/v1/analyze?fs=360" &
blocker=$!
for _ in $(seq 1 200); do
    curl -s "http://127.0.0.1:$PORT/metrics" | grep -q '^ecgd_analysis_running 1$' && break
    sleep 0.02
done
code=$(req POST '/v1/analyses?fs=360' "${auth[@]}" -H 'Content-Type: application/octet-stream' \
       -H 'Prefer: respond-async' --data-binary @"$tmp/long.f32")
location=$(header Location)
cp "$tmp/body" "$tmp/accepted.json"
cp "$tmp/headers" "$tmp/accepted.headers"
accepted=$code
saw_running=0
final=
for _ in $(seq 1 1200); do
    code=$(req GET "$location" "${auth[@]}")
    if [ "$code" = 202 ]; then
        saw_running=1
        [ "$(header Location)" = "$location" ] || break
    else
        final=$code
        break
    fi
    sleep 0.05
done
wait "$blocker"
beats_async=$(json x "len(d['beats']['r_peak'])")
cp "$tmp/accepted.json" "$tmp/body"
aid=$(json x "d['id']" 2>/dev/null)
check "Prefer: respond-async, 5 MB body: 202 with Location and a running progress document" \
    bash -c "[ $accepted = 202 ] && [ '$location' = /v1/analyses/$aid ] && [ \"\$(json x \"d['status']\")\" = running ]"
check "polling the Location: 202 running, then 200 with the analysis" \
    bash -c "[ $saw_running = 1 -o $BACKEND = cuda ] && [ '$final' = 200 ]"
req POST '/v1/analyze?fs=360' "${auth[@]}" -H 'Content-Type: application/octet-stream' \
    --data-binary @"$tmp/long.f32" >/dev/null
check "the asynchronous analysis equals /v1/analyze's ($beats_async beats)" \
    test "$beats_async" = "$(json x "len(d['beats']['r_peak'])")" -a "$beats_async" -gt 3500
code=$(req POST '/v1/analyses?fs=360' "${auth[@]}" -H 'Content-Type: text/csv' \
       -H 'Prefer: respond-async' --data-binary @"$tmp/106-2min.csv")
check "Prefer: respond-async with a body under --async-mb: answered 201 at once" test "$code" = 201
head -c 2000000 /dev/zero | tr '\0' 'x' >"$tmp/garbage.csv"
code=$(req POST '/v1/analyses?fs=360' "${auth[@]}" -H 'Content-Type: text/csv' \
       -H 'Prefer: respond-async' --data-binary @"$tmp/garbage.csv")
location=$(header Location)
for _ in $(seq 1 400); do
    code=$(req GET "$location" "${auth[@]}")
    [ "$code" != 202 ] && break
    sleep 0.05
done
check "an asynchronous analysis that fails: its Location answers the error (400, JSON)" \
    bash -c "[ $code = 400 ] && [ -n \"\$(python3 -c \"import json; print(json.load(open('$tmp/body'))['error']['code'])\")\" ]"

code=$(req OPTIONS "/v1/analyses/$aid/signal" -H 'Origin: http://dash.example' \
       -H 'Access-Control-Request-Method: GET' -H 'Access-Control-Request-Headers: authorization')
check "CORS preflight without the token: 204, the origin allowed, its methods and headers" \
    bash -c "[ $code = 204 ] && [ '$(header Access-Control-Allow-Origin)' = http://dash.example ] && \
             grep -qi '^access-control-allow-methods: GET, HEAD, OPTIONS' '$tmp/headers' && \
             grep -qi '^access-control-allow-headers:.*Authorization' '$tmp/headers'"
code=$(req OPTIONS /v1/analyses -H 'Origin: http://other.example' -H 'Access-Control-Request-Method: POST')
check "CORS preflight from the second listed origin: allowed" \
    test "$code" = 204 -a "$(header Access-Control-Allow-Origin)" = http://other.example
code=$(req OPTIONS /v1/analyses -H 'Origin: http://evil.example' -H 'Access-Control-Request-Method: POST')
check "CORS preflight from another origin: no Access-Control-Allow-Origin" \
    bash -c "[ $code = 204 ] && ! grep -qi '^access-control-allow-origin' '$tmp/headers'"
code=$(req OPTIONS /nowhere -H 'Origin: http://dash.example')
check "OPTIONS on an unknown path: 404" test "$code" = 404
code=$(req GET "/v1/analyses/$aid/signal?points=100" -H 'Origin: http://dash.example')
check "cross-origin GET without the token: 401, readable by the page (CORS headers)" \
    bash -c "[ $code = 401 ] && [ '$(header Access-Control-Allow-Origin)' = http://dash.example ]"
code=$(req GET "/v1/analyses/$aid/signal?points=100" -H 'Origin: http://dash.example' "${auth[@]}")
check "cross-origin GET with the token: 200, Access-Control-Allow-Origin and Vary: Origin" \
    bash -c "[ $code = 200 ] && [ '$(header Access-Control-Allow-Origin)' = http://dash.example ] && \
             grep -qi '^vary: Origin' '$tmp/headers'"
code=$(req POST '/v1/analyses?fs=360' -H 'Content-Type: text/csv' --data-binary @"$tmp/106-2min.csv")
check "POST /v1/analyses without the token: 401" test "$code" = 401
code=$(req GET "/v1/analyses/$aid/beats/3")
check "GET beats without the token: 401" test "$code" = 401
code=$(req DELETE "/v1/analyses/$aid")
check "DELETE without the token: 401" test "$code" = 401
code=$(req GET /)
check "the page itself needs no token" test "$code" = 200
stop_server "$SERVER_PID"

# ------------------------------------------------------------------ memory cap, expiry
CAP_MB=2
start_server "$tmp/c.log" --model-dir "$tmp/models" --workers 2 --queue-depth 64 --store-mb "$CAP_MB" --store-ttl-s 600 ||
    { not_ok "server with --store-mb started"; cat "$tmp/c.log"; }
cap=$((CAP_MB << 20))
# 64 parallel uploads of eight different 2-minute recordings, while the store's bytes are sampled.
( for _ in $(seq 1 60); do
      curl -s "http://127.0.0.1:$PORT/metrics" | sed -n 's/^ecgd_analyses_stored_bytes //p'
      sleep 0.05
  done ) >"$tmp/samples" &
sampler=$!
pids=()
for i in $(seq 1 64); do
    r=$(echo 106 108 109 112 114 115 116 118 | cut -d' ' -f$(( (i - 1) % 8 + 1 )))
    curl -s -o "$tmp/par$i.json" -w '%{http_code}\n' "http://127.0.0.1:$PORT/v1/analyses?fs=360" \
        -H 'Content-Type: text/csv' --data-binary @"$tmp/$r-2min.csv" >"$tmp/par$i.code" &
    pids+=($!)
done
wait "${pids[@]}"
wait "$sampler"
created=$(cat "$tmp"/par*.code | grep -c '^201$')
stored=$(metric ecgd_analyses_stored)
bytes=$(metric ecgd_analyses_stored_bytes)
evicted=$(metric 'ecgd_analyses_removed_total{reason="memory"}')
max_sampled=$(sort -n "$tmp/samples" | tail -1)
check "64 parallel uploads under a ${CAP_MB} MiB cap: all 64 created" test "$created" = 64
check "the store holds at most the cap (now $bytes bytes, $stored analyses; at most $max_sampled sampled during the run)" \
    test "$bytes" -le "$cap" -a "${max_sampled:-0}" -le "$cap" -a "$stored" -ge 1 -a "$stored" -lt 64
check "evicted for memory: every analysis that is not kept ($evicted)" \
    test "$evicted" = $((64 - stored))
expired=0 kept=0
for i in $(seq 1 64); do
    pid_id=$(python3 -c "import json; print(json.load(open('$tmp/par$i.json'))['id'])")
    code=$(req GET "/v1/analyses/$pid_id?include=summary")
    [ "$code" = 200 ] && kept=$((kept + 1))
    [ "$code" = 404 ] && [ "$(err_code)" = expired ] && expired=$((expired + 1))
done
check "evicted ids answer 404 expired, kept ones 200 ($kept kept, $expired expired)" \
    test "$kept" = "$stored" -a $((kept + expired)) = 64
code=$(req POST '/v1/analyses?fs=360' -H 'Content-Type: text/csv' --data-binary @"$csv")
check "an analysis larger than the whole cap: 413 too_large_to_keep" \
    test "$code" = 413 -a "$(err_code)" = too_large_to_keep
stop_server "$SERVER_PID"
start_server "$tmp/d.log" --model-dir "$tmp/models" --workers 1 --store-ttl-s 1 ||
    { not_ok "server with --store-ttl-s 1 started"; cat "$tmp/d.log"; }
code=$(req POST '/v1/analyses?fs=360' -H 'Content-Type: text/csv' --data-binary @"$tmp/108-2min.csv")
ttl_id=$(json x "d['id']")
sleep 2.5
code=$(req GET "/v1/analyses/$ttl_id")
check "after --store-ttl-s unused: 404 expired" test "$code" = 404 -a "$(err_code)" = expired
check "metrics: evictions by time to live, an empty store" \
    test "$(metric 'ecgd_analyses_removed_total{reason="ttl"}')" -ge 1 -a "$(metric ecgd_analyses_stored)" = 0
stop_server "$SERVER_PID"

echo "# $n tests, $failures failed"
[ "$failures" -eq 0 ]
