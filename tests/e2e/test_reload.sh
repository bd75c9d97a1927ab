#!/usr/bin/env bash
# test_reload.sh - models reloaded while the server runs (POST /v1/models/reload with the token,
# and SIGHUP): a model trained after start becomes usable without a restart; unchanged files keep
# their loaded entry; a file that no longer loads keeps the last good version; the default model
# vanishing refuses the reload (409) and changes nothing; 32 analyses in flight during reloads
# (some on a model the reload replaces) all finish with 200 and the right answer; model=none
# works over HTTP; without a token the route is refused (403).
# Usage: ECGD=build/ecgd tests/e2e/test_reload.sh   (run from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
HERE=$(cd "$(dirname "$0")" && pwd)
HELP="python3 $HERE/http_helpers.py"
source "$HERE/lib.sh"

require_ecgd
require_data mitdb/101.hea

mkdir -p "$tmp/models"
cp models/default.ecgm "$tmp/models/default.ecgm"
cp models/default.ecgm "$tmp/models/other.ecgm"
# A second, different model, and MIT-BIH 101 (30 min) as CSV: analyses long enough to be in
# flight during a reload.
"$ECGD" train "$DATA/ucr/ecg50T.txt" --fs 250 --epochs 3 --seed 5 --out "$tmp/trained.ecgm" \
    >/dev/null 2>&1
python3 - "$DATA/mitdb" "$tmp/rec.csv" <<'PY'
import os, sys
raw = open(os.path.join(sys.argv[1], "101.dat"), "rb").read()
with open(sys.argv[2], "w") as f:
    for i in range(0, len(raw) - 2, 3):
        s0 = ((raw[i + 1] & 0x0F) << 8) | raw[i]
        f.write("%.3f\n" % (((s0 - 4096 if s0 > 2047 else s0) - 1024) / 200.0))
PY
TOKEN=reload-secret
AUTH=(-H "Authorization: Bearer $TOKEN")
if ! start_server "$tmp/server.log" --model-dir "$tmp/models" --model default --workers 2 \
        --queue-depth 64 --token "$TOKEN"; then
    echo "not ok 1 - the server starts"; sed 's/^/# /' "$tmp/server.log"; exit 1
fi
ok "server ready on port $PORT"
A="/v1/analyze?fs=360&include=beats,score"
analyze() { req POST "$A&model=$1" "${AUTH[@]}" -H 'Content-Type: text/csv' --data-binary @"$tmp/rec.csv"; }
reload() { req POST /v1/models/reload "${AUTH[@]}"; }
# report_is KEY NAMES...: the last reload report's KEY list is exactly NAMES
report_is() {
    python3 - "$tmp/body" "$@" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
got = doc[sys.argv[2]] if sys.argv[2] != "skipped" else [s["file"].split("/")[-1] for s in doc["skipped"]]
if got != sys.argv[3:]:
    print("# %s: %s" % (sys.argv[2], got))
sys.exit(0 if got == sys.argv[3:] else 1)
PY
}
export -f report_is
export tmp

check "reference analysis with the default model" test "$(analyze default)" = 200
cp "$tmp/body" "$tmp/ref_default.json"
code=$(analyze mine)
check "model=mine before it exists: 404 model_not_found" is_error 404 model_not_found
code=$(analyze none)
check "model=none over HTTP: 200, beats without model, latent or score" python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2]))
sys.exit(0 if "model" not in d and "score" not in d["beats"] and d["beats"]["r_peak"] == r["beats"]["r_peak"] else 1)' "$tmp/body" "$tmp/ref_default.json"

cp "$tmp/trained.ecgm" "$tmp/models/mine.ecgm"
code=$(req POST /v1/models/reload)
check "POST /v1/models/reload without the token: 401" is_error 401 unauthorized
code=$(reload)
check "reload: 200, mine added, default and other unchanged" bash -c \
    "[ $code = 200 ] && report_is added mine && report_is unchanged default other && report_is models default mine other"
code=$(analyze mine)
check "model=mine after the reload: 200 with model mine" bash -c \
    "[ $code = 200 ] && grep -q '\"name\":\"mine\"' '$tmp/body'"
code=$(analyze default)
check "the default model's answer is unchanged" $HELP same "$tmp/body" "$tmp/ref_default.json"
code=$(req GET /v1/models "${AUTH[@]}")
check "GET /v1/models lists mine" grep -q '"name":"mine"' "$tmp/body"

# 32 analyses in flight while the model directory changes and is reloaded twice (HTTP, SIGHUP):
# "other" is replaced by a different model under them.
rm -f "$tmp"/par.*
for i in $(seq 1 32); do
    model=default
    [ $((i % 4)) = 0 ] && model=other
    curl -s --max-time 120 -o "$tmp/par.$i.json" -w '%{http_code}\n' -X POST "${AUTH[@]}" \
        -H 'Content-Type: text/csv' --data-binary @"$tmp/rec.csv" \
        "http://127.0.0.1:$PORT$A&model=$model" >"$tmp/par.$i.code" &
    pids[$i]=$!
done
# Reload once most of them are in (the /metrics request itself counts one): on a loaded machine
# the 32 clients take a while to start, and a fixed pause would reload before they arrive.
for _ in $(seq 1 200); do
    inflight=$(curl -s "http://127.0.0.1:$PORT/metrics" |
               awk '/^ecgd_http_requests_in_flight /{print $2}')
    [ "${inflight:-0}" -ge 17 ] && break
    sleep 0.05
done
cp "$tmp/trained.ecgm" "$tmp/models/other.ecgm"
code=$(reload)
check "reload during 32 analyses: 200, other replaced" bash -c "[ $code = 200 ] && report_is replaced other"
kill -HUP "$SERVER_PID"
for i in $(seq 1 32); do wait "${pids[$i]}"; done
# From the logs: analyses that started before the HTTP reload was logged and ended after it.
check "analyses were in flight across the reload" python3 - "$tmp/server.log" <<'PY'
import json, sys
from datetime import datetime, timedelta
def at(t):
    return datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ")
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
reloads = [at(l["time"]) for l in lines if l.get("event") == "models_reloaded"]
reload_t = reloads[1]  # the first came before the parallel analyses
across = 0
for l in lines:
    if l.get("event") == "request" and l.get("route") == "/v1/analyze" and l["status"] == 200:
        end = at(l["time"])
        start = end - timedelta(milliseconds=l["duration_ms"])
        across += start < reload_t < end
print("# %d analyses in flight across the reload" % across)
sys.exit(0 if across >= 2 else 1)
PY
bad=0
for i in $(seq 1 32); do
    [ "$(cat "$tmp/par.$i.code")" = 200 ] || bad=$((bad + 1))
    if [ $((i % 4)) != 0 ]; then
        $HELP same "$tmp/par.$i.json" "$tmp/ref_default.json" >/dev/null || bad=$((bad + 1))
    fi
done
check "all 32 analyses answered 200, the default model's ones identical to the reference" test "$bad" = 0
check "SIGHUP reloaded too (logged)" bash -c "[ \$(grep -c '\"event\":\"models_reloaded\"' '$tmp/server.log') -ge 3 ]"

# Failures change nothing that works.
printf 'not a model' >"$tmp/models/mine.ecgm"
code=$(reload)
check "a model file that no longer loads: skipped, the loaded version kept" bash -c \
    "[ $code = 200 ] && report_is skipped mine.ecgm && report_is models default mine other"
code=$(analyze mine)
check "model=mine still answers with the version loaded before" test "$code" = 200
mv "$tmp/models/default.ecgm" "$tmp/default.ecgm.away"
code=$(reload)
check "the default model's file gone: 409 default_model_missing" is_error 409 default_model_missing
code=$(analyze default)
check "the default model still answers after the refused reload" $HELP same "$tmp/body" "$tmp/ref_default.json"
mv "$tmp/default.ecgm.away" "$tmp/models/default.ecgm"
rm "$tmp/models/mine.ecgm"
kill -HUP "$SERVER_PID"
for _ in $(seq 1 50); do
    [ "$(grep -c '"event":"models_reloaded"' "$tmp/server.log")" -ge 4 ] && break
    sleep 0.1
done
code=$(analyze mine)
check "SIGHUP after mine.ecgm was removed: model=mine 404" is_error 404 model_not_found

# Without a token the route is refused.
if start_server "$tmp/server2.log" --model-dir "$tmp/models" --model default --workers 1; then
    code=$(req POST /v1/models/reload)
    check "no token configured: POST /v1/models/reload is 403 forbidden" is_error 403 forbidden
else
    not_ok "a second server starts"
fi

echo "# $n tests, $failures failed"
[ "$failures" -eq 0 ]
