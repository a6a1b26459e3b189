# Coordinator, local mode and `make run` (operator/coordinator/, operator/cmd/cmd_local.c,
# noderuntime/worker/: coord_client.c, worker_coord.c).

# make bench-coordinator: BENCH_WORKERS simulated workers (one process, one connection each)
# against a coordinator in a child process: time until every plan is delivered, peak RSS.
BENCH_WORKERS ?= 4096
$(BUILD)/bench/bench_coordinator: $(call obj,tests/bench/bench_coordinator.c) $(LIB_OP) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

.PHONY: bench-coordinator
bench-coordinator: $(BUILD)/bench/bench_coordinator
	@echo "== bench-coordinator ($(BENCH_WORKERS) workers, $$(date -u +%F), load: $$(uptime | sed 's/.*load average: //'))"
	@ulimit -n $$(( $(BENCH_WORKERS) * 2 + 256 )) 2>/dev/null || true; \
	 $(BUILD)/bench/bench_coordinator $(BENCH_WORKERS)

# make chaos: a local job of a few minutes under repeated faults (SIGKILL, SIGTERM, SIGSTOP past
# the gang timeout, a dropped link); root. STEPS, EVERY, GAP, SEED, OUT: see tests/chaos/chaos.sh.
.PHONY: chaos
chaos: $(BINDIR)/holmes-operator $(BINDIR)/holmes-node
	@tests/chaos/chaos.sh

# make bench-terapipe: TeraPipe token slicing vs the unsliced pipeline (tests/bench/terapipe/run.sh;
# results in docs/benchmarks.md). REPS, STEPS, SEQ, LAYERS, HIDDEN as the script says.
.PHONY: bench-terapipe
bench-terapipe: $(BINDIR)/holmes-operator $(BINDIR)/holmes-node
	@tests/bench/terapipe/run.sh
