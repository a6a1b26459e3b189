/* NCCL backend of the communicator (GPU builds only; `make comm-nccl`, part of `make cuda`).
 * One NCCL communicator per planned group, created with ncclCommInitRankConfig and
 * ncclConfig_t.netName from the plan ("IB" for RDMA groups, "Socket" for cross-fabric ones),
 * the HCA list / GID index / socket interface from discovery (NCCL_IB_HCA, NCCL_IB_GID_INDEX,
 * NCCL_SOCKET_IFNAME, process-wide, set before the first communicator), non-blocking init and
 * bounded waits (ncclCommGetAsyncError; ncclCommAbort on timeout), its own CUDA stream, grouped
 * ncclSend/ncclRecv for pipeline traffic. After init it reads NCCL's own log to learn which
 * network the communicator really uses, so a planned RDMA group that fell back to sockets is
 * reported (nccl_comm_check_transport) instead of silently running ~10x slower. */
#ifndef HOLMES_COMM_NCCL_H
#define HOLMES_COMM_NCCL_H

#include <stddef.h>

#include <cuda_runtime.h>

#include "comm.h"
#include "error.h"

struct nccl_comm_spec {
    const char *name;          /* for messages, e.g. "dp[stage 0]" */
    int size, rank;            /* members, my index */
    const char *net_name;      /* "IB" or "Socket" (the plan's nccl_net) */
    const char *ib_hca;        /* NCCL_IB_HCA, or NULL */
    int gid_index;             /* NCCL_IB_GID_INDEX, or -1 */
    const char *socket_ifname; /* NCCL_SOCKET_IFNAME, or NULL */
    int device;                /* CUDA device of this rank */
    double timeout_s;          /* bound on init and on every nccl_comm_sync */
};

struct nccl_comm;

/* Creates the communicator; the NCCL unique id goes from member 0 to the others over the
 * bootstrap communicator (the TCP group of the same members, same order). */
int nccl_comm_create(struct nccl_comm **out, const struct nccl_comm_spec *spec,
                     struct comm *bootstrap, herr *e);
void nccl_comm_free(struct nccl_comm *c);
cudaStream_t nccl_comm_stream(const struct nccl_comm *c);

/* The network NCCL chose ("IB", "Socket", or "" when it logged none, e.g. one node only). */
const char *nccl_comm_transport(const struct nccl_comm *c);
/* -1 with a loud message when the plan asked for IB but NCCL uses sockets. */
int nccl_comm_check_transport(const struct nccl_comm *c, herr *e);

/* Enqueued on the communicator's stream (device buffers, fp32 sum); nccl_comm_sync waits. */
int nccl_comm_all_reduce(struct nccl_comm *c, float *buf, size_t count, herr *e);
/* send[count*size] -> recv[count] (chunk `rank` summed). */
int nccl_comm_reduce_scatter(struct nccl_comm *c, const float *send, float *recv, size_t count, herr *e);
/* send[count] -> recv[count*size]. */
int nccl_comm_all_gather(struct nccl_comm *c, const float *send, float *recv, size_t count, herr *e);
/* send[bytes] -> recv[bytes*size], any element type. */
int nccl_comm_all_gather_bytes(struct nccl_comm *c, const void *send, void *recv, size_t bytes,
                               herr *e);
int nccl_comm_broadcast(struct nccl_comm *c, void *buf, size_t bytes, int root, herr *e);
/* Pipeline traffic: send to one peer and receive from another in one NCCL group (either peer
 * may be -1 to skip that half). */
int nccl_comm_sendrecv(struct nccl_comm *c, int to, const void *sbuf, size_t sbytes, int from,
                       void *rbuf, size_t rbytes, herr *e);
/* Point to point, one message each, queued on the communicator's stream. */
int nccl_comm_send(struct nccl_comm *c, int peer, const void *buf, size_t bytes, herr *e);
int nccl_comm_recv(struct nccl_comm *c, int peer, void *buf, size_t bytes, herr *e);
/* Waits for the stream, bounded by the timeout; a NCCL error or a timeout aborts the
 * communicator and names it. */
int nccl_comm_sync(struct nccl_comm *c, herr *e);
/* An error NCCL met in the background (a peer lost inside a collective): the communicator is
 * aborted (its kernels end) and the error, a peer error, names it. 0 while all is well. */
int nccl_comm_async_error(struct nccl_comm *c, herr *e);
/* Ends the communicator's work at once (ncclCommAbort), e.g. once a host wait for the GPU timed
 * out. */
void nccl_comm_abort(struct nccl_comm *c);

#endif
