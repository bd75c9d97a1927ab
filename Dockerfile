# syntax=docker/dockerfile:1
#
# ecgd container: built in a CUDA devel image, run in the CUDA runtime image with cuDNN as a
# non-root user. `docker build .` from the repository root; run with the NVIDIA container toolkit:
#   docker run --gpus 1 -p 8080:8080 ecgd
# Without a GPU the service falls back to the CPU backend (ECGD_BACKEND=auto).
# docs/SERVICE.md documents every ECGD_* variable.
#
# CUDA 13.0: what the project is built and measured with (bench/RESULTS-gpu.md: CUDA 13.0,
# cuDNN 9; tests/e2e/test_deploy.sh checks the two agree).
#
# Base images are named by tag here. Pin them by digest for a reproducible build: resolve the
# digests where a registry is reachable, e.g.
#   docker buildx imagetools inspect nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04
# and build with
#   docker build --build-arg BUILD_IMAGE=nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04@sha256:<d1> \
#                --build-arg RUN_IMAGE=nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04@sha256:<d2> .
# (The digests are not written here: they could not be looked up from the machine this file was
# written on, which has no registry access, and a made-up digest would be worse than none.)
#
# Layers, from the least to the most often changed: system packages; the CUDA sources and the
# headers they include, compiled to objects (minutes of nvcc); then the rest of the tree, so that
# a change to docs, tests or C files outside gpu/ reuses the CUDA objects.

ARG BUILD_IMAGE=nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04
ARG RUN_IMAGE=nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04

# ---------------------------------------------------------------------------- build
FROM ${BUILD_IMAGE} AS build
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        build-essential make libmicrohttpd-dev libcjson-dev libfftw3-dev libedf-dev \
        zlib1g-dev libzstd-dev libssl-dev nodejs npm \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# CUDA objects first: they depend on gpu/ and the engine's and models' headers only (Makefile).
COPY Makefile ./
COPY engine/*.h engine/
COPY engine/cpu/*.h engine/cpu/
COPY gpu/ gpu/
RUN make -j"$(nproc)" CUDA=1 cuda-objects
# Everything else (.dockerignore keeps build outputs, node_modules and data out).
COPY . .
# CUDA=1: kernels for sm_80 and sm_90 plus PTX. make runs `npm ci` (package-lock.json) for uPlot,
# which the binary embeds with the dashboard page. The libraries ecgd links besides glibc and CUDA
# are copied next to it, so the runtime image needs no -dev packages and no package names that
# change between releases.
RUN make -j"$(nproc)" CUDA=1 build/ecgd \
 && mkdir -p /out/lib \
 && cp build/ecgd /out/ecgd \
 && ldd build/ecgd | awk '/=> \// {print $1, $3}' | while read -r name path; do \
        case "$name" in \
            linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*) continue ;; \
            libgcc_s.so*|libstdc++.so*) continue ;; \
            libcuda.so*|libcudart*|libcufft*|libcudnn*|libcublas*|libnvrtc*|libnvJitLink*) continue ;; \
        esac; \
        cp -L "$path" "/out/lib/$name"; \
    done

# ---------------------------------------------------------------------------- run
FROM ${RUN_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
# curl for the HEALTHCHECK; libstdc++ is in the base image.
RUN apt-get update \
 && apt-get install -y --no-install-recommends curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 ecgd \
 && useradd --system --uid 10001 --gid ecgd --home-dir /opt/ecgd --shell /usr/sbin/nologin ecgd
COPY --from=build /out/lib/ /usr/local/lib/ecgd/
COPY --from=build /out/ecgd /usr/local/bin/ecgd
RUN echo /usr/local/lib/ecgd > /etc/ld.so.conf.d/ecgd.conf && ldconfig \
 && /usr/local/bin/ecgd serve --print-config >/dev/null
COPY models/default.ecgm /opt/ecgd/models/default.ecgm

WORKDIR /opt/ecgd
ENV ECGD_BIND=0.0.0.0 \
    ECGD_PORT=8080 \
    ECGD_BACKEND=auto \
    ECGD_MODEL_DIR=/opt/ecgd/models \
    ECGD_MODEL=default \
    ECGD_DRAIN_S=25
USER 10001:10001
EXPOSE 8080
STOPSIGNAL SIGTERM
# Liveness only: readiness (/readyz) is for load balancers and orchestrators.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD curl -fsS "http://127.0.0.1:${ECGD_PORT}/healthz" >/dev/null || exit 1
ENTRYPOINT ["/usr/local/bin/ecgd"]
CMD ["serve"]
