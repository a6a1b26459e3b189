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
#include "devmem.h"
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

/* Device buffers: the comm_dev_* calls take buffers in the memory of the rank's engine
 * (devmem.h), given once with comm_set_devmem. Order: what a call sends is what the engine's
 * compute lane has written by the time of the call (work queued before it); once comm_wait (or
 * the blocking form) returns, work queued on the compute lane afterwards sees the result, and may
 * reuse a buffer that was sent. In between the buffer is the communicator's. The host does not
 * wait for the device in these calls, except where TCP needs the bytes on the host: a backend
 * with device operations (NCCL) queues them on its own stream behind an event of the compute
 * lane; any other (TCP) stages them through pinned host buffers on the progress thread (or, for
 * comm_dev_recv, on the caller's), copying only what the operation reads and writes (a
 * reduce-scatter copies the whole bucket down and its own chunk up). Without a devmem, or with
 * host memory, they are the host calls. Every comm_dev_isend must be waited for before its
 * buffer is written again. */
int comm_set_devmem(struct comm *c, struct devmem *m, herr *e);
int comm_dev_isend(struct comm *c, int peer, uint32_t tag, const void *buf, size_t len,
                   struct comm_req **req, herr *e);
int comm_dev_recv(struct comm *c, int peer, uint32_t tag, void *buf, size_t len, herr *e);
int comm_dev_ireduce_scatter(struct comm *c, float *buf, size_t count, struct comm_req **req,
                             herr *e);
int comm_dev_iall_gather(struct comm *c, void *buf, size_t count, size_t elem_size,
                         struct comm_req **req, herr *e);
int comm_dev_iall_reduce(struct comm *c, float *buf, size_t count, struct comm_req **req, herr *e);
int comm_dev_all_reduce(struct comm *c, float *buf, size_t count, herr *e);
int comm_dev_all_gather(struct comm *c, void *buf, size_t count, size_t elem_size, herr *e);
/* Whether the backend runs device buffers itself (NCCL), rather than staging them. */
int comm_dev_native(const struct comm *c);
/* Bytes copied between device buffers and host staging so far (0 for host memory or NCCL). */
uint64_t comm_bytes_staged(const struct comm *c);

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
 * fell back to sockets is an error, not a warning. Device buffers (comm_dev_*) go to NCCL as they
 * are, on the communicator's stream; host buffers are staged through device scratch memory.
 * Point-to-point traffic takes device buffers only (comm_dev_isend / comm_dev_recv; NCCL has no
 * tags: messages match in the order they are issued), and one direction per communicator: a link
 * that carries both directions has one NCCL communicator for each, so that neither direction's
 * queue waits behind the other's. */
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
