/* ZeRO-1 style distributed optimizer over one stage's flat parameter / gradient buffers, in the
 * memory of the rank's engine (devmem.h: host memory for CPU ranks, the GPU's for CUDA ranks).
 * The buffer is cut into buckets from its end backwards (the order backward produces gradients);
 * replica r of the data-parallel group owns chunk r (tcp_chunk) of every bucket. As soon as a
 * bucket's gradients are final (zero_grads_ready), its reduce-scatter starts asynchronously on the
 * data-parallel communicator (comm_dev_*: in the compute lane's order, with no host wait on a
 * GPU), overlapping the rest of backward; zero_reduce_wait finishes them. The caller then runs
 * AdamW on the owned shards and the parts of zero_params_gather_* restore full parameters on
 * every replica (in fp32, or in bf16 from fp32 masters: zero_params_bf16). With no communicator
 * (data = 1) the shard is the whole buffer. Checkpoints gather into host buffers
 * (zero_all_gather_host, zero_master_gather_host). */
#ifndef HOLMES_ZERO_H
#define HOLMES_ZERO_H

#include <stddef.h>

#include "comm.h"
#include "devmem.h"
#include "error.h"

struct zero;

/* Buckets hold at most bucket_floats floats (0 picks PLAN_ZERO_BUCKET_FLOATS, plan_doc.h: what
 * the planner prices) and never span one of the `ncuts`
 * offsets in `cuts` (any order; e.g. layer boundaries, so that a layer's reduce-scatter can start
 * as soon as its backward is done, or a tensor that is exchanged on its own). dp may be NULL
 * (one replica). */
int zero_create(struct zero **out, struct devmem *m, float *params, float *grads, size_t n,
                const size_t *cuts, int ncuts, size_t bucket_floats, struct comm *dp, herr *e);
/* Called (on the caller's thread, in the compute lane's order) whenever the parameters [lo, hi)
 * were written by the gather or by rounding from the masters, so that an engine refreshes what
 * it derives from them. */
void zero_set_params_written(struct zero *z, void (*fn)(void *ctx, size_t lo, size_t hi),
                             void *ctx);
/* Called with begin 1 before and begin 0 after zero queues work of its own on the compute lane
 * (the fp32 masters rounded into the parameters, gathered bf16 parameters widened), so that the
 * caller can time it (engine_profile_enter). */
void zero_set_device_work(struct zero *z, void (*fn)(void *ctx, int begin), void *ctx);
void zero_free(struct zero *z);

/* Gradients [lo, hi) are final for this step: starts the reduce-scatter of every bucket that is
 * now complete. Ranges may come in any order (the same on every replica); each element must be
 * reported once per step. */
int zero_grads_ready(struct zero *z, size_t lo, size_t hi, herr *e);
/* The bucket holding offset `off`, -1 when outside. */
int zero_bucket_at(const struct zero *z, size_t off);
/* The end of bucket b's range in the flat buffer. */
size_t zero_bucket_end(const struct zero *z, int b);
/* Bucket b's range [*lo, *hi) in the flat buffer. */
void zero_bucket_range(const struct zero *z, int b, size_t *lo, size_t *hi);
/* Waits for the reduce-scatter of bucket b (started by zero_grads_ready): its owned shard then
 * holds the data-parallel sum, e.g. to exchange it further before zero_reduce_wait. */
int zero_bucket_wait(struct zero *z, int b, herr *e);
/* Starts any bucket not yet started and waits for all; resets readiness for the next step. */
int zero_reduce_wait(struct zero *z, herr *e);

int zero_num_buckets(const struct zero *z);
/* Buckets whose reduce-scatter has started this step. */
int zero_buckets_started(const struct zero *z);
/* The owned shard of bucket b: [*lo, *hi) in the flat buffer (may be empty). */
void zero_shard(const struct zero *z, int b, size_t *lo, size_t *hi);
/* Floats owned over all buckets (sizes of m and v for AdamW); zero_shard_offset = the start of
 * bucket b's shard inside that concatenation, which holds the shards in buffer order (the last
 * bucket's first), so with one replica offset = parameter (m, v and the masters are laid out like
 * the parameters, and adjacent shards can be updated in one pass). */
size_t zero_shard_total(const struct zero *z);
size_t zero_shard_offset(const struct zero *z, int b);
/* All-gathers every bucket's parameters (each replica contributes its updated shard). */
int zero_all_gather_params(struct zero *z, herr *e);
/* The same in parts, so that the gather overlaps the next forward: part issues the all-gather of
 * the buckets that lie inside [lo, hi), from the start of the buffer (the order forward reads it;
 * the others later, in the same order on every replica); wait returns once the buckets holding
 * [lo, hi) are gathered; finish waits for the rest. Nothing else may use the gradient buckets'
 * requests in between (the next reduce-scatter comes after finish). */
int zero_params_gather_part(struct zero *z, size_t lo, size_t hi, herr *e);
int zero_params_wait(struct zero *z, size_t lo, size_t hi, herr *e);
int zero_params_gather_finish(struct zero *z, herr *e);
/* The same for a HOST buffer of the parameters' layout (e.g. optimizer moments for a
 * checkpoint): each replica's shards of `buf` filled in everywhere. */
int zero_all_gather_host(struct zero *z, float *buf, herr *e);

/* bf16 parameters (parallelism.paramGatherDtype bf16): the replicas compute with parameters
 * rounded to bfloat16 and all-gather them in 2 bytes each, while the optimizer updates fp32
 * master copies of the owned shards. zero_params_bf16 switches it on (masters from the current
 * parameters, which are then rounded); afterwards the caller updates zero_master() (laid out like
 * m and v: bucket b's shard at zero_shard_offset(b)) instead of the parameters, and
 * zero_params_gather_part rounds each owned shard from its master before sending it (with one
 * replica: adjacent shards in one copy and one rounding). */
int zero_params_bf16(struct zero *z, herr *e);
/* The owned shards' fp32 masters (in engine memory); NULL unless bf16 parameters are on. */
float *zero_master(const struct zero *z);
/* After the parameters were overwritten (a checkpoint loaded): masters from the parameters'
 * owned shards, then the parameters rounded. Nothing without bf16 parameters. */
int zero_master_from_params(struct zero *z, herr *e);
/* The full fp32 parameters into the HOST buffer out (n floats): every replica's masters
 * all-gathered, or a copy of the parameters without bf16 parameters. Collective on the
 * data-parallel group. */
int zero_master_gather_host(struct zero *z, float *out, herr *e);

#endif
