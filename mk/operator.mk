# Operator module: packages its tests need, and `make bench-operator`.
DEB_PKGS += curl jq bc

.PHONY: bench-operator
# 1,000 TrainingJobs x 8 workers against tests/fakeapi: time until all pods exist, reconcile
# latency p50/p99, operator peak RSS. BENCH_OPERATOR_ARGS="100 8" for a smaller run.
bench-operator: build
	tests/bench/operator_bench.sh $(BENCH_OPERATOR_ARGS)
