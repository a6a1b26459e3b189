#!/usr/bin/env bash
# The NCCL backend compiles and links against /usr/local/cuda when NCCL is installed; on a machine
# with a GPU its test runs every collective against a reference.
source "$(dirname "$0")/lib.bash"
# It builds into the repository (make comm-nccl): once, in the pass that runs cuda_build.sh too
# (tests/run.sh runs the variants side by side, and two builds of one target must not race).
once_per_run comm_nccl
NCCL_HOME=${NCCL_HOME:-/usr/local/cuda}
if [ ! -f "$NCCL_HOME/include/nccl.h" ]; then
    echo "no $NCCL_HOME/include/nccl.h: NCCL backend not built here"
    exit 0
fi
out=$(make -C "$REPO" --no-print-directory comm-nccl NCCL_HOME="$NCCL_HOME" 2>&1)
rc=$?
check "NCCL backend compiles and links (make comm-nccl)" test $rc = 0
[ $rc = 0 ] || { echo "$out" | tail -20; exit 1; }
check "NCCL backend build is warning-free" test -z "$(grep -i warning <<<"$out")"
"$REPO/build/comm-nccl/test_comm_nccl" --compile-only
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    timeout 300 "$REPO/build/comm-nccl/test_comm_nccl"
fi
