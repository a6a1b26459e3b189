# Communication and the parallel engine (noderuntime/comm/, noderuntime/train/: pipeline, zero, rank table,
# trainer.c, cmd_worker.c; docs/comm.md).
#   make bench-comm   all-reduce and send/recv bus bandwidth vs raw TCP, 2 and 4 ranks on loopback
#   make comm-nccl    the NCCL backend (noderuntime/comm/nccl/comm_nccl.c) and its test; part of `make cuda`

$(BUILD)/bench/bench_comm: $(call obj,tests/bench/bench_comm.c tests/unit/comm_testutil.c) $(LIB_NODE) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

BENCH_COMM_MAX ?= 268435456
.PHONY: bench-comm
bench-comm: $(BUILD)/bench/bench_comm
	@echo "== bench-comm ($$(date -u '+%F %H:%M UTC'), $$(nproc) cores, load: $$(uptime | sed 's/.*load average: //'))"
	@$(BUILD)/bench/bench_comm 2 $(BENCH_COMM_MAX)
	@$(BUILD)/bench/bench_comm 4 $(BENCH_COMM_MAX)

# NCCL backend: built only here (the plain build does not descend into noderuntime/comm/nccl/).
NCCL_HOME ?= /usr/local/cuda
NCCL_LIBDIR ?= $(NCCL_HOME)/lib64
COMM_GB   := build/comm-nccl
COMM_GPU_CFLAGS = -std=gnu11 -O2 -g $(WARN) -D_GNU_SOURCE -Icommon -Inoderuntime/comm \
                   -Inoderuntime/comm/nccl -Inoderuntime/engine -Inoderuntime/engine/cuda \
                   -I$(NCCL_HOME)/include -I$(CUDA_HOME)/include $(EXTRA_CFLAGS)
COMM_GPU_SRC := noderuntime/comm/nccl/comm_nccl.c noderuntime/comm/comm.c noderuntime/comm/comm_tcp.c noderuntime/comm/tcp_socket.c \
                noderuntime/comm/devmem.c noderuntime/engine/bf16.c \
                common/error.c common/clock.c tests/gpu/test_comm_nccl.c
$(COMM_GB)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (NCCL build)"
	@$(CC) $(COMM_GPU_CFLAGS) -MMD -MP -c $< -o $@
$(COMM_GB)/test_comm_nccl: $(patsubst %.c,$(COMM_GB)/%.o,$(COMM_GPU_SRC))
	@echo "  LD      $@"
	@$(CC) -o $@ $^ -L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR) -lnccl -lcudart -lpthread -lm

# The comm seam on device buffers (comm_dev_*: the NCCL backend's device operations and the TCP
# staging), on the GPU's memory (devmem_cuda): tests/gpu/test_comm_dev.c, run by test-gpu.
COMM_DEV_SRC := $(filter-out tests/gpu/test_comm_nccl.c,$(COMM_GPU_SRC)) \
                noderuntime/comm/nccl/comm_nccl_host.c tests/gpu/test_comm_dev.c
$(COMM_GB)/test_comm_dev: $(patsubst %.c,$(COMM_GB)/%.o,$(COMM_DEV_SRC)) build/cuda/node/devmem_cuda.o
	@echo "  LD      $@"
	@$(CXX) -o $@ $^ -L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR) -lnccl -L$(CUDA_HOME)/lib64 \
	    -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lpthread -lm

.PHONY: comm-nccl
comm-nccl: $(COMM_GB)/test_comm_nccl $(COMM_GB)/test_comm_dev
cuda: comm-nccl
