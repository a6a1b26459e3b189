# Planner: `make bench-plan` measures planning time, peak memory and the schedule simulations the
# search ran: the issue-34 goals are every cluster up to 64 nodes and 16,384 GPUs in < 1 s on the
# 2-core machine. Cases: synthetic clusters of N workers x 8 GPUs (four fabrics; 2,048 workers =
# 16,384 GPUs), the three-fabric fixtures (tests/fixtures/planner: 8 nodes, pipeline 8; 16 nodes,
# pipeline auto, 96 layers), and a sweep of random clusters of up to 64 nodes (its slowest plan).
# Results go to docs/benchmarks.md by hand, with the date and load.
BENCH_PLAN := $(BUILD)/bench/bench_plan
BENCH_PLAN_SIZES ?= 64 1024 2048 16384
BENCH_PLAN_FIXTURES ?= three-fabrics-8 three-fabrics-16
BENCH_PLAN_SWEEP ?= 100

$(BENCH_PLAN): $(call obj,tests/bench/bench_plan.c tests/unit/planner_testutil.c) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -Wl,--start-group $(ALL_LIBS) -Wl,--end-group $(LDLIBS)

.PHONY: bench-plan
bench-plan: $(BENCH_PLAN)
	@echo "bench-plan: $$(date -u '+%F %H:%M UTC'), load: $$(uptime | sed 's/.*load average: //'), one core (taskset -c 0)"
	@for n in $(BENCH_PLAN_SIZES); do taskset -c 0 $(BENCH_PLAN) $$n || exit 1; done
	@for f in $(BENCH_PLAN_FIXTURES); do taskset -c 0 $(BENCH_PLAN) --cluster tests/fixtures/planner/$$f.yaml \
	    tests/fixtures/planner/$$f-job.yaml || exit 1; done
	@taskset -c 0 $(BENCH_PLAN) --cluster examples/clusters/paper-ib-roce.yaml examples/clusters/gpt-7.5b-job.yaml
	@taskset -c 0 $(BENCH_PLAN) --sweep 64 $(BENCH_PLAN_SWEEP)
