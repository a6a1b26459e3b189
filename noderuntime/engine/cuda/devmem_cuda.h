/* A GPU's memory behind devmem.h: cudaMalloc'd buffers, pinned host buffers, CUDA streams as
 * lanes (lane NULL is the engine's compute stream), events, and the element kernels (add, bf16
 * pack / unpack / round). Host waits poll with a bound (devmem.timeout_s): a peer lost inside a
 * NCCL collective leaves the GPU waiting forever, and the wait then fails naming the bound
 * instead of hanging (the caller aborts its NCCL communicators, comm_nccl.h). Precision-free: one
 * object for both CUDA engines. CUDA build only. */
#ifndef HOLMES_DEVMEM_CUDA_H
#define HOLMES_DEVMEM_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

#include "devmem.h"
#include "error.h"

/* On `device`, with `stream` (a cudaStream_t) as the compute lane. */
int devmem_cuda_create(struct devmem **out, int device, void *stream, double timeout_s, herr *e);
void devmem_cuda_free(struct devmem *m);
/* Something a host wait also watches (a NCCL communicator): `check` is called while the wait
 * polls (non-zero: the wait fails with its error, e.g. a peer lost inside a collective), `abort`
 * when the wait times out (so that the GPU work blocked on it ends). A devmem not made here
 * ignores both calls. */
int devmem_cuda_watch(struct devmem *m, int (*check)(void *ctx, herr *e), void (*abort)(void *ctx),
                      void *ctx, herr *e);
void devmem_cuda_unwatch(struct devmem *m, void *ctx);
/* The smallest total memory of CUDA devices 0..n-1 (as this process sees them), in bytes, read
 * from the device properties: no context is created, so the process that reports it (the
 * worker, before it starts its ranks) holds no GPU memory. -1 with the reason (no driver, fewer
 * than n devices). */
int devmem_cuda_total_memory(int n, double *bytes, herr *e);
/* The least peak memory bandwidth of CUDA devices 0..n-1, GB/s: twice the memory clock times
 * the bus width (double data rate; cudaDevAttrMemoryClockRate, cudaDevAttrGlobalMemoryBusWidth),
 * read without creating a context. -1 with the reason (no driver, fewer than n devices, a
 * device that reports no clock). */
int devmem_cuda_memory_gbps(int n, double *gbps, herr *e);

#ifdef __cplusplus
}
#endif

#endif
