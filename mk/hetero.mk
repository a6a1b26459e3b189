# make bench-hetero: the heterogeneous-fabric benchmark (tests/bench/hetero/, docs/hetero.md).
# Needs root (network namespaces, tc). Writes docs/hetero-table.md, docs/hetero-results.tsv,
# docs/hetero-placements.txt, docs/hetero-calibration.json, docs/hetero-links-refs.json and
# docs/hetero.png. REPS, CAL_REPS, STEPS, WARMUP, LAYERS, IB_MBIT, ROCE_MBIT, CROSS_MBIT,
# PIPELINE_DTYPE, PARAM_GATHER_DTYPE, FABRIC_MTU, ONLY, OUT, KEEP, PLAN_LINKS and FIT_REFS
# override the defaults (see tests/bench/hetero/run.sh).
DEB_PKGS += gnuplot-nox

.PHONY: bench-hetero
bench-hetero: $(BINDIR)/holmes-operator $(BINDIR)/holmes-node
	@echo "== bench-hetero ($$(date -u +%F), load: $$(uptime | sed 's/.*load average: //'))"
	@tests/bench/hetero/run.sh
