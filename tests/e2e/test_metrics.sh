#!/usr/bin/env bash
# test_metrics.sh - metrics and access logs that add up: per-model analysis counters, stage
# seconds that do not count the whole analysis twice, the process_* metrics, client aborts in
# their own counter (not as code="0"), access-log lines for 4xx that say so with their code, and
# the server's threads named by pool.
# Usage: ECGD=build/ecgd tests/e2e/test_metrics.sh   (run from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"

require_ecgd
if ! start_server "$tmp/server.log" --model-dir models --model default --workers 2; then
    echo "not ok 1 - the server starts"; sed 's/^/# /' "$tmp/server.log"; exit 1
fi
ok "server ready on port $PORT"
CSV=tests/data/mitdb_100s.csv
for model in default default none; do
    code=$(req POST "/v1/analyze?fs=360&model=$model" -H 'Content-Type: text/csv' --data-binary @"$CSV")
    [ "$code" = 200 ] || not_ok "analysis with model=$model: $code"
done
code=$(req POST "/v1/analyze?fs=360" -H 'Content-Type: text/csv' --data-binary $'1\nabc\n')
check "a bad CSV: 400 bad_csv" is_error 400 bad_csv
# A client that leaves in the middle of its body.
python3 - "$PORT" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/analyze?fs=360 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
          b"Content-Length: 100000\r\n\r\n0.1\n0.2\n")
time.sleep(0.3)
s.close()
PY
sleep 0.5
req GET /metrics >/dev/null
cp "$tmp/body" "$tmp/metrics"
metric() { awk -v k="$1" '$1 == k {print $2}' "$tmp/metrics"; }

check "ecgd_analyses_total{model=\"default\"} 2" test "$(metric 'ecgd_analyses_total{model="default"}')" = 2
check "ecgd_analyses_total{model=\"none\"} 1" test "$(metric 'ecgd_analyses_total{model="none"}')" = 1
check "beats and samples by model" bash -c \
    "grep -q '^ecgd_beats_analysed_total{model=\"default\"} [1-9]' '$tmp/metrics' && grep -q '^ecgd_samples_analysed_total{model=\"none\"} 36000$' '$tmp/metrics'"
check "no stage=\"total\" among the stages" bash -c "! grep -q 'stage=\"total\"' '$tmp/metrics'"
check "the stages sum to at most the whole analyses' seconds" python3 - "$tmp/metrics" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
stages = sum(float(v) for v in re.findall(r'^ecgd_engine_stage_seconds_sum\{stage="[a-z]+"\} (\S+)$', text, re.M))
whole = sum(float(v) for v in re.findall(r'^ecgd_analysis_seconds_total\{model="[^"]+"\} (\S+)$', text, re.M))
print("# stages %.6f s, whole analyses %.6f s" % (stages, whole))
sys.exit(0 if 0 < stages <= whole * 1.0001 else 1)
PY
pid_fds=$(ls /proc/"$SERVER_PID"/fd | wc -l)
check "process_* metrics: CPU, memory, fds (ls says $pid_fds), limit, start time" python3 - "$tmp/metrics" "$pid_fds" <<'PY'
import re, sys, time
text = open(sys.argv[1]).read()
v = {k: float(x) for k, x in re.findall(r'^(process_[a-z_]+) (\S+)$', text, re.M)}
fds = int(sys.argv[2])
good = (v.get("process_cpu_seconds_total", 0) > 0 and v.get("process_resident_memory_bytes", 0) > 1e6
        and v.get("process_virtual_memory_bytes", 0) >= v["process_resident_memory_bytes"]
        and abs(v.get("process_open_fds", -99) - fds) <= 4 and v.get("process_max_fds", 0) > 0
        and time.time() - 600 < v.get("process_start_time_seconds", 0) <= time.time())
if not good:
    print("# %s" % v)
sys.exit(0 if good else 1)
PY
check "threads named by pool (docs/SERVICE.md): 2 ecgd-worker, MHD-* for HTTP, ecgd-reaper" python3 - "$SERVER_PID" <<'PY'
import collections, glob, sys
names = collections.Counter(open(t).read().strip()
                            for t in glob.glob("/proc/%s/task/*/comm" % sys.argv[1]))
print("# %s" % dict(names))
sys.exit(0 if names["ecgd-worker"] == 2 and names["ecgd-reaper"] == 1
         and sum(v for k, v in names.items() if k.startswith("MHD-")) >= 2 else 1)
PY
check "the client that left: aborted_total{reason=\"client_abort\"}, not code=\"0\"" bash -c \
    "grep -q '^ecgd_http_requests_aborted_total{route=\"/v1/analyze\",reason=\"client_abort\"} 1$' '$tmp/metrics' && ! grep -q 'code=\"0\"' '$tmp/metrics'"
check "4xx are counted under their code" \
    grep -q '^ecgd_http_requests_total{route="/v1/analyze",code="400"} 1$' "$tmp/metrics"
check "access log of the 400: outcome client_error, error_code bad_csv" \
    grep -q '"status":400,.*"outcome":"client_error","error_code":"bad_csv"' "$tmp/server.log"
check "access log of an analysis names its model" \
    grep -q '"status":200,.*"outcome":"ok","model":"none"' "$tmp/server.log"
check "access log of the client that left: status 0, outcome client_abort" \
    grep -q '"status":0,.*"outcome":"client_abort"' "$tmp/server.log"

echo "# $n tests, $failures failed"
[ "$failures" -eq 0 ]
