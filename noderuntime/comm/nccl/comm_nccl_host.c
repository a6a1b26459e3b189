/* The NCCL backend of the comm seam (comm.h's comm_create_nccl, comm_backend.h): an NCCL
 * communicator (comm_nccl.h) running the trainer's operations on device buffers as they are
 * (comm_dev_*: queued on the communicator's stream behind the compute lane's event, an event
 * recorded after), and on host buffers staged through device scratch memory (the norm's
 * scalars, checkpoints). CUDA build only. Chunks follow comm_chunk (remainder to the first
 * ranks); where they are unequal, NCCL's equal chunks go through a padded scratch buffer (grown,
 * never allocated per operation). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "comm.h"
#include "comm_backend.h"
#include "comm_nccl.h"
#include "comm_tcp.h"
#include "devmem_cuda.h"

struct nccl_host {
    struct nccl_comm *nc;
    struct comm *bootstrap;       /* the TCP group NCCL's id went over (kept: closing it while a
                                     peer still reads would reset the peer's connection) */
    char name[64];
    int device, size, rank;
    uint64_t bytes;
    unsigned char *dsend, *drecv; /* device scratch */
    size_t cap;                   /* bytes of each */
    struct devmem *dm;            /* device buffers' memory (comm_set_devmem) */
    unsigned char *pad;           /* padded scratch of unequal chunks (device) */
    size_t pad_cap;
};

static int cuda_ok(struct nccl_host *h, cudaError_t ce, const char *what, herr *e)
{
    if (ce == cudaSuccess)
        return 0;
    return herr_set(e, "NCCL communicator %s: %s: %s", h->name, what, cudaGetErrorString(ce));
}

/* Scratch of at least `bytes` each, on this rank's device (set on the calling thread). */
static int scratch(struct nccl_host *h, size_t bytes, herr *e)
{
    if (cuda_ok(h, cudaSetDevice(h->device), "selecting the device", e) != 0)
        return -1;
    if (bytes <= h->cap)
        return 0;
    cudaFree(h->dsend);
    cudaFree(h->drecv);
    h->dsend = h->drecv = NULL;
    h->cap = 0;
    if (cuda_ok(h, cudaMalloc((void **)&h->dsend, bytes), "allocating staging memory", e) != 0 ||
        cuda_ok(h, cudaMalloc((void **)&h->drecv, bytes), "allocating staging memory", e) != 0)
        return -1;
    h->cap = bytes;
    return 0;
}

static int copy(struct nccl_host *h, void *dst, const void *src, size_t bytes,
                enum cudaMemcpyKind kind, herr *e)
{
    if (!bytes)
        return 0;
    return cuda_ok(h, cudaMemcpyAsync(dst, src, bytes, kind, nccl_comm_stream(h->nc)),
                   "staging a buffer", e);
}

/* A host all-reduce goes through the staging buffers in pieces of at most this many floats
 * (64 MiB): the buffers stay with the communicator, so a checkpoint's whole-stage sum with tensor
 * parallelism (trainer_ckpt.c tp_assemble) would otherwise keep two copies of the stage on the
 * device for the rest of the run, memory the planner does not give it. */
#define NH_ALL_REDUCE_PIECE ((size_t)16 << 20)

static int nh_all_reduce(void *impl, float *buf, size_t count, herr *e)
{
    struct nccl_host *h = impl;
    size_t piece = count < NH_ALL_REDUCE_PIECE ? count : NH_ALL_REDUCE_PIECE;
    if (scratch(h, piece ? piece * sizeof(float) : 4, e) != 0)
        return -1;
    size_t off = 0;
    do { /* once at least: every rank makes the same calls, also for nothing */
        size_t n = count - off < piece ? count - off : piece;
        if (copy(h, h->dsend, buf + off, n * sizeof(float), cudaMemcpyHostToDevice, e) != 0 ||
            nccl_comm_all_reduce(h->nc, (float *)h->dsend, n, e) != 0 ||
            copy(h, buf + off, h->dsend, n * sizeof(float), cudaMemcpyDeviceToHost, e) != 0 ||
            nccl_comm_sync(h->nc, e) != 0)
            return -1;
        off += n;
    } while (off < count);
    h->bytes += 2 * count * sizeof(float) * (size_t)(h->size - 1) / (size_t)h->size;
    return 0;
}

static int nh_reduce_scatter(void *impl, float *buf, size_t count, herr *e)
{
    struct nccl_host *h = impl;
    int n = h->size;
    size_t q = (count + (size_t)n - 1) / (size_t)n, off, len;
    if (scratch(h, (q ? q : 1) * (size_t)n * sizeof(float), e) != 0 ||
        cuda_ok(h, cudaMemsetAsync(h->dsend, 0, q * (size_t)n * sizeof(float), nccl_comm_stream(h->nc)),
                "clearing staging memory", e) != 0)
        return -1;
    for (int r = 0; r < n; r++) {
        tcp_chunk(count, n, r, &off, &len);
        if (copy(h, h->dsend + (size_t)r * q * sizeof(float), buf + off, len * sizeof(float),
                 cudaMemcpyHostToDevice, e) != 0)
            return -1;
    }
    tcp_chunk(count, n, h->rank, &off, &len);
    if (nccl_comm_reduce_scatter(h->nc, (const float *)h->dsend, (float *)h->drecv, q, e) != 0 ||
        copy(h, buf + off, h->drecv, len * sizeof(float), cudaMemcpyDeviceToHost, e) != 0 ||
        nccl_comm_sync(h->nc, e) != 0)
        return -1;
    h->bytes += q * sizeof(float) * (size_t)(n - 1);
    return 0;
}

static int nh_all_gather(void *impl, void *buf, size_t count, size_t esz, herr *e)
{
    struct nccl_host *h = impl;
    int n = h->size;
    unsigned char *b = buf;
    size_t q = (count + (size_t)n - 1) / (size_t)n * esz, off, len;
    tcp_chunk(count, n, h->rank, &off, &len);
    if (scratch(h, (q ? q : 1) * (size_t)n, e) != 0 ||
        copy(h, h->dsend, b + off * esz, len * esz, cudaMemcpyHostToDevice, e) != 0 ||
        nccl_comm_all_gather_bytes(h->nc, h->dsend, h->drecv, q, e) != 0)
        return -1;
    for (int r = 0; r < n; r++) {
        tcp_chunk(count, n, r, &off, &len);
        if (r != h->rank && copy(h, b + off * esz, h->drecv + (size_t)r * q, len * esz,
                                 cudaMemcpyDeviceToHost, e) != 0)
            return -1;
    }
    if (nccl_comm_sync(h->nc, e) != 0)
        return -1;
    h->bytes += q * (size_t)(n - 1);
    return 0;
}

static int nh_broadcast(void *impl, void *buf, size_t len, int root, herr *e)
{
    struct nccl_host *h = impl;
    if (scratch(h, len ? len : 1, e) != 0 ||
        (h->rank == root && copy(h, h->dsend, buf, len, cudaMemcpyHostToDevice, e) != 0) ||
        nccl_comm_broadcast(h->nc, h->dsend, len, root, e) != 0 ||
        copy(h, buf, h->dsend, len, cudaMemcpyDeviceToHost, e) != 0 || nccl_comm_sync(h->nc, e) != 0)
        return -1;
    if (h->rank == root)
        h->bytes += len;
    return 0;
}

static int nh_barrier(void *impl, herr *e)
{
    float one = 1;
    return nh_all_reduce(impl, &one, 1, e);
}

static int nh_p2p(void *impl, herr *e)
{
    struct nccl_host *h = impl;
    return herr_set(e, "NCCL communicator %s: point-to-point messages take device buffers "
                    "(comm_dev_isend, comm_dev_recv); a host buffer here is a bug", h->name);
}
static int nh_send(void *impl, int peer, uint32_t tag, const void *buf, size_t len, herr *e)
{
    (void)peer, (void)tag, (void)buf, (void)len;
    return nh_p2p(impl, e);
}
static int nh_recv(void *impl, int peer, uint32_t tag, void *buf, size_t len, herr *e)
{
    (void)peer, (void)tag, (void)buf, (void)len;
    return nh_p2p(impl, e);
}

/* ---------- device buffers ---------- */

static int nh_check(void *ctx, herr *e) { return nccl_comm_async_error(((struct nccl_host *)ctx)->nc, e); }
static void nh_abort(void *ctx) { nccl_comm_abort(((struct nccl_host *)ctx)->nc); }

static int nh_set_devmem(void *impl, struct devmem *m, herr *e)
{
    struct nccl_host *h = impl;
    if (m->device != h->device)
        return herr_set(e, "NCCL communicator %s: buffers on GPU %d, the communicator on GPU %d",
                        h->name, m->device, h->device);
    h->dm = m;
    /* a host wait on this GPU also watches this communicator for a lost peer */
    return devmem_cuda_watch(m, nh_check, nh_abort, h, e);
}

/* The operation's stream waits for the compute lane's event. */
static int dev_begin(struct nccl_host *h, void *ready, herr *e)
{
    if (cuda_ok(h, cudaSetDevice(h->device), "selecting the device", e) != 0)
        return -1;
    return cuda_ok(h, cudaStreamWaitEvent(nccl_comm_stream(h->nc), (cudaEvent_t)ready, 0),
                   "ordering after the compute stream", e);
}

static int dev_end(struct nccl_host *h, void *done, herr *e)
{
    return cuda_ok(h, cudaEventRecord((cudaEvent_t)done, nccl_comm_stream(h->nc)),
                   "recording the operation's end", e);
}

/* Padded device scratch of at least `bytes` (allocated on growth only; the stream's earlier
 * work on the old one is waited for first). */
static int pad_fit(struct nccl_host *h, size_t bytes, herr *e)
{
    if (bytes <= h->pad_cap)
        return 0;
    if (h->pad && (cuda_ok(h, cudaStreamSynchronize(nccl_comm_stream(h->nc)), "waiting", e) != 0))
        return -1;
    devmem_free(h->dm, h->pad);
    h->pad = NULL;
    h->pad_cap = 0;
    if (devmem_alloc(h->dm, bytes, (void **)&h->pad, e) != 0)
        return herr_wrap(e, "NCCL communicator %s: padding scratch", h->name);
    h->pad_cap = bytes;
    return 0;
}

static int dcopy(struct nccl_host *h, void *dst, const void *src, size_t bytes, herr *e)
{
    if (!bytes)
        return 0;
    return cuda_ok(h, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                      nccl_comm_stream(h->nc)), "copying on the device", e);
}

static int nh_dev_all_reduce(void *impl, float *buf, size_t count, void *ready, void *done,
                             herr *e)
{
    struct nccl_host *h = impl;
    if (dev_begin(h, ready, e) != 0 || nccl_comm_all_reduce(h->nc, buf, count, e) != 0 ||
        dev_end(h, done, e) != 0)
        return -1;
    h->bytes += 2 * count * sizeof(float) * (size_t)(h->size - 1) / (size_t)h->size;
    return 0;
}

/* In place, rank r's chunk (tcp_chunk) summed; equal chunks go straight to NCCL. */
static int nh_dev_reduce_scatter(void *impl, float *buf, size_t count, void *ready, void *done,
                                 herr *e)
{
    struct nccl_host *h = impl;
    int n = h->size;
    size_t q = (count + (size_t)n - 1) / (size_t)n, off, len;
    if (dev_begin(h, ready, e) != 0)
        return -1;
    if (count % (size_t)n == 0) {
        if (nccl_comm_reduce_scatter(h->nc, buf, buf + (size_t)h->rank * q, q, e) != 0)
            return -1;
    } else {
        size_t qb = q * sizeof(float);
        if (pad_fit(h, qb * (size_t)n, e) != 0 ||
            cuda_ok(h, cudaMemsetAsync(h->pad, 0, qb * (size_t)n, nccl_comm_stream(h->nc)),
                    "clearing scratch", e) != 0)
            return -1;
        for (int r = 0; r < n; r++) {
            tcp_chunk(count, n, r, &off, &len);
            if (dcopy(h, h->pad + (size_t)r * qb, buf + off, len * sizeof(float), e) != 0)
                return -1;
        }
        float *p = (float *)h->pad;
        tcp_chunk(count, n, h->rank, &off, &len);
        if (nccl_comm_reduce_scatter(h->nc, p, p + (size_t)h->rank * q, q, e) != 0 ||
            dcopy(h, buf + off, p + (size_t)h->rank * q, len * sizeof(float), e) != 0)
            return -1;
    }
    h->bytes += q * sizeof(float) * (size_t)(n - 1);
    return dev_end(h, done, e);
}

/* In place: every rank's chunk (tcp_chunk) everywhere, any element size. */
static int nh_dev_all_gather(void *impl, void *buf, size_t count, size_t esz, void *ready,
                             void *done, herr *e)
{
    struct nccl_host *h = impl;
    int n = h->size;
    unsigned char *b = buf;
    size_t q = (count + (size_t)n - 1) / (size_t)n, qb = q * esz, off, len;
    if (dev_begin(h, ready, e) != 0)
        return -1;
    if (count % (size_t)n == 0) {
        if (nccl_comm_all_gather_bytes(h->nc, b + (size_t)h->rank * qb, b, qb, e) != 0)
            return -1;
    } else {
        tcp_chunk(count, n, h->rank, &off, &len);
        if (pad_fit(h, qb * (size_t)n, e) != 0 ||
            dcopy(h, h->pad + (size_t)h->rank * qb, b + off * esz, len * esz, e) != 0 ||
            nccl_comm_all_gather_bytes(h->nc, h->pad + (size_t)h->rank * qb, h->pad, qb, e) != 0)
            return -1;
        for (int r = 0; r < n; r++) {
            tcp_chunk(count, n, r, &off, &len);
            if (r != h->rank && dcopy(h, b + off * esz, h->pad + (size_t)r * qb, len * esz, e) != 0)
                return -1;
        }
    }
    h->bytes += qb * (size_t)(n - 1);
    return dev_end(h, done, e);
}

static int nh_dev_send(void *impl, int peer, const void *buf, size_t len, void *ready, void *done,
                       herr *e)
{
    struct nccl_host *h = impl;
    if (dev_begin(h, ready, e) != 0 || nccl_comm_send(h->nc, peer, buf, len, e) != 0 ||
        dev_end(h, done, e) != 0)
        return -1;
    h->bytes += len;
    return 0;
}

static int nh_dev_recv(void *impl, int peer, void *buf, size_t len, void *ready, void *done,
                       herr *e)
{
    struct nccl_host *h = impl;
    if (dev_begin(h, ready, e) != 0 || nccl_comm_recv(h->nc, peer, buf, len, e) != 0)
        return -1;
    return dev_end(h, done, e);
}

static int nh_size(const void *impl) { return ((const struct nccl_host *)impl)->size; }
static int nh_rank(const void *impl) { return ((const struct nccl_host *)impl)->rank; }
static const char *nh_name(const void *impl) { return ((const struct nccl_host *)impl)->name; }
static uint64_t nh_bytes(const void *impl) { return ((const struct nccl_host *)impl)->bytes; }
static const char *nh_transport(const void *impl)
{
    return nccl_comm_transport(((const struct nccl_host *)impl)->nc);
}

static void nh_destroy(void *impl)
{
    struct nccl_host *h = impl;
    if (!h)
        return;
    cudaSetDevice(h->device);
    if (h->dm)
        devmem_cuda_unwatch(h->dm, h);
    nccl_comm_free(h->nc);
    cudaFree(h->dsend);
    cudaFree(h->drecv);
    if (h->dm)
        devmem_free(h->dm, h->pad);
    comm_free(h->bootstrap);
    free(h);
}

static const struct comm_backend nccl_backend = {
    .kind = "nccl", .size = nh_size, .rank = nh_rank, .name = nh_name, .bytes_sent = nh_bytes,
    .transport = nh_transport, .send = nh_send, .recv = nh_recv,
    .reduce_scatter_f32 = nh_reduce_scatter, .all_gather = nh_all_gather,
    .all_reduce_f32 = nh_all_reduce, .broadcast = nh_broadcast, .barrier = nh_barrier,
    .destroy = nh_destroy, .set_devmem = nh_set_devmem, .dev_send = nh_dev_send,
    .dev_recv = nh_dev_recv, .dev_reduce_scatter_f32 = nh_dev_reduce_scatter,
    .dev_all_gather = nh_dev_all_gather, .dev_all_reduce_f32 = nh_dev_all_reduce,
};

int comm_create_nccl(struct comm **out, struct comm *bootstrap, const struct comm_nccl_params *p,
                     herr *e)
{
    *out = NULL;
    struct nccl_host *h = calloc(1, sizeof *h);
    if (!h) {
        comm_free(bootstrap);
        return herr_set(e, "out of memory for NCCL communicator %s", p->name);
    }
    h->bootstrap = bootstrap;
    snprintf(h->name, sizeof h->name, "%s", p->name ? p->name : "?");
    h->device = p->device;
    h->size = comm_size(bootstrap);
    h->rank = comm_rank(bootstrap);
    struct nccl_comm_spec s = {.name = h->name, .size = h->size, .rank = h->rank,
                               .net_name = p->net_name, .ib_hca = p->ib_hca,
                               .gid_index = p->gid_index, .socket_ifname = p->socket_ifname,
                               .device = p->device, .timeout_s = p->timeout_s};
    if (nccl_comm_create(&h->nc, &s, bootstrap, e) != 0) {
        nh_destroy(h);
        return -1;
    }
    /* NCCL connects on first use: one all-reduce, then the network it chose against the plan */
    float probe = 1;
    if (nh_all_reduce(h, &probe, 1, e) != 0 || nccl_comm_check_transport(h->nc, e) != 0) {
        nh_destroy(h);
        return -1;
    }
    h->bytes = 0;
    return comm_create_backend(out, &nccl_backend, h, e);
}
