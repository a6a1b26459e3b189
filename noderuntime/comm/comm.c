#include "comm.h"

#include "comm_backend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum req_kind { REQ_SEND, REQ_REDUCE_SCATTER, REQ_ALL_GATHER, REQ_ALL_REDUCE, REQ_BROADCAST, REQ_BARRIER,
                REQ_RECV /* device buffers on a native backend only */ };

struct comm_req {
    struct comm_req *next;
    struct comm *comm;
    enum req_kind kind;
    void *buf;
    size_t count, elem_size;
    int peer; /* send: peer; broadcast: root */
    uint32_t tag;
    int done, rc;
    herr err;
    int dev;              /* buf is in the communicator's device memory */
    void *ready, *ev_done; /* dev: the compute lane's point at the call; the result in place */
};

/* Host staging of device buffers (a backend without device operations). */
struct staging {
    void *buf;
    size_t cap;
    void *ev;        /* recorded after the last copy out of buf that is not waited for */
};

struct comm {
    const struct comm_backend *be;
    void *impl;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work queued, stop requested */
    pthread_cond_t done_cv; /* a request finished */
    struct comm_req *head, *tail;
    int stop;
    /* device buffers (comm_set_devmem) */
    struct devmem *dm;      /* NULL: host memory only */
    void *lane;             /* the communicator's copy lane */
    struct staging queued;  /* operations on the progress thread */
    struct staging p2p;     /* comm_dev_recv on the caller's thread */
    void **evs;             /* free events (under mu) */
    int nevs, cap_evs;
    uint64_t staged;        /* bytes copied between device buffers and the staging buffers */
};

static int staged_run(struct comm_req *r);
static int native_run(struct comm_req *r);
static int dev_finish(struct comm_req *r, int rc, herr *e);

static int run_req(struct comm_req *r)
{
    const struct comm_backend *be = r->comm->be;
    void *t = r->comm->impl;
    if (r->dev)
        return be->set_devmem ? native_run(r) : staged_run(r);
    switch (r->kind) {
    case REQ_SEND:
        return be->send(t, r->peer, r->tag, r->buf, r->count, &r->err);
    case REQ_REDUCE_SCATTER:
        return be->reduce_scatter_f32(t, r->buf, r->count, &r->err);
    case REQ_ALL_GATHER:
        return be->all_gather(t, r->buf, r->count, r->elem_size, &r->err);
    case REQ_ALL_REDUCE:
        return be->all_reduce_f32(t, r->buf, r->count, &r->err);
    case REQ_BROADCAST:
        return be->broadcast(t, r->buf, r->count, r->peer, &r->err);
    case REQ_BARRIER:
        return be->barrier(t, &r->err);
    case REQ_RECV:
        break;
    }
    return herr_set(&r->err, "unknown request kind");
}

static void *progress_main(void *arg)
{
    struct comm *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->head && !c->stop)
            pthread_cond_wait(&c->cv, &c->mu);
        if (!c->head)
            break;
        struct comm_req *r = c->head;
        c->head = r->next;
        if (!c->head)
            c->tail = NULL;
        pthread_mutex_unlock(&c->mu);
        int rc = run_req(r);
        pthread_mutex_lock(&c->mu);
        r->rc = rc;
        r->done = 1;
        pthread_cond_broadcast(&c->done_cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int comm_create_backend(struct comm **out, const struct comm_backend *be, void *impl, herr *e)
{
    *out = NULL;
    struct comm *c = calloc(1, sizeof *c);
    if (!c) {
        herr_set(e, "out of memory for communicator %s", be->name(impl));
        be->destroy(impl);
        return -1;
    }
    c->be = be;
    c->impl = impl;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    if (pthread_create(&c->thread, NULL, progress_main, c) != 0) {
        herr_set(e, "communicator %s: cannot start its progress thread", be->name(impl));
        be->destroy(impl);
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

/* ---------- the TCP backend ---------- */

static int tcp_be_size(const void *t) { return tcp_comm_size(t); }
static int tcp_be_rank(const void *t) { return tcp_comm_index(t); }
static const char *tcp_be_name(const void *t) { return tcp_comm_name(t); }
static uint64_t tcp_be_bytes(const void *t) { return tcp_comm_bytes_sent(t); }
static const char *tcp_be_transport(const void *t) { (void)t; return "tcp"; }
static int tcp_be_send(void *t, int peer, uint32_t tag, const void *buf, size_t len, herr *e)
{
    return tcp_send(t, peer, tag, buf, len, e);
}
static int tcp_be_recv(void *t, int peer, uint32_t tag, void *buf, size_t len, herr *e)
{
    return tcp_recv(t, peer, tag, buf, len, e);
}
static int tcp_be_rs(void *t, float *buf, size_t count, herr *e)
{
    return tcp_reduce_scatter_f32(t, buf, count, e);
}
static int tcp_be_ag(void *t, void *buf, size_t count, size_t esz, herr *e)
{
    return tcp_all_gather(t, buf, count, esz, e);
}
static int tcp_be_ar(void *t, float *buf, size_t count, herr *e)
{
    return tcp_all_reduce_f32(t, buf, count, e);
}
static int tcp_be_bcast(void *t, void *buf, size_t len, int root, herr *e)
{
    return tcp_broadcast(t, buf, len, root, e);
}
static int tcp_be_barrier(void *t, herr *e) { return tcp_barrier(t, e); }
static void tcp_be_destroy(void *t) { tcp_comm_free(t); }

static const struct comm_backend tcp_backend = {
    .kind = "tcp", .size = tcp_be_size, .rank = tcp_be_rank, .name = tcp_be_name,
    .bytes_sent = tcp_be_bytes, .transport = tcp_be_transport, .send = tcp_be_send,
    .recv = tcp_be_recv, .reduce_scatter_f32 = tcp_be_rs, .all_gather = tcp_be_ag,
    .all_reduce_f32 = tcp_be_ar, .broadcast = tcp_be_bcast, .barrier = tcp_be_barrier,
    .destroy = tcp_be_destroy,
};

int comm_create(struct comm **out, struct tcp_listener *l, const struct tcp_group_spec *spec, herr *e)
{
    *out = NULL;
    struct tcp_comm *t;
    if (tcp_comm_create(&t, l, spec, e) != 0)
        return -1;
    return comm_create_backend(out, &tcp_backend, t, e);
}

static void staging_free(struct comm *c, struct staging *s)
{
    if (s->ev) /* a copy out of it may still run */
        devmem_sync(c->dm, s->ev, NULL);
    devmem_free_host(c->dm, s->buf);
    devmem_event_free(c->dm, s->ev);
    memset(s, 0, sizeof *s);
}

void comm_free(struct comm *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    if (c->dm) {
        staging_free(c, &c->queued);
        staging_free(c, &c->p2p);
        for (int i = 0; i < c->nevs; i++)
            devmem_event_free(c->dm, c->evs[i]);
        free(c->evs);
        devmem_lane_free(c->dm, c->lane);
    }
    c->be->destroy(c->impl);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    pthread_cond_destroy(&c->done_cv);
    free(c);
}

int comm_size(const struct comm *c) { return c->be->size(c->impl); }
int comm_rank(const struct comm *c) { return c->be->rank(c->impl); }
const char *comm_name(const struct comm *c) { return c->be->name(c->impl); }
uint64_t comm_bytes_sent(const struct comm *c) { return c->be->bytes_sent(c->impl); }
const char *comm_backend_kind(const struct comm *c) { return c->be->kind; }
const char *comm_transport(const struct comm *c) { return c->be->transport(c->impl); }

void comm_chunk(const struct comm *c, size_t count, int r, size_t *offset, size_t *len)
{
    tcp_chunk(count, comm_size(c), r, offset, len);
}

int comm_send(struct comm *c, int peer, uint32_t tag, const void *buf, size_t len, herr *e)
{
    return c->be->send(c->impl, peer, tag, buf, len, e);
}

int comm_recv(struct comm *c, int peer, uint32_t tag, void *buf, size_t len, herr *e)
{
    return c->be->recv(c->impl, peer, tag, buf, len, e);
}

/* Queues an operation (device buffers: with the compute lane's point `ready` and the event
 * `done` to record). */
static int submit_ev(struct comm *c, enum req_kind kind, void *buf, size_t count, size_t esz,
                     int peer, uint32_t tag, int dev, void *ready, void *done,
                     struct comm_req **out, herr *e)
{
    *out = NULL;
    struct comm_req *r = calloc(1, sizeof *r);
    if (!r)
        return herr_set(e, "communicator %s: out of memory for a request", comm_name(c));
    *r = (struct comm_req){.comm = c, .kind = kind, .buf = buf, .count = count, .elem_size = esz,
                           .peer = peer, .tag = tag, .dev = dev,
                           .ready = ready, .ev_done = done};
    pthread_mutex_lock(&c->mu);
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    *out = r;
    return 0;
}

static int submit(struct comm *c, enum req_kind kind, void *buf, size_t count, size_t esz, int peer,
                  uint32_t tag, struct comm_req **out, herr *e)
{
    return submit_ev(c, kind, buf, count, esz, peer, tag, 0, NULL, NULL, out, e);
}

int comm_wait(struct comm_req *r, herr *e)
{
    if (!r)
        return 0;
    struct comm *c = r->comm;
    pthread_mutex_lock(&c->mu);
    while (!r->done)
        pthread_cond_wait(&c->done_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    int rc = r->rc;
    if (rc != 0 && e)
        *e = r->err;
    if (r->dev)
        rc = dev_finish(r, rc, e);
    free(r);
    return rc;
}

int comm_isend(struct comm *c, int peer, uint32_t tag, const void *buf, size_t len,
               struct comm_req **req, herr *e)
{
    return submit(c, REQ_SEND, (void *)buf, len, 1, peer, tag, req, e);
}

int comm_ireduce_scatter(struct comm *c, float *buf, size_t count, struct comm_req **req, herr *e)
{
    return submit(c, REQ_REDUCE_SCATTER, buf, count, sizeof(float), 0, 0, req, e);
}

int comm_iall_gather(struct comm *c, void *buf, size_t count, size_t elem_size,
                     struct comm_req **req, herr *e)
{
    return submit(c, REQ_ALL_GATHER, buf, count, elem_size, 0, 0, req, e);
}

int comm_iall_reduce(struct comm *c, float *buf, size_t count, struct comm_req **req, herr *e)
{
    return submit(c, REQ_ALL_REDUCE, buf, count, sizeof(float), 0, 0, req, e);
}

int comm_ibroadcast(struct comm *c, void *buf, size_t len, int root, struct comm_req **req, herr *e)
{
    return submit(c, REQ_BROADCAST, buf, len, 1, root, 0, req, e);
}


int comm_reduce_scatter(struct comm *c, float *buf, size_t count, herr *e)
{
    struct comm_req *r;
    if (comm_ireduce_scatter(c, buf, count, &r, e) != 0)
        return -1;
    return comm_wait(r, e);
}

int comm_all_gather(struct comm *c, void *buf, size_t count, size_t elem_size, herr *e)
{
    struct comm_req *r;
    if (comm_iall_gather(c, buf, count, elem_size, &r, e) != 0)
        return -1;
    return comm_wait(r, e);
}

int comm_all_reduce(struct comm *c, float *buf, size_t count, herr *e)
{
    struct comm_req *r;
    if (comm_iall_reduce(c, buf, count, &r, e) != 0)
        return -1;
    return comm_wait(r, e);
}

int comm_broadcast(struct comm *c, void *buf, size_t len, int root, herr *e)
{
    struct comm_req *r;
    if (comm_ibroadcast(c, buf, len, root, &r, e) != 0)
        return -1;
    return comm_wait(r, e);
}

int comm_barrier(struct comm *c, herr *e)
{
    struct comm_req *r;
    if (submit(c, REQ_BARRIER, NULL, 0, 0, 0, 0, &r, e) != 0)
        return -1;
    return comm_wait(r, e);
}

/* ---------- device buffers ---------- */

int comm_set_devmem(struct comm *c, struct devmem *m, herr *e)
{
    if (c->dm)
        return c->dm == m ? 0 : herr_set(e, "communicator %s: device memory set twice", comm_name(c));
    if (!m || m->host)
        return 0; /* host memory: the comm_dev_* calls are the host calls */
    if (devmem_lane_new(m, &c->lane, e) != 0)
        return herr_wrap(e, "communicator %s", comm_name(c));
    if (c->be->set_devmem && c->be->set_devmem(c->impl, m, e) != 0) {
        devmem_lane_free(m, c->lane);
        c->lane = NULL;
        return herr_wrap(e, "communicator %s", comm_name(c));
    }
    c->dm = m;
    return 0;
}

int comm_dev_native(const struct comm *c) { return c->dm && c->be->set_devmem != NULL; }

uint64_t comm_bytes_staged(const struct comm *c)
{
    return __atomic_load_n(&c->staged, __ATOMIC_RELAXED);
}

/* An event from the pool (or a new one). */
static int event_take(struct comm *c, void **ev, herr *e)
{
    pthread_mutex_lock(&c->mu);
    *ev = c->nevs ? c->evs[--c->nevs] : NULL;
    pthread_mutex_unlock(&c->mu);
    if (*ev)
        return 0;
    return devmem_event_new(c->dm, ev, e);
}

static void event_give(struct comm *c, void *ev)
{
    if (!ev)
        return;
    pthread_mutex_lock(&c->mu);
    if (c->nevs == c->cap_evs) {
        int cap = c->cap_evs ? 2 * c->cap_evs : 16;
        void **n = realloc(c->evs, (size_t)cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&c->mu);
            devmem_event_free(c->dm, ev);
            return;
        }
        c->evs = n;
        c->cap_evs = cap;
    }
    c->evs[c->nevs++] = ev;
    pthread_mutex_unlock(&c->mu);
}

/* Queues a device-buffer operation: the compute lane's point now is what it reads. */
static int submit_dev(struct comm *c, enum req_kind kind, void *buf, size_t count, size_t esz,
                      int peer, uint32_t tag, struct comm_req **out, herr *e)
{
    *out = NULL;
    void *ready = NULL, *done = NULL;
    if (event_take(c, &ready, e) != 0 || event_take(c, &done, e) != 0 ||
        devmem_record(c->dm, NULL, ready, e) != 0) {
        event_give(c, ready);
        event_give(c, done);
        return herr_wrap(e, "communicator %s", comm_name(c));
    }
    if (submit_ev(c, kind, buf, count, esz, peer, tag, 1, ready, done, out, e) != 0) {
        event_give(c, ready);
        event_give(c, done);
        return -1;
    }
    return 0;
}

/* Pinned staging of at least `bytes` (grown, never per transfer once large enough). */
static int staging_fit(struct comm *c, struct staging *s, size_t bytes, herr *e)
{
    if (bytes <= s->cap)
        return 0;
    if (s->ev && devmem_sync(c->dm, s->ev, e) != 0)
        return -1;
    devmem_free_host(c->dm, s->buf);
    s->buf = NULL;
    s->cap = 0;
    if (devmem_alloc_host(c->dm, bytes, &s->buf, e) != 0)
        return -1;
    s->cap = bytes;
    return 0;
}

/* What an operation reads from the buffer and writes back ([lo, hi) in bytes each). */
static void staged_ranges(const struct comm_req *r, size_t *down_lo, size_t *down_hi,
                          size_t *up_lo, size_t *up_hi)
{
    struct comm *c = r->comm;
    size_t all = r->count * r->elem_size, off, len;
    int n = comm_size(c), me = comm_rank(c);
    *down_lo = 0;
    *down_hi = all;
    *up_lo = 0;
    *up_hi = all;
    switch (r->kind) {
    case REQ_SEND:
        *up_hi = 0;
        break;
    case REQ_REDUCE_SCATTER:
        tcp_chunk(r->count, n, me, &off, &len);
        *up_lo = off * r->elem_size;
        *up_hi = (off + len) * r->elem_size;
        break;
    case REQ_ALL_GATHER:
        tcp_chunk(r->count, n, me, &off, &len);
        *down_lo = off * r->elem_size;
        *down_hi = (off + len) * r->elem_size;
        break;
    case REQ_BROADCAST:
        if (me != r->peer)
            *down_hi = 0;
        else
            *up_hi = 0;
        break;
    default:
        break;
    }
}

/* A device-buffer operation on a backend without device operations, on the progress thread:
 * the bytes it reads down to pinned memory (once the compute lane has written them), the host
 * operation there, what it wrote back up on the communicator's lane. */
static int staged_run(struct comm_req *r)
{
    struct comm *c = r->comm;
    struct devmem *m = c->dm;
    const struct comm_backend *be = c->be;
    herr *e = &r->err;
    size_t all = r->count * r->elem_size, dlo, dhi, ulo, uhi;
    staged_ranges(r, &dlo, &dhi, &ulo, &uhi);
    if (staging_fit(c, &c->queued, all, e) != 0 || devmem_sync(m, r->ready, e) != 0)
        return herr_wrap(e, "communicator %s: staging %zu bytes", comm_name(c), all);
    unsigned char *h = c->queued.buf, *d = r->buf;
    /* the lane's last copy up from the staging buffer is done once this copy down is */
    if (dhi > dlo && devmem_copy(m, c->lane, h + dlo, d + dlo, dhi - dlo, e) != 0)
        return -1;
    __atomic_add_fetch(&c->staged, (uint64_t)(dhi - dlo + uhi - ulo), __ATOMIC_RELAXED);
    devmem_count_bytes(m, uhi - ulo, dhi - dlo);
    if (devmem_lane_sync(m, c->lane, e) != 0)
        return -1;
    int rc;
    void *t = c->impl;
    switch (r->kind) {
    case REQ_SEND:
        rc = be->send(t, r->peer, r->tag, h, all, e);
        break;
    case REQ_REDUCE_SCATTER:
        rc = be->reduce_scatter_f32(t, (float *)h, r->count, e);
        break;
    case REQ_ALL_GATHER:
        rc = be->all_gather(t, h, r->count, r->elem_size, e);
        break;
    case REQ_ALL_REDUCE:
        rc = be->all_reduce_f32(t, (float *)h, r->count, e);
        break;
    case REQ_BROADCAST:
        rc = be->broadcast(t, h, all, r->peer, e);
        break;
    default:
        rc = herr_set(e, "communicator %s: this operation takes no device buffer", comm_name(c));
    }
    if (rc != 0)
        return -1;
    if (uhi > ulo && devmem_copy(m, c->lane, d + ulo, h + ulo, uhi - ulo, e) != 0)
        return -1;
    return devmem_record(m, c->lane, r->ev_done, e);
}

/* A device-buffer operation on a backend that runs them (NCCL), on the progress thread. */
static int native_run(struct comm_req *r)
{
    struct comm *c = r->comm;
    const struct comm_backend *be = c->be;
    void *t = c->impl;
    switch (r->kind) {
    case REQ_SEND:
        return be->dev_send(t, r->peer, r->buf, r->count, r->ready, r->ev_done, &r->err);
    case REQ_RECV:
        return be->dev_recv(t, r->peer, r->buf, r->count, r->ready, r->ev_done, &r->err);
    case REQ_REDUCE_SCATTER:
        return be->dev_reduce_scatter_f32(t, r->buf, r->count, r->ready, r->ev_done, &r->err);
    case REQ_ALL_GATHER:
        return be->dev_all_gather(t, r->buf, r->count, r->elem_size, r->ready, r->ev_done,
                                  &r->err);
    case REQ_ALL_REDUCE:
        return be->dev_all_reduce_f32(t, r->buf, r->count, r->ready, r->ev_done, &r->err);
    default:
        return herr_set(&r->err, "communicator %s: this operation takes no device buffer",
                        comm_name(c));
    }
}

/* comm_wait's end for a device-buffer request: later compute-lane work sees its result. */
static int dev_finish(struct comm_req *r, int rc, herr *e)
{
    struct comm *c = r->comm;
    herr e2;
    if (rc == 0 && devmem_wait(c->dm, NULL, r->ev_done, &e2) != 0) {
        if (e)
            *e = e2;
        rc = -1;
    }
    event_give(c, r->ready);
    event_give(c, r->ev_done);
    return rc;
}

int comm_dev_isend(struct comm *c, int peer, uint32_t tag, const void *buf, size_t len,
                   struct comm_req **req, herr *e)
{
    if (!c->dm)
        return comm_isend(c, peer, tag, buf, len, req, e);
    return submit_dev(c, REQ_SEND, (void *)buf, len, 1, peer, tag, req, e);
}

int comm_dev_recv(struct comm *c, int peer, uint32_t tag, void *buf, size_t len, herr *e)
{
    if (!c->dm)
        return comm_recv(c, peer, tag, buf, len, e);
    struct devmem *m = c->dm;
    if (c->be->set_devmem) { /* NCCL: queued on its stream behind the compute lane's readers, by
                                the progress thread (the one thread that calls NCCL on it) */
        struct comm_req *r;
        if (submit_dev(c, REQ_RECV, buf, len, 1, peer, tag, &r, e) != 0)
            return -1;
        return comm_wait(r, e);
    }
    /* staged: the bytes arrive in pinned memory; the copy up is queued on the compute lane (the
     * work after it reads them); the staging buffer is reused once that copy is done */
    struct staging *s = &c->p2p;
    if (staging_fit(c, s, len, e) != 0 || (!s->ev && devmem_event_new(m, &s->ev, e) != 0) ||
        devmem_sync(m, s->ev, e) != 0)
        return herr_wrap(e, "communicator %s: staging %zu bytes", comm_name(c), len);
    if (c->be->recv(c->impl, peer, tag, s->buf, len, e) != 0)
        return -1;
    if (devmem_copy(m, NULL, buf, s->buf, len, e) != 0 || devmem_record(m, NULL, s->ev, e) != 0)
        return herr_wrap(e, "communicator %s", comm_name(c));
    __atomic_add_fetch(&c->staged, (uint64_t)len, __ATOMIC_RELAXED);
    devmem_count_bytes(m, len, 0);
    return 0;
}

int comm_dev_ireduce_scatter(struct comm *c, float *buf, size_t count, struct comm_req **req,
                             herr *e)
{
    if (!c->dm)
        return comm_ireduce_scatter(c, buf, count, req, e);
    return submit_dev(c, REQ_REDUCE_SCATTER, buf, count, sizeof(float), 0, 0, req, e);
}

int comm_dev_iall_gather(struct comm *c, void *buf, size_t count, size_t elem_size,
                         struct comm_req **req, herr *e)
{
    if (!c->dm)
        return comm_iall_gather(c, buf, count, elem_size, req, e);
    return submit_dev(c, REQ_ALL_GATHER, buf, count, elem_size, 0, 0, req, e);
}

int comm_dev_iall_reduce(struct comm *c, float *buf, size_t count, struct comm_req **req, herr *e)
{
    if (!c->dm)
        return comm_iall_reduce(c, buf, count, req, e);
    return submit_dev(c, REQ_ALL_REDUCE, buf, count, sizeof(float), 0, 0, req, e);
}

int comm_dev_all_reduce(struct comm *c, float *buf, size_t count, herr *e)
{
    struct comm_req *r;
    if (comm_dev_iall_reduce(c, buf, count, &r, e) != 0)
        return -1;
    return comm_wait(r, e);
}

int comm_dev_all_gather(struct comm *c, void *buf, size_t count, size_t elem_size, herr *e)
{
    struct comm_req *r;
    if (comm_dev_iall_gather(c, buf, count, elem_size, &r, e) != 0)
        return -1;
    return comm_wait(r, e);
}
