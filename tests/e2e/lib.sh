# lib.sh - shared by the end-to-end scripts that start their own server (test_openapi.sh,
# test_uploads.sh, test_reload.sh): TAP-style results, a server on a free port, requests.
# Source it after setting ECGD; it sets tmp (removed at exit) and kills the servers it started.
BACKEND=${ECGD_TEST_BACKEND:-cpu}
DATA=${ECG_SHARED_DATA:-../shared/data}
tmp=$(mktemp -d)
server_pids=()
n=0
failures=0

lib_cleanup() {
    for pid in "${server_pids[@]}"; do
        kill -KILL "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap lib_cleanup EXIT

# require_ecgd: the script cannot run without $ECGD (a failure); require_data FILE: nor
# meaningfully without the shared data (a skip, as on a machine that has none).
require_ecgd() {
    if [ ! -x "$ECGD" ]; then echo "not ok 1 - $ECGD is not built"; exit 1; fi
}
require_data() {
    if [ ! -f "$DATA/$1" ]; then echo "skip 1 - shared data not found at $DATA"; exit 0; fi
}

ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failures=$((failures + 1)); echo "not ok $n - $1"; }
# check DESC CMD...: ok when CMD succeeds.
check() {
    local desc=$1
    shift
    if "$@"; then ok "$desc"; else not_ok "$desc"; fi
}

# start_server LOG [ARGS...]: starts `ecgd serve` on 127.0.0.1 and a free port, waits for
# /readyz (at most 30 s); sets SERVER_PID and PORT; false when it did not get there.
start_server() {
    local log=$1
    shift
    "$ECGD" serve --bind 127.0.0.1 --port 0 --backend "$BACKEND" "$@" 2>"$log" &
    SERVER_PID=$!
    server_pids+=("$SERVER_PID")
    PORT=
    for _ in $(seq 1 300); do
        PORT=$(grep -m1 '"event":"listening"' "$log" 2>/dev/null | grep -o '"port":[0-9]*' |
               head -1 | cut -d: -f2)
        [ -n "$PORT" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' \
            "http://127.0.0.1:$PORT/readyz")" = 200 ] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || return 1
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

# is_error STATUS CODE: the last answer ($tmp/body) is that JSON error.
is_error() {
    python3 - "$tmp/body" "$1" "$2" <<'PY'
import json, sys
try:
    e = json.load(open(sys.argv[1]))["error"]
    good = e["status"] == int(sys.argv[2]) and e["code"] == sys.argv[3] and e["message"]
except Exception as exc:
    print("# not a JSON error: %s" % exc)
    sys.exit(1)
if not good:
    print("# got %s" % json.dumps(e)[:300])
sys.exit(0 if good else 1)
PY
}
