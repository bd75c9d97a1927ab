#!/usr/bin/env bash
# Installs the Debian packages ecgd builds, tests and benchmarks with, and the npm test tools of
# package.json (npm ci, into node_modules/, again only when package-lock.json changed).
# Idempotent: does nothing when everything is present. Needs root (or sudo) only when a Debian
# package is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# npm packages: uPlot (embedded in the binary with the dashboard page; the Makefile runs the same
# npm ci when the stamp is older than the lock file) and the test tools (the OpenAPI linter and
# validator of tests/e2e/test_openapi.sh, puppeteer-core for tests/e2e/test_browser.sh).
npm_tools() {
    command -v npm >/dev/null || { echo "install-deps: npm not found: the OpenAPI test needs it" >&2; return 0; }
    local stamp=node_modules/.ecgd-lock.sha256 want
    want=$(sha256sum package-lock.json | cut -d' ' -f1)
    [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && return 0
    npm ci --no-audit --no-fund --loglevel=error >&2
    echo "$want" >"$stamp"
}
npm_tools

# --fuzz: also what `make fuzz` needs (clang with libFuzzer and the sanitizers, the OpenMP
# runtime the engine's objects call, llvm-symbolizer for readable reports).
fuzz_pkgs=()
[ "${1:-}" = "--fuzz" ] && fuzz_pkgs=(clang libomp-dev llvm)

pkgs=(build-essential pkg-config libmicrohttpd-dev libcjson-dev libfftw3-dev libedf-dev
      libcmocka-dev curl python3 python3-numpy python3-yaml wrk
      zlib1g-dev libzstd-dev libssl-dev zstd chromium "${fuzz_pkgs[@]}")
# chromium: the dashboard's browser tests (tests/e2e/test_browser.sh, headless); zstd: the
# command that compresses test_uploads.sh's zstd body.
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
