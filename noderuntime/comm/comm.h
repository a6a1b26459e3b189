/* Communicator API with asynchronous handles. A communicator is a group of ranks over one
 * transport (on the CPU: the TCP backend of comm_tcp.h; the planner's ib/roce/socket all map to
 * TCP there, with optional pacing). Each communicator owns a progress thread: the i* calls queue
 * an operation and return a request at once so communication overlaps compute; comm_wait ends
 * it. Operations queued on one communicator run in order; collectives must be issued in the same
 * order on every member. Point-to-point comm_send/comm_recv run on the caller's thread and may be
 * used from any thread. */
#ifndef HOLMES_COMM_H
#define HOLMES_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "comm_tcp.h"
#include "error.h"

struct comm;
struct comm_req;

int comm_create(struct comm **out, struct tcp_listener *l, const struct tcp_group_spec *spec, herr *e);
/* Waits for queued operations, then closes the connections. */
void comm_free(struct comm *c);
int comm_size(const struct comm *c);
int comm_rank(const struct comm *c); /* index in the group */
const char *comm_name(const struct comm *c);
uint64_t comm_bytes_sent(const struct comm *c); /* payload bytes sent so far */

int comm_send(struct comm *c, int peer, uint32_t tag, const void *buf, size_t len, herr *e);
int comm_recv(struct comm *c, int peer, uint32_t tag, void *buf, size_t len, herr *e);

/* Asynchronous operations; buffers must stay valid until comm_wait. */
int comm_isend(struct comm *c, int peer, uint32_t tag, const void *buf, size_t len,
               struct comm_req **req, herr *e);
int comm_ireduce_scatter(struct comm *c, float *buf, size_t count, struct comm_req **req, herr *e);
int comm_iall_gather(struct comm *c, void *buf, size_t count, size_t elem_size,
                     struct comm_req **req, herr *e);
int comm_iall_reduce(struct comm *c, float *buf, size_t count, struct comm_req **req, herr *e);
int comm_ibroadcast(struct comm *c, void *buf, size_t len, int root, struct comm_req **req, herr *e);
/* Waits for the operation, frees the request and returns its status (error in e). */
int comm_wait(struct comm_req *req, herr *e);

/* Blocking forms (queue + wait). Semantics as in comm_tcp.h. */
int comm_reduce_scatter(struct comm *c, float *buf, size_t count, herr *e);
int comm_all_gather(struct comm *c, void *buf, size_t count, size_t elem_size, herr *e);
int comm_all_reduce(struct comm *c, float *buf, size_t count, herr *e);
int comm_broadcast(struct comm *c, void *buf, size_t len, int root, herr *e);
int comm_barrier(struct comm *c, herr *e);

/* Rank r's part of a reduce-scatter/all-gather over count elements (see tcp_chunk). */
void comm_chunk(const struct comm *c, size_t count, int r, size_t *offset, size_t *len);

#endif
