# Holmes build. `make` builds bin/holmes-operator and bin/holmes-node.
# `make test` runs every test twice: plain, then under ASan+UBSan.
# Modules add their own targets, packages and libraries in mk/*.mk.

CC       ?= gcc
VARIANT  ?= release
BUILD    := build/$(VARIANT)
ifeq ($(VARIANT),release)
BINDIR   := bin
else
BINDIR   := $(BUILD)/bin
endif

PKGS     := libcurl libcjson yaml-0.1 openblas zlib libibverbs libwebsockets openssl libpcre2-8
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter
OPT_release := -O2 -g
OPT_asan    := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
OPT_debug   := -O0 -g
# clang under the sanitizers cannot vectorise the engine's `omp simd` loops and says so for each
# (-Wpass-failed); the loops are right, only slower under ASan. gcc says nothing there.
ifneq (,$(findstring clang,$(shell $(CC) --version 2>/dev/null | head -n 1)))
OPT_asan    += -Wno-pass-failed
endif
CFLAGS   ?=
ifeq ($(CI),true)
EXTRA_CFLAGS += -Werror
endif
# Sources: common/, and each binary's folder with one level of subsystem folders under it
# (operator/kube, operator/planner, ...; noderuntime/engine, noderuntime/comm, ...). Deeper folders
# (noderuntime/engine/cuda, noderuntime/comm/nccl) need CUDA and are built by mk/cuda.mk, mk/comm.mk.
SRC_DIRS := common operator $(wildcard operator/*/) noderuntime $(wildcard noderuntime/*/)
CFLAGS   += -std=gnu11 $(OPT_$(VARIANT)) $(WARN) -fopenmp -D_GNU_SOURCE \
            $(addprefix -I,$(patsubst %/,%,$(SRC_DIRS))) $(PKG_CFLAGS) $(EXTRA_CFLAGS)
# The linker: gold where $(CC) can run it (binutils ships it). BFD's ld spends most of its time on
# the objects' debug information: the test binaries of one variant linked in 20 s on 2 cores with
# it, 6 s with gold. LD_FLAGS_FAST= keeps the compiler's default.
ifeq ($(origin LD_FLAGS_FAST),undefined)
LD_FLAGS_FAST := $(shell $(CC) -fuse-ld=gold -Wl,--version 2>/dev/null | grep -q 'GNU gold' && echo -fuse-ld=gold)
endif
LDFLAGS  += $(filter -fsanitize=%,$(OPT_$(VARIANT))) -fopenmp $(LD_FLAGS_FAST)
LDLIBS   += $(PKG_LIBS) -lm -lpthread

# Debian packages the build, the tests and `make run` need (mk/*.mk may add).
DEB_PKGS := build-essential pkg-config libcurl4-openssl-dev libcjson-dev libwebsockets-dev \
            libyaml-dev libibverbs-dev ibverbs-providers rdma-core libopenblas-dev zlib1g-dev \
            libssl-dev libomp-dev iproute2 procps python3 \
            libpcre2-dev python3-regex

COMMON_SRC := $(wildcard common/*.c)
OP_SRC     := $(filter-out operator/main.c,$(wildcard operator/*.c operator/*/*.c))
NODE_SRC   := $(filter-out noderuntime/main.c,$(wildcard noderuntime/*.c noderuntime/*/*.c))
TEST_SRC   := $(wildcard tests/unit/test_*.c)
TEST_SUPPORT_SRC := $(filter-out $(TEST_SRC),$(wildcard tests/unit/*.c))

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))
LIB_COMMON := $(BUILD)/libholmes_common.a
LIB_OP     := $(BUILD)/libholmes_operator.a
LIB_NODE   := $(BUILD)/libholmes_node.a
ALL_LIBS   := $(LIB_OP) $(LIB_NODE) $(LIB_COMMON)
TEST_BINS  := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(TEST_SRC))

.PHONY: all build deps run test test-build test-fresh clean cuda help
all: build
build: $(BINDIR)/holmes-operator $(BINDIR)/holmes-node

# Keep test objects (make would delete them as intermediates). Named, not a bare .SECONDARY:,
# which would make every target intermediate and let make postpone .deps-ok past the build.
.SECONDARY: $(call obj,$(TEST_SRC) $(TEST_SUPPORT_SRC))

-include mk/*.mk

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB_COMMON): $(call obj,$(COMMON_SRC))
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^
$(LIB_OP): $(call obj,$(OP_SRC))
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^
$(LIB_NODE): $(call obj,$(NODE_SRC))
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^

$(BINDIR)/holmes-operator: $(call obj,operator/main.c) $(LIB_OP) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BINDIR)/holmes-node: $(call obj,noderuntime/main.c) $(LIB_NODE) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Every unit test links every library, so tests may cross modules.
$(BUILD)/tests/%: $(call obj,tests/unit/%.c) $(call obj,$(TEST_SUPPORT_SRC)) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -Wl,--start-group $(ALL_LIBS) -Wl,--end-group $(LDLIBS)

test-build: build $(TEST_BINS)

# Installs what is missing, idempotently (needs root or sudo).
# mk/*.mk may add install steps beyond apt (e.g. tools from npm) to DEPS_HOOKS.
deps: $(DEPS_HOOKS)
	@scripts/deps.sh $(sort $(DEB_PKGS))

.deps-ok: scripts/deps.sh $(wildcard mk/*.mk) | $(DEPS_HOOKS)
	@scripts/deps.sh $(sort $(DEB_PKGS)) && touch $@

# The two builds use every core (-j$(nproc)) unless the caller gave its own -j: a plain
# `make test` (CI's) would otherwise compile one file at a time.
TEST_BUILD_JOBS = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc 2>/dev/null || echo 1))
test: .deps-ok
	@$(MAKE) --no-print-directory $(TEST_BUILD_JOBS) VARIANT=release test-build
	@$(MAKE) --no-print-directory $(TEST_BUILD_JOBS) VARIANT=asan test-build
	@tests/run.sh build/release bin build/asan build/asan/bin

# The README's commands in a fresh Debian 12 chroot (debootstrap), on a clean clone of HEAD:
# tests/fresh/fresh_debian.sh. Root; about 7 minutes on 2 cores. Not part of `make test`.
test-fresh:
	@tests/fresh/fresh_debian.sh

clean:
	rm -rf build bin .deps-ok

help:
	@echo "make            build bin/holmes-operator and bin/holmes-node"
	@echo "make deps       install the Debian packages build, tests and run need"
	@echo "make run        run examples/local-tiny.yaml on this machine"
	@echo "make test       unit + integration tests, plain and under ASan/UBSan"
	@echo "make test-fresh make run + make test, as README says, in a fresh Debian 12 chroot"
	@echo "make cuda       build the CUDA engine (needs nvcc)"
	@echo "make bench-*    benchmarks; results go to docs/benchmarks.md"

-include $(shell find build -name '*.d' -type f -not -path 'build/gpu-carry/*' 2>/dev/null)

# The README's main command: the tiny example job on this machine (see mk/local.mk for details).
RUN_JOB ?= examples/local-tiny.yaml
# Dependencies first, then a fresh make (so pkg-config sees what was just installed), then the job.
run: .deps-ok
	@$(MAKE) --no-print-directory build
	$(BINDIR)/holmes-operator local $(RUN_JOB)
