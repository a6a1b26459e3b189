/* TCP backend of the communicator: one connection per peer pair per group, framed messages,
 * a reader thread per connection (so a send never waits for the peer to call recv: full duplex,
 * no deadlock when both sides send large tensors), bandwidth-optimal ring collectives, optional
 * per-link pacing (token bucket + latency) to emulate a slow fabric. Every wait is bounded by the
 * group's timeout and ends in an error naming the peer and the operation; a dead peer (EOF/RST)
 * fails waits on it at once. */
#ifndef HOLMES_COMM_TCP_H
#define HOLMES_COMM_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* One listening socket per process; connections of every group arrive on it. */
struct tcp_listener;
/* port 0 picks a free port (see tcp_listener_port). bind_host NULL = all interfaces. */
int tcp_listener_open(struct tcp_listener **out, const char *bind_host, int port, herr *e);
int tcp_listener_port(const struct tcp_listener *l);
void tcp_listener_close(struct tcp_listener *l);
/* The listening socket, e.g. to hand to a rank process, which takes it back with
 * tcp_listener_adopt (a listening TCP socket; it becomes the listener's). */
int tcp_listener_fd(const struct tcp_listener *l);
int tcp_listener_adopt(struct tcp_listener **out, int fd, herr *e);

struct tcp_endpoint {
    char host[256];
    int port;
};

/* Emulated link: bytes_per_sec 0 = unlimited; latency_s added before each message. */
struct tcp_pacing {
    double bytes_per_sec;
    double latency_s;
};

struct tcp_group_spec {
    const char *name;          /* for messages, e.g. "data[stage 0]" */
    uint32_t group_id;         /* equal on every member, unique per group in the job */
    int size;                  /* members */
    int index;                 /* my index in the group */
    const int *world_ranks;    /* [size] global rank of each member (for messages) */
    const struct tcp_endpoint *endpoints; /* [size] where each member listens */
    const struct tcp_pacing *pacing;      /* [size] per-peer link, or NULL */
    double timeout_s;          /* bound on every wait (connect, send, recv) */
};

struct tcp_comm;
/* Connects to members with a lower index and accepts those with a higher one. */
int tcp_comm_create(struct tcp_comm **out, struct tcp_listener *l, const struct tcp_group_spec *spec,
                    herr *e);
void tcp_comm_free(struct tcp_comm *c);
int tcp_comm_size(const struct tcp_comm *c);
int tcp_comm_index(const struct tcp_comm *c);
const char *tcp_comm_name(const struct tcp_comm *c);
/* Payload bytes this member has sent so far (all peers, all operations). */
uint64_t tcp_comm_bytes_sent(const struct tcp_comm *c);

/* Point to point, thread-safe. tag < TCP_TAG_RESERVED; recv takes the oldest message from the
 * peer with that tag and fails when its size differs from len. */
#define TCP_TAG_RESERVED 0x80000000u
int tcp_send(struct tcp_comm *c, int peer, uint32_t tag, const void *buf, size_t len, herr *e);
int tcp_recv(struct tcp_comm *c, int peer, uint32_t tag, void *buf, size_t len, herr *e);

/* Chunk i of count elements split over n ranks: sizes differ by at most one, the first
 * count % n chunks are one larger. */
void tcp_chunk(size_t count, int n, int i, size_t *offset, size_t *len);

/* Ring collectives (call them from one thread at a time per group). In place on buf:
 * reduce_scatter leaves rank r's fully summed chunk r (tcp_chunk) in place; all_gather
 * takes chunk r from rank r and fills every chunk; all_reduce = both. */
int tcp_reduce_scatter_f32(struct tcp_comm *c, float *buf, size_t count, herr *e);
int tcp_all_gather(struct tcp_comm *c, void *buf, size_t count, size_t elem_size, herr *e);
int tcp_all_reduce_f32(struct tcp_comm *c, float *buf, size_t count, herr *e);
int tcp_broadcast(struct tcp_comm *c, void *buf, size_t len, int root, herr *e);
int tcp_barrier(struct tcp_comm *c, herr *e);

#endif
