# CPU training engine (noderuntime/gpt.c, optimizer.c, dataloader.c, checkpoint.c, cmd_train.c).

# The benchmark binary: one whole-model stage, forward + backward + AdamW.
$(BUILD)/bench/bench_gpt: $(call obj,tests/bench/bench_gpt.c) $(LIB_NODE) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

BENCH_THREADS ?= 2
BENCH_STEPS ?= 5
.PHONY: bench-cpu
bench-cpu: $(BUILD)/bench/bench_gpt
	@echo "== bench-cpu ($(BENCH_THREADS) threads, $$(date -u +%F), load: $$(uptime | sed 's/.*load average: //'))"
	@OMP_NUM_THREADS=$(BENCH_THREADS) $(BUILD)/bench/bench_gpt 4 256 4 50257 4 64 $(BENCH_STEPS)
	@OMP_NUM_THREADS=$(BENCH_THREADS) $(BUILD)/bench/bench_gpt 12 768 12 50257 4 64 $(BENCH_STEPS)

# The engine's element-wise loops (exp, tanh, selects) vectorise only when the compiler may
# ignore floating-point traps and errno; no reassociation, so results stay IEEE-exact per op.
ENGINE_OBJS := $(call obj,noderuntime/gpt.c noderuntime/optimizer.c)
$(ENGINE_OBJS): CFLAGS += -fno-trapping-math -fno-math-errno
