# NIC discovery (noderuntime/nic/): benchmark.
# `make bench-nic`: discovery time on a generated tree with 8 ConnectX-7 NDR HCAs and 8 GPUs
# under PCIe switches (goal: under 50 ms). Results go to docs/benchmarks.md by hand.

NIC_BENCH_DIR := $(BUILD)/bench-nic

$(BUILD)/bench/bench_nic: $(call obj,tests/bench/bench_nic.c) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -Wl,--start-group $(ALL_LIBS) -Wl,--end-group $(LDLIBS)

.PHONY: bench-nic
bench-nic: $(BUILD)/bench/bench_nic
	@tests/fixtures/sysfs/generate.sh $(NIC_BENCH_DIR) bench-8hca
	@$(BUILD)/bench/bench_nic $(NIC_BENCH_DIR)/bench-8hca/sys 50
