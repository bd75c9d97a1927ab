#!/usr/bin/env bash
# test_batching.sh - dynamic batching through the service: --max-batch/--batch-window-us reach
# the engine, batched answers over HTTP equal an unbatched server's byte for byte (every field
# but timing_ms), refusals too, and /metrics shows the batches (ecgd_batch_size,
# ecgd_batch_queue_delay_seconds), a --workers below --max-batch is warned about at start
# (batch_capped), and --print-config shows the settings. Without a GPU the CPU backend batches
# under ECG_BATCH_ANY=1 (engine/batch.c's stage-by-stage runner); on a device,
# ECGD_TEST_BACKEND=cuda runs the same against the CUDA backend's own batches.
set -u
ECGD=${ECGD:-build/ecgd}
. "$(dirname "$0")/lib.sh"
export ECG_BATCH_ANY=1

start_server "$tmp/plain.log" --workers 4 --max-batch 1 --model models/default.ecgm ||
    { echo "not ok 1 - unbatched server did not start"; cat "$tmp/plain.log"; exit 1; }
plain=$PORT
start_server "$tmp/batch.log" --workers 24 --max-batch 16 --batch-window-us 50000 \
    --model models/default.ecgm ||
    { echo "not ok 1 - batching server did not start"; cat "$tmp/batch.log"; exit 1; }
batch=$PORT
batch_pid=$SERVER_PID
# batches kept in flight: three per batcher, each launched while the ones before it run
start_server "$tmp/deep.log" --workers 24 --max-batch 8 --batch-window-us 2000 --batch-depth 3 \
    --model models/default.ecgm ||
    { echo "not ok 1 - batching server with --batch-depth 3 did not start"; cat "$tmp/deep.log"; exit 1; }
deep=$PORT
deep_pid=$SERVER_PID

check "--print-config shows the batching settings" \
    bash -c "'$ECGD' serve --max-batch 8 --batch-window-us 50 --batch-depth 2 --print-config |
             grep -q '\"max_batch\":8,\"batch_window_us\":50,\"batch_lanes\":2,\"batch_depth\":2'"
check "the batching server's log has no batch_capped warning (24 workers, batches of 16)" \
    bash -c "! grep -q '\"event\":\"batch_capped\"' '$tmp/batch.log'"
check "--max-batch 0 is refused (exit 2)" \
    bash -c "'$ECGD' serve --max-batch 0 --print-config >/dev/null 2>&1; [ \$? = 2 ]"

# 24 strips (1 .. 80 s of MIT-BIH record 119 as CSV at 360 Hz, and a 0.5-s strip, shorter than
# ECG_MIN_DURATION_S), posted all at
# once to both servers; answers compared without timing_ms
python3 - "$DATA/mitdb/119" "$tmp" <<'PY' || { not_ok "fixtures"; exit 1; }
import struct, sys
path, tmp = sys.argv[1], sys.argv[2]
raw = open(path + ".dat", "rb").read()
# format 212: two 12-bit samples in 3 bytes; the first lead only
x = []
for i in range(0, 3 * 40000, 3):
    b0, b1 = raw[i], raw[i + 1]
    v = b0 | ((b1 & 0x0F) << 8)
    x.append((v - 4096 if v > 2047 else v) / 200.0)
lengths = [2, 3, 5, 10, 10, 10, 20, 30, 45, 60, 80, 0.5, 1, 7, 15, 10, 25, 40, 10, 12, 9, 10, 33, 80]
for k, s in enumerate(lengths):
    n = int(s * 360)
    start = (k * 977) % (len(x) - n)
    open("%s/strip%02d.csv" % (tmp, k), "w").write("".join("%.4f\n" % v for v in x[start:start + n]))
PY

post_all() { # post_all PORT TAG: every strip at once, answers to $tmp/ans-TAG.NN
    local pids=()
    for f in "$tmp"/strip*.csv; do
        k=${f##*strip}; k=${k%.csv}
        curl -s --max-time 60 -o "$tmp/ans-$2.$k" -H 'Content-Type: text/csv' --data-binary @"$f" \
            "http://127.0.0.1:$1/v1/analyze?fs=360&include=all" &
        pids+=($!)
    done
    wait "${pids[@]}"
}
post_all "$plain" plain
post_all "$batch" batch
post_all "$deep" deep

python3 - "$tmp" <<'PY'
import glob, json, os, sys
tmp = sys.argv[1]
same = refused = 0
bad = []
for p in sorted(glob.glob(tmp + "/ans-plain.*")):
    k = p.rsplit(".", 1)[1]
    a = json.load(open(p))
    b = json.load(open(tmp + "/ans-batch." + k))
    c = json.load(open(tmp + "/ans-deep." + k))
    for d in (a, b, c):
        d.pop("timing_ms", None)
    if a != b or a != c:
        bad.append(k)
    elif "error" in a:
        refused += 1
    else:
        same += 1
print("# %d answers identical, %d refusals identical, %d differ %s" % (same, refused, len(bad), bad))
sys.exit(0 if not bad and same == 23 and refused == 1 else 1)
PY
check "batched answers, one batch or three in flight per batcher, equal the unbatched server's (23 analyses, the 0.5-s strip refused alike)" [ $? = 0 ]

req GET /metrics >/dev/null
check "/metrics: ecgd_batch_size counts the 23 batched analyses" \
    grep -q '^ecgd_batch_size_count 23$' "$tmp/body"
check "/metrics: some batch held several analyses" \
    python3 -c "
import re, sys
t = open('$tmp/body').read()
one = int(re.search(r'^ecgd_batch_size_bucket\{le=\"1\"\} (\d+)$', t, re.M).group(1))
sys.exit(0 if one < 23 else 1)"
check "/metrics: ecgd_batch_queue_delay_seconds has as many observations" \
    grep -q '^ecgd_batch_queue_delay_seconds_count 23$' "$tmp/body"
# bodies up to 128 KiB are read by the HTTP thread and queued on a batch without a worker
# (svc_analyze_start); the larger ones, and the 0.5-s strip the batches do not take, by a worker
inline=$(python3 -c "
import glob, os
n = 0
for p in glob.glob('$tmp/strip*.csv'):
    lines = sum(1 for _ in open(p))
    n += os.path.getsize(p) <= 131072 and lines >= 360
print(n)")
check "/metrics: ecgd_analyses_inline_total counts the $inline strips of at most 128 KiB" \
    grep -q "^ecgd_analyses_inline_total $inline\$" "$tmp/body"
check "some strips went through a worker instead (larger than 128 KiB)" [ "$inline" -lt 23 ]
# JSON bodies read slower: the HTTP thread takes them up to 32 KiB only
python3 - "$tmp/strip03.csv" "$tmp" <<'PY' || not_ok "JSON fixtures"
import json, sys
x = [float(l) for l in open(sys.argv[1])]
open(sys.argv[2] + "/small.json", "w").write(json.dumps({"fs": 360, "signal": x[:3600]}))
open(sys.argv[2] + "/large.json", "w").write(json.dumps({"fs": 360, "signal": (x * 4)[:14400]}))
PY
inline_now() { curl -s "http://127.0.0.1:$batch/metrics" | sed -n 's/^ecgd_analyses_inline_total //p'; }
before=$(inline_now)
small_code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
             --data-binary @"$tmp/small.json" "http://127.0.0.1:$batch/v1/analyze")
after_small=$(inline_now)
large_code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
             --data-binary @"$tmp/large.json" "http://127.0.0.1:$batch/v1/analyze")
after_large=$(inline_now)
check "a 10-s JSON body ($(wc -c <"$tmp/small.json") bytes) is read by the HTTP thread" \
    [ "$small_code" = 200 ] && [ "$after_small" = $((before + 1)) ]
check "a 40-s JSON body ($(wc -c <"$tmp/large.json") bytes, over 32 KiB) by a worker" \
    [ "$large_code" = 200 ] && [ "$after_large" = "$after_small" ]
# overlap_s through the batch: the HTTP thread reads the strip, the batch analyses it, the
# overlap's beats are left out as on a worker's path
curl -s -o "$tmp/whole.json" -H 'Content-Type: application/json' --data-binary @"$tmp/small.json" \
    "http://127.0.0.1:$batch/v1/analyze"
before=$(inline_now)
overlap_code=$(curl -s -o "$tmp/overlap.json" -w '%{http_code}' -H 'Content-Type: application/json' \
               --data-binary @"$tmp/small.json" "http://127.0.0.1:$batch/v1/analyze?overlap_s=2")
check "overlap_s=2 on a batched 10-s strip: read by the HTTP thread, the beats from sample 720 on" \
    [ "$overlap_code" = 200 ] && [ "$(inline_now)" = $((before + 1)) ] && python3 -c "
import json
a, b = json.load(open('$tmp/whole.json')), json.load(open('$tmp/overlap.json'))
ra, rb = a['beats']['r_peak'], b['beats']['r_peak']
assert b['signal']['overlap_samples'] == 720 and rb == [r for r in ra if r >= 720] and len(rb) < len(ra)
assert b['beats']['score'] == a['beats']['score'][len(ra) - len(rb):]"
PORT=$plain
req GET /metrics >/dev/null
check "/metrics of the unbatched server: no batched analysis" \
    grep -q '^ecgd_batch_size_count 0$' "$tmp/body"
check "/metrics of the unbatched server: none read by the HTTP thread" \
    grep -q '^ecgd_analyses_inline_total 0$' "$tmp/body"

# Clients that leave while their analysis waits in a batch (a 50-ms window, clients giving up
# after 10 ms): the server lets the batch finish, drops the answers, and goes on
PORT=$batch
gone=()
for k in 1 2 3 4 5 6 7 8; do
    curl -s --max-time 0.01 -o /dev/null -H 'Content-Type: text/csv' \
        --data-binary @"$tmp/strip03.csv" "http://127.0.0.1:$batch/v1/analyze?fs=360" &
    gone+=($!)
done
wait "${gone[@]}"
sleep 0.3
req GET /metrics >/dev/null
check "clients gone mid-batch: no request left in flight but this one" \
    grep -q '^ecgd_http_requests_in_flight 1$' "$tmp/body"
code=$(curl -s -o "$tmp/after" -w '%{http_code}' -H 'Content-Type: text/csv' \
       --data-binary @"$tmp/strip03.csv" "http://127.0.0.1:$batch/v1/analyze?fs=360&include=all")
check "... and the next analysis is answered as before" \
    python3 -c "
import json, sys
a, b = json.load(open('$tmp/after')), json.load(open('$tmp/ans-plain.03'))
a.pop('timing_ms'); b.pop('timing_ms')
sys.exit(0 if '$code' == '200' and a == b else 1)"

# SIGTERM while analyses wait in batches: every request that reached the server is answered
# (200, or 503 shutting_down when it came after the drain began), then the server exits 0
# saying so ("all requests finished": none was in flight when the listeners stopped).
# Connections made after the listener closed are refused (curl exit 7); one accepted just
# before whose request had not arrived when the drain ended is closed as idle (curl exit 52,
# an empty reply: what a client sees of any server that closes an idle connection), or reset
# while curl was still sending it (exit 55 or 56, its send or its receive failed), as is one
# the kernel had completed in the listen backlog when the listener closed (seen under ASan,
# where the server is slow). None of them was a request the server had taken: the drain waits
# for every request it took (the "clients gone mid-batch" check above).
drain_check() { # drain_check PORT PID LOG WHAT: SIGTERM while every strip is being analysed
    local drainers=() f k drain_rc
    rm -f "$tmp"/rc-drain.* "$tmp"/ans-drain.*
    for f in "$tmp"/strip*.csv; do
        k=${f##*strip}; k=${k%.csv}
        (curl -s --max-time 60 -o "$tmp/ans-drain.$k" -H 'Content-Type: text/csv' \
             --data-binary @"$f" "http://127.0.0.1:$1/v1/analyze?fs=360"
         echo $? >"$tmp/rc-drain.$k") &
        drainers+=($!)
    done
    sleep 0.02
    kill -TERM "$2"
    wait "${drainers[@]}"
    wait "$2"
    drain_rc=$?
    check "SIGTERM with analyses in batches ($4): the server exits 0" [ "$drain_rc" = 0 ]
    check "... after all requests finished" \
        grep -q '"event":"stopped".*all requests finished' "$3"
    check "... and every request it took was answered (200, or 503 shutting_down)" \
        python3 -c "
import glob, json, sys
bad = answered = 0
for r in sorted(glob.glob('$tmp/rc-drain.*')):
    k = r.rsplit('.', 1)[1]
    rc = open(r).read().strip()
    if rc in ('7', '52', '55', '56'):
        continue  # refused or reset with the listener, or closed as idle before its request came
    try:
        d = json.load(open('$tmp/ans-drain.' + k))
    except Exception:
        print('# strip %s: curl exit %s, no JSON answer' % (k, rc))
        bad += 1
        continue
    answered += 1
    if 'error' in d and d['error'].get('code') not in ('too_short', 'shutting_down'):
        print('# strip %s: %s' % (k, d['error']))
        bad += 1
print('# %d answered' % answered)
sys.exit(0 if bad == 0 and answered > 0 else 1)"
}
drain_check "$batch" "$batch_pid" "$tmp/batch.log" "one in flight per batcher"
drain_check "$deep" "$deep_pid" "$tmp/deep.log" "three in flight per batcher"

# fewer workers than --max-batch (64 by default) bound every batch: the log says so at start
start_server "$tmp/capped.log" --workers 2 --model none ||
    not_ok "capped server did not start"
check "--workers 2 under --max-batch 64: a batch_capped warning at start" \
    grep -q '"event":"batch_capped".*--workers 2 caps every batch at 2' "$tmp/capped.log"
kill -TERM "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null

echo "# $n checks, $failures failed"
[ "$failures" -eq 0 ]
