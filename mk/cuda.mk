# GPU training engine (noderuntime/engine/cuda/, docs/gpu.md). The plain build never needs nvcc.
#   make cuda        builds the engine in fp32 and bf16 (sm_80 + sm_90), test_gpu and bench_gpu, and
#                    build/cuda/bin/holmes-node: the worker with the CUDA engines and NCCL
#   make test-gpu    GPU vs CPU engine, 2-stage = 1-stage, resume, compute-sanitizer, and the worker
#                    path (tests/gpu/worker_gpu.sh: the CUDA holmes-node trains; needs a GPU)
#   make bench-gpu   GEMM ceiling, GPT-2 124M and 1.5B (seq 1024, bf16; 1.5B also with 8
#                    micro-batches), each with its breakdown by part, the worker, PyTorch beside
#                    it, and the summary table (tests/bench/gpu_summary.py)
#   make gpu-check   all three in one command under an 8-minute budget (tests/gpu/gpu_check.sh),
#                    a table of the phases and the benchmarks' summary last; log in
#                    build/cuda/gpu-check.log
# The binaries need only the CUDA runtime and cuBLAS(Lt) (libgomp and libstdc++ from gcc): the CPU
# reference engine is compiled against noderuntime/engine/cuda/shim/ (cblas.h, zlib.h) and cpu_shim.c
# instead of OpenBLAS and zlib, which GPU machines lack.

NVCC       ?= /usr/local/cuda/bin/nvcc
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCHS ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90
CXX        ?= g++
GPU_DEBUG  ?= 0
GPU_PYTHON ?= python3
GPU_PEAK   ?= 989
GPU_B_1558M ?= 4
# gpu_stage_create flags for bench-gpu: 1 = recompute GELU outputs in backward, 4 = the
# materialised attention instead of flash attention, 8 = flash attention's dQ kernel recomputing S
# and dP instead of reading the dS its dK/dV kernel stores, 16 = the weight gradients' products on
# a second stream beside the input gradients' (or-ed)
GPU_FLAGS  ?= 0
GB := build/cuda

GPU_HOST_CFLAGS := -std=gnu11 -O2 -g $(WARN) -fopenmp -D_GNU_SOURCE -fno-trapping-math \
                   -fno-math-errno -Inoderuntime/engine/cuda/shim -Inoderuntime/engine/cuda -Icommon \
                   -Inoderuntime/engine -Inoderuntime/train -Itests/unit -I$(CUDA_HOME)/include $(EXTRA_CFLAGS)
NVCC_FLAGS := -std=c++17 -O3 $(CUDA_ARCHS) -Icommon -Inoderuntime/engine -Inoderuntime/train \
              -Xcompiler -Wall,-Wextra,-Wshadow,-Wno-unused-parameter
ifeq ($(GPU_DEBUG),1)
NVCC_FLAGS += -DHOLMES_GPU_DEBUG -lineinfo
endif
ifeq ($(CI),true)
NVCC_FLAGS += -Werror all-warnings -Xcompiler -Werror
endif
GPU_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart \
            -fopenmp -lm -lpthread

GPU_HOST_SRC := common/error.c common/clock.c noderuntime/engine/gpt.c noderuntime/engine/gpt_pass.c noderuntime/engine/gpt_layers.c \
                noderuntime/engine/optimizer.c \
                noderuntime/train/dataloader.c noderuntime/train/checkpoint.c noderuntime/engine/cuda/cpu_shim.c \
                noderuntime/engine/cuda/token_groups.c
GPU_HOST_OBJ := $(patsubst %.c,$(GB)/host/%.o,$(GPU_HOST_SRC))
GPU_HDRS := $(wildcard noderuntime/engine/cuda/*.h) noderuntime/engine/gpt.h \
            noderuntime/engine/optimizer.h common/error.h $(wildcard noderuntime/engine/cuda/*.cuh)

$(GB)/host/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (GPU build)"
	@$(CC) $(GPU_HOST_CFLAGS) -MMD -MP -c $< -o $@

# The engine: one translation unit per layer kind (stage.cuh lists them), compiled once per
# precision into $(GB)/{fp32,bf16}/cu/.
# (devmem_cuda.cu is precision-free: built once, for holmes-node and test_comm_dev)
GPU_CU := $(filter-out %/devmem_cuda.cu,$(wildcard noderuntime/engine/cuda/*.cu))
GPU_CU_NAMES := $(notdir $(GPU_CU:.cu=.o))
GPU_CU_OBJ_fp32 := $(addprefix $(GB)/fp32/cu/,$(GPU_CU_NAMES))
GPU_CU_OBJ_bf16 := $(addprefix $(GB)/bf16/cu/,$(GPU_CU_NAMES))
$(GB)/fp32/cu/%.o: noderuntime/engine/cuda/%.cu $(GPU_HDRS)
	@mkdir -p $(dir $@)
	@echo "  NVCC    $< (fp32)"
	@$(NVCC) $(NVCC_FLAGS) -DHOLMES_GPU_FP32 -c $< -o $@
$(GB)/bf16/cu/%.o: noderuntime/engine/cuda/%.cu $(GPU_HDRS)
	@mkdir -p $(dir $@)
	@echo "  NVCC    $< (bf16)"
	@$(NVCC) $(NVCC_FLAGS) -c $< -o $@

# kept between runs (pattern-rule chains would delete them as intermediates and rebuild them)
.SECONDARY: $(GPU_CU_OBJ_fp32) $(GPU_CU_OBJ_bf16) $(GPU_HOST_OBJ) \
            $(foreach p,fp32 bf16,$(GB)/$(p)/host/noderuntime/engine/cuda/test_gpu.o \
                                  $(GB)/$(p)/host/noderuntime/engine/cuda/bench_gpu.o \
                                  $(GB)/$(p)/host/noderuntime/engine/cuda/stage_bytes.o)

# gpt_cuda.h names each engine function for its precision (both link into holmes-node), so the
# files that call it are compiled once per precision too.
$(GB)/fp32/host/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (GPU build, fp32)"
	@$(CC) $(GPU_HOST_CFLAGS) -DHOLMES_GPU_FP32 -MMD -MP -c $< -o $@
$(GB)/bf16/host/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (GPU build, bf16)"
	@$(CC) $(GPU_HOST_CFLAGS) -MMD -MP -c $< -o $@

$(GB)/%/test_gpu: $(addprefix $(GB)/%/cu/,$(GPU_CU_NAMES)) $(GB)/%/host/noderuntime/engine/cuda/test_gpu.o $(GPU_HOST_OBJ)
	@echo "  LD      $@"
	@$(CXX) -o $@ $^ $(GPU_LIBS)
$(GB)/%/bench_gpu: $(addprefix $(GB)/%/cu/,$(GPU_CU_NAMES)) $(GB)/%/host/noderuntime/engine/cuda/bench_gpu.o $(GPU_HOST_OBJ)
	@echo "  LD      $@"
	@$(CXX) -o $@ $^ $(GPU_LIBS)
$(GB)/%/stage_bytes: $(addprefix $(GB)/%/cu/,$(GPU_CU_NAMES)) $(GB)/%/host/noderuntime/engine/cuda/stage_bytes.o $(GPU_HOST_OBJ)
	@echo "  LD      $@"
	@$(CXX) -o $@ $^ $(GPU_LIBS)

# The CUDA holmes-node: the plain worker runtime plus both CUDA engines behind the engine seam
# (engine_cuda.c, once per precision) and the NCCL backend behind the comm seam. It links the
# same Debian libraries as bin/holmes-node (the CUDA node image installs them) and CUDA's.
NODE_GB := $(GB)/node
NODE_CUDA_CFLAGS = $(CFLAGS) -Inoderuntime/engine/cuda -Inoderuntime/comm/nccl -I$(CUDA_HOME)/include
NODE_CUDA_OBJ := $(NODE_GB)/fp32/engine_cuda.o $(NODE_GB)/bf16/engine_cuda.o \
                 $(GPU_CU_OBJ_fp32) $(GPU_CU_OBJ_bf16) $(NODE_GB)/token_groups.o \
                 $(NODE_GB)/devmem_cuda.o $(NODE_GB)/comm_nccl.o $(NODE_GB)/comm_nccl_host.o
# The GPU's memory behind devmem.h (precision-free: one object for both engines).
$(NODE_GB)/devmem_cuda.o: noderuntime/engine/cuda/devmem_cuda.cu noderuntime/engine/cuda/devmem_cuda.h \
                          noderuntime/comm/devmem.h
	@mkdir -p $(dir $@)
	@echo "  NVCC    $<"
	@$(NVCC) $(NVCC_FLAGS) -Inoderuntime/comm -c $< -o $@
$(NODE_GB)/fp32/engine_cuda.o: noderuntime/engine/cuda/engine_cuda.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (holmes-node, fp32)"
	@$(CC) $(NODE_CUDA_CFLAGS) -DHOLMES_GPU_FP32 -MMD -MP -c $< -o $@
$(NODE_GB)/bf16/engine_cuda.o: noderuntime/engine/cuda/engine_cuda.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (holmes-node, bf16)"
	@$(CC) $(NODE_CUDA_CFLAGS) -MMD -MP -c $< -o $@
$(NODE_GB)/token_groups.o: noderuntime/engine/cuda/token_groups.c
	@mkdir -p $(dir $@)
	@$(CC) $(NODE_CUDA_CFLAGS) -MMD -MP -c $< -o $@
$(NODE_GB)/%.o: noderuntime/comm/nccl/%.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (holmes-node)"
	@$(CC) $(NODE_CUDA_CFLAGS) -I$(NCCL_HOME)/include -MMD -MP -c $< -o $@
$(GB)/bin/holmes-node: $(call obj,noderuntime/main.c) $(NODE_CUDA_OBJ) $(LIB_NODE) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	@echo "  LD      $@ (CUDA engines, NCCL)"
	@$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS) -L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR) -lnccl $(GPU_LIBS)
-include $(wildcard $(NODE_GB)/*.d $(NODE_GB)/*/*.d $(GB)/*/host/*/*/*/*.d)

GPU_BINS := $(GB)/fp32/test_gpu $(GB)/bf16/test_gpu $(GB)/bf16/bench_gpu $(GB)/fp32/bench_gpu \
            $(GB)/fp32/stage_bytes $(GB)/bf16/stage_bytes
# holmes-node needs the plain build's Debian -dev packages, which GPU machines may lack: built
# where pkg-config finds them (CI, the images); elsewhere carried (gpu-carry below).
ifneq ($(PKG_LIBS),)
GPU_BINS += $(GB)/bin/holmes-node
endif
HOLMES_GPU_NODE ?= $(GB)/bin/holmes-node

# For a GPU machine without Debian's packages (the device tool's): the CUDA holmes-node built here
# and the .debs of the libraries it loads (images/container.sh runtime-packages), to carry there;
# tests/gpu/worker_gpu.sh unpacks them (dpkg -x) beside the binary when its libraries are missing.
GPU_CARRY := build/gpu-carry
.PHONY: gpu-carry
gpu-carry: $(GB)/bin/holmes-node $(BINDIR)/holmes-node
	@rm -rf $(GPU_CARRY) && mkdir -p $(GPU_CARRY)/debs
	@cp $(GB)/bin/holmes-node $(GPU_CARRY)/holmes-node
	@pkgs=$$(images/container.sh runtime-packages $(BINDIR)/holmes-node) && \
	    cd $(GPU_CARRY)/debs && apt-get download $$pkgs >/dev/null
	@echo "gpu-carry: $(GPU_CARRY), $$(du -sh $(GPU_CARRY) | cut -f1): carry it, then run" \
	      "make test-gpu HOLMES_GPU_NODE=$(GPU_CARRY)/holmes-node"

.PHONY: cuda test-gpu bench-gpu gpu-check
cuda: $(GPU_BINS)

SANITIZER = $(firstword $(shell command -v compute-sanitizer) $(wildcard $(CUDA_HOME)/bin/compute-sanitizer))
test-gpu: cuda
	@echo "== test-gpu: $$(date -u '+%F %H:%M UTC')"
	@nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
	@fail=0; \
	$(GB)/fp32/test_gpu || fail=1; \
	$(GB)/bf16/test_gpu || fail=1; \
	build/comm-nccl/test_comm_dev || fail=1; \
	tests/gpu/worker_gpu.sh $(HOLMES_GPU_NODE) || fail=1; \
	if [ -n "$(SANITIZER)" ]; then \
	    $(SANITIZER) --tool memcheck --leak-check full --error-exitcode 1 $(GB)/bf16/test_gpu --quick \
	        && echo "PASS gpu.compute_sanitizer.memcheck" || { echo "FAIL gpu.compute_sanitizer.memcheck"; fail=1; }; \
	else echo "FAIL gpu.compute_sanitizer: compute-sanitizer not found"; fail=1; fi; \
	exit $$fail

# GPT-2 124M (12 768 12) and 1.5B (48 1600 25), vocabulary 50257, seq 1024, bf16.
GPU_SHAPES ?= "12 768 12 50257 16 1024 20" \
              "48 1600 25 50257 $(GPU_B_1558M) 1024 10 --micro-batches 1,8"
# The worker (holmes-node worker, one rank, state on the device) at the same shapes, with 1 and 8
# micro-batches: "L C NH V B T M steps" (tests/bench/bench_worker_gpu.sh).
GPU_WORKER_RUNS ?= "12 768 12 50257 16 1024 1 12" "12 768 12 50257 16 1024 8 5" \
                   "48 1600 25 50257 $(GPU_B_1558M) 1024 1 8" "48 1600 25 50257 $(GPU_B_1558M) 1024 8 5"
bench-gpu: SHELL := /bin/bash
bench-gpu: $(GB)/bf16/bench_gpu
	@set -o pipefail; { \
	echo "== bench-gpu: $$(date -u '+%F %H:%M UTC'), peak $(GPU_PEAK) TFLOP/s"; \
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true; \
	$(GB)/bf16/bench_gpu --gemm 8192 20 && \
	for s in $(GPU_SHAPES); do $(GB)/bf16/bench_gpu $$s $(GPU_PEAK) $(GPU_FLAGS) || exit 1; done && \
	for s in $(GPU_WORKER_RUNS); do tests/bench/bench_worker_gpu.sh $(HOLMES_GPU_NODE) $$s || exit 1; done && \
	if $(GPU_PYTHON) -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then \
	    for s in $(GPU_SHAPES); do PYTHONUNBUFFERED=1 $(GPU_PYTHON) tests/bench/bench_torch_gpu.py $$s $(GPU_PEAK) || exit 1; done; \
	else echo "bench-gpu: $(GPU_PYTHON) has no CUDA PyTorch: PyTorch skipped"; fi; \
	} 2>&1 | tee $(GB)/bench-gpu.log && python3 tests/bench/gpu_summary.py $(GB)/bench-gpu.log

# PyTorch's fused attention backends (cuDNN, FlashAttention-2, memory-efficient) at the engine's
# two attention shapes, forward and forward + backward a layer, each also under
# torch.use_deterministic_algorithms, and whether its backward is bit-exact on a second run: the
# anchor for bench_gpu's attention table and for a cuDNN path (tests/bench/bench_torch_attention.py)
.PHONY: bench-gpu-attention
bench-gpu-attention:
	@PYTHONUNBUFFERED=1 $(GPU_PYTHON) tests/bench/bench_torch_attention.py 16 12 1024 64 $(GPU_B_1558M) 25 1024 64

# every phase under one time budget (GPU_CHECK_BUDGET, 480 s), each run even when one before
# failed, the last lines a table of the phases and the benchmarks' summary
gpu-check:
	@HOLMES_GPU_NODE=$(HOLMES_GPU_NODE) CUDA_HOME=$(CUDA_HOME) tests/gpu/gpu_check.sh $(MAKE)

# The CPU reference of the GPU build, checked without a GPU: the CPU engine's own unit tests
# (gradients vs finite differences, stage split, checkpoints) compiled against the stand-ins.
GPU_HOST_TESTS := $(GB)/host/tests/test_gpt $(GB)/host/tests/test_checkpoint
GPU_HOST_TEST_UTIL := $(GB)/host/tests/unit/gpt_reference.o $(GB)/host/tests/unit/fs_testutil.o
$(GB)/host/tests/%: $(GB)/host/tests/unit/%.o $(GPU_HOST_OBJ) $(GPU_HOST_TEST_UTIL)
	@mkdir -p $(dir $@)
	@echo "  LD      $@ (GPU build's CPU reference)"
	@$(CC) -o $@ $^ -fopenmp -lm -lpthread
# Kernels run on the host (tests/unit/*_emu.cc on tests/unit/kernel_emu.h): the same source as the
# GPU's, its barriers and warp-wide operations emulated; no nvcc, no GPU. Flash attention's
# mma.sync kernels (ldmatrix and mma as the PTX ISA lays them out), LayerNorm's and the column sums,
# the optimizer's (AdamW over spans, the sums of squares), the classifier's fused cross-entropy,
# the token embedding's backward.
FLASH_EMU := $(GB)/host/flash_mma_emu
LAYERNORM_EMU := $(GB)/host/layernorm_emu
ADAMW_EMU := $(GB)/host/adamw_emu
CLASSIFIER_EMU := $(GB)/host/classifier_emu
ENCODER_EMU := $(GB)/host/encoder_emu
EMU_SELF := $(GB)/host/kernel_emu_self
$(FLASH_EMU): noderuntime/engine/cuda/flash_mma_kernels.cuh noderuntime/engine/cuda/flash_fwd_kernels.cuh \
              noderuntime/engine/cuda/flash_bwd_kernels.cuh noderuntime/engine/cuda/flash_plan.h
$(LAYERNORM_EMU): noderuntime/engine/cuda/layernorm_kernels.cuh noderuntime/engine/cuda/colsum_plan.h
$(CLASSIFIER_EMU): noderuntime/engine/cuda/classifier_kernels.cuh
$(ENCODER_EMU): noderuntime/engine/cuda/encoder_kernels.cuh noderuntime/engine/cuda/token_groups.c \
                noderuntime/engine/cuda/token_groups.h
$(ADAMW_EMU): noderuntime/engine/cuda/adamw_kernels.cuh noderuntime/engine/cuda/block_sum.cuh \
              noderuntime/engine/cuda/adamw_math.h noderuntime/engine/optimizer.h
EMU_CXX = @mkdir -p $(dir $@); echo "  CXX     $< (kernels emulated on the host$(2))"; \
    $(CXX) -std=c++17 -O2 -g $(WARN) -Wno-unknown-pragmas $(if $(filter true,$(CI)),-Werror) \
    -pthread $(1) -Inoderuntime/engine -Icommon -o $@ $<
$(GB)/host/%_emu: tests/unit/%_emu.cc tests/unit/kernel_emu.h tests/unit/emu_floatx.h
	$(call EMU_CXX)
# the same LayerNorm kernels in the fp32 build's types
$(LAYERNORM_EMU)_fp32: tests/unit/layernorm_emu.cc tests/unit/kernel_emu.h tests/unit/emu_floatx.h \
                       noderuntime/engine/cuda/layernorm_kernels.cuh noderuntime/engine/cuda/colsum_plan.h
	$(call EMU_CXX,-DEMU_FP32, in fp32)
# the token embedding's backward in the fp32 build's types too
$(ENCODER_EMU)_fp32: tests/unit/encoder_emu.cc tests/unit/kernel_emu.h tests/unit/emu_floatx.h \
                     noderuntime/engine/cuda/encoder_kernels.cuh noderuntime/engine/cuda/token_groups.c \
                     noderuntime/engine/cuda/token_groups.h
	$(call EMU_CXX,-DEMU_FP32, in fp32)
$(EMU_SELF): tests/unit/kernel_emu_self.cc tests/unit/kernel_emu.h
	$(call EMU_CXX)
.PHONY: flash-emu-check layernorm-emu-check adamw-emu-check classifier-emu-check encoder-emu-check \
        emu-self-check
# the emulator's own checks (its coroutines, barriers, shuffles, deadlock and guard-page reports)
emu-self-check: $(EMU_SELF)
	@$(EMU_SELF)
flash-emu-check: $(FLASH_EMU)
	@$(FLASH_EMU)
layernorm-emu-check: $(LAYERNORM_EMU) $(LAYERNORM_EMU)_fp32
	@$(LAYERNORM_EMU) && $(LAYERNORM_EMU)_fp32
adamw-emu-check: $(ADAMW_EMU)
	@$(ADAMW_EMU)
classifier-emu-check: $(CLASSIFIER_EMU)
	@$(CLASSIFIER_EMU)
encoder-emu-check: $(ENCODER_EMU) $(ENCODER_EMU)_fp32
	@$(ENCODER_EMU) && $(ENCODER_EMU)_fp32
.PHONY: gpu-host-check
gpu-host-check: $(GPU_HOST_TESTS)
	@for t in $(GPU_HOST_TESTS); do $$t || exit 1; done
