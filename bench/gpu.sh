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

post_once() { # url content-type file answer -> total time in ms
    curl -s -o "$4" -w '%{time_total}' -H "Expect:" -H "Content-Type: $2" \
        --data-binary @"$3" "$1" | awk '{printf "%.1f", $1 * 1000}'
}
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
streamed() {
    curl -s "http://127.0.0.1:$port/metrics" | awk '/^ecgd_uploads_streamed_total/ {print $2}'
}
http_table() { # http_table LABEL: the CSV and float32 rows against the server on $port
    echo
    echo "HTTP POST (curl, 127.0.0.1), $1: ecgd and the sink alternately, one warm-up each, then"
    echo "the median of 7 rounds; the ratio is of the two medians."
    echo
    echo "| body | ecgd ms | raw transfer to a sink ms | ratio | engine read stage ms | engine total ms | bytes |"
    echo "|---|---|---|---|---|---|---|"
    for kind in csv f32; do
        if [ $kind = csv ]; then ct=text/csv; q="fs=360&lead=1"; else ct=application/octet-stream; q="fs=360"; fi
        file=$work/rec.$kind
        url="http://127.0.0.1:$port/v1/analyze?$q&include=summary,timing"
        post_once "$url" $ct "$file" "$work/answer.json" >/dev/null
        post_once "http://127.0.0.1:18081/sink" $ct "$file" /dev/null >/dev/null
        before=$(streamed)
        e=() r=()
        for _ in 1 2 3 4 5 6 7; do
            e+=("$(post_once "$url" $ct "$file" "$work/answer.json")")
            r+=("$(post_once "http://127.0.0.1:18081/sink" $ct "$file" /dev/null)")
        done
        after=$(streamed)
        read -r read_ms total_ms < <(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["timing_ms"]; print(t["read"], t["total"])' "$work/answer.json")
        em=$(median "${e[@]}") rm=$(median "${r[@]}")
        echo "| $kind | $em | $rm | $(awk -v a="$em" -v b="$rm" 'BEGIN {printf "%.2f", a / b}') | $read_ms | $total_ms | $(stat -c %s "$file") |"
        echo "  ($kind rounds, ecgd: ${e[*]}; sink: ${r[*]}; bodies streamed to the device: $((${after:-0} - ${before:-0})) of 7)"
    done
}
http_table "bodies streamed to the device as they arrive"
if [ "${ECG_BENCH_BACKEND:-cuda}" = cuda ]; then
    # the same server with streaming switched off: the body is copied once it is complete
    kill $server 2>/dev/null; wait $server 2>/dev/null
    port=18082
    ECG_CUDA_STREAM_UPLOADS=0 "$dir/ecgd" serve --port $port --bind 127.0.0.1 --backend cuda \
        --model-dir "$work" --model bench --workers 1 --max-body-mb 1024 --timeout-s 120 \
        2>"$work/serve2.log" &
    server=$!
    for _ in $(seq 1 3000); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/readyz" && break
        sleep 0.01
    done
    http_table "streaming switched off (ECG_CUDA_STREAM_UPLOADS=0)"
fi
