-- http_bench.lua - wrk script for bench/bench_http.sh.
-- Usage: BENCH_NAME=NAME wrk ... -s bench/http_bench.lua URL -- NAME [METHOD BODY_FILE CONTENT_TYPE]
-- Sends the same request on every connection (a POST body read once from BODY_FILE) and prints
-- one machine-readable line at the end:
--   RESULT name=NAME rps=R p50_ms=X p99_ms=Y requests=N non2xx=M socket_errors=E
-- done() runs in wrk's main Lua state, where init() never ran: the name comes from the
-- environment there.
local name = os.getenv("BENCH_NAME") or "request"
function init(args)
    name = args[1] or name
    if args[2] then
        wrk.method = args[2]
    end
    if args[3] then
        local f = assert(io.open(args[3], "rb"))
        wrk.body = f:read("*a")
        f:close()
    end
    if args[4] then
        wrk.headers["Content-Type"] = args[4]
    end
end

function done(summary, latency, requests)
    local errors = summary.errors
    local socket_errors = errors.connect + errors.read + errors.write + errors.timeout
    io.write(string.format(
        "RESULT name=%s rps=%.1f p50_ms=%.3f p99_ms=%.3f requests=%d non2xx=%d socket_errors=%d\n",
        name, summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
        latency:percentile(99) / 1000, summary.requests, errors.status, socket_errors))
end
