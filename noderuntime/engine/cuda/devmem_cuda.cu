/* devmem.h on a GPU (devmem_cuda.h). Never run on a GPU yet: written and compile-checked
 * without one; tests/gpu/worker_gpu.sh exercises it through the trainer. */
#include "devmem_cuda.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pthread.h>

#include <cuda_runtime.h>

namespace {

struct watch {
    int (*check)(void *ctx, herr *e);
    void (*abort)(void *ctx);
    void *ctx;
};

struct cuda_mem {
    struct devmem m;
    cudaStream_t compute;
    pthread_mutex_t mu; /* the watches: communicators come and go on other threads */
    struct watch *w;
    int nw, capw;
};

/* Runs every watch's check (abort: every watch's abort); the first error. */
int watches(struct devmem *m, int abort, herr *e)
{
    struct cuda_mem *c = (struct cuda_mem *)m->ctx;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nw; i++) {
        if (abort)
            c->w[i].abort(c->w[i].ctx);
        else if (rc == 0 && c->w[i].check(c->w[i].ctx, e) != 0)
            rc = -1;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

cudaStream_t lane_of(struct devmem *m, void *lane)
{
    return lane ? (cudaStream_t)lane : ((struct cuda_mem *)m->ctx)->compute;
}

int ck(struct devmem *m, cudaError_t ce, const char *what, herr *e)
{
    if (ce == cudaSuccess)
        return 0;
    (void)cudaGetLastError(); /* a failed allocation's error is not sticky */
    return herr_set(e, "GPU %d: %s: %s", m->device, what, cudaGetErrorString(ce));
}

int set_device(struct devmem *m, herr *e)
{
    return ck(m, cudaSetDevice(m->device), "selecting the device", e);
}

/* ---------- element kernels (grid-stride, 16-byte accesses where aligned) ---------- */

__global__ void add_kernel(float *dst, const float *src, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += step)
        dst[i] += src[i];
}

__device__ uint16_t to_bf16(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even, as bf16.h */
    return (uint16_t)(u >> 16);
}

__device__ float from_bf16(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

__global__ void pack_kernel(uint16_t *dst, const float *src, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += step)
        dst[i] = to_bf16(src[i]);
}

__global__ void unpack_kernel(float *dst, const uint16_t *src, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += step)
        dst[i] = from_bf16(src[i]);
}

__global__ void round_kernel(float *p, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += step)
        p[i] = from_bf16(to_bf16(p[i]));
}

unsigned grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

/* ---------- the operations ---------- */

int c_alloc(struct devmem *m, size_t bytes, void **out, herr *e)
{
    *out = NULL;
    if (set_device(m, e) != 0)
        return -1;
    if (bytes == 0)
        bytes = 16;
    void *p = NULL;
    cudaError_t ce = cudaMalloc(&p, bytes);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return herr_set_kind(e, HERR_CONFIG, "GPU %d: out of device memory: %zu bytes asked, %zu of "
                             "%zu free", m->device, bytes, fr, tot);
    }
    if (ck(m, cudaMemset(p, 0, bytes), "clearing new memory", e) != 0) {
        cudaFree(p);
        return -1;
    }
    *out = p;
    return 0;
}

void c_free(struct devmem *m, void *p)
{
    cudaSetDevice(m->device);
    cudaFree(p);
}

int c_alloc_host(struct devmem *m, size_t bytes, void **out, herr *e)
{
    *out = NULL;
    if (set_device(m, e) != 0)
        return -1;
    return ck(m, cudaMallocHost(out, bytes ? bytes : 16), "allocating pinned host memory", e);
}

void c_free_host(struct devmem *m, void *p)
{
    (void)m;
    cudaFreeHost(p);
}

int c_lane_new(struct devmem *m, void **lane, herr *e)
{
    *lane = NULL;
    cudaStream_t s;
    if (set_device(m, e) != 0 ||
        ck(m, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating a stream", e) != 0)
        return -1;
    *lane = (void *)s;
    return 0;
}

void c_lane_free(struct devmem *m, void *lane)
{
    cudaSetDevice(m->device);
    cudaStreamDestroy((cudaStream_t)lane);
}

int c_copy(struct devmem *m, void *lane, void *dst, const void *src, size_t bytes, herr *e)
{
    if (set_device(m, e) != 0)
        return -1;
    return ck(m, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, lane_of(m, lane)), "copying",
              e);
}

int c_zero(struct devmem *m, void *lane, void *p, size_t bytes, herr *e)
{
    if (set_device(m, e) != 0)
        return -1;
    return ck(m, cudaMemsetAsync(p, 0, bytes, lane_of(m, lane)), "clearing memory", e);
}

int launched(struct devmem *m, const char *what, herr *e)
{
    return ck(m, cudaGetLastError(), what, e);
}

int c_add(struct devmem *m, void *lane, float *dst, const float *src, size_t n, herr *e)
{
    if (set_device(m, e) != 0)
        return -1;
    add_kernel<<<grid_for(n), 256, 0, lane_of(m, lane)>>>(dst, src, n);
    return launched(m, "adding", e);
}

int c_pack(struct devmem *m, void *lane, uint16_t *dst, const float *src, size_t n, herr *e)
{
    if (set_device(m, e) != 0)
        return -1;
    pack_kernel<<<grid_for(n), 256, 0, lane_of(m, lane)>>>(dst, src, n);
    return launched(m, "rounding to bf16", e);
}

int c_unpack(struct devmem *m, void *lane, float *dst, const uint16_t *src, size_t n, herr *e)
{
    if (set_device(m, e) != 0)
        return -1;
    unpack_kernel<<<grid_for(n), 256, 0, lane_of(m, lane)>>>(dst, src, n);
    return launched(m, "widening bf16", e);
}

int c_round(struct devmem *m, void *lane, float *p, size_t n, herr *e)
{
    if (set_device(m, e) != 0)
        return -1;
    round_kernel<<<grid_for(n), 256, 0, lane_of(m, lane)>>>(p, n);
    return launched(m, "rounding to bf16", e);
}

int c_event_new(struct devmem *m, void **ev, herr *e)
{
    *ev = NULL;
    cudaEvent_t x;
    if (set_device(m, e) != 0 ||
        ck(m, cudaEventCreateWithFlags(&x, cudaEventDisableTiming), "creating an event", e) != 0)
        return -1;
    *ev = (void *)x;
    return 0;
}

void c_event_free(struct devmem *m, void *ev)
{
    cudaSetDevice(m->device);
    cudaEventDestroy((cudaEvent_t)ev);
}

int c_record(struct devmem *m, void *lane, void *ev, herr *e)
{
    if (set_device(m, e) != 0)
        return -1;
    return ck(m, cudaEventRecord((cudaEvent_t)ev, lane_of(m, lane)), "recording an event", e);
}

int c_wait(struct devmem *m, void *lane, void *ev, herr *e)
{
    if (set_device(m, e) != 0)
        return -1;
    return ck(m, cudaStreamWaitEvent(lane_of(m, lane), (cudaEvent_t)ev, 0), "ordering streams", e);
}

double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Polls `query` until it is no longer cudaErrorNotReady, within m->timeout_s: a short spin,
 * then sleeps that grow to 1 ms (a GPU step is milliseconds; a lost peer is seconds). */
template <typename Q> int poll_done(struct devmem *m, Q query, const char *what, herr *e)
{
    double start = now_s();
    long sleep_ns = 0;
    for (int polls = 0;; polls++) {
        cudaError_t ce = query();
        if (ce != cudaErrorNotReady)
            return ck(m, ce, what, e);
        if (polls % 64 == 63 && watches(m, 0, e) != 0)
            return herr_wrap(e, "GPU %d: %s", m->device, what);
        if (m->timeout_s > 0 && now_s() - start > m->timeout_s) {
            watches(m, 1, NULL); /* the GPU work waiting on a lost peer ends */
            return herr_peer(e, "GPU %d: %s: the device was still busy after %.0f s (a peer lost "
                             "inside a collective?); its NCCL communicators were aborted",
                             m->device, what, m->timeout_s);
        }
        if (sleep_ns) {
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
        }
        sleep_ns = sleep_ns ? (sleep_ns < 1000000 ? sleep_ns * 2 : 1000000) : 1000;
    }
}

int c_sync(struct devmem *m, void *ev, herr *e)
{
    if (!ev)
        return 0;
    if (set_device(m, e) != 0)
        return -1;
    return poll_done(m, [ev] { return cudaEventQuery((cudaEvent_t)ev); }, "waiting for an event",
                     e);
}

int c_lane_sync(struct devmem *m, void *lane, herr *e)
{
    if (set_device(m, e) != 0)
        return -1;
    cudaStream_t s = lane_of(m, lane);
    return poll_done(m, [s] { return cudaStreamQuery(s); }, "waiting for a stream", e);
}

const struct devmem_ops cuda_ops = {
    c_alloc, c_free, c_alloc_host, c_free_host, c_lane_new, c_lane_free, c_copy, c_zero, c_add,
    c_pack, c_unpack, c_round, c_event_new, c_event_free, c_record, c_wait, c_sync, c_lane_sync,
};

} /* namespace */

extern "C" int devmem_cuda_create(struct devmem **out, int device, void *stream, double timeout_s,
                                  herr *e)
{
    *out = NULL;
    struct cuda_mem *c = (struct cuda_mem *)calloc(1, sizeof *c);
    if (!c)
        return herr_set(e, "out of memory for the GPU's memory object");
    c->compute = (cudaStream_t)stream;
    pthread_mutex_init(&c->mu, NULL);
    c->m.ops = &cuda_ops;
    c->m.name = "cuda";
    c->m.host = 0;
    c->m.device = device;
    c->m.ctx = c;
    c->m.timeout_s = timeout_s;
    *out = &c->m;
    return 0;
}

extern "C" void devmem_cuda_free(struct devmem *m)
{
    if (!m)
        return;
    struct cuda_mem *c = (struct cuda_mem *)m->ctx;
    pthread_mutex_destroy(&c->mu);
    free(c->w);
    free(c);
}

extern "C" int devmem_cuda_watch(struct devmem *m, int (*check)(void *ctx, herr *e),
                                 void (*abort)(void *ctx), void *ctx, herr *e)
{
    if (!m || m->ops != &cuda_ops)
        return 0;
    struct cuda_mem *c = (struct cuda_mem *)m->ctx;
    pthread_mutex_lock(&c->mu);
    if (c->nw == c->capw) {
        int cap = c->capw ? 2 * c->capw : 8;
        struct watch *n = (struct watch *)realloc(c->w, (size_t)cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&c->mu);
            return herr_set(e, "out of memory for the GPU's watches");
        }
        c->w = n;
        c->capw = cap;
    }
    c->w[c->nw++] = watch{check, abort, ctx};
    pthread_mutex_unlock(&c->mu);
    return 0;
}

extern "C" void devmem_cuda_unwatch(struct devmem *m, void *ctx)
{
    if (!m || m->ops != &cuda_ops)
        return;
    struct cuda_mem *c = (struct cuda_mem *)m->ctx;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nw; i++)
        if (c->w[i].ctx == ctx) {
            c->w[i] = c->w[--c->nw];
            break;
        }
    pthread_mutex_unlock(&c->mu);
}

/* Are CUDA devices 0..n-1 visible? 0, or -1 with the reason, `what` naming the figure asked. */
static int devices_visible(int n, const char *what, herr *e)
{
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        return herr_set(e, "%s: no CUDA device (%s)", what, cudaGetErrorString(ce));
    }
    if (n < 1 || count < n)
        return herr_set(e, "%s: %d GPUs asked, %d visible", what, n, count);
    return 0;
}

int devmem_cuda_memory_gbps(int n, double *gbps, herr *e)
{
    *gbps = 0;
    if (devices_visible(n, "GPU memory bandwidth", e))
        return -1;
    double least = 0;
    for (int d = 0; d < n; d++) {
        int khz = 0, bits = 0;
        cudaError_t ce = cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, d);
        if (ce == cudaSuccess)
            ce = cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, d);
        if (ce != cudaSuccess) {
            (void)cudaGetLastError();
            return herr_set(e, "GPU memory bandwidth: device %d: %s", d, cudaGetErrorString(ce));
        }
        if (khz <= 0 || bits <= 0)
            return herr_set(e, "GPU memory bandwidth: device %d reports a memory clock of %d kHz "
                            "and a bus of %d bits", d, khz, bits);
        double g = 2.0 * khz * 1e3 * (bits / 8.0) / 1e9;
        if (d == 0 || g < least)
            least = g;
    }
    *gbps = least;
    return 0;
}

int devmem_cuda_total_memory(int n, double *bytes, herr *e)
{
    *bytes = 0;
    if (devices_visible(n, "GPU memory", e))
        return -1;
    double least = 0;
    for (int d = 0; d < n; d++) {
        cudaDeviceProp prop;
        cudaError_t ce = cudaGetDeviceProperties(&prop, d);
        if (ce != cudaSuccess) {
            (void)cudaGetLastError();
            return herr_set(e, "GPU memory: device %d: %s", d, cudaGetErrorString(ce));
        }
        if (d == 0 || (double)prop.totalGlobalMem < least)
            least = (double)prop.totalGlobalMem;
    }
    *bytes = least;
    return 0;
}
