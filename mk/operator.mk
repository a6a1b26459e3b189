# Operator module: packages its tests need, and `make bench-operator`.
DEB_PKGS += curl jq bc
# tests/integration/job_page.sh loads the job page in headless Chromium (it says SKIP without).
DEB_PKGS += chromium

.PHONY: bench-operator
# 1,000 TrainingJobs x 8 workers against tests/fakeapi: time until all pods exist, reconcile
# latency p50/p99, operator peak RSS. BENCH_OPERATOR_ARGS="100 8" for a smaller run.
bench-operator: build
	tests/bench/operator_bench.sh $(BENCH_OPERATOR_ARGS)

# The job page (operator/controller/job_page.html) inside the binary: each line a string
# literal, included by operator/controller/job_page.c. No file is read at run time.
$(BUILD)/gen/job_page_html.inc: operator/controller/job_page.html mk/operator.mk
	@mkdir -p $(dir $@)
	@sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< >$@.tmp && mv $@.tmp $@
$(BUILD)/operator/controller/job_page.o: $(BUILD)/gen/job_page_html.inc
$(BUILD)/operator/controller/job_page.o: CFLAGS += -I$(BUILD)/gen
