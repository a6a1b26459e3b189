#include "comm_tcp.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "tcp_socket.h"

#define FRAME_MAGIC 0x46524d45u /* "FRME": the last (or only) frame of a message */
#define FRAME_MORE 0x4d4f5245u  /* "MORE": more frames of the same message follow */
#define TAG_COLL (TCP_TAG_RESERVED | 1u)
#ifndef SEG_BYTES
#define SEG_BYTES ((size_t)1 << 20)      /* collectives move data in segments of this size */
#endif
#define MAX_FRAME ((uint64_t)1 << 36)

/* ---------- connections ---------- */

/* A frame nobody had posted a receive for, kept until a receive takes it. */
struct tcp_msg {
    struct tcp_msg *next;
    uint32_t tag;
    int more;
    size_t len;
    char *data;
};

/* A posted receive: the reader thread puts the frames of the next message with `tag` straight
 * into buf (reduce: adds them to buf as float32), in stream order, as they arrive. Owned by the
 * caller; linked into its connection's list (under the connection's mu) until post_cancel. */
enum post_state { POST_WAITING, POST_FILLING, POST_DONE, POST_FAILED };

struct tcp_post {
    struct tcp_post *next;
    uint32_t tag;
    char *buf;
    size_t len;
    int reduce;
    enum post_state state;
    size_t filled; /* bytes placed so far */
    int bad;       /* the message did not have len bytes */
    int linked;
};

#ifndef SCRATCH_BYTES
#define SCRATCH_BYTES ((size_t)128 << 10) /* cache-sized buffer for receive-and-add */
#endif

struct tcp_conn {
    struct tcp_comm *comm;
    int peer;
    int fd;
    pthread_t reader;
    int reader_started;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* broadcast on: frame queued, post progress, death */
    struct tcp_msg *head, *tail;
    struct tcp_post *posts, *posts_tail;
    int dead;
    char why[200];
    pthread_mutex_t send_mu;
    struct tcp_pacing pacing;
    double tokens, refill_at;
    float *scratch;        /* [SCRATCH_BYTES], the reader's receive-and-add staging */
};

struct tcp_comm {
    char name[128];
    uint32_t group_id;
    int size, index;
    int *world_ranks;
    double timeout_s;
    struct tcp_conn *conns; /* [size], conns[index] unused */
    uint64_t bytes_sent;    /* payload bytes, updated atomically */
};

uint64_t tcp_comm_bytes_sent(const struct tcp_comm *c)
{
    return __atomic_load_n(&c->bytes_sent, __ATOMIC_RELAXED);
}

int tcp_comm_size(const struct tcp_comm *c) { return c->size; }
int tcp_comm_index(const struct tcp_comm *c) { return c->index; }
const char *tcp_comm_name(const struct tcp_comm *c) { return c->name; }

static void conn_mark_dead(struct tcp_conn *k, const char *why)
{
    pthread_mutex_lock(&k->mu);
    if (!k->dead) {
        k->dead = 1;
        snprintf(k->why, sizeof k->why, "%s", why);
    }
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

/* dst[i] += src[i]; written with vector types so it is vectorised at -O2 with gcc and clang. */
typedef float f32x4 __attribute__((vector_size(16)));

static void add_f32(float *restrict dst, const float *restrict src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        f32x4 a0, a1, b0, b1;
        memcpy(&a0, dst + i, sizeof a0);
        memcpy(&a1, dst + i + 4, sizeof a1);
        memcpy(&b0, src + i, sizeof b0);
        memcpy(&b1, src + i + 4, sizeof b1);
        a0 += b0;
        a1 += b1;
        memcpy(dst + i, &a0, sizeof a0);
        memcpy(dst + i + 4, &a1, sizeof a1);
    }
    for (; i < n; i++)
        dst[i] += src[i];
}

/* Reads len bytes (a multiple of 4) and adds them to dst as floats, through the scratch buffer
 * so the staged data is still in cache when it is added. */
static int read_reduce(struct tcp_conn *k, float *dst, size_t len)
{
    while (len > 0) {
        size_t piece = len < SCRATCH_BYTES ? len : SCRATCH_BYTES;
        if (tcp_read_full(k->fd, k->scratch, piece) != 0)
            return -1;
        add_f32(dst, k->scratch, piece / sizeof(float));
        dst += piece / sizeof(float);
        len -= piece;
    }
    return 0;
}

/* The oldest posted receive that can take the next frame with tag (mu held). */
static struct tcp_post *post_find(struct tcp_conn *k, uint32_t tag)
{
    for (struct tcp_post *p = k->posts; p; p = p->next)
        if (p->tag == tag && p->state == POST_WAITING)
            return p;
    return NULL;
}

static int post_fits(const struct tcp_post *p, size_t len)
{
    return len <= p->len - p->filled && (!p->reduce || len % sizeof(float) == 0);
}

/* Accounts a frame of len bytes placed into p (mu held). */
static void post_advance(struct tcp_post *p, size_t len, int more)
{
    p->filled += len;
    if (!more) {
        p->state = POST_DONE;
        p->bad = p->filled != p->len;
    } else if (p->filled == p->len) {
        p->state = POST_DONE; /* the message goes on past the posted size */
        p->bad = 1;
    } else {
        p->state = POST_WAITING;
    }
}

/* Places an already staged frame into p, or ends p as bad if it does not fit (mu held). */
static void post_take_staged(struct tcp_post *p, const struct tcp_msg *m)
{
    if (!post_fits(p, m->len)) {
        p->state = POST_DONE;
        p->bad = 1;
        return;
    }
    if (p->reduce)
        add_f32((float *)(void *)(p->buf + p->filled), (const float *)(const void *)m->data,
                m->len / sizeof(float));
    else if (m->len)
        memcpy(p->buf + p->filled, m->data, m->len);
    post_advance(p, m->len, m->more);
}

static void msg_free(struct tcp_msg *m)
{
    free(m->data);
    free(m);
}

/* Reads one frame that no posted receive takes into the mailbox (or into a receive posted while
 * it was being read). Returns -1 when the connection died. */
static int reader_stage(struct tcp_conn *k, uint32_t tag, uint64_t len, int more)
{
    struct tcp_msg *m = malloc(sizeof *m);
    char *data = malloc(len ? len : 1);
    if (!m || !data) {
        free(m);
        free(data);
        conn_mark_dead(k, "out of memory for an incoming message");
        return -1;
    }
    if (len && tcp_read_full(k->fd, data, len) != 0) {
        free(m);
        free(data);
        conn_mark_dead(k, errno ? strerror(errno) : "connection closed by peer mid-message");
        return -1;
    }
    *m = (struct tcp_msg){NULL, tag, more, len, data};
    pthread_mutex_lock(&k->mu);
    /* a receive posted while this frame was read takes it: it is next in the stream */
    struct tcp_post *p = post_find(k, tag);
    if (p) {
        post_take_staged(p, m);
        msg_free(m);
    } else {
        if (k->tail)
            k->tail->next = m;
        else
            k->head = m;
        k->tail = m;
    }
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
    return 0;
}

static void *reader_main(void *arg)
{
    struct tcp_conn *k = arg;
    for (;;) {
        uint32_t hdr[4];
        if (tcp_read_full(k->fd, hdr, sizeof hdr) != 0) {
            conn_mark_dead(k, errno ? strerror(errno) : "connection closed by peer");
            return NULL;
        }
        uint64_t len = (uint64_t)hdr[2] | ((uint64_t)hdr[3] << 32);
        if ((hdr[0] != FRAME_MAGIC && hdr[0] != FRAME_MORE) || len > MAX_FRAME) {
            conn_mark_dead(k, "corrupt frame header");
            return NULL;
        }
        int more = hdr[0] == FRAME_MORE;
        pthread_mutex_lock(&k->mu);
        struct tcp_post *p = post_find(k, hdr[1]);
        if (p && !post_fits(p, len)) {
            p->state = POST_DONE;
            p->bad = 1;
            pthread_cond_broadcast(&k->cv);
            p = NULL;
        }
        if (p)
            p->state = POST_FILLING;
        pthread_mutex_unlock(&k->mu);
        if (!p) {
            if (reader_stage(k, hdr[1], len, more) != 0)
                return NULL;
            continue;
        }
        /* only this thread changes p->filled, so it can be read without the lock here */
        char *dst = p->buf + p->filled;
        int rc = p->reduce ? read_reduce(k, (float *)(void *)dst, len) : tcp_read_full(k->fd, dst, len);
        int err = errno;
        pthread_mutex_lock(&k->mu);
        if (rc == 0)
            post_advance(p, len, more);
        else
            p->state = POST_FAILED;
        pthread_cond_broadcast(&k->cv);
        pthread_mutex_unlock(&k->mu);
        if (rc != 0) {
            conn_mark_dead(k, err ? strerror(err) : "connection closed by peer mid-message");
            return NULL;
        }
    }
}

static int conn_init(struct tcp_conn *k, struct tcp_comm *c, int peer, int fd,
                     const struct tcp_pacing *pacing)
{
    k->comm = c;
    k->peer = peer;
    k->fd = fd;
    if (pacing)
        k->pacing = *pacing;
    k->refill_at = clock_mono_s();
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&k->mu, NULL);
    pthread_mutex_init(&k->send_mu, NULL);
    pthread_cond_init(&k->cv, &ca);
    pthread_condattr_destroy(&ca);
    tcp_tune_socket(fd);
    tcp_set_timeout(fd, SO_SNDTIMEO, c->timeout_s);
    k->scratch = malloc(SCRATCH_BYTES);
    if (!k->scratch)
        return -1;
    if (pthread_create(&k->reader, NULL, reader_main, k) != 0)
        return -1;
    k->reader_started = 1;
    return 0;
}

void tcp_comm_free(struct tcp_comm *c)
{
    if (!c)
        return;
    for (int i = 0; c->conns && i < c->size; i++) {
        struct tcp_conn *k = &c->conns[i];
        if (k->fd <= 0)
            continue;
        shutdown(k->fd, SHUT_RDWR);
        if (k->reader_started)
            pthread_join(k->reader, NULL);
        close(k->fd);
        for (struct tcp_msg *m = k->head, *n; m; m = n) {
            n = m->next;
            msg_free(m);
        }
        free(k->scratch);
        pthread_mutex_destroy(&k->mu);
        pthread_mutex_destroy(&k->send_mu);
        pthread_cond_destroy(&k->cv);
    }
    free(c->conns);
    free(c->world_ranks);
    free(c);
}

int tcp_comm_create(struct tcp_comm **out, struct tcp_listener *l, const struct tcp_group_spec *s,
                    herr *e)
{
    *out = NULL;
    if (s->size < 1 || s->index < 0 || s->index >= s->size)
        return herr_set(e, "group %s: index %d is outside 0..%d", s->name, s->index, s->size - 1);
    struct tcp_comm *c = calloc(1, sizeof *c);
    if (!c)
        return herr_set(e, "out of memory for group %s", s->name);
    snprintf(c->name, sizeof c->name, "%s", s->name ? s->name : "?");
    c->group_id = s->group_id;
    c->size = s->size;
    c->index = s->index;
    c->timeout_s = s->timeout_s > 0 ? s->timeout_s : 60;
    c->world_ranks = calloc((size_t)s->size, sizeof *c->world_ranks);
    c->conns = calloc((size_t)s->size, sizeof *c->conns);
    if (!c->world_ranks || !c->conns) {
        tcp_comm_free(c);
        return herr_set(e, "out of memory for group %s", s->name);
    }
    for (int i = 0; i < s->size; i++)
        c->world_ranks[i] = s->world_ranks ? s->world_ranks[i] : i;
    double deadline = clock_mono_s() + c->timeout_s;
    int me = c->world_ranks[c->index];
    /* Connect to lower indices first (their listeners queue us even before they accept). */
    for (int i = 0; i < c->index; i++) {
        char why[160];
        int fd = tcp_connect_until(&s->endpoints[i], deadline, why, sizeof why);
        if (fd < 0) {
            herr_peer(e, "group %s: rank %d could not connect to rank %d at %s:%d within %g s (%s)",
                        c->name, me, c->world_ranks[i], s->endpoints[i].host, s->endpoints[i].port,
                        c->timeout_s, why);
            tcp_comm_free(c);
            return -1;
        }
        uint32_t hello[4] = {HELLO_MAGIC, c->group_id, (uint32_t)c->index, (uint32_t)c->size};
        if (tcp_write_full(fd, hello, sizeof hello, 0) != 0) {
            herr_set(e, "group %s: sending hello to rank %d: %s", c->name, c->world_ranks[i],
                     strerror(errno));
            close(fd);
            tcp_comm_free(c);
            return -1;
        }
        if (conn_init(&c->conns[i], c, i, fd, s->pacing ? &s->pacing[i] : NULL) != 0) {
            tcp_comm_free(c);
            return herr_set(e, "group %s: cannot start a reader thread", c->name);
        }
    }
    for (int i = c->index + 1; i < c->size; i++) {
        int fd;
        if (tcp_listener_take(l, c->group_id, i, deadline, &fd) != 0) {
            herr_peer(e, "group %s: rank %d (expected from %s:%d) never connected to rank %d within %g s",
                        c->name, c->world_ranks[i], s->endpoints[i].host, s->endpoints[i].port, me,
                        c->timeout_s);
            tcp_comm_free(c);
            return -1;
        }
        if (conn_init(&c->conns[i], c, i, fd, s->pacing ? &s->pacing[i] : NULL) != 0) {
            tcp_comm_free(c);
            return herr_set(e, "group %s: cannot start a reader thread", c->name);
        }
    }
    *out = c;
    return 0;
}

/* ---------- point to point ---------- */

static void pace(struct tcp_conn *k, size_t bytes)
{
    double rate = k->pacing.bytes_per_sec;
    if (rate <= 0)
        return;
    double burst = rate * 0.005 > 65536 ? rate * 0.005 : 65536;
    double t = clock_mono_s();
    k->tokens += (t - k->refill_at) * rate;
    if (k->tokens > burst)
        k->tokens = burst;
    k->refill_at = t;
    if (k->tokens < (double)bytes) {
        clock_sleep_s(((double)bytes - k->tokens) / rate);
        k->refill_at = clock_mono_s();
        k->tokens = 0;
    } else {
        k->tokens -= (double)bytes;
    }
}

/* Sends len bytes as frames of at most SEG_BYTES; more_after marks the last frame "more", so
 * several calls make one message (the ring sends a chunk segment by segment). */
static int send_op(struct tcp_comm *c, int peer, uint32_t tag, const void *buf, size_t len,
                   int more_after, const char *op, herr *e)
{
    if (peer < 0 || peer >= c->size || peer == c->index)
        return herr_set(e, "group %s: %s to invalid peer index %d", c->name, op, peer);
    struct tcp_conn *k = &c->conns[peer];
    pthread_mutex_lock(&k->mu);
    int dead = k->dead;
    char why[200];
    snprintf(why, sizeof why, "%s", k->why);
    pthread_mutex_unlock(&k->mu);
    if (dead)
        return herr_peer(e, "group %s: rank %d lost its connection to rank %d (%s) during %s",
                           c->name, c->world_ranks[c->index], c->world_ranks[peer], why, op);
    pthread_mutex_lock(&k->send_mu);
    if (k->pacing.latency_s > 0)
        clock_sleep_s(k->pacing.latency_s);
    /* frames of at most SEG_BYTES, so the receiver never stages a whole large message */
    const char *p = buf;
    size_t left = len;
    int rc = 0;
    do {
        size_t fl = left < SEG_BYTES ? left : SEG_BYTES;
        uint32_t hdr[4] = {left > fl || more_after ? FRAME_MORE : FRAME_MAGIC, tag, (uint32_t)fl,
                           (uint32_t)((uint64_t)fl >> 32)};
        rc = tcp_write_full(k->fd, hdr, sizeof hdr, fl > 0);
        size_t piece = k->pacing.bytes_per_sec > 0 ? 65536 : fl;
        while (rc == 0 && fl > 0) {
            size_t n = fl < piece ? fl : piece;
            pace(k, n);
            rc = tcp_write_full(k->fd, p, n, 0);
            p += n;
            left -= n;
            fl -= n;
        }
    } while (rc == 0 && left > 0);
    int err = errno;
    pthread_mutex_unlock(&k->send_mu);
    __atomic_add_fetch(&c->bytes_sent, (uint64_t)(len - left), __ATOMIC_RELAXED);
    if (rc != 0) {
        if (err == EAGAIN || err == EWOULDBLOCK)
            return herr_peer(e, "group %s: rank %d timed out after %g s sending to rank %d during %s",
                               c->name, c->world_ranks[c->index], c->timeout_s, c->world_ranks[peer], op);
        return herr_peer(e, "group %s: rank %d lost its connection to rank %d (%s) during %s", c->name,
                           c->world_ranks[c->index], c->world_ranks[peer], strerror(err), op);
    }
    return 0;
}

/* Posts p on k (mu held): frames of its tag already in the mailbox go into it first (they came
 * earlier in the stream), then the reader fills the rest as it arrives. */
static void post_link(struct tcp_conn *k, struct tcp_post *p)
{
    p->state = POST_WAITING;
    p->filled = 0;
    p->bad = 0;
    int earlier = 0; /* an earlier posted receive with this tag takes the next frames */
    for (struct tcp_post *q = k->posts; q; q = q->next)
        earlier |= q->tag == p->tag && q->state != POST_DONE;
    struct tcp_msg *prev = NULL, *m = k->head;
    while (!earlier && m && p->state == POST_WAITING) {
        if (m->tag != p->tag) {
            prev = m;
            m = m->next;
            continue;
        }
        struct tcp_msg *next = m->next;
        if (prev)
            prev->next = next;
        else
            k->head = next;
        if (k->tail == m)
            k->tail = prev;
        post_take_staged(p, m);
        msg_free(m);
        m = next;
    }
    p->next = NULL;
    if (k->posts_tail)
        k->posts_tail->next = p;
    else
        k->posts = p;
    k->posts_tail = p;
    p->linked = 1;
}

/* Takes p off its connection; if the reader is writing into it, ends the connection first so
 * the caller's buffer is never written after this returns. */
static void post_cancel(struct tcp_conn *k, struct tcp_post *p)
{
    pthread_mutex_lock(&k->mu);
    if (p->linked) {
        if (p->state == POST_FILLING) {
            shutdown(k->fd, SHUT_RDWR);
            while (p->state == POST_FILLING)
                pthread_cond_wait(&k->cv, &k->mu);
        }
        struct tcp_post *prev = NULL;
        for (struct tcp_post *q = k->posts; q && q != p; q = q->next)
            prev = q;
        if (prev)
            prev->next = p->next;
        else
            k->posts = p->next;
        if (k->posts_tail == p)
            k->posts_tail = prev;
        p->linked = 0;
    }
    pthread_mutex_unlock(&k->mu);
}

/* Waits until p holds at least `need` bytes (need >= p->len: until the whole message is in).
 * The timeout runs from the last progress, so a long message on a slow link does not time out
 * while data keeps arriving. */
static int post_wait(struct tcp_comm *c, int peer, struct tcp_post *p, size_t need, const char *op,
                     herr *e)
{
    struct tcp_conn *k = &c->conns[peer];
    int me = c->world_ranks[c->index], them = c->world_ranks[peer], rc = 0;
    struct timespec dl = clock_deadline(CLOCK_MONOTONIC, c->timeout_s);
    pthread_mutex_lock(&k->mu);
    size_t seen = p->filled;
    for (;;) {
        if (p->state == POST_DONE && p->bad) {
            rc = herr_set(e, "group %s: rank %d got a message of another size than %zu bytes from "
                          "rank %d during %s", c->name, me, p->len, them, op);
            break;
        }
        if (p->state == POST_DONE || (need < p->len && p->filled >= need))
            break;
        if (p->state == POST_FAILED || (k->dead && p->state != POST_FILLING)) {
            rc = herr_peer(e, "group %s: rank %d lost its connection to rank %d (%s) during %s",
                             c->name, me, them, k->why[0] ? k->why : "connection closed", op);
            break;
        }
        if (pthread_cond_timedwait(&k->cv, &k->mu, &dl) == ETIMEDOUT) {
            if (p->filled != seen) {
                seen = p->filled;
                dl = clock_deadline(CLOCK_MONOTONIC, c->timeout_s);
                continue;
            }
            rc = herr_peer(e, "group %s: rank %d timed out after %g s waiting for rank %d during %s",
                             c->name, me, c->timeout_s, them, op);
            break;
        }
    }
    pthread_mutex_unlock(&k->mu);
    return rc;
}

/* Receives one message of exactly len bytes into buf. */
static int recv_into(struct tcp_comm *c, int peer, uint32_t tag, void *buf, size_t len,
                     const char *op, herr *e)
{
    if (peer < 0 || peer >= c->size || peer == c->index)
        return herr_set(e, "group %s: %s from invalid peer index %d", c->name, op, peer);
    struct tcp_conn *k = &c->conns[peer];
    struct tcp_post p = {.tag = tag, .buf = buf, .len = len};
    pthread_mutex_lock(&k->mu);
    post_link(k, &p);
    pthread_mutex_unlock(&k->mu);
    int rc = post_wait(c, peer, &p, SIZE_MAX, op, e);
    post_cancel(k, &p);
    return rc;
}

int tcp_send(struct tcp_comm *c, int peer, uint32_t tag, const void *buf, size_t len, herr *e)
{
    if (tag >= TCP_TAG_RESERVED)
        return herr_set(e, "group %s: send tag %u is reserved", c->name, tag);
    return send_op(c, peer, tag, buf, len, 0, "send", e);
}

int tcp_recv(struct tcp_comm *c, int peer, uint32_t tag, void *buf, size_t len, herr *e)
{
    if (tag >= TCP_TAG_RESERVED)
        return herr_set(e, "group %s: recv tag %u is reserved", c->name, tag);
    return recv_into(c, peer, tag, buf, len, "recv", e);
}

/* ---------- ring collectives ---------- */

void tcp_chunk(size_t count, int n, int i, size_t *offset, size_t *len)
{
    size_t q = count / (size_t)n, r = count % (size_t)n, ui = (size_t)i;
    *len = q + (ui < r ? 1 : 0);
    *offset = ui * q + (ui < r ? ui : r);
}

/* Step t of an all-reduce on n ranks, as rank r: steps 0..n-2 are the reduce-scatter (send
 * chunk r-t-1, add chunk r-t-2 from the left), steps n-1..2n-3 the all-gather (send chunk r-s,
 * copy chunk r-s-1, s = t-(n-1)). In every step the chunk sent is the one received in the step
 * before. */
static void ring_chunks(int n, int r, int t, int *send_chunk, int *recv_chunk, int *reduce)
{
    int s = t < n - 1 ? t + 1 : t - (n - 1);
    *reduce = t < n - 1;
    *send_chunk = ((r - s) % n + n) % n;
    *recv_chunk = ((r - s - 1) % n + n) % n;
}

/* Runs ring steps t0..t1-1 on buf. The receives of all steps are posted up front, so the left
 * neighbour's reader thread receives (and adds) every chunk while this thread sends; a segment
 * of step t is sent as soon as the same segment of step t-1 has arrived, so steps pipeline at
 * segment granularity. */
static int ring_run(struct tcp_comm *c, char *buf, size_t count, size_t esz, int t0, int t1,
                    const char *op, herr *e)
{
    int n = c->size, r = c->index;
    if (n == 1 || t1 <= t0)
        return 0;
    int right = (r + 1) % n, left = (r + n - 1) % n, np = t1 - t0;
    struct tcp_conn *kl = &c->conns[left];
    struct tcp_post *posts = calloc((size_t)np, sizeof *posts);
    if (!posts)
        return herr_set(e, "group %s: out of memory for %s", c->name, op);
    pthread_mutex_lock(&kl->mu);
    for (int i = 0; i < np; i++) {
        int sc, rc, reduce;
        size_t off, len;
        ring_chunks(n, r, t0 + i, &sc, &rc, &reduce);
        tcp_chunk(count, n, rc, &off, &len);
        posts[i] = (struct tcp_post){.tag = TAG_COLL, .buf = buf + off * esz, .len = len * esz,
                                     .reduce = reduce};
        post_link(kl, &posts[i]);
    }
    pthread_mutex_unlock(&kl->mu);
    int rc = 0;
    for (int i = 0; i < np && rc == 0; i++) {
        int sc, rcv, reduce;
        size_t off, len;
        ring_chunks(n, r, t0 + i, &sc, &rcv, &reduce);
        tcp_chunk(count, n, sc, &off, &len);
        const char *sp = buf + off * esz;
        size_t sb = len * esz, o = 0;
        do {
            size_t l = sb - o < SEG_BYTES ? sb - o : SEG_BYTES;
            if (i > 0)
                rc = post_wait(c, left, &posts[i - 1], o + l, op, e);
            /* flow control: a segment goes out only once this step has received as far as the
             * segment before it, so neither neighbour runs more than a segment ahead (a rank
             * that left a collective early with its data still queued would delay the next
             * operation on a shaped link) */
            if (rc == 0 && o > 0)
                rc = post_wait(c, left, &posts[i], o < posts[i].len ? o : posts[i].len, op, e);
            if (rc == 0)
                rc = send_op(c, right, TAG_COLL, sp + o, l, o + l < sb, op, e);
            o += l;
        } while (rc == 0 && o < sb);
    }
    for (int i = 0; i < np && rc == 0; i++)
        rc = post_wait(c, left, &posts[i], SIZE_MAX, op, e);
    for (int i = 0; i < np; i++)
        post_cancel(kl, &posts[i]);
    free(posts);
    return rc;
}

int tcp_reduce_scatter_f32(struct tcp_comm *c, float *buf, size_t count, herr *e)
{
    return ring_run(c, (char *)buf, count, sizeof(float), 0, c->size - 1, "reduce-scatter", e);
}

int tcp_all_gather(struct tcp_comm *c, void *buf, size_t count, size_t elem_size, herr *e)
{
    return ring_run(c, buf, count, elem_size, c->size - 1, 2 * (c->size - 1), "all-gather", e);
}

int tcp_all_reduce_f32(struct tcp_comm *c, float *buf, size_t count, herr *e)
{
    return ring_run(c, (char *)buf, count, sizeof(float), 0, 2 * (c->size - 1), "all-reduce", e);
}

/* Chain from the root, segment by segment (each segment its own message). */
static size_t nseg(size_t bytes) { return bytes == 0 ? 1 : (bytes + SEG_BYTES - 1) / SEG_BYTES; }

int tcp_broadcast(struct tcp_comm *c, void *buf, size_t len, int root, herr *e)
{
    int n = c->size;
    if (root < 0 || root >= n)
        return herr_set(e, "group %s: broadcast root %d is outside 0..%d", c->name, root, n - 1);
    if (n == 1)
        return 0;
    int pos = (c->index - root + n) % n, right = (c->index + 1) % n, left = (c->index + n - 1) % n;
    size_t ns = nseg(len);
    for (size_t k = 0; k < ns; k++) {
        size_t o = k * SEG_BYTES, l = len - o < SEG_BYTES ? len - o : SEG_BYTES;
        if (pos > 0 && recv_into(c, left, TAG_COLL, (char *)buf + o, l, "broadcast", e) != 0)
            return -1;
        if (pos < n - 1 && send_op(c, right, TAG_COLL, (char *)buf + o, l, 0, "broadcast", e) != 0)
            return -1;
    }
    return 0;
}

int tcp_barrier(struct tcp_comm *c, herr *e)
{
    char flags[256];
    char *buf = c->size <= (int)sizeof flags ? flags : malloc((size_t)c->size);
    if (!buf)
        return herr_set(e, "group %s: out of memory for a barrier", c->name);
    memset(buf, 1, (size_t)c->size);
    int rc = tcp_all_gather(c, buf, (size_t)c->size, 1, e);
    if (rc != 0)
        herr_wrap(e, "barrier");
    if (buf != flags)
        free(buf);
    return rc;
}
