#include "comm.h"

#include "comm_backend.h"

#include <pthread.h>
#include <stdlib.h>

enum req_kind { REQ_SEND, REQ_REDUCE_SCATTER, REQ_ALL_GATHER, REQ_ALL_REDUCE, REQ_BROADCAST, REQ_BARRIER };

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
};

static int run_req(struct comm_req *r)
{
    const struct comm_backend *be = r->comm->be;
    void *t = r->comm->impl;
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

void comm_free(struct comm *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
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

static int submit(struct comm *c, enum req_kind kind, void *buf, size_t count, size_t esz, int peer,
                  uint32_t tag, struct comm_req **out, herr *e)
{
    *out = NULL;
    struct comm_req *r = calloc(1, sizeof *r);
    if (!r)
        return herr_set(e, "communicator %s: out of memory for a request", comm_name(c));
    *r = (struct comm_req){.comm = c, .kind = kind, .buf = buf, .count = count, .elem_size = esz,
                           .peer = peer, .tag = tag};
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
