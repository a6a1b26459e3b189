/* Device memory: where a rank's engine keeps its buffers (parameters, gradients, optimizer state,
 * activations), and the few operations the trainer and the communicators run on them.
 *
 * The CPU engine's memory is host memory (devmem_host: every operation a plain loop or memcpy,
 * work done when the call returns). The CUDA engine's is a GPU's (engine/cuda/devmem_cuda.c: the
 * operations are kernels and asynchronous copies queued on CUDA streams). The trainer, ZeRO, the
 * pipeline and the communicators are written once against this interface, so CI runs on CPUs the
 * code GPU ranks run.
 *
 * Order. Work is queued on lanes (CUDA streams). Lane NULL is the engine's compute lane, on which
 * forward and backward run; a communicator has a lane of its own for its copies. An event marks
 * the point a lane has reached when it is recorded; another lane (or the host) waits for it. On
 * host memory every call has finished its work when it returns, and events are no-ops.
 *
 * Emulated device (devmem_emulated): host memory that says it is not, so that the communicators
 * stage it through host buffers exactly as they stage a GPU's (tests run the staging path on
 * CPUs). Its copies are memcpy and its events no-ops, like the host's.
 *
 * Counters: host synchronisations (a host wait for a lane or an event: devmem_sync,
 * devmem_lane_sync) and bytes copied between host and device memory (devmem_to_host,
 * devmem_from_host, the communicators' staging, and what an engine counts of its own uploads),
 * for benchmarks and tests (devmem_stats). Host memory counts nothing. */
#ifndef HOLMES_DEVMEM_H
#define HOLMES_DEVMEM_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct devmem;

struct devmem_ops {
    /* Device memory, zeroed; *out NULL on failure (with the bytes asked in the error). */
    int (*alloc)(struct devmem *m, size_t bytes, void **out, herr *e);
    void (*free)(struct devmem *m, void *p);
    /* Host memory the device copies from and to at full speed (pinned). */
    int (*alloc_host)(struct devmem *m, size_t bytes, void **out, herr *e);
    void (*free_host)(struct devmem *m, void *p);
    /* A lane of its own (a CUDA stream); NULL lane is the compute lane. */
    int (*lane_new)(struct devmem *m, void **lane, herr *e);
    void (*lane_free)(struct devmem *m, void *lane);
    /* Queued on `lane`: dst <- src, either side host or device memory. */
    int (*copy)(struct devmem *m, void *lane, void *dst, const void *src, size_t bytes, herr *e);
    int (*zero)(struct devmem *m, void *lane, void *p, size_t bytes, herr *e);
    /* dst[i] += src[i] (fp32) */
    int (*add_f32)(struct devmem *m, void *lane, float *dst, const float *src, size_t n, herr *e);
    /* bfloat16, round to nearest even (bf16.h's): pack fp32 -> bf16, unpack bf16 -> fp32,
     * round fp32 in place to the nearest bf16 value */
    int (*pack_bf16)(struct devmem *m, void *lane, uint16_t *dst, const float *src, size_t n,
                     herr *e);
    int (*unpack_bf16)(struct devmem *m, void *lane, float *dst, const uint16_t *src, size_t n,
                       herr *e);
    int (*round_bf16)(struct devmem *m, void *lane, float *p, size_t n, herr *e);
    /* Events. */
    int (*event_new)(struct devmem *m, void **ev, herr *e);
    void (*event_free)(struct devmem *m, void *ev);
    int (*record)(struct devmem *m, void *lane, void *ev, herr *e); /* ev: the lane's work so far */
    int (*wait)(struct devmem *m, void *lane, void *ev, herr *e);   /* lane's later work after ev */
    int (*sync)(struct devmem *m, void *ev, herr *e);               /* the host waits for ev */
    int (*lane_sync)(struct devmem *m, void *lane, herr *e);        /* the host waits for lane */
};

struct devmem {
    const struct devmem_ops *ops;
    const char *name;   /* "host", "emulated", "cuda" */
    int host;           /* buffers are host memory a communicator may use as they are */
    int device;         /* CUDA device (-1 for host memory) */
    void *ctx;          /* the implementation's (the CUDA compute stream...) */
    double timeout_s;   /* bound on a host wait (sync, lane_sync); 0 = none */
    /* counters, updated by the implementation (atomically: communicators' threads use it too) */
    uint64_t host_syncs, bytes_h2d, bytes_d2h;
    uint64_t bytes_alloc; /* asked of devmem_alloc so far (frees not subtracted) */
};

/* The host's memory: the CPU engine's. One shared object. */
struct devmem *devmem_host(void);
/* Host memory that communicators stage as if it were a device's (tests). One shared object. */
struct devmem *devmem_emulated(void);

/* Wrappers (errors name the operation). */
int devmem_alloc(struct devmem *m, size_t bytes, void **out, herr *e);
void devmem_free(struct devmem *m, void *p);
int devmem_alloc_host(struct devmem *m, size_t bytes, void **out, herr *e);
void devmem_free_host(struct devmem *m, void *p);
int devmem_lane_new(struct devmem *m, void **lane, herr *e);
void devmem_lane_free(struct devmem *m, void *lane);
int devmem_copy(struct devmem *m, void *lane, void *dst, const void *src, size_t bytes, herr *e);
int devmem_zero(struct devmem *m, void *lane, void *p, size_t bytes, herr *e);
int devmem_add_f32(struct devmem *m, void *lane, float *dst, const float *src, size_t n, herr *e);
int devmem_pack_bf16(struct devmem *m, void *lane, uint16_t *dst, const float *src, size_t n,
                     herr *e);
int devmem_unpack_bf16(struct devmem *m, void *lane, float *dst, const uint16_t *src, size_t n,
                       herr *e);
int devmem_round_bf16(struct devmem *m, void *lane, float *p, size_t n, herr *e);
int devmem_event_new(struct devmem *m, void **ev, herr *e);
void devmem_event_free(struct devmem *m, void *ev);
int devmem_record(struct devmem *m, void *lane, void *ev, herr *e);
int devmem_wait(struct devmem *m, void *lane, void *ev, herr *e);
int devmem_sync(struct devmem *m, void *ev, herr *e);
int devmem_lane_sync(struct devmem *m, void *lane, herr *e);
/* Synchronous copies for checkpoints and set-up: queued on the compute lane, then waited for. */
int devmem_to_host(struct devmem *m, void *host, const void *dev, size_t bytes, herr *e);
int devmem_from_host(struct devmem *m, void *dev, const void *host, size_t bytes, herr *e);

struct devmem_stats {
    uint64_t host_syncs, bytes_h2d, bytes_d2h;
    uint64_t bytes_alloc; /* devmem_alloc's bytes so far: the trainer's, pipeline's and
                             communicators' buffers (an engine's own stage is not made here) */
};
void devmem_read_stats(const struct devmem *m, struct devmem_stats *out);
/* For implementations: counts a host wait / bytes moved. */
void devmem_count_sync(struct devmem *m);
void devmem_count_bytes(struct devmem *m, uint64_t h2d, uint64_t d2h);

#endif
