#!/usr/bin/env bash
# Installs the Debian packages ecgd builds, tests and benchmarks with. Idempotent: does nothing
# when everything is present. Needs root (or sudo) only when something is missing.
set -euo pipefail
pkgs=(build-essential pkg-config libmicrohttpd-dev libcjson-dev libfftw3-dev libedf-dev
      libcmocka-dev libcurl4-openssl-dev curl python3 python3-numpy python3-yaml wrk)
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
