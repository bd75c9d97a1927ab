#!/usr/bin/env bash
# test_browser.sh - the dashboard in real headless Chromium: starts `ecgd serve` on 127.0.0.1 and
# runs tests/browser/dashboard.mjs (puppeteer-core driving Debian's chromium) against it with
# MIT-BIH record 101 (30 min) uploaded through the page's file input. Screenshots go to
# $ECGD_SCREENSHOT_DIR (default a temporary directory; docs/ keeps the ones looked at).
# Skips visibly where Chromium, node or the npm packages are missing.
# Usage: ECGD=build/ecgd tests/e2e/test_browser.sh   (run from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
DATA=${ECG_SHARED_DATA:-../shared/data}
BACKEND=${ECGD_TEST_BACKEND:-cpu}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

if [ ! -x "$CHROMIUM" ] || ! command -v node >/dev/null || [ ! -d node_modules/puppeteer-core ]; then
    echo "skip 1 - browser tests: chromium ($CHROMIUM), node or node_modules/puppeteer-core missing (scripts/install-deps.sh, npm ci)"
    exit 0
fi
if [ ! -f "$DATA/mitdb/101.dat" ]; then
    echo "skip 1 - browser tests: shared data not found at $DATA"
    exit 0
fi
shots=${ECGD_SCREENSHOT_DIR:-$tmp/shots}
mkdir -p "$shots"
python3 tests/e2e/analyses_helpers.py mitcsv "$DATA" 101 "$tmp/mitdb-101.csv" || exit 1
"$ECGD" serve --bind 127.0.0.1 --port 0 --backend "$BACKEND" --workers 2 >"$tmp/log" 2>&1 &
pid=$!
port=
for _ in $(seq 1 300); do
    port=$(grep -m1 '"event":"ready"' "$tmp/log" >/dev/null && grep -m1 '"event":"listening"' "$tmp/log" | grep -o '"port":[0-9]*' | head -1 | cut -d: -f2)
    [ -n "$port" ] && break
    sleep 0.1
done
if [ -z "$port" ]; then
    echo "not ok 1 - browser tests: the server did not start"
    cat "$tmp/log"
    exit 1
fi
node tests/browser/dashboard.mjs "http://127.0.0.1:$port" "$tmp/mitdb-101.csv" 360 "$shots"
