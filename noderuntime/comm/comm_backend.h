/* The comm seam's other side: what a transport provides so that comm.c (the queue, the progress
 * thread, the asynchronous handles) can run it. The TCP backend (comm_tcp.h) is one; the NCCL
 * backend (nccl/comm_nccl_host.c, CUDA build only) another. Every operation runs on the
 * communicator's progress thread, except send/recv, which run on the caller's. Semantics of each
 * collective are comm_tcp.h's (in place, fp32 sums, chunks as comm_chunk). */
#ifndef HOLMES_COMM_BACKEND_H
#define HOLMES_COMM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct comm;
struct devmem;

struct comm_backend {
    const char *kind; /* "tcp", "nccl" */
    int (*size)(const void *impl);
    int (*rank)(const void *impl);
    const char *(*name)(const void *impl);
    uint64_t (*bytes_sent)(const void *impl);
    /* the network really in use ("tcp"; for NCCL what NCCL says it chose, e.g. "IB") */
    const char *(*transport)(const void *impl);
    int (*send)(void *impl, int peer, uint32_t tag, const void *buf, size_t len, herr *e);
    int (*recv)(void *impl, int peer, uint32_t tag, void *buf, size_t len, herr *e);
    int (*reduce_scatter_f32)(void *impl, float *buf, size_t count, herr *e);
    int (*all_gather)(void *impl, void *buf, size_t count, size_t elem_size, herr *e);
    int (*all_reduce_f32)(void *impl, float *buf, size_t count, herr *e);
    int (*broadcast)(void *impl, void *buf, size_t len, int root, herr *e);
    int (*barrier)(void *impl, herr *e);
    void (*destroy)(void *impl);
    /* Device buffers (optional: NULL, and comm.c stages them through pinned host memory). Each
     * queues the operation behind the event `ready` (of the rank's devmem) and records `done` when
     * its result is in place (for a send: when the buffer may be reused). set_devmem is called
     * once, before any of them. */
    int (*set_devmem)(void *impl, struct devmem *m, herr *e);
    int (*dev_send)(void *impl, int peer, const void *buf, size_t len, void *ready, void *done,
                    herr *e);
    int (*dev_recv)(void *impl, int peer, void *buf, size_t len, void *ready, void *done,
                    herr *e);
    int (*dev_reduce_scatter_f32)(void *impl, float *buf, size_t count, void *ready, void *done,
                                  herr *e);
    int (*dev_all_gather)(void *impl, void *buf, size_t count, size_t elem_size, void *ready,
                          void *done, herr *e);
    int (*dev_all_reduce_f32)(void *impl, float *buf, size_t count, void *ready, void *done,
                              herr *e);
};

/* A communicator over `impl` (taken: destroyed by comm_free, or here on failure). */
int comm_create_backend(struct comm **out, const struct comm_backend *be, void *impl, herr *e);

#endif
