/* Communicator API with asynchronous handles: the comm seam. A communicator is a group of ranks
 * over one backend (comm_backend.h): the TCP backend of comm_tcp.h (comm_create; on CPUs the
 * planner's ib/roce/socket all map to it, with optional pacing), or in the CUDA build NCCL
 * (comm_nccl_host.h: the plan's IB and RoCE groups of GPU ranks). Each communicator owns a progress thread: the i* calls queue
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
const char *comm_backend_kind(const struct comm *c); /* "tcp", "nccl" */
const char *comm_transport(const struct comm *c);    /* the network in use: "tcp", NCCL's "IB" ... */
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

/* The NCCL backend (CUDA build only: the symbol is weak and NULL in the plain build). A
 * communicator for an RDMA group of GPU ranks: NCCL created with the plan's network (netName
 * "IB" also drives RoCE), HCA list, GID index and socket interface, over the bootstrap TCP
 * group of the same members (taken: kept until the communicator is freed, and freed here on
 * failure). After creation one all-reduce makes
 * NCCL connect, and the network it chose is checked against the plan: a planned RDMA group that
 * fell back to sockets is an error, not a warning. Buffers stay host buffers (staged through the
 * device); send/recv are refused (pipeline and embedding links stay on TCP). */
struct comm_nccl_params {
    const char *name;          /* e.g. "dp[stage 0]" */
    int device;                /* CUDA device of this rank */
    const char *net_name;      /* "IB" or "Socket" */
    const char *ib_hca;        /* NCCL_IB_HCA or NULL */
    int gid_index;             /* NCCL_IB_GID_INDEX or -1 */
    const char *socket_ifname; /* NCCL_SOCKET_IFNAME or NULL */
    double timeout_s;          /* bound on creation and on every operation */
};
int comm_create_nccl(struct comm **out, struct comm *bootstrap, const struct comm_nccl_params *p,
                     herr *e) __attribute__((weak));

/* Rank r's part of a reduce-scatter/all-gather over count elements (see tcp_chunk). */
void comm_chunk(const struct comm *c, size_t count, int r, size_t *offset, size_t *len);

#endif
