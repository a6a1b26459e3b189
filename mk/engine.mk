# CPU training engine (noderuntime/engine/: gpt.c, gpt_layers.c, optimizer.c; train/: dataloader.c, checkpoint.c;
# cmd/cmd_train.c).

# The engine's element-wise loops (exp, tanh, selects) vectorise only when the compiler may
# ignore floating-point traps and errno; no reassociation, so results stay IEEE-exact per op.
ENGINE_OBJS := $(call obj,noderuntime/engine/gpt.c noderuntime/engine/gpt_pass.c noderuntime/engine/gpt_layers.c \
                         noderuntime/engine/optimizer.c)
$(ENGINE_OBJS): CFLAGS += -fno-trapping-math -fno-math-errno

# The benchmark binary: one whole-model stage, forward + backward + AdamW.
$(BUILD)/bench/bench_gpt: $(call obj,tests/bench/bench_gpt.c) $(LIB_NODE) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# make bench-cpu: ours, then PyTorch on the same model and step when Debian's python3-torch is
# installed (not in DEB_PKGS: no test needs it; apt-get install python3-torch to compare).
BENCH_THREADS ?= 2
BENCH_STEPS ?= 5
# e.g. BENCH_ENV=OMP_WAIT_POLICY=passive on a machine busy with other work (applies to both)
BENCH_ENV ?=
BENCH_SHAPES ?= "4 256 4 50257" "12 768 12 50257"
.PHONY: bench-cpu
bench-cpu: $(BUILD)/bench/bench_gpt
	@echo "== bench-cpu: $(BENCH_THREADS) threads, B=4 T=64, $$(date -u '+%F %H:%M UTC'), load $$(uptime | sed 's/.*load average: //')$(if $(BENCH_ENV), - $(BENCH_ENV))"
	@for s in $(BENCH_SHAPES); do env $(BENCH_ENV) OMP_NUM_THREADS=$(BENCH_THREADS) $(BUILD)/bench/bench_gpt $$s 4 64 $(BENCH_STEPS) || exit 1; done
	@if /usr/bin/python3 -c 'import torch' 2>/dev/null; then \
	    for s in $(BENCH_SHAPES); do \
	        env $(BENCH_ENV) /usr/bin/python3 tests/bench/bench_torch.py $$s 4 64 $(BENCH_STEPS) $(BENCH_THREADS) || exit 1; done; \
	else echo "bench-cpu: /usr/bin/python3 has no torch (apt-get install python3-torch): PyTorch skipped"; fi
