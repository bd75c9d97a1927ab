#!/usr/bin/env bash
# test_browser.sh - the dashboard in real headless Chromium: starts `ecgd serve` on 127.0.0.1 and
# runs tests/browser/dashboard.mjs (puppeteer-core driving Debian's chromium) against it with
# MIT-BIH record 101 (30 min) uploaded through the page's file input. Screenshots go to
# $ECGD_SCREENSHOT_DIR (default a temporary directory; docs/ keeps the ones looked at).
# Skips visibly where Chromium, node or the npm packages are missing.
# Usage: ECGD=build/ecgd tests/e2e/test_browser.sh   (run from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"

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
if ! start_server "$tmp/log" --workers 2; then
    echo "not ok 1 - browser tests: the server did not start"
    sed 's/^/# /' "$tmp/log"
    exit 1
fi
port=$PORT
node tests/browser/dashboard.mjs "http://127.0.0.1:$port" "$tmp/mitdb-101.csv" 360 "$shots"
