#!/usr/bin/env bash
# bench_strips.sh - analyses of recordings from 1 s to 20 h over HTTP, each cell measured as a
# ratio to an HTTP sink in the same run: for every recording length and body format, wrk posts
# the same body with the same clients first to bench/http_sink.c (libmicrohttpd with as many
# threads as the ecgd server of the cell: reads the body, answers a fixed small JSON), then to
# ecgd on each backend.
# The sink is measured again right before each backend's cell, so a drifting machine load hits
# both sides of a ratio alike.
#
# Prints "RESULT name=strip ..." per cell (rps, p50/p99, the sink's, ratio = ecgd / sink; the
# server's CPU time per request (user + system, /proc/PID/stat), the cores it kept busy and its
# threads' context switches per request (/proc/PID/task/*/status) over the cell; host_cores and
# sink_host_cores: the whole machine's busy CPUs during the cell and during its sink's, wrk
# included, to tell a cell bound by the host's CPUs from one bound by latency) and a closing
# markdown table (the scaling table: requests/s, p50/p99, samples/s and CPU per request).
#
# Usage: bench/bench_strips.sh [BUILD_DIR]      (from the repository root; default build)
# Environment:
#   ECGD, SINK      binaries (default BUILD/ecgd, BUILD/bench/http_sink)
#   BACKENDS        backends in order (default "cpu"; "cuda cuda-unbatched cpu" on a GPU host):
#                   "cuda" is the CUDA backend as shipped, no batching option given (dynamic
#                   batching, --max-batch 64, --batch-window-us 100, 2 batchers per GPU, fronts
#                   as CUDA graphs, and the workers that come with it: at least --max-batch);
#                   "cuda-unbatched" the same with --max-batch 1 --workers WORKERS (each
#                   analysis on its own pass); "cuda-nographs" the default with
#                   ECG_CUDA_BATCH_GRAPHS=0. MAX_BATCH, BATCH_WINDOW_US, BATCH_LANES and
#                   BATCH_WORKERS and BATCH_DEPTH, when set, are passed to "cuda" and
#                   "cuda-nographs" as --max-batch, --batch-window-us, --batch-lanes,
#                   --workers and --batch-depth (sweeps)
#   SIZES           recording lengths in seconds (default "1 10 80 1800"; 72000 = 20 h). 1 s
#                   is the shortest the service analyses (ECG_MIN_DURATION_S)
#   ONE_CLIENT      1: after each backend's cells, one client posting the 10-s CSV strip over
#                   one kept-alive connection ONE_CLIENT_N times (default 400): p50/p99 of the
#                   server's timing_ms.total and of the wall time (default 0)
#   FORMATS         body formats, csv and/or f32 (default "csv f32")
#   CONNS           concurrent clients for recordings up to 80 s (default 64)
#   BIG_CONNS       clients for longer recordings (default 4: each holds the whole body)
#   DURATION        wrk duration per cell (default 10s); WRK_THREADS (default 2)
#   WARMUP          the cell's own load for this long first, not measured (default 1s; 0: none):
#                   what the service pays once for a new kind of batch (CUDA graph captures,
#                   buffers grown to the cell's bodies) stays out of the cell's figures
#   WORKERS         ecgd --workers (default: CPUs)
#   IO_THREADS      ecgd --io-threads (default: ecgd's own: its workers, which rise to
#                   --max-batch where it batches); the sink always gets the server's count
#   MODEL           .ecgm file or none (default models/default.ecgm)
#   ECG_SHARED_DATA (default ../shared/data): the UCR ECG excerpt (250 Hz) tiled to each length
#   ECG_CUDA_BATCH_TIMES  1: each CUDA batcher's time by step, printed after its server's cells
#   ECG_CUDA_SYNC   spin, yield or block: how the CUDA server's threads wait for the device
#                   (gpu/cuda_backend.cu; unset: CUDA's own choice), and ECG_CUDA_BATCH_SPIN_US
#                   (the batchers poll that long, then sleep), passed through (sweeps)
set -u
BUILD=${1:-build}
ECGD=${ECGD:-$BUILD/ecgd}
SINK=${SINK:-$BUILD/bench/http_sink}
BACKENDS=${BACKENDS:-cpu}
SIZES=${SIZES:-"1 10 80 1800"}
FORMATS=${FORMATS:-"csv f32"}
CONNS=${CONNS:-64}
BIG_CONNS=${BIG_CONNS:-4}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
WRK_THREADS=${WRK_THREADS:-2}
MODEL=${MODEL:-models/default.ecgm}
MAX_BATCH=${MAX_BATCH:-}
BATCH_WINDOW_US=${BATCH_WINDOW_US:-}
BATCH_LANES=${BATCH_LANES:-}
BATCH_WORKERS=${BATCH_WORKERS:-}
BATCH_DEPTH=${BATCH_DEPTH:-}
ONE_CLIENT=${ONE_CLIENT:-0}
ONE_CLIENT_N=${ONE_CLIENT_N:-400}
export ECG_SHARED_DATA=${ECG_SHARED_DATA:-../shared/data}
cpus=$(nproc)
WORKERS=${WORKERS:-$cpus}
IO_THREADS=${IO_THREADS:-}
[ -n "$IO_THREADS" ] && [ "$IO_THREADS" -lt 2 ] && IO_THREADS=2   # ecgd's own floor
LUA=bench/http_bench.lua

for tool in wrk curl python3; do
    command -v "$tool" >/dev/null || { echo "bench_strips: $tool is not installed" >&2; exit 1; }
done
for bin in "$ECGD" "$SINK"; do
    [ -x "$bin" ] || { echo "bench_strips: $bin is not built (make bench)" >&2; exit 1; }
done
model_args=(--model none)
[ "$MODEL" != none ] && [ -f "$MODEL" ] && model_args=(--model "$MODEL")

tmp=$(mktemp -d)
server_pid=
sink_pid=
cleanup() {
    [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    [ -n "$sink_pid" ] && kill -TERM "$sink_pid" 2>/dev/null && wait "$sink_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

# Fixtures: the UCR excerpt tiled to each length, as CSV ("%g" per line) and float32.
fixture_sizes=$SIZES
[ "$ONE_CLIENT" = 1 ] && fixture_sizes="$SIZES 10"
python3 - "$ECG_SHARED_DATA/ucr/ecg50T.txt" "$tmp" $fixture_sizes <<'PYTHON' || exit 1
import array, sys
ucr = [float(line) for line in open(sys.argv[1]) if line.strip()]
text = ["%g\n" % v for v in ucr]
for size in sys.argv[3:]:
    n = int(float(size) * 250)
    full, rest = divmod(n, len(ucr))
    with open("%s/s%s.csv" % (sys.argv[2], size), "w") as f:
        block = "".join(text)
        for _ in range(full):
            f.write(block)
        f.write("".join(text[:rest]))
    a = array.array("f", ucr) * full + array.array("f", ucr[:rest])
    open("%s/s%s.f32" % (sys.argv[2], size), "wb").write(a.tobytes())
PYTHON

# start_sink N: (re)starts the sink with N threads, the server's own HTTP thread count; sets sink
sink_threads=
start_sink() {
    [ "$1" = "$sink_threads" ] && return
    [ -n "$sink_pid" ] && kill -TERM "$sink_pid" 2>/dev/null && wait "$sink_pid" 2>/dev/null
    rm -f "$tmp/sink.port"
    "$SINK" --threads "$1" --port-file "$tmp/sink.port" 2>"$tmp/sink.log" &
    sink_pid=$!
    for _ in $(seq 1 100); do [ -s "$tmp/sink.port" ] && break; sleep 0.05; done
    [ -s "$tmp/sink.port" ] || { echo "bench_strips: the sink did not start" >&2; cat "$tmp/sink.log" >&2; exit 1; }
    sink=http://127.0.0.1:$(cat "$tmp/sink.port")
    sink_threads=$1
}

# wrk_cell URL FILE TYPE CONNS -> "rps p50_ms p99_ms requests non2xx socket_errors"
wrk_cell() {
    BENCH_NAME=cell wrk -t "$WRK_THREADS" -c "$4" -d "$DURATION" --timeout 120s -s "$LUA" "$1" \
        -- cell POST "$2" "$3" 2>/dev/null | grep '^RESULT' |
        sed -E 's/.*rps=([^ ]+) p50_ms=([^ ]+) p99_ms=([^ ]+) requests=([^ ]+) non2xx=([^ ]+) socket_errors=([^ ]+).*/\1 \2 \3 \4 \5 \6/'
}

# proc_usage PID -> "cpu_ticks context_switches": user + system clock ticks of the process, and
# the voluntary and involuntary context switches of its threads alive now (the server's pools
# live as long as it does)
proc_usage() {
    local ticks csw
    ticks=$(awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null)
    csw=$(cat /proc/"$1"/task/*/status 2>/dev/null |
          awk '/^(voluntary|nonvoluntary)_ctxt_switches/ {s += $2} END {print s + 0}')
    echo "${ticks:-0} ${csw:-0}"
}

# host_ticks -> "busy_ticks total_ticks": the whole machine's CPU clock ticks (/proc/stat),
# busy (everything but idle and iowait) and all: how close a cell came to the host's CPUs
host_ticks() {
    awk '/^cpu / {busy = 0; for (i = 2; i <= NF; i++) if (i != 5 && i != 6) busy += $i;
                  total = 0; for (i = 2; i <= NF; i++) total += $i; print busy, total}' /proc/stat
}

# host_cores BEFORE AFTER -> the CPUs' worth of busy time between two host_ticks lines (of
# all the host has: 16 = all 16 busy)
host_cores() {
    python3 -c "
import os, sys
b0, t0, b1, t1 = (float(v) for v in sys.argv[1:])
print('%.2f' % ((b1 - b0) / (t1 - t0) * os.cpu_count() if t1 > t0 else 0))" $1 $2
}

# thread_ticks PID -> "http=T work=T lane=T other=T": user + system clock ticks of the threads
# alive now, by pool (their names: libmicrohttpd's MHD-*, ecgd-worker, ecgd-lane; other is
# the main thread, the reaper and the CUDA driver's threads)
thread_ticks() {
    python3 - "$1" <<'PYTHON'
import glob, sys
t = {"http": 0, "work": 0, "lane": 0, "other": 0}
for task in glob.glob("/proc/%s/task/*/stat" % sys.argv[1]):
    try:
        raw = open(task).read()
    except OSError:
        continue
    name, rest = raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()
    ticks = int(rest[11]) + int(rest[12])  # utime, stime (fields 14, 15)
    pool = ("http" if name.startswith("MHD-") else "work" if name == "ecgd-worker" else
            "lane" if name == "ecgd-lane" else "other")
    t[pool] += ticks
print(" ".join("%s=%d" % kv for kv in t.items()))
PYTHON
}

# batch_sums BASE -> "count size_sum delay_sum_s": the server's batched analyses so far, the sum
# of their batch sizes and of their waits for their batch to start (/metrics)
batch_sums() {
    curl -s "$1/metrics" | awk '
        /^ecgd_batch_size_count / {n = $2} /^ecgd_batch_size_sum / {s = $2}
        /^ecgd_batch_queue_delay_seconds_sum / {d = $2}
        END {printf "%d %s %s\n", n + 0, s + 0, d + 0}'
}

# per_request BEFORE AFTER N -> "http=US work=US lane=US other=US": each pool's CPU
# microseconds per request between two thread_ticks lines
per_request() {
    python3 - "$1" "$2" "$3" <<'PYTHON'
import os, sys
a, b = (dict(kv.split("=") for kv in line.split()) for line in sys.argv[1:3])
n, hz = float(sys.argv[3]), os.sysconf("SC_CLK_TCK")
print(" ".join("%s=%.1f" % (k, 1e6 * (int(b[k]) - int(a[k])) / hz / n if n else 0) for k in a))
PYTHON
}

start_ecgd() { # start_ecgd cpu|cuda|cuda-unbatched|cuda-nographs: sets server_pid and base
    : >"$tmp/server.log"
    local args=(--workers "$WORKERS") env=()
    case "$1" in
    cuda | cuda-nographs)
        args=()
        [ -n "$MAX_BATCH" ] && args+=(--max-batch "$MAX_BATCH")
        [ -n "$BATCH_WINDOW_US" ] && args+=(--batch-window-us "$BATCH_WINDOW_US")
        [ -n "$BATCH_LANES" ] && args+=(--batch-lanes "$BATCH_LANES")
        [ -n "$BATCH_WORKERS" ] && args+=(--workers "$BATCH_WORKERS")
        [ -n "$BATCH_DEPTH" ] && args+=(--batch-depth "$BATCH_DEPTH")
        [ "$1" = cuda-nographs ] && env=(ECG_CUDA_BATCH_GRAPHS=0) ;;
    cuda-unbatched) args+=(--max-batch 1) ;;
    cpu) ;;
    *) echo "bench_strips: unknown backend $1 (cpu, cuda, cuda-unbatched, cuda-nographs)" >&2; exit 1 ;;
    esac
    [ -n "$IO_THREADS" ] && args+=(--io-threads "$IO_THREADS")
    env "${env[@]}" "$ECGD" serve --bind 127.0.0.1 --port 0 \
        --backend "${1%%-*}" "${args[@]}" \
        --max-body-mb 2048 --queue-depth 1024 --timeout-s 300 \
        --max-conns-per-ip 0 "${model_args[@]}" 2>"$tmp/server.log" &
    server_pid=$!
    local port=
    for _ in $(seq 1 600); do
        port=$(grep -m1 '"event":"listening"' "$tmp/server.log" 2>/dev/null |
               grep -o '"port":[0-9]*' | head -1 | cut -d: -f2)
        [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ] && break
        sleep 0.1
    done
    [ -n "$port" ] || { echo "bench_strips: ecgd did not start" >&2; cat "$tmp/server.log" >&2; exit 1; }
    base=http://127.0.0.1:$port
    local config io
    config=$(grep -m1 '"event":"listening"' "$tmp/server.log" | python3 -c '
import json, sys
c = json.loads(sys.stdin.read())["config"]
print("workers %d, max_batch %d, batch_window_us %d, batch_lanes %d, batch_depth %d" % (
    c["workers"], c["max_batch"], c["batch_window_us"], c["batch_lanes"], c["batch_depth"]))')
    io=$(grep -m1 '"event":"listening"' "$tmp/server.log" | grep -o '"io_threads":[0-9]*' |
         cut -d: -f2)
    start_sink "$io"
    echo "# ecgd $(curl -s "$base/v1/info" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["version"], "backend", d["backend"], "on", d["device"])') ($1: ${env[*]} ${args[*]}; $config), $io io threads (the sink's too), $cpus CPUs, model ${model_args[1]}"
}

rows=$tmp/rows
: >"$rows"
# the commit of the binaries measured: a bundle's (tests/gpu/bundle.sh writes COMMIT beside
# them), else the checkout's
commit=$(cat "$(dirname "$ECGD")/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)
echo "# bench_strips: $(date -u +%Y-%m-%dT%H:%MZ) commit $commit, $cpus CPUs, wrk -t $WRK_THREADS, $DURATION per cell after $WARMUP of warm-up"
for backend in $BACKENDS; do
    start_ecgd "$backend"
    for size in $SIZES; do
        conns=$CONNS
        [ "$(python3 -c "print(int(float('$size') > 80))")" = 1 ] && conns=$BIG_CONNS
        for fmt in $FORMATS; do
            file=$tmp/s$size.$fmt
            type=text/csv
            [ "$fmt" = f32 ] && type=application/octet-stream
            url="$base/v1/analyze?fs=250"
            # one request first: the answer must be an analysis, and it warms the worker
            code=$(curl -s -o "$tmp/answer" -w '%{http_code}' -H 'Expect:' -H "Content-Type: $type" \
                   --data-binary @"$file" "$url")
            [ "$code" = 200 ] || { echo "bench_strips: $backend $size s $fmt answered $code: $(head -c 300 "$tmp/answer")" >&2; exit 1; }
            [ "$WARMUP" != 0 ] && DURATION=$WARMUP wrk_cell "$url" "$file" "$type" "$conns" >/dev/null
            s0_ticks=$(proc_usage "$sink_pid")
            h0=$(host_ticks)
            read -r s_rps s_p50 s_p99 s_n s_bad s_err <<<"$(wrk_cell "$sink/v1/analyze?fs=250" "$file" "$type" "$conns")"
            s1_ticks=$(proc_usage "$sink_pid")
            sink_host=$(host_cores "$h0" "$(host_ticks)")
            sink_cpu_us=$(python3 -c "import os, sys; n = float(sys.argv[3]); print('%.1f' % (1e6 * (int(sys.argv[2]) - int(sys.argv[1])) / os.sysconf('SC_CLK_TCK') / n if n else 0))" "${s0_ticks%% *}" "${s1_ticks%% *}" "${s_n:-0}")
            b0=$(batch_sums "$base")
            t0_pools=$(thread_ticks "$server_pid")
            read -r u0_ticks u0_csw <<<"$(proc_usage "$server_pid")"
            u0_t=$(date +%s.%N)
            h0=$(host_ticks)
            read -r e_rps e_p50 e_p99 e_n e_bad e_err <<<"$(wrk_cell "$url" "$file" "$type" "$conns")"
            u1_t=$(date +%s.%N)
            host=$(host_cores "$h0" "$(host_ticks)")
            read -r u1_ticks u1_csw <<<"$(proc_usage "$server_pid")"
            pools=$(per_request "$t0_pools" "$(thread_ticks "$server_pid")" "${e_n:-0}")
            read -r batched batch_mean delay_us <<<"$(python3 -c "
import sys
n0, s0, d0, n1, s1, d1 = (float(v) for v in sys.argv[1:])
n = n1 - n0
print('%d %.1f %.0f' % (n, (s1 - s0) / n if n else 0, 1e6 * (d1 - d0) / n if n else 0))
" $b0 $(batch_sums "$base"))"
            read -r cpu_us cores csw <<<"$(python3 -c "
import os, sys
ticks, csw, n, wall = (float(v) for v in sys.argv[1:])
cpu_s = ticks / os.sysconf('SC_CLK_TCK')
print('%.1f %.2f %.2f' % (1e6 * cpu_s / n if n else 0, cpu_s / wall if wall else 0, csw / n if n else 0))
" "$((u1_ticks - u0_ticks))" "$((u1_csw - u0_csw))" "${e_n:-0}" "$(python3 -c "print($u1_t - $u0_t)")")"
            line="backend=$backend size_s=$size format=$fmt conns=$conns bytes=$(stat -c %s "$file") rps=${e_rps:-0} p50_ms=${e_p50:-0} p99_ms=${e_p99:-0} requests=${e_n:-0} non2xx=${e_bad:-?} socket_errors=${e_err:-?} sink_rps=${s_rps:-0} sink_p50_ms=${s_p50:-0} sink_p99_ms=${s_p99:-0} cpu_us=$cpu_us cores=$cores csw=$csw sink_cpu_us=$sink_cpu_us host_cores=$host sink_host_cores=$sink_host batched=$batched batch_mean=$batch_mean batch_delay_us=$delay_us $(echo "$pools" | sed -E 's/(^| )/\1cpu_us_/g')"
            ratio=$(python3 -c "import sys; s=float(sys.argv[2]); print('%.3f' % (float(sys.argv[1]) / s if s > 0 else 0))" "${e_rps:-0}" "${s_rps:-0}")
            echo "RESULT name=strip $line ratio=$ratio"
            echo "$line ratio=$ratio" >>"$rows"
        done
    done
    if [ "$ONE_CLIENT" = 1 ]; then
        # one client, one kept-alive connection, the 10-s CSV strip: the server's own time
        # (timing_ms.total) and the wall time of each request, after 20 to warm up
        python3 - "$base" "$tmp/s10.csv" "$ONE_CLIENT_N" "$backend" >>"$tmp/one" <<'PYTHON' || exit 1
import http.client, json, sys, time, urllib.parse
base, path, n, backend = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
body = open(path, "rb").read()
u = urllib.parse.urlparse(base)
conn = http.client.HTTPConnection(u.hostname, u.port)
server, wall = [], []
for i in range(n + 20):
    t = time.perf_counter()
    conn.request("POST", "/v1/analyze?fs=250&include=timing", body, {"Content-Type": "text/csv"})
    answer = conn.getresponse().read()
    w = (time.perf_counter() - t) * 1e3
    if i >= 20:
        server.append(json.loads(answer)["timing_ms"]["total"])
        wall.append(w)
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))]
print("backend=%s n=%d server_p50_ms=%.3f server_p99_ms=%.3f wall_p50_ms=%.3f wall_p99_ms=%.3f" % (
    backend, n, pct(server, 50), pct(server, 99), pct(wall, 50), pct(wall, 99)))
PYTHON
        echo "RESULT name=one_client $(tail -n 1 "$tmp/one")"
    fi
    kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    server_pid=
    # ECG_CUDA_BATCH_TIMES=1: where the CUDA batchers' time went, over all of this server's cells
    grep '^cuda batch lane' "$tmp/server.log" | sed 's/^/# /'
done

python3 - "$rows" <<'PYTHON'
import sys
rows = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1])]
def length(s):
    s = float(s)
    return "%g h" % (s / 3600) if s >= 3600 else "%g min" % (s / 60) if s >= 600 else "%g s" % s
print()
print("| backend | recording | body | clients | req/s | p50 ms | p99 ms | sink req/s | ratio to sink | M samples/s | server CPU us/req | cores busy | context switches/req | CPU us/req: HTTP / workers / lanes / other | sink CPU us/req | mean batch | batch wait us |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    rps = float(r["rps"])
    print("| %s | %s | %s | %s | %.0f | %.2f | %.2f | %.0f | %.3f | %.2f | %.0f | %.1f | %.2f | %s | %s | %s | %s |%s" % (
        r["backend"], length(r["size_s"]), r["format"], r["conns"], rps, float(r["p50_ms"]),
        float(r["p99_ms"]), float(r["sink_rps"]), float(r["ratio"]),
        rps * float(r["size_s"]) * 250 / 1e6, float(r["cpu_us"]), float(r["cores"]),
        float(r["csw"]),
        " / ".join("%.0f" % float(r.get("cpu_us_" + k, 0)) for k in ("http", "work", "lane", "other")),
        "%.0f" % float(r.get("sink_cpu_us", 0)),
        r.get("batch_mean", "0") if r.get("batched", "0") != "0" else "-",
        r.get("batch_delay_us", "0") if r.get("batched", "0") != "0" else "-",
        "" if r["non2xx"] == "0" and r["socket_errors"] == "0" else
        " **%s non-2xx, %s socket errors**" % (r["non2xx"], r["socket_errors"])))
PYTHON
if [ "$ONE_CLIENT" = 1 ] && [ -s "$tmp/one" ]; then
    python3 - "$tmp/one" <<'PYTHON'
import sys
rows = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1])]
print()
print("| backend | one client, 10-s CSV strip | server p50 ms | server p99 ms | wall p50 ms | wall p99 ms |")
print("|---|---|---|---|---|---|")
for r in rows:
    print("| %s | %s requests | %s | %s | %s | %s |" % (r["backend"], r["n"], r["server_p50_ms"],
          r["server_p99_ms"], r["wall_p50_ms"], r["wall_p99_ms"]))
PYTHON
fi
