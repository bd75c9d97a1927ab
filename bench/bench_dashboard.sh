#!/usr/bin/env bash
# bench_dashboard.sh - the dashboard's two figures (issue 11):
#   1. GET /v1/analyses/{id}/signal of a 20-hour recording at 2,000 points: server time (the
#      access log's duration_ms) and client time (curl), median of 30; anchor in the same run:
#      the same request for a 10-second window of the same analysis, and GET /healthz.
#   2. page load to first full drawing of a 30-minute record (MIT-BIH 101) in headless Chromium
#      (bench/dashboard_load.mjs), median of 5; anchor in the same run: the 100-s example.
# BACKEND=cpu|cuda (default cpu). Part 2 is skipped where chromium or puppeteer-core is missing.
# Usage: ECGD=build/ecgd bench/bench_dashboard.sh   (from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
DATA=${ECG_SHARED_DATA:-../shared/data}
BACKEND=${BACKEND:-cpu}
HOURS=${HOURS:-20}
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

echo "# bench_dashboard: $(date -u +%Y-%m-%dT%H:%MZ) commit $(git rev-parse --short HEAD 2>/dev/null), backend $BACKEND, load average $(cut -d' ' -f1-3 /proc/loadavg)"
python3 tests/e2e/analyses_helpers.py long_f32 "$DATA" "$tmp/long.f32" "$HOURS"
python3 tests/e2e/analyses_helpers.py mitcsv "$DATA" 101 "$tmp/101.csv"
"$ECGD" serve --bind 127.0.0.1 --port 0 --backend "$BACKEND" --workers 2 --max-body-mb 512 \
    --store-mb 4096 2>"$tmp/log" &
pid=$!
port=
for _ in $(seq 1 600); do
    grep -q '"event":"ready"' "$tmp/log" 2>/dev/null && port=$(grep -m1 '"event":"listening"' "$tmp/log" | grep -o '"port":[0-9]*' | head -1 | cut -d: -f2) && break
    sleep 0.1
done
[ -n "$port" ] || { echo "server did not start"; cat "$tmp/log"; exit 1; }
base=http://127.0.0.1:$port
device=$(curl -s "$base/v1/info" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["backend"], "-", d["device"])')
echo "# server: $device"

create() { # BODY TYPE QUERY -> id
    curl -s -X POST -H "Content-Type: $2" --data-binary @"$1" "$base/v1/analyses?$3" |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["id"], d["signal"]["samples"], d["timing_ms"]["total"])'
}
read -r id n_samples analysis_ms < <(create "$tmp/long.f32" application/octet-stream fs=360)
echo "# ${HOURS}-hour recording: $n_samples samples, analysed in $analysis_ms ms"

# median_of PATH N: median server (access log) and client (curl) milliseconds of N GETs.
median_of() {
    local path=$1 runs=$2 marker
    marker="bench-$RANDOM$RANDOM"
    for i in $(seq 1 "$runs"); do
        curl -s -o /dev/null -H "X-Request-Id: $marker-$i" -w '%{time_total}\n' "$base$path"
    done >"$tmp/client"
    sleep 0.2
    grep "\"request_id\":\"$marker-" "$tmp/log" | grep -o '"duration_ms":[0-9.]*' | cut -d: -f2 >"$tmp/server"
    python3 - "$tmp/server" "$tmp/client" <<'PY'
import statistics, sys
s = [float(x) for x in open(sys.argv[1]) if x.strip()]
c = [1000 * float(x) for x in open(sys.argv[2]) if x.strip()]
print("%.3f %.3f" % (statistics.median(s), statistics.median(c)))
PY
}
curl -s -o /dev/null "$base/v1/analyses/$id/signal?points=2000" # warm
read -r full_s full_c < <(median_of "/v1/analyses/$id/signal?points=2000" 30)
read -r short_s short_c < <(median_of "/v1/analyses/$id/signal?start_s=36000&end_s=36010&points=2000" 30)
read -r health_s health_c < <(median_of "/healthz" 30)
bytes=$(curl -s "$base/v1/analyses/$id/signal?points=2000" | wc -c)
echo
echo "| GET .../signal, $BACKEND | server ms (median of 30) | client ms | vs 10-s window |"
echo "|---|---|---|---|"
echo "| whole ${HOURS}-hour recording ($n_samples samples) at 2,000 points ($bytes bytes) | $full_s | $full_c | $(python3 -c "print('%.1fx' % ($full_s / $short_s))") |"
echo "| a 10-second window (3,600 samples) at 2,000 points (anchor) | $short_s | $short_c | 1 |"
echo "| GET /healthz (anchor) | $health_s | $health_c | |"

if [ -x "${CHROMIUM:-/usr/bin/chromium}" ] && [ -d node_modules/puppeteer-core ]; then
    read -r id30 _ _ < <(create "$tmp/101.csv" text/csv fs=360)
    read -r id100 _ _ < <(create tests/data/mitdb_100s.csv text/csv fs=360)
    long=$(node bench/dashboard_load.mjs "$base" "$id30" 5)
    short=$(node bench/dashboard_load.mjs "$base" "$id100" 5)
    echo
    echo "| page load to first full drawing, headless Chromium | median ms (5 loads) | min | max |"
    echo "|---|---|---|---|"
    python3 - "$long" "$short" <<'PY'
import json, sys
l, s = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("| MIT-BIH 101, 30 min, 1,868 beats | %.0f | %.0f | %.0f |" % (l["median_ms"], l["min_ms"], l["max_ms"]))
print("| the 100-s example (anchor) | %.0f | %.0f | %.0f |" % (s["median_ms"], s["min_ms"], s["max_ms"]))
print("\nratio 30 min / 100 s: %.2fx" % (l["median_ms"] / s["median_ms"]))
PY
else
    echo "# page load: skipped (no chromium or puppeteer-core)"
fi
