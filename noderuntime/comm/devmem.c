#include "devmem.h"

#include <stdlib.h>
#include <string.h>

#include "bf16.h"

/* ---------- the host's memory (and the emulated device, which is host memory too) ---------- */

static int h_alloc(struct devmem *m, size_t bytes, void **out, herr *e)
{
    (void)m;
    *out = calloc(1, bytes ? bytes : 1);
    if (!*out)
        return herr_set(e, "out of memory: %zu bytes", bytes);
    return 0;
}

static void h_free(struct devmem *m, void *p)
{
    (void)m;
    free(p);
}

static int h_lane_new(struct devmem *m, void **lane, herr *e)
{
    (void)m, (void)e;
    *lane = NULL;
    return 0;
}

static void h_lane_free(struct devmem *m, void *lane) { (void)m, (void)lane; }

static int h_copy(struct devmem *m, void *lane, void *dst, const void *src, size_t bytes, herr *e)
{
    (void)m, (void)lane, (void)e;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
    return 0;
}

static int h_zero(struct devmem *m, void *lane, void *p, size_t bytes, herr *e)
{
    (void)m, (void)lane, (void)e;
    if (bytes)
        memset(p, 0, bytes);
    return 0;
}

static int h_add(struct devmem *m, void *lane, float *dst, const float *src, size_t n, herr *e)
{
    (void)m, (void)lane, (void)e;
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
    return 0;
}

static int h_pack(struct devmem *m, void *lane, uint16_t *dst, const float *src, size_t n, herr *e)
{
    (void)m, (void)lane, (void)e;
    bf16_pack(dst, src, n);
    return 0;
}

static int h_unpack(struct devmem *m, void *lane, float *dst, const uint16_t *src, size_t n,
                    herr *e)
{
    (void)m, (void)lane, (void)e;
    bf16_unpack(dst, src, n);
    return 0;
}

static int h_round(struct devmem *m, void *lane, float *p, size_t n, herr *e)
{
    (void)m, (void)lane, (void)e;
    for (size_t i = 0; i < n; i++)
        p[i] = bf16_round(p[i]);
    return 0;
}

/* events: the work is done when a call returns, so there is nothing to mark or wait for */
static int h_event_new(struct devmem *m, void **ev, herr *e)
{
    (void)m, (void)e;
    *ev = NULL;
    return 0;
}

static void h_event_free(struct devmem *m, void *ev) { (void)m, (void)ev; }

static int h_event_op(struct devmem *m, void *lane, void *ev, herr *e)
{
    (void)m, (void)lane, (void)ev, (void)e;
    return 0;
}

static int h_sync(struct devmem *m, void *ev, herr *e)
{
    (void)m, (void)ev, (void)e;
    return 0;
}

static const struct devmem_ops host_ops = {
    .alloc = h_alloc, .free = h_free, .alloc_host = h_alloc, .free_host = h_free,
    .lane_new = h_lane_new, .lane_free = h_lane_free, .copy = h_copy, .zero = h_zero,
    .add_f32 = h_add, .pack_bf16 = h_pack, .unpack_bf16 = h_unpack, .round_bf16 = h_round,
    .event_new = h_event_new, .event_free = h_event_free, .record = h_event_op,
    .wait = h_event_op, .sync = h_sync, .lane_sync = h_sync,
};

static struct devmem host_mem = {.ops = &host_ops, .name = "host", .host = 1, .device = -1};
static struct devmem emulated_mem = {.ops = &host_ops, .name = "emulated", .host = 0,
                                     .device = -1};

struct devmem *devmem_host(void) { return &host_mem; }
struct devmem *devmem_emulated(void) { return &emulated_mem; }

/* ---------- wrappers ---------- */

int devmem_alloc(struct devmem *m, size_t bytes, void **out, herr *e)
{
    *out = NULL;
    if (m->ops->alloc(m, bytes, out, e) != 0)
        return herr_wrap(e, "%s memory", m->name);
    __atomic_add_fetch(&m->bytes_alloc, (uint64_t)bytes, __ATOMIC_RELAXED);
    return 0;
}

void devmem_free(struct devmem *m, void *p)
{
    if (p)
        m->ops->free(m, p);
}

int devmem_alloc_host(struct devmem *m, size_t bytes, void **out, herr *e)
{
    *out = NULL;
    if (m->ops->alloc_host(m, bytes, out, e) != 0)
        return herr_wrap(e, "pinned host memory for %s", m->name);
    return 0;
}

void devmem_free_host(struct devmem *m, void *p)
{
    if (p)
        m->ops->free_host(m, p);
}

int devmem_lane_new(struct devmem *m, void **lane, herr *e) { return m->ops->lane_new(m, lane, e); }
void devmem_lane_free(struct devmem *m, void *lane)
{
    if (lane)
        m->ops->lane_free(m, lane);
}

int devmem_copy(struct devmem *m, void *lane, void *dst, const void *src, size_t bytes, herr *e)
{
    return bytes ? m->ops->copy(m, lane, dst, src, bytes, e) : 0;
}

int devmem_zero(struct devmem *m, void *lane, void *p, size_t bytes, herr *e)
{
    return bytes ? m->ops->zero(m, lane, p, bytes, e) : 0;
}

int devmem_add_f32(struct devmem *m, void *lane, float *dst, const float *src, size_t n, herr *e)
{
    return n ? m->ops->add_f32(m, lane, dst, src, n, e) : 0;
}

int devmem_pack_bf16(struct devmem *m, void *lane, uint16_t *dst, const float *src, size_t n,
                     herr *e)
{
    return n ? m->ops->pack_bf16(m, lane, dst, src, n, e) : 0;
}

int devmem_unpack_bf16(struct devmem *m, void *lane, float *dst, const uint16_t *src, size_t n,
                       herr *e)
{
    return n ? m->ops->unpack_bf16(m, lane, dst, src, n, e) : 0;
}

int devmem_round_bf16(struct devmem *m, void *lane, float *p, size_t n, herr *e)
{
    return n ? m->ops->round_bf16(m, lane, p, n, e) : 0;
}

int devmem_event_new(struct devmem *m, void **ev, herr *e) { return m->ops->event_new(m, ev, e); }
void devmem_event_free(struct devmem *m, void *ev)
{
    if (ev)
        m->ops->event_free(m, ev);
}
int devmem_record(struct devmem *m, void *lane, void *ev, herr *e)
{
    return m->ops->record(m, lane, ev, e);
}
int devmem_wait(struct devmem *m, void *lane, void *ev, herr *e)
{
    return m->ops->wait(m, lane, ev, e);
}
int devmem_sync(struct devmem *m, void *ev, herr *e)
{
    if (!m->host)
        devmem_count_sync(m);
    return m->ops->sync(m, ev, e);
}

int devmem_lane_sync(struct devmem *m, void *lane, herr *e)
{
    if (!m->host)
        devmem_count_sync(m);
    return m->ops->lane_sync(m, lane, e);
}

int devmem_to_host(struct devmem *m, void *host, const void *dev, size_t bytes, herr *e)
{
    if (devmem_copy(m, NULL, host, dev, bytes, e) != 0 || devmem_lane_sync(m, NULL, e) != 0)
        return herr_wrap(e, "copying %zu bytes from %s memory", bytes, m->name);
    if (!m->host)
        devmem_count_bytes(m, 0, bytes);
    return 0;
}

int devmem_from_host(struct devmem *m, void *dev, const void *host, size_t bytes, herr *e)
{
    if (devmem_copy(m, NULL, dev, host, bytes, e) != 0 || devmem_lane_sync(m, NULL, e) != 0)
        return herr_wrap(e, "copying %zu bytes to %s memory", bytes, m->name);
    if (!m->host)
        devmem_count_bytes(m, bytes, 0);
    return 0;
}

void devmem_read_stats(const struct devmem *m, struct devmem_stats *out)
{
    out->host_syncs = __atomic_load_n(&m->host_syncs, __ATOMIC_RELAXED);
    out->bytes_h2d = __atomic_load_n(&m->bytes_h2d, __ATOMIC_RELAXED);
    out->bytes_d2h = __atomic_load_n(&m->bytes_d2h, __ATOMIC_RELAXED);
    out->bytes_alloc = __atomic_load_n(&m->bytes_alloc, __ATOMIC_RELAXED);
}

void devmem_count_sync(struct devmem *m)
{
    __atomic_add_fetch(&m->host_syncs, 1, __ATOMIC_RELAXED);
}

void devmem_count_bytes(struct devmem *m, uint64_t h2d, uint64_t d2h)
{
    if (h2d)
        __atomic_add_fetch(&m->bytes_h2d, h2d, __ATOMIC_RELAXED);
    if (d2h)
        __atomic_add_fetch(&m->bytes_d2h, d2h, __ATOMIC_RELAXED);
}
