# ecgd - build, test, run, bench.
#   make                 build build/ecgd (CUDA objects too when nvcc exists; CUDA=0 to skip)
#   make test            unit, end-to-end and (where a GPU exists) GPU tests
#   make run             start the service on the bundled model
#   make bench           stage benchmarks on a 20M-sample recording
#   make soak            the hostile-client suite's long mode (tests/hostile, minutes)
# Switches: CUDA=0|1  SANITIZE=address,undefined  DEBUG=1  WERROR=1
.DEFAULT_GOAL := all
SHELL := /bin/bash

CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
ifeq ($(NVCC),)
CUDA ?= 0
else
CUDA ?= 1
endif

BUILD   := build
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
CFLAGS  ?= -O3 -march=x86-64-v2 -mtune=native
CFLAGS  += -std=c11 -D_GNU_SOURCE -pthread -fopenmp $(WARN) -Iengine -fno-strict-aliasing
LDFLAGS += -fopenmp
LDLIBS  := -lmicrohttpd -lcjson -lfftw3f -lfftw3f_threads -ledf -lz -lzstd -lcrypto -lm -lpthread
ifeq ($(DEBUG),1)
CFLAGS  := $(filter-out -O3,$(CFLAGS)) -O0 -g3
endif
ifneq ($(SANITIZE),)
CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -g
LDFLAGS += -fsanitize=$(SANITIZE)
endif
ifeq ($(WERROR),1)
CFLAGS  += -Werror
endif

ENGINE_SRC  := $(wildcard engine/*.c engine/cpu/*.c models/*.c)
SERVICE_SRC := $(wildcard service/*.c)
CLI_SRC     := $(wildcard cli/*.c)
CU_SRC      := $(wildcard gpu/*.cu)

ifeq ($(CUDA),1)
CFLAGS   += -DECG_HAVE_CUDA=1 -I$(CUDA_HOME)/include
NVFLAGS  := -O3 -std=c++17 -Iengine -Xcompiler -fPIC,-Wall,-fopenmp \
            -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
            -gencode arch=compute_90,code=compute_90
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcufft -lcudnn -lcudart -lstdc++
CU_OBJ   := $(CU_SRC:%.cu=$(BUILD)/%.o)
else
CU_OBJ   :=
endif

LIB_OBJ  := $(ENGINE_SRC:%.c=$(BUILD)/%.o) $(SERVICE_SRC:%.c=$(BUILD)/%.o) $(CU_OBJ)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libecg.a

TEST_SRC := $(wildcard tests/unit/test_*.c tests/gpu/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

all: $(BUILD)/ecgd

# Layering: the engine, gpu/ and the service see engine/ only; the trainer (models/), the CLI,
# tests and benchmarks sit above and see models/ too.
ABOVE_ENGINE := -Imodels
$(BUILD)/models/%.o $(BUILD)/cli/%.o: CFLAGS += $(ABOVE_ENGINE)

$(BUILD)/%.o: %.c $(wildcard engine/*.h engine/cpu/*.h models/*.h service/*.h gpu/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The baseline build of the SIMD VAE passes 32-byte generic vectors between its static inline
# functions; GCC's ABI note about such arguments does not concern it.
$(BUILD)/engine/cpu/vae_f32_generic.o: CFLAGS += -Wno-psabi

# service/openapi.c embeds the parts of the OpenAPI document, service/openapi/*.json (.incbin),
# and the server merges them at start: rebuild it when a part changes.
$(BUILD)/service/openapi.o: $(wildcard service/openapi/*.json)

# service/web.c embeds the dashboard (web/) and uPlot from node_modules, installed by `npm ci`
# from package-lock.json; the stamp (shared with scripts/install-deps.sh, which writes the lock
# file's hash) reruns it when the lock file is newer.
WEB_FILES := web/index.html web/app.js web/app.css tests/data/mitdb_100s.csv
$(BUILD)/service/web.o: $(WEB_FILES) node_modules/.ecgd-lock.sha256
node_modules/.ecgd-lock.sha256: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	sha256sum package-lock.json | cut -d' ' -f1 >$@

$(BUILD)/%.o: %.cu $(wildcard engine/*.h engine/cpu/*.h gpu/*.h gpu/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/ecgd: $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(LIB) $(LDLIBS)

# A test program is tests/DIR/test_NAME.c, and for the larger GPU ones the files the rules below
# add (tests/gpu/parity_*.c, upload_*.c: parity.h and upload.h say what each holds).
$(BUILD)/tests/%: tests/%.c $(LIB) $(wildcard tests/*.h tests/gpu/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ABOVE_ENGINE) -Itests -DECG_TEST_DATA='"tests/data"' -DECG_SHARED_DATA='"../shared/data"' \
	    $(LDFLAGS) -o $@ $(filter %.c,$^) $(LIB) $(LDLIBS) -lcmocka
$(BUILD)/tests/gpu/test_gpu_parity: $(wildcard tests/gpu/parity_*.c)
$(BUILD)/tests/gpu/test_gpu_upload: $(wildcard tests/gpu/upload_*.c)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ABOVE_ENGINE) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

tests: $(TEST_BIN) $(BUILD)/ecgd

# The CUDA objects alone (the Dockerfile builds them in a layer of their own).
cuda-objects: $(CU_OBJ)

# Installs the Debian packages the build needs (no-op when present).
deps:
	@scripts/install-deps.sh

# Runs every test binary and end-to-end script; prints one summary line.
test: deps
	@$(MAKE) --no-print-directory tests
	@tests/run.sh $(BUILD)

# Starts the service on 0.0.0.0:8080 with the bundled model (CPU where there is no GPU).
run: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/ecgd serve

bench: deps
	@$(MAKE) --no-print-directory $(BENCH_BIN) $(BUILD)/ecgd
	@bench/run.sh $(BUILD)

# The hostile-client suite's long mode: more disconnects, shutdown drains of 0, 1 and 25 s
# looped 20 times, and the figures bench/RESULTS.md quotes (bench/soak.sh).
soak: deps
	@$(MAKE) --no-print-directory $(BUILD)/ecgd
	@ulimit -n 12000 2>/dev/null; python3 tests/hostile/hostile.py --ecgd $(BUILD)/ecgd --soak

# The fuzzing campaign: every libFuzzer harness (tests/fuzz) for FUZZ_SECONDS (60) each with
# FUZZ_JOBS processes (all CPUs), a table of executions per harness; fails on any crash.
fuzz: fuzz-build
	@$(MAKE) --no-print-directory -C tests/fuzz campaign

# The harnesses alone (clang with ASan, UBSan and libFuzzer; installed by install-deps.sh --fuzz).
fuzz-build:
	@scripts/install-deps.sh --fuzz
	@$(MAKE) --no-print-directory -C tests/fuzz

clean:
	rm -rf $(BUILD)

.PHONY: all deps test tests run bench clean fuzz fuzz-build soak cuda-objects
