# Planner: `make bench-plan` measures planning time and peak memory at 64, 1,024 and 16,384
# workers (results go to docs/benchmarks.md by hand, with the date and load).
BENCH_PLAN := $(BUILD)/bench/bench_plan
BENCH_PLAN_SIZES ?= 64 1024 16384

$(BENCH_PLAN): $(call obj,tests/bench/bench_plan.c) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -Wl,--start-group $(ALL_LIBS) -Wl,--end-group $(LDLIBS)

.PHONY: bench-plan
bench-plan: $(BENCH_PLAN)
	@echo "bench-plan: $$(date -u '+%F %H:%M UTC'), load: $$(uptime | sed 's/.*load average: //'), one core (taskset -c 0)"
	@for n in $(BENCH_PLAN_SIZES); do taskset -c 0 $(BENCH_PLAN) $$n || exit 1; done
