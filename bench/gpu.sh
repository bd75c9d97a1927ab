#!/usr/bin/env bash
# gpu.sh - the GPU benchmark on a device machine: bench_gpu (stage times, memory, input paths),
# then the service end to end: process start to /readyz, and POST /v1/analyze of the 20M-sample
# recording as CSV and as float32, beside a raw loopback transfer of the same bytes to a sink
# that only reads them (the floor of any HTTP answer).
#
# Usage (from the repository root): LD_LIBRARY_PATH=DIR/lib bench/gpu.sh [DIR]
# DIR (default .gpu-run) holds bench_gpu, ecgd and data/mitdb. Needs curl and python3.
set -u
dir=${1:-.gpu-run}
work=$(mktemp -d)
trap 'kill $server $sink 2>/dev/null; rm -rf "$work"' EXIT
server= sink=

ECG_BENCH_WRITE=$work "$dir/bench_gpu" "$dir/data" || exit 1

if ! command -v curl >/dev/null || [ ! -x "$dir/ecgd" ]; then
    echo "no curl or ecgd: HTTP part skipped"
    exit 0
fi
port=18080
t0=$(date +%s.%N)
"$dir/ecgd" serve --port $port --bind 127.0.0.1 --backend "${ECG_BENCH_BACKEND:-cuda}" --model-dir "$work" \
    --model bench --workers 1 --max-body-mb 1024 --timeout-s 120 2>"$work/serve.log" &
server=$!
ready=0
for _ in $(seq 1 3000); do
    if curl -sf -o /dev/null "http://127.0.0.1:$port/readyz"; then ready=1; break; fi
    kill -0 $server 2>/dev/null || break
    sleep 0.01
done
t1=$(date +%s.%N)
echo
if [ $ready -ne 1 ]; then
    echo "the service did not become ready; its log:"
    tail -n 20 "$work/serve.log"
    exit 1
fi
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "service start to /readyz 200: %.1f ms\n", (b - a) * 1000 }'
curl -s "http://127.0.0.1:$port/v1/info"; echo

# the sink: reads a request body and answers 200, nothing else
cat >"$work/sink.py" <<'PY'
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        left = int(self.headers["Content-Length"])
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 20))
            if not chunk:
                break
            left -= len(chunk)
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
PY
python3 "$work/sink.py" 18081 &
sink=$!
sleep 1

post() { # url content-type file -> median of 3 total times in ms
    local times=()
    for _ in 1 2 3 4; do
        times+=("$(curl -s -o "$work/answer.json" -w '%{time_total}' -H "Expect:" \
            -H "Content-Type: $2" \
            --data-binary @"$3" "$1")")
    done
    printf '%s\n' "${times[@]:1}" | sort -n | sed -n 2p | awk '{printf "%.1f", $1 * 1000}'
}
echo
echo "| HTTP POST (curl, 127.0.0.1, median of 3 after a warm-up) | ms | bytes |"
echo "|---|---|---|"
for kind in csv f32; do
    if [ $kind = csv ]; then ct=text/csv; q="fs=360&lead=1"; else ct=application/octet-stream; q="fs=360"; fi
    file=$work/rec.$kind
    ms=$(post "http://127.0.0.1:$port/v1/analyze?$q&include=summary" $ct "$file")
    head -c 400 "$work/answer.json"; echo
    raw=$(post "http://127.0.0.1:18081/sink" $ct "$file")
    echo "| /v1/analyze, $kind | $ms | $(stat -c %s "$file") |"
    echo "| raw transfer of the same bytes to a sink | $raw | $(stat -c %s "$file") |"
done
