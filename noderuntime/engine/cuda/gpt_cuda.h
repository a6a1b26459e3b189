/* GPT-2 on one NVIDIA GPU, one pipeline stage at a time: the CUDA twin of gpt.h.
 *
 * Same model, same stage split, same parameter layout (the tensor table is gpt.c's: the engine
 * keeps a host-side gpt_stage of the same shape for it, for initialisation and for checkpoint
 * I/O), so parameters, AdamW moments and checkpoints (checkpoint.h) move between the CPU and the
 * GPU engines unchanged.
 *
 * Precision is chosen when the engine is compiled (mk/cuda.mk builds both):
 *   HOLMES_GPU_FP32 defined: every tensor fp32, cuBLASLt with CUBLAS_COMPUTE_32F (no TF32);
 *   otherwise (bf16 mode):  activations and a bf16 copy of the weights, matrix products in bf16
 *                           with fp32 accumulation; fp32 master weights, gradients and AdamW
 *                           moments; LayerNorm statistics, softmax and the loss in fp32.
 * gpu_precision_name() says which one a binary holds.
 *
 * Activations that cross stages (in_act, out_act, dout, din) are DEVICE pointers of
 * gpu_act_bytes() per element ([B*T*C] elements of the engine's activation type, bf16 or fp32),
 * so that the communication layer (NCCL) sends them without a host copy; gpu_act_upload/download
 * convert from and to host fp32. Tokens and targets are host arrays (they come from the data
 * loader): they go up through pinned staging buffers of the slot, asynchronously.
 *
 * All work is queued on gpu_stage_stream(), and forward and backward do not synchronise it: a
 * caller that hands out_act or din to another stream (NCCL's) first orders that stream after the
 * stage's (gpu_stage_event_record, then cudaStreamWaitEvent on the other stream), and one that
 * hands in_act or dout produced on another stream makes the stage's stream wait for it
 * (gpu_stage_wait_event). Calls that return results to the host (a non-NULL loss, parameters,
 * gradients, norms, gpu_stage_loss_take) synchronise the stream; gpu_act_upload/download
 * synchronise the whole device.
 *
 * Every CUDA and cuBLAS call is checked; a failure makes the call return -1 with the error in
 * the herr (create) or in gpu_stage_error(). Building with -DHOLMES_GPU_DEBUG (make cuda
 * GPU_DEBUG=1) synchronises after every kernel launch and checks its error too.
 */
#ifndef HOLMES_GPT_CUDA_H
#define HOLMES_GPT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* C headers: declared with C linkage also when the CUDA (C++) side includes them */
#include "error.h"
#include "kernel_times.h"
#include "gpt.h"
#include "optimizer.h"

/* Both precisions link into one binary (the CUDA holmes-node, engine_cuda.c): each object's
 * names carry its precision, so a file that includes this header talks to the engine of the
 * precision it is compiled for (HOLMES_GPU_FP32 defined or not). */
#ifdef HOLMES_GPU_FP32
#define GPU_API(name) gpu_fp32_##name
#else
#define GPU_API(name) gpu_bf16_##name
#endif
#define gpu_precision_name GPU_API(precision_name)
#define gpu_act_bytes GPU_API(act_bytes)
#define gpu_stage_create GPU_API(stage_create)
#define gpu_stage_create_tp GPU_API(stage_create_tp)
#define gpu_stage_set_tp_sum GPU_API(stage_set_tp_sum)
#define gpu_stage_set_tp_sum_dev GPU_API(stage_set_tp_sum_dev)
#define gpu_stage_set_forward_hook GPU_API(stage_set_forward_hook)
#define gpu_stage_set_backward_hook GPU_API(stage_set_backward_hook)
#define gpu_stage_params_changed GPU_API(stage_params_changed)
#define gpu_stage_loss_take GPU_API(stage_loss_take)
#define gpu_stage_adamw_ex GPU_API(stage_adamw_ex)
#define gpu_stage_adamw_spans GPU_API(stage_adamw_spans)
#define gpu_stage_sq_norm_ranges GPU_API(stage_sq_norm_ranges)
#define gpu_stage_free GPU_API(stage_free)
#define gpu_stage_config GPU_API(stage_config)
#define gpu_stage_num_params GPU_API(stage_num_params)
#define gpu_stage_tensors GPU_API(stage_tensors)
#define gpu_stage_wte GPU_API(stage_wte)
#define gpu_stage_stream GPU_API(stage_stream)
#define gpu_stage_sync GPU_API(stage_sync)
#define gpu_stage_flops GPU_API(stage_flops)
#define gpu_stage_error GPU_API(stage_error)
#define gpu_stage_init_params GPU_API(stage_init_params)
#define gpu_stage_set_params GPU_API(stage_set_params)
#define gpu_stage_get_params GPU_API(stage_get_params)
#define gpu_stage_get_grads GPU_API(stage_get_grads)
#define gpu_stage_set_grads GPU_API(stage_set_grads)
#define gpu_stage_set_moments GPU_API(stage_set_moments)
#define gpu_stage_get_moments GPU_API(stage_get_moments)
#define gpu_stage_params_dev GPU_API(stage_params_dev)
#define gpu_stage_grads_dev GPU_API(stage_grads_dev)
#define gpu_stage_forward GPU_API(stage_forward)
#define gpu_stage_backward GPU_API(stage_backward)
#define gpu_stage_forward_slice GPU_API(stage_forward_slice)
#define gpu_stage_backward_slice GPU_API(stage_backward_slice)
#define gpu_stage_zero_grads GPU_API(stage_zero_grads)
#define gpu_stage_grad_sq_norm GPU_API(stage_grad_sq_norm)
#define gpu_stage_adamw GPU_API(stage_adamw)
#define gpu_stage_event_record GPU_API(stage_event_record)
#define gpu_stage_wait_event GPU_API(stage_wait_event)
#define gpu_stage_sq_norm_ex GPU_API(stage_sq_norm_ex)
#define gpu_stage_attention_kind GPU_API(stage_attention_kind)
#define gpu_stage_profile_begin GPU_API(stage_profile_begin)
#define gpu_stage_profile_end GPU_API(stage_profile_end)
#define gpu_stage_profile_enter GPU_API(stage_profile_enter)
#define gpu_stage_profile_leave GPU_API(stage_profile_leave)
#define gpu_part_name GPU_API(part_name)
#define gpu_counters GPU_API(counters)
#define gpu_stage_device_bytes GPU_API(stage_device_bytes)
#define gpu_stage_debug_poison GPU_API(stage_debug_poison)
#define gpu_act_alloc GPU_API(act_alloc)
#define gpu_act_free GPU_API(act_free)
#define gpu_act_upload GPU_API(act_upload)
#define gpu_act_download GPU_API(act_download)
#define gpu_gemm_tflops GPU_API(gemm_tflops)
#define gpu_device_name GPU_API(device_name)
#define gpu_gemm_choices_file GPU_API(gemm_choices_file)

struct gpu_stage;

/* "fp32" or "bf16": the mode this engine was compiled in. */
const char *gpu_precision_name(void);
/* Bytes of one activation element (4 in fp32 mode, 2 in bf16 mode). */
size_t gpu_act_bytes(void);

/* gpu_stage_create flags */
#define GPU_RECOMPUTE_GELU 1 /* keep no GELU outputs (4*B*T*C per layer and slot, a quarter of the
                                activations): backward recomputes them */
#define GPU_NO_MOMENTS 2     /* no whole-stage AdamW moments (gpu_stage_adamw, _set/_get_moments
                                refuse): the caller keeps its own, e.g. a ZeRO shard's, and runs
                                gpu_stage_adamw_ex */
#define GPU_MATERIALISED_ATTENTION 4 /* bf16: the attention that materialises the T x T scores
                                instead of flash attention (for checking; fp32 always does) */
#define GPU_FLASH_RECOMPUTE_DQ 8 /* bf16, flash attention: the dQ kernel recomputes S and dP (three
                                products a query-key pair) instead of reading the dS the dK/dV
                                kernel stores (one): no [B][heads][T][T] bf16 workspace, for
                                comparing the two and for memory-tight stages */
#define GPU_OVERLAP_WEIGHT_GRADS 16 /* a linear layer's weight-gradient product on a second stream
                                beside its input-gradient product (the same results, bit for bit):
                                the GPU fills the last wave of one with the other's tiles; 32 MiB
                                more (a second cuBLASLt workspace) */
#define GPU_FLAGS_ALL 31

/* Like gpt_stage_create, on the current CUDA device. Parameters are zero until
 * gpu_stage_init_params() or gpu_stage_set_params(); gradients and moments start at zero. */
int gpu_stage_create(struct gpu_stage **out, const struct gpt_config *c, int first, int last,
                     int B, int T, int slots, int flags, herr *e);
/* The same stage as rank tp_rank of a tensor-parallel group of tp: gpt_stage_create_tp's split
 * (Megatron-LM) and parameter layout, so the tensor table, the parameter count and every offset
 * are that rank's, and forward and backward do gpt_pass.c's math: the vocabulary-parallel
 * embedding and cross-entropy, q, k, v and the MLP's fc column-parallel, both projections
 * row-parallel. The group's partial results are summed in fp32 (also in bf16 mode) through the
 * function given with gpu_stage_set_tp_sum_dev (on the device buffer, stream-ordered) or else
 * gpu_stage_set_tp_sum (on host buffers: each sum copies its device buffer to a host staging
 * buffer, calls the function and copies the result back, synchronising the stream). tp 1 is
 * gpu_stage_create. Out of device memory, the error names the stage's layers, the bytes it needs
 * and the bytes free. */
int gpu_stage_create_tp(struct gpu_stage **out, const struct gpt_config *c, int first, int last,
                        int B, int T, int slots, int flags, int tp, int tp_rank, herr *e);
/* gpt_stage_set_tp_sum's function: buf[n] (host, fp32) becomes the sum of every rank's buf.
 * Without one (or when it fails), a tensor-parallel forward or backward returns -1. */
void gpu_stage_set_tp_sum(struct gpu_stage *s, int (*fn)(void *ctx, float *buf, size_t n),
                          void *ctx);
/* Device memory a stage of this shape needs (parameters, gradients, moments unless
 * GPU_NO_MOMENTS, the bf16 weight copy, scratch and slots; not cuBLASLt's tuning buffers nor the
 * sliced backward's lazily allocated accumulators), for planners and error messages; 0 when the
 * shape is invalid. */
size_t gpu_stage_device_bytes(const struct gpt_config *c, int first, int last, int B, int T,
                              int slots, int flags, int tp);
void gpu_stage_free(struct gpu_stage *s);

/* The device-resident trainer's calls (engine_cuda.c). Forward and backward queue their work on
 * the stream and return without waiting for it (an out_act or din is complete for another stream
 * once that stream waits for an event recorded after the call); tokens and targets go up from
 * per-slot pinned buffers, asynchronously.
 *
 * The forward hook: called on the host before the forward queues work that reads parameters
 * [lo, hi) (the embeddings, each block, the final LayerNorm and head), in forward order, at every
 * call (slices too), as gpt_stage_set_forward_hook; a non-zero return fails the forward. It may
 * make the stream wait for events (the ZeRO all-gather of the range). */
void gpu_stage_set_forward_hook(struct gpu_stage *s, int (*fn)(void *ctx, size_t lo, size_t hi),
                                void *ctx);
/* Parameters [lo, hi) were rewritten in device memory (an all-gather, AdamW through
 * gpu_stage_adamw_ex on buffers other than the stage's, a load), in the stream's order: the bf16
 * weight copy of every unit they touch is refreshed right after that unit's forward hook, before
 * it is read (fp32: nothing). */
void gpu_stage_params_changed(struct gpu_stage *s, size_t lo, size_t hi);
/* The backward hook: called right after the work that produces block `layer`'s final gradients
 * (global layer index, last block first) is queued, at the backward that ends a micro-batch
 * (t0 = 0 with token slices), as gpt_stage_set_backward_hook. */
void gpu_stage_set_backward_hook(struct gpu_stage *s, void (*fn)(void *ctx, int layer), void *ctx);
/* The tensor group's sum on a DEVICE fp32 buffer, in the stream's order: fn is called after the
 * work producing buf is queued and makes the stream wait until buf holds the sum. When set, it
 * replaces gpu_stage_set_tp_sum's host staging. */
void gpu_stage_set_tp_sum_dev(struct gpu_stage *s, int (*fn)(void *ctx, float *buf, size_t n),
                              void *ctx);
/* The losses the last stage's forwards added since the last call (forwards given loss NULL; each
 * a micro-batch's (or slice's share of its) mean), summed, and the sum reset: one wait. */
int gpu_stage_loss_take(struct gpu_stage *s, float *sum);
/* AdamW (optimizer.h's adamw_update_at) over parameters [lo, hi) held anywhere in device memory:
 * p, g, m, v each with element 0 at parameter lo; weight decay by the tensor table at lo + i.
 * Queued. When p is the stage's own parameters (gpu_stage_params_dev(s) + lo) the kernel also
 * writes their bf16 copy, as gpu_stage_adamw does (one pass: no gpu_stage_params_changed needed);
 * other buffers (fp32 masters) leave it alone. */
int gpu_stage_adamw_ex(struct gpu_stage *s, const struct adamw_config *o, size_t lo, size_t hi,
                       float *p, const float *g, float *m, float *v, float lr, long step,
                       float grad_scale);
/* The same over n spans (optimizer.h), in as few launches as the kernel's parameter holds (48
 * spans a launch): a ZeRO shard cut into one piece per bucket is a few dozen launches. */
int gpu_stage_adamw_spans(struct gpu_stage *s, const struct adamw_config *o,
                          const struct adamw_span *sp, int n, float lr, long step,
                          float grad_scale);
/* Sum of squares of base[lo[i], hi[i]) over the n ranges (device memory), fp64, a fixed order of
 * reduction: one wait. */
int gpu_stage_sq_norm_ranges(struct gpu_stage *s, const float *base, const size_t *lo,
                             const size_t *hi, int n, double *out);

const struct gpt_config *gpu_stage_config(const struct gpu_stage *s);
size_t gpu_stage_num_params(const struct gpu_stage *s);
int gpu_stage_tensors(const struct gpu_stage *s, const struct gpt_tensor **out);
int gpu_stage_wte(const struct gpu_stage *s, size_t *offset, size_t *count);
/* The cudaStream_t everything runs on (void * so that C callers need no CUDA headers). */
void *gpu_stage_stream(struct gpu_stage *s);
/* Waits for the stream's work (for timing). */
int gpu_stage_sync(struct gpu_stage *s);
/* gpt_stage_flops() of this stage's shape: floating-point operations of one forward + backward of
 * one micro-batch (causal attention counted as the lower triangle). */
double gpu_stage_flops(const struct gpu_stage *s);
/* Why the last call returned -1. */
const char *gpu_stage_error(const struct gpu_stage *s);

/* gpt_stage_init_params's values (same seed, same numbers), uploaded. */
int gpu_stage_init_params(struct gpu_stage *s, uint64_t seed);
/* Host fp32 <-> device copies of the flat buffers (n = gpu_stage_num_params floats). set_params
 * also refreshes the bf16 weight copy. m and v are the AdamW moments of the whole stage. */
int gpu_stage_set_params(struct gpu_stage *s, const float *host);
int gpu_stage_get_params(struct gpu_stage *s, float *host);
int gpu_stage_get_grads(struct gpu_stage *s, float *host);
int gpu_stage_set_grads(struct gpu_stage *s, const float *host);
int gpu_stage_set_moments(struct gpu_stage *s, const float *m, const float *v);
int gpu_stage_get_moments(struct gpu_stage *s, float *m, float *v);
/* Device pointers of the fp32 buffers, for collectives (NCCL all-reduce of grads, etc.).
 * gpu_stage_zero_grads does not clear the gradients: the next backward writes every element
 * instead of adding (the first micro-batch writes, later ones add), so between the two the
 * buffer holds the old step's values. The stage's own readers (get_grads, grad_sq_norm, adamw,
 * and gpu_stage_grads_dev itself) clear it on the stream first when no backward ran since; a
 * caller reading through a pointer it kept reads after a backward (the backward hook's blocks,
 * the end of the micro-batches). */
float *gpu_stage_params_dev(struct gpu_stage *s);
float *gpu_stage_grads_dev(struct gpu_stage *s);

/* Records `cuda_event` (a cudaEvent_t, cast to void *) on the stage's stream: every piece of work
 * enqueued so far (out_act, din, gradients) is complete when the event is. */
int gpu_stage_event_record(struct gpu_stage *s, void *cuda_event);
/* The stage's stream waits for `cuda_event` (recorded on another stream) before its next work. */
int gpu_stage_wait_event(struct gpu_stage *s, void *cuda_event);

/* Forward / backward, as gpt_stage_forward / gpt_stage_backward (see the header comment for
 * which pointers live where). On the last stage with targets, a non-NULL loss gets the
 * micro-batch's mean loss (synchronising the stream); with loss NULL it is added, on the device,
 * to the stage's loss accumulator instead (gpu_stage_loss_take). */
int gpu_stage_forward(struct gpu_stage *s, int slot, const int *tokens, const void *in_act,
                      const int *targets, void *out_act, float *loss);
int gpu_stage_backward(struct gpu_stage *s, int slot, const void *dout, void *din,
                       float loss_scale);
/* TeraPipe, as gpt_stage_forward_slice / gpt_stage_backward_slice (gpt.h's contract: slices
 * [t0, t1) tile [0, T), forwards in order, backwards in reverse, all in `slot`; tokens and
 * targets are the micro-batch's whole host arrays, read at t0 = 0; in_act, out_act, dout and din
 * are device buffers of the slice's positions of every sequence, [B][t1 - t0][C]; the last
 * stage's *loss is the slice's share of the micro-batch's mean). gpu_stage_forward/backward are
 * the slice (0, T), which runs the whole micro-batch's code. Not with tensor parallelism (-1).
 * A sliced micro-batch's backward keeps, per slot and allocated at its first use, an fp32 copy
 * of every block's q, k, v gradients ([nl][B*T*3C]) and, on the first stage, the embeddings'
 * gradient ([B*T*C], activation type). With flash attention a slice's attention costs its
 * rectangle (its queries, the keys up to its end). Compiled, not yet run on a GPU. */
int gpu_stage_forward_slice(struct gpu_stage *s, int slot, int t0, int t1, const int *tokens,
                            const void *in_act, const int *targets, void *out_act, float *loss);
int gpu_stage_backward_slice(struct gpu_stage *s, int slot, int t0, int t1, const void *dout,
                             void *din, float loss_scale);
/* The next backward writes the gradients instead of adding to them (no memset). */
int gpu_stage_zero_grads(struct gpu_stage *s);

/* Sum of squares of grads[lo, hi) (fp64 accumulation, deterministic), synchronising. */
int gpu_stage_grad_sq_norm(struct gpu_stage *s, size_t lo, size_t hi, double *out);
/* The same over any device fp32 buffer g[0, n) (gpu_stage_sq_norm_ranges for several ranges in
 * one wait). */
int gpu_stage_sq_norm_ex(struct gpu_stage *s, const float *g, size_t n, double *out);
/* AdamW (optimizer.h's adamw_update, same formula) over params[lo, hi) on the device, moments
 * indexed like params; refreshes the bf16 weight copy of the range. */
int gpu_stage_adamw(struct gpu_stage *s, const struct adamw_config *o, size_t lo, size_t hi,
                    float lr, long step, float grad_scale);

/* Tests: every activation and scratch buffer of the stage filled with NaN (0xff bytes), so that
 * a kernel that leaves part of its output unwritten shows; synchronises. */
int gpu_stage_debug_poison(struct gpu_stage *s);
/* "flash" (bf16, head size 16, 32, 64 or 128) or "materialised": the attention this stage
 * runs. */
const char *gpu_stage_attention_kind(const struct gpu_stage *s);

/* Where the time goes (bench_gpu, the worker's --profile-step): between begin and end every part
 * of the stage's work is timed with CUDA events on its stream; end synchronises and fills ms[]
 * per part, total_ms (begin to end on the GPU), and the kernel launches (and other enqueued work)
 * and host synchronisations the engine made meanwhile (process-wide counters). The optimizer is
 * AdamW, the norm the sums of squares, the bf16 copy the refresh of changed parameters' copy
 * (gpu_stage_params_changed), zeroing the clear of gradients no backward wrote; masters is work
 * a caller queues on the stream and marks as such (gpu_stage_profile_enter: the trainer's fp32
 * masters rounded into the parameters). Nested parts count for the outermost. */
enum gpu_part {
    GPU_PART_ATTENTION, GPU_PART_MATMUL, GPU_PART_LAYERNORM, GPU_PART_CLASSIFIER,
    GPU_PART_EMBEDDING, GPU_PART_OPTIMIZER, GPU_PART_NORM, GPU_PART_BF16_COPY, GPU_PART_ZEROING,
    GPU_PART_MASTERS, GPU_PART_OTHER, GPU_PARTS
};
struct gpu_profile {
    double ms[GPU_PARTS], total_ms;
    unsigned long long launches, syncs;
    int events_lost; /* parts not timed (the event pool ran out) */
    /* the matrix products (cuBLASLt or cublasGemmEx) and flash attention's kernels, each launch
     * timed alone, by kind and shape, the longest first; kernels_lost: launches not timed (event
     * pool, or more entries than GPU_PROF_KERNELS) */
    struct gpu_kernel_time kernels[GPU_PROF_KERNELS];
    int nkernels, kernels_lost;
};
int gpu_stage_profile_begin(struct gpu_stage *s);
int gpu_stage_profile_end(struct gpu_stage *s, struct gpu_profile *out);
/* The work the caller queues on the stage's stream from enter to leave counts as `part` (a
 * gpu_part); nothing when no profile is on. */
void gpu_stage_profile_enter(struct gpu_stage *s, int part);
void gpu_stage_profile_leave(struct gpu_stage *s);
const char *gpu_part_name(int part);
/* The engine's process-wide counts of enqueued work and host synchronisations. */
void gpu_counters(unsigned long long *launches, unsigned long long *syncs);

/* Activation buffers: device memory for n elements of the activation type; host fp32 copies
 * (synchronising the whole device before and after, so any stream's work on dev is complete). */
void *gpu_act_alloc(size_t n, herr *e);
void gpu_act_free(void *p);
int gpu_act_upload(void *dev, const float *host, size_t n, herr *e);
int gpu_act_download(float *host, const void *dev, size_t n, herr *e);

/* The GEMM ceiling: TFLOP/s of an n*n*n product through the engine's own cuBLASLt path and
 * precision (random inputs, median of iters timed runs). */
int gpu_gemm_tflops(int n, int iters, double *tflops, herr *e);
/* The device's name and multiprocessor count, for reports. */
int gpu_device_name(char *buf, size_t len, herr *e);
/* The process's cuBLASLt algorithm choices (one per product shape, timed once: matmul_lt.cu)
 * kept in `path` (NULL: none): the choices an earlier process recorded there for this GPU,
 * cuBLASLt version and precision are taken, and every new choice is added, so a process that
 * resumes another's run computes with the same algorithms (bit for bit). Before the first
 * product. */
int gpu_gemm_choices_file(const char *path, herr *e);

#ifdef __cplusplus
}
#endif

#endif
