# Fuzzing what arrives over the network (docs/development.md, "Fuzzing"): libFuzzer targets
# built with clang, AddressSanitizer and UBSan, in build/fuzz/. Owner: security.
#
#   make fuzz           every target for FUZZ_SECONDS (default 600) each, corpus in
#                       build/fuzz/corpus/TARGET (seeded from tests/fuzz/seeds/TARGET);
#                       findings (crash-*, timeout-*, leak-*) in build/fuzz/findings/TARGET
#   make fuzz-build     the targets only
#   make fuzz-short     every target for FUZZ_SHORT_SECONDS (default 4) each: make test runs this
#                       (tests/integration/fuzz_short.sh)
#   make fuzz-seeds     writes the protocol seeds again (tests/fuzz/fuzz_seeds.c, real messages
#                       with real plans); the Kubernetes ones: tests/fuzz/capture_kube_seeds.sh
#
# Targets (tests/fuzz/fuzz_*.c): coord_message (the coordinator's parser and what it does with
# a worker's message), worker_message (the worker's parser, its assignment and its start),
# kube_decode (watch streams and API objects as the operator decodes them), http_request (the
# head of a request to the operator's metrics, health and job page server); and the files users
# hand over: manifest (TrainingJob manifests, cluster and calibration files, and the plans made
# of the small ones), train_files (checkpoints as a resume and export read them, llm.c weights,
# token shards and text); and what the kernel hands over: nic_sysfs (NIC discovery on recorded
# sysfs trees the input changes).

FUZZ_CC            ?= clang
FUZZ_BUILD         := build/fuzz
FUZZ_SECONDS       ?= 600
FUZZ_SHORT_SECONDS ?= 4
FUZZ_TARGETS       := coord_message worker_message kube_decode http_request manifest train_files \
                      nic_sysfs
FUZZ_SAN           := -fsanitize=address,undefined -fno-sanitize-recover=undefined
# LLVM's lld for the links where it is installed (3x faster than BFD's ld here; gold warns about
# each of the sanitizer runtime's local symbols); asked of $(FUZZ_CC) once, when first used
ifeq ($(origin FUZZ_LD_FAST),undefined)
FUZZ_LD_FAST        = $(eval FUZZ_LD_FAST := $(shell $(FUZZ_CC) -fuse-ld=lld -Wl,--version 2>/dev/null \
                        | grep -q 'LLD ' && echo -fuse-ld=lld))$(FUZZ_LD_FAST)
endif
FUZZ_CFLAGS        := -std=gnu11 -O1 -g -fno-omit-frame-pointer $(FUZZ_SAN) -fsanitize=fuzzer-no-link -fopenmp \
                      -Wno-pass-failed \
                      $(WARN) -D_GNU_SOURCE $(addprefix -I,$(patsubst %/,%,$(SRC_DIRS))) \
                      $(PKG_CFLAGS) $(EXTRA_CFLAGS)
# What the targets run: common/, the Kubernetes client, the coordinator's TLS material, the
# worker's peers, the planner, the checkpoint and data readers and the CPU engine's stage (the
# llm.c import fills one). Only these are built with the fuzzer's instrumentation.
FUZZ_LIB_SRC       := $(wildcard common/*.c) $(wildcard operator/kube/*.c) \
                      operator/coordinator/coord_tls.c \
                      operator/controller/http_server.c operator/controller/tls_keeper.c \
                      noderuntime/worker/worker_peers.c $(wildcard noderuntime/nic/*.c) \
                      $(wildcard operator/planner/*.c) \
                      $(addprefix noderuntime/train/,checkpoint.c ckpt_layout.c dataloader.c \
                                                     model_export.c model_import.c tokenizer.c bpe.c \
                                                     choice_eval.c) \
                      $(addprefix noderuntime/engine/,gpt.c gpt_layers.c gpt_pass.c bf16.c \
                                                      engine.c engine_cpu.c optimizer.c) \
                      noderuntime/comm/devmem.c
FUZZ_LIB           := $(FUZZ_BUILD)/libholmes_fuzz.a
FUZZ_BINS          := $(addprefix $(FUZZ_BUILD)/fuzz_,$(FUZZ_TARGETS))
# libFuzzer: clang and its runtime (libclang-rt-14-dev holds libclang_rt.fuzzer); clang's OpenMP
# (libomp-14-dev: omp.h and libomp) for the CPU engine's stage that fuzz_train_files fills.
DEB_PKGS           += clang libclang-rt-14-dev libomp-14-dev

.PHONY: fuzz fuzz-build fuzz-short fuzz-seeds

$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  FUZZCC  $<"
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -Itests/fuzz -MMD -MP -c $< -o $@

$(FUZZ_LIB): $(patsubst %.c,$(FUZZ_BUILD)/%.o,$(FUZZ_LIB_SRC))
	@rm -f $@; ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/tests/fuzz/fuzz_%.o $(FUZZ_LIB)
	@echo "  LD      $@"
	@$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -fopenmp $(FUZZ_LD_FAST) -o $@ $< $(FUZZ_LIB) $(PKG_LIBS) -lm -lpthread

fuzz-build: $(FUZZ_BINS)

# run TARGET SECONDS: the corpus seeded, libFuzzer for that long; its last status line kept. The
# findings' folder is absolute: a file target crashes inside its private directory (fuzz_files.h).
define fuzz_run
	@mkdir -p $(FUZZ_BUILD)/corpus/$(1) $(FUZZ_BUILD)/findings/$(1)
	@cp -n tests/fuzz/seeds/$(1)/* $(FUZZ_BUILD)/corpus/$(1)/ 2>/dev/null || true
	@echo "== fuzz_$(1): $(2) s"
	@ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    $(FUZZ_BUILD)/fuzz_$(1) -max_total_time=$(2) -timeout=10 -rss_limit_mb=2048 \
	    -max_len=1100000 -print_final_stats=1 -artifact_prefix=$(CURDIR)/$(FUZZ_BUILD)/findings/$(1)/ \
	    $(FUZZ_BUILD)/corpus/$(1) 2>$(FUZZ_BUILD)/fuzz_$(1).log || \
	    { tail -40 $(FUZZ_BUILD)/fuzz_$(1).log; exit 1; }
	@grep -E '^stat::number_of_executed_units|^stat::average_exec_per_sec|^stat::peak_rss_mb' \
	    $(FUZZ_BUILD)/fuzz_$(1).log | sed 's/^/   /'

endef

fuzz: fuzz-build
	$(foreach t,$(FUZZ_TARGETS),$(call fuzz_run,$(t),$(FUZZ_SECONDS)))

fuzz-short: fuzz-build
	$(foreach t,$(FUZZ_TARGETS),$(call fuzz_run,$(t),$(FUZZ_SHORT_SECONDS)))

$(BUILD)/tests/fuzz_seeds: $(call obj,tests/fuzz/fuzz_seeds.c) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -Wl,--start-group $(ALL_LIBS) -Wl,--end-group $(LDLIBS)

fuzz-seeds: $(BUILD)/tests/fuzz_seeds
	@$(BUILD)/tests/fuzz_seeds tests/fuzz/seeds
