#!/usr/bin/env bash
# bundle.sh - builds here and packs what the GPU machine needs into .gpu-run/ (git-ignored):
# ecgd, the GPU test and benchmark binaries, the non-system libraries they link
# (../shared/tools/bundle-libs) and a copy of the shared MIT-BIH records and NSTDB noises
# (data.tar.xz, made once).
# Then, on the device: tar xJf .gpu-run/data.tar.xz -C .gpu-run &&
#   LD_LIBRARY_PATH=.gpu-run/lib bash tests/gpu/run-device.sh .gpu-run
# The fuzzing campaign (about 8 minutes on 16 CPUs; no data needed):
#   LD_LIBRARY_PATH=.gpu-run/lib bash tests/gpu/run-device.sh .gpu-run fuzz
# `bundle.sh --fuzz` packs only the libFuzzer harnesses and their libraries, into .gpu-fuzz/
# (about 13 MB, to carry alone), for
#   LD_LIBRARY_PATH=.gpu-fuzz/lib bash tests/gpu/run-device.sh .gpu-fuzz fuzz
set -euo pipefail
dir=.gpu-run
bundle=../shared/tools/bundle-libs

# The libFuzzer harnesses for the fuzzing campaign (run-device.sh part "fuzz"), built here with
# clang (the device has no compiler): their libraries join DIR/lib, the binaries travel
# compressed in DIR/fuzz.tar.xz (about 3 MB instead of 30).
bundle_fuzz() {
    local into=$1 stage
    make -j2 fuzz-build
    stage=$(mktemp -d)
    for bin in build/fuzz/fuzz_*; do
        "$bundle" "$bin" "$stage/fuzz" >/dev/null
    done
    mkdir -p "$into/lib"
    cp "$stage"/fuzz/lib/* "$into/lib/"
    tar cJf "$into/fuzz.tar.xz" -C "$stage" $(cd "$stage" && ls fuzz/fuzz_*)
    rm -rf "$stage" "$into/fuzz"
}

if [ "${1:-}" = "--fuzz" ]; then
    rm -rf .gpu-fuzz
    bundle_fuzz .gpu-fuzz
    git rev-parse --short HEAD >.gpu-fuzz/COMMIT
    du -sh .gpu-fuzz
    exit 0
fi
make -j2 all build/tests/gpu/test_gpu_parity build/tests/gpu/test_gpu_host_memory \
    build/tests/gpu/test_gpu_upload build/tests/gpu/test_gpu_leads \
    build/tests/gpu/test_gpu_quality build/tests/gpu/test_gpu_trace build/tests/gpu/test_gpu_batch \
    build/bench/bench_gpu build/bench/bench_batch build/bench/http_sink
mkdir -p "$dir"
for bin in build/ecgd build/tests/gpu/test_gpu_parity build/tests/gpu/test_gpu_host_memory \
           build/tests/gpu/test_gpu_upload build/tests/gpu/test_gpu_leads \
           build/tests/gpu/test_gpu_quality build/tests/gpu/test_gpu_trace build/tests/gpu/test_gpu_batch \
           build/bench/bench_gpu build/bench/bench_batch build/bench/http_sink; do
    "$bundle" "$bin" "$dir" >/dev/null
done
bundle_fuzz "$dir"
# wrk drives bench_http.sh's 64-client runs on the device
if command -v wrk >/dev/null; then
    "$bundle" "$(command -v wrk)" "$dir" >/dev/null
fi
# zstd compresses test_uploads.sh's zstd body (run-device.sh 'uploads' puts DIR first on PATH)
if command -v zstd >/dev/null; then
    "$bundle" "$(command -v zstd)" "$dir" >/dev/null
fi
if [ ! -f "$dir/data.tar.xz" ] || ! tar tJf "$dir/data.tar.xz" | grep -q "^data/noise/"; then
    tar cJf "$dir/data.tar.xz" -C ../shared data/mitdb data/ucr data/noise
fi
git rev-parse --short HEAD >"$dir/COMMIT"
du -sh "$dir"
