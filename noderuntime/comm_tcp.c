#include "comm_tcp.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define HELLO_MAGIC 0x484c4d53u /* "HLMS" */
#define FRAME_MAGIC 0x46524d45u /* "FRME": the last (or only) frame of a message */
#define FRAME_MORE 0x4d4f5245u  /* "MORE": more frames of the same message follow */
#define TAG_COLL (TCP_TAG_RESERVED | 1u)
#define SEG_BYTES ((size_t)1 << 20)      /* collectives move data in segments of this size */
#define MAX_FRAME ((uint64_t)1 << 36)
#define MAX_PENDING 256

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---------- listener ---------- */

struct pending_conn {
    int fd;
    uint32_t group_id;
    int from;
    int size;
};

struct tcp_listener {
    int fd;
    int port;
    struct pending_conn pending[MAX_PENDING];
    int npending;
};

int tcp_listener_open(struct tcp_listener **out, const char *bind_host, int port, herr *e)
{
    *out = NULL;
    if (port < 0 || port > 65535)
        return herr_set(e, "listen port %d is out of range 0..65535", port);
    struct tcp_listener *l = calloc(1, sizeof *l);
    if (!l)
        return herr_set(e, "out of memory for the TCP listener");
    l->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        free(l);
        return herr_set(e, "socket: %s", strerror(errno));
    }
    int one = 1;
    setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind_host && *bind_host) {
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int rc = getaddrinfo(bind_host, NULL, &hints, &res);
        if (rc != 0) {
            close(l->fd);
            free(l);
            return herr_set(e, "cannot resolve listen host '%s': %s", bind_host, gai_strerror(rc));
        }
        a.sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
        freeaddrinfo(res);
    }
    if (bind(l->fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(l->fd, 128) != 0) {
        herr_set(e, "cannot listen on %s:%d: %s", bind_host ? bind_host : "*", port, strerror(errno));
        close(l->fd);
        free(l);
        return -1;
    }
    socklen_t alen = sizeof a;
    if (getsockname(l->fd, (struct sockaddr *)&a, &alen) != 0) {
        herr_set(e, "getsockname: %s", strerror(errno));
        close(l->fd);
        free(l);
        return -1;
    }
    l->port = ntohs(a.sin_port);
    *out = l;
    return 0;
}

int tcp_listener_port(const struct tcp_listener *l) { return l->port; }

void tcp_listener_close(struct tcp_listener *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->npending; i++)
        close(l->pending[i].fd);
    close(l->fd);
    free(l);
}

/* Reads exactly len bytes; 0 on success, -1 with errno (0 for EOF). */
static int read_full(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_WAITALL);
        if (n == 0) {
            errno = 0;
            return -1;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t len, int more)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void set_timeout(int fd, int opt, double s)
{
    struct timeval tv = {(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv);
}

static void tune_socket(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Accepts until a connection for (group_id, from) is stashed or the deadline passes. */
static int listener_take(struct tcp_listener *l, uint32_t group_id, int from, double deadline,
                         int *fd_out)
{
    for (;;) {
        for (int i = 0; i < l->npending; i++) {
            if (l->pending[i].group_id == group_id && l->pending[i].from == from) {
                *fd_out = l->pending[i].fd;
                l->pending[i] = l->pending[--l->npending];
                return 0;
            }
        }
        double left = deadline - now_s();
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = l->fd, .events = POLLIN};
        int pr = poll(&p, 1, (int)(left * 1000) + 1);
        if (pr <= 0)
            continue;
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        uint32_t hello[4];
        set_timeout(fd, SO_RCVTIMEO, left > 5 ? 5 : left);
        if (read_full(fd, hello, sizeof hello) != 0 || hello[0] != HELLO_MAGIC ||
            l->npending == MAX_PENDING) {
            close(fd);
            continue;
        }
        set_timeout(fd, SO_RCVTIMEO, 0);
        l->pending[l->npending++] = (struct pending_conn){fd, hello[1], (int)hello[2], (int)hello[3]};
    }
}

static int connect_until(const struct tcp_endpoint *ep, double deadline, char *why, size_t whylen)
{
    char port[16];
    snprintf(port, sizeof port, "%d", ep->port);
    snprintf(why, whylen, "no attempt");
    while (now_s() < deadline) {
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int rc = getaddrinfo(ep->host, port, &hints, &res);
        if (rc != 0) {
            snprintf(why, whylen, "%s", gai_strerror(rc));
            sleep_s(0.05);
            continue;
        }
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            snprintf(why, whylen, "socket: %s", strerror(errno));
            freeaddrinfo(res);
            return -1;
        }
        int cr = connect(fd, res->ai_addr, res->ai_addrlen);
        freeaddrinfo(res);
        if (cr != 0 && errno == EINPROGRESS) {
            double left = deadline - now_s();
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (left > 0 && poll(&p, 1, (int)(left * 1000) + 1) == 1) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                cr = err ? -1 : 0;
                errno = err ? err : ETIMEDOUT;
            } else {
                errno = ETIMEDOUT;
            }
        }
        if (cr == 0) {
            int flags = fcntl(fd, F_GETFL);
            fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
            return fd;
        }
        snprintf(why, whylen, "%s", strerror(errno));
        close(fd);
        sleep_s(0.05);
    }
    return -1;
}

/* ---------- connections ---------- */

struct tcp_msg {
    struct tcp_msg *next;
    uint32_t tag;
    int more;
    size_t len;
    char *data;
};

struct tcp_conn {
    struct tcp_comm *comm;
    int peer;
    int fd;
    pthread_t reader;
    int reader_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct tcp_msg *head, *tail;
    int dead;
    char why[200];
    pthread_mutex_t send_mu;
    struct tcp_pacing pacing;
    double tokens, refill_at;
    /* A posted receive: the reader thread reads the next frame with this tag and length
     * straight into buf (no staging copy for large messages). */
    enum { POST_NONE, POST_WAITING, POST_FILLING, POST_DONE, POST_FAILED } post_state;
    uint32_t post_tag;
    size_t post_len;
    char *post_buf;
    int post_more;         /* the directly read frame said more frames follow */
    int reading;           /* the reader is staging a frame with reading_tag */
    uint32_t reading_tag;
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

static void *reader_main(void *arg)
{
    struct tcp_conn *k = arg;
    for (;;) {
        uint32_t hdr[4];
        if (read_full(k->fd, hdr, sizeof hdr) != 0) {
            conn_mark_dead(k, errno ? strerror(errno) : "connection closed by peer");
            return NULL;
        }
        uint64_t len = (uint64_t)hdr[2] | ((uint64_t)hdr[3] << 32);
        if ((hdr[0] != FRAME_MAGIC && hdr[0] != FRAME_MORE) || len > MAX_FRAME) {
            conn_mark_dead(k, "corrupt frame header");
            return NULL;
        }
        pthread_mutex_lock(&k->mu);
        int direct = k->post_state == POST_WAITING && k->post_tag == hdr[1] && k->post_len == len;
        if (direct) {
            k->post_state = POST_FILLING;
        } else {
            k->reading = 1;
            k->reading_tag = hdr[1];
        }
        pthread_mutex_unlock(&k->mu);
        if (direct) {
            int rc = read_full(k->fd, k->post_buf, len);
            int err = errno;
            pthread_mutex_lock(&k->mu);
            k->post_state = rc == 0 ? POST_DONE : POST_FAILED;
            k->post_more = hdr[0] == FRAME_MORE;
            pthread_cond_broadcast(&k->cv);
            pthread_mutex_unlock(&k->mu);
            if (rc != 0) {
                conn_mark_dead(k, err ? strerror(err) : "connection closed by peer mid-message");
                return NULL;
            }
            continue;
        }
        struct tcp_msg *m = malloc(sizeof *m);
        char *data = malloc(len ? len : 1);
        if (!m || !data) {
            free(m);
            free(data);
            k->reading = 0;
            conn_mark_dead(k, "out of memory for an incoming message");
            return NULL;
        }
        if (len && read_full(k->fd, data, len) != 0) {
            free(m);
            free(data);
            conn_mark_dead(k, errno ? strerror(errno) : "connection closed by peer mid-message");
            return NULL;
        }
        *m = (struct tcp_msg){NULL, hdr[1], hdr[0] == FRAME_MORE, len, data};
        pthread_mutex_lock(&k->mu);
        k->reading = 0;
        if (k->tail)
            k->tail->next = m;
        else
            k->head = m;
        k->tail = m;
        pthread_cond_broadcast(&k->cv);
        pthread_mutex_unlock(&k->mu);
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
    k->refill_at = now_s();
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&k->mu, NULL);
    pthread_mutex_init(&k->send_mu, NULL);
    pthread_cond_init(&k->cv, &ca);
    pthread_condattr_destroy(&ca);
    tune_socket(fd);
    set_timeout(fd, SO_SNDTIMEO, c->timeout_s);
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
            free(m->data);
            free(m);
        }
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
    double deadline = now_s() + c->timeout_s;
    int me = c->world_ranks[c->index];
    /* Connect to lower indices first (their listeners queue us even before they accept). */
    for (int i = 0; i < c->index; i++) {
        char why[160];
        int fd = connect_until(&s->endpoints[i], deadline, why, sizeof why);
        if (fd < 0) {
            herr_set(e, "group %s: rank %d could not connect to rank %d at %s:%d within %g s (%s)",
                     c->name, me, c->world_ranks[i], s->endpoints[i].host, s->endpoints[i].port,
                     c->timeout_s, why);
            tcp_comm_free(c);
            return -1;
        }
        uint32_t hello[4] = {HELLO_MAGIC, c->group_id, (uint32_t)c->index, (uint32_t)c->size};
        if (write_full(fd, hello, sizeof hello, 0) != 0) {
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
        if (listener_take(l, c->group_id, i, deadline, &fd) != 0) {
            herr_set(e, "group %s: rank %d (expected from %s:%d) never connected to rank %d within %g s",
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
    double t = now_s();
    k->tokens += (t - k->refill_at) * rate;
    if (k->tokens > burst)
        k->tokens = burst;
    k->refill_at = t;
    if (k->tokens < (double)bytes) {
        sleep_s(((double)bytes - k->tokens) / rate);
        k->refill_at = now_s();
        k->tokens = 0;
    } else {
        k->tokens -= (double)bytes;
    }
}

static int send_op(struct tcp_comm *c, int peer, uint32_t tag, const void *buf, size_t len,
                   const char *op, herr *e)
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
        return herr_set(e, "group %s: rank %d lost its connection to rank %d (%s) during %s",
                        c->name, c->world_ranks[c->index], c->world_ranks[peer], why, op);
    pthread_mutex_lock(&k->send_mu);
    if (k->pacing.latency_s > 0)
        sleep_s(k->pacing.latency_s);
    /* frames of at most SEG_BYTES, so the receiver never stages a whole large message */
    const char *p = buf;
    size_t left = len;
    int rc = 0;
    do {
        size_t fl = left < SEG_BYTES ? left : SEG_BYTES;
        uint32_t hdr[4] = {left > fl ? FRAME_MORE : FRAME_MAGIC, tag, (uint32_t)fl,
                           (uint32_t)((uint64_t)fl >> 32)};
        rc = write_full(k->fd, hdr, sizeof hdr, fl > 0);
        size_t piece = k->pacing.bytes_per_sec > 0 ? 65536 : fl;
        while (rc == 0 && fl > 0) {
            size_t n = fl < piece ? fl : piece;
            pace(k, n);
            rc = write_full(k->fd, p, n, 0);
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
            return herr_set(e, "group %s: rank %d timed out after %g s sending to rank %d during %s",
                            c->name, c->world_ranks[c->index], c->timeout_s, c->world_ranks[peer], op);
        return herr_set(e, "group %s: rank %d lost its connection to rank %d (%s) during %s", c->name,
                        c->world_ranks[c->index], c->world_ranks[peer], strerror(err), op);
    }
    return 0;
}

#define DIRECT_MIN ((size_t)64 << 10)

/* Waits for the oldest message with tag from peer and hands it over (caller frees). With a
 * `direct` buffer for a large message and none queued, the receive is posted so the reader thread
 * fills `direct` itself; *out is then NULL. */
static int take_op(struct tcp_comm *c, int peer, uint32_t tag, size_t len, const char *op,
                   struct tcp_msg **out, void *direct, int *direct_more, herr *e)
{
    *out = NULL;
    if (peer < 0 || peer >= c->size || peer == c->index)
        return herr_set(e, "group %s: %s from invalid peer index %d", c->name, op, peer);
    struct tcp_conn *k = &c->conns[peer];
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    double frac = c->timeout_s - (double)(time_t)c->timeout_s;
    dl.tv_sec += (time_t)c->timeout_s;
    dl.tv_nsec += (long)(frac * 1e9);
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    int rc = 0, posted = 0;
    pthread_mutex_lock(&k->mu);
    for (;;) {
        if (posted && k->post_state == POST_DONE) {
            k->post_state = POST_NONE;
            if (direct_more)
                *direct_more = k->post_more;
            break;
        }
        if (posted && k->post_state == POST_FAILED) {
            k->post_state = POST_NONE;
            posted = 0;
        }
        struct tcp_msg *prev = NULL, *m = k->head;
        while (m && m->tag != tag) {
            prev = m;
            m = m->next;
        }
        if (m) {
            if (prev)
                prev->next = m->next;
            else
                k->head = m->next;
            if (k->tail == m)
                k->tail = prev;
            *out = m;
            if (posted && k->post_state == POST_WAITING)
                k->post_state = POST_NONE;
            break;
        }
        if (k->dead) {
            if (posted && k->post_state == POST_WAITING)
                k->post_state = POST_NONE;
            rc = herr_set(e, "group %s: rank %d lost its connection to rank %d (%s) during %s",
                          c->name, c->world_ranks[c->index], c->world_ranks[peer], k->why, op);
            break;
        }
        if (!posted && direct && len >= DIRECT_MIN && k->post_state == POST_NONE &&
            !(k->reading && k->reading_tag == tag)) {
            k->post_state = POST_WAITING;
            k->post_tag = tag;
            k->post_len = len;
            k->post_buf = direct;
            posted = 1;
        }
        if (pthread_cond_timedwait(&k->cv, &k->mu, &dl) == ETIMEDOUT) {
            if (posted && k->post_state == POST_FILLING) {
                /* the reader is writing into the caller's buffer: end the connection */
                shutdown(k->fd, SHUT_RDWR);
                while (k->post_state == POST_FILLING)
                    pthread_cond_wait(&k->cv, &k->mu);
            }
            if (posted)
                k->post_state = POST_NONE;
            rc = herr_set(e, "group %s: rank %d timed out after %g s waiting for rank %d during %s",
                          c->name, c->world_ranks[c->index], c->timeout_s, c->world_ranks[peer], op);
            break;
        }
    }
    pthread_mutex_unlock(&k->mu);
    if (rc == 0 && *out && (*out)->len != len) {
        herr_set(e, "group %s: rank %d got %zu bytes from rank %d during %s, expected %zu", c->name,
                 c->world_ranks[c->index], (*out)->len, c->world_ranks[peer], op, len);
        free((*out)->data);
        free(*out);
        *out = NULL;
        return -1;
    }
    return rc;
}

/* Receives one message of len bytes into buf, frame by frame (directly when large). */
static int recv_into(struct tcp_comm *c, int peer, uint32_t tag, void *buf, size_t len,
                     const char *op, herr *e)
{
    size_t off = 0;
    for (;;) {
        size_t fl = len - off < SEG_BYTES ? len - off : SEG_BYTES;
        struct tcp_msg *m;
        int more = 0;
        if (take_op(c, peer, tag, fl, op, &m, (char *)buf + off, &more, e) != 0)
            return -1;
        if (m) {
            if (fl)
                memcpy((char *)buf + off, m->data, fl);
            more = m->more;
            free(m->data);
            free(m);
        }
        off += fl;
        if (more != (off < len))
            return herr_set(e, "group %s: rank %d got a message of another size than %zu bytes from "
                            "rank %d during %s", c->name, c->world_ranks[c->index], len,
                            c->world_ranks[peer], op);
        if (!more)
            return 0;
    }
}

static void msg_free(struct tcp_msg *m)
{
    free(m->data);
    free(m);
}

int tcp_send(struct tcp_comm *c, int peer, uint32_t tag, const void *buf, size_t len, herr *e)
{
    if (tag >= TCP_TAG_RESERVED)
        return herr_set(e, "group %s: send tag %u is reserved", c->name, tag);
    return send_op(c, peer, tag, buf, len, "send", e);
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

static size_t nseg(size_t bytes) { return bytes == 0 ? 1 : (bytes + SEG_BYTES - 1) / SEG_BYTES; }

static void seg_range(size_t bytes, size_t k, size_t *off, size_t *len)
{
    *off = k * SEG_BYTES;
    *len = *off >= bytes ? 0 : (bytes - *off < SEG_BYTES ? bytes - *off : SEG_BYTES);
}

/* One ring step: send chunk sc to the right while receiving chunk rc from the left, segment by
 * segment; reduce = 1 adds received floats, else copies. */
static int ring_step(struct tcp_comm *c, char *buf, size_t count, size_t esz, int sc, int rcv,
                     int reduce, const char *op, herr *e)
{
    int n = c->size, right = (c->index + 1) % n, left = (c->index + n - 1) % n;
    size_t soff, slen, roff, rlen;
    tcp_chunk(count, n, sc, &soff, &slen);
    tcp_chunk(count, n, rcv, &roff, &rlen);
    char *sp = buf + soff * esz, *rp = buf + roff * esz;
    size_t sb = slen * esz, rb = rlen * esz;
    size_t ns = nseg(sb), nr = nseg(rb), nmax = ns > nr ? ns : nr;
    for (size_t k = 0; k < nmax; k++) {
        size_t o, l;
        if (k < ns) {
            seg_range(sb, k, &o, &l);
            if (send_op(c, right, TAG_COLL, sp + o, l, op, e) != 0)
                return -1;
        }
        if (k < nr) {
            seg_range(rb, k, &o, &l);
            if (!reduce) {
                if (recv_into(c, left, TAG_COLL, rp + o, l, op, e) != 0)
                    return -1;
                continue;
            }
            struct tcp_msg *m;
            if (take_op(c, left, TAG_COLL, l, op, &m, NULL, NULL, e) != 0)
                return -1;
            {
                float *dst = (float *)(void *)(rp + o);
                const float *src = (const float *)(void *)m->data;
                size_t nf = l / sizeof(float);
                for (size_t j = 0; j < nf; j++)
                    dst[j] += src[j];
            }
            msg_free(m);
        }
    }
    return 0;
}

int tcp_reduce_scatter_f32(struct tcp_comm *c, float *buf, size_t count, herr *e)
{
    int n = c->size, r = c->index;
    for (int s = 0; s < n - 1; s++) {
        int sc = ((r - s - 1) % n + n) % n, rc = ((r - s - 2) % n + n) % n;
        if (ring_step(c, (char *)buf, count, sizeof(float), sc, rc, 1, "reduce-scatter", e) != 0)
            return -1;
    }
    return 0;
}

int tcp_all_gather(struct tcp_comm *c, void *buf, size_t count, size_t elem_size, herr *e)
{
    int n = c->size, r = c->index;
    for (int s = 0; s < n - 1; s++) {
        int sc = ((r - s) % n + n) % n, rc = ((r - s - 1) % n + n) % n;
        if (ring_step(c, buf, count, elem_size, sc, rc, 0, "all-gather", e) != 0)
            return -1;
    }
    return 0;
}

int tcp_all_reduce_f32(struct tcp_comm *c, float *buf, size_t count, herr *e)
{
    if (tcp_reduce_scatter_f32(c, buf, count, e) != 0)
        return -1;
    return tcp_all_gather(c, buf, count, sizeof(float), e);
}

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
        size_t o, l;
        seg_range(len, k, &o, &l);
        if (pos > 0 && recv_into(c, left, TAG_COLL, (char *)buf + o, l, "broadcast", e) != 0)
            return -1;
        if (pos < n - 1 && send_op(c, right, TAG_COLL, (char *)buf + o, l, "broadcast", e) != 0)
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
