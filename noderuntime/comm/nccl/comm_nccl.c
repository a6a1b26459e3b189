#include "comm_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>

#include "clock.h"

struct nccl_comm {
    char name[64];
    char planned[16];
    char transport[32];
    int size, rank;
    double timeout_s;
    ncclComm_t comm;
    cudaStream_t stream;
    long log_from, log_to; /* this communicator's part of NCCL's log */
};

static char log_path[512]; /* NCCL_DEBUG_FILE we asked for, "" when the user set NCCL_DEBUG */

static long log_size(void)
{
    struct stat st;
    return log_path[0] && stat(log_path, &st) == 0 ? (long)st.st_size : 0;
}

/* Process-wide NCCL settings from this rank's NIC, set before the first communicator. */
static void set_env_once(const struct nccl_comm_spec *s)
{
    static int done;
    if (done)
        return;
    done = 1;
    if (s->ib_hca && *s->ib_hca)
        setenv("NCCL_IB_HCA", s->ib_hca, 0);
    if (s->gid_index >= 0) {
        char g[16];
        snprintf(g, sizeof g, "%d", s->gid_index);
        setenv("NCCL_IB_GID_INDEX", g, 0);
    }
    if (s->socket_ifname && *s->socket_ifname)
        setenv("NCCL_SOCKET_IFNAME", s->socket_ifname, 0);
    if (!getenv("NCCL_DEBUG")) {
        const char *tmp = getenv("TMPDIR");
        snprintf(log_path, sizeof log_path, "%s/holmes-nccl.%d.log", tmp && *tmp ? tmp : "/tmp",
                 (int)getpid());
        setenv("NCCL_DEBUG", "INFO", 1);
        setenv("NCCL_DEBUG_SUBSYS", "INIT,NET", 1);
        setenv("NCCL_DEBUG_FILE", log_path, 1);
    }
}

/* The network named in NCCL's log between two offsets: "Using network X" at init, or the
 * "via NET/X" of the connections made by the first operations. */
static void scan_transport(struct nccl_comm *c)
{
    if (!log_path[0])
        return;
    FILE *f = fopen(log_path, "r");
    if (!f)
        return;
    if (fseek(f, c->log_from, SEEK_SET) != 0) {
        fclose(f);
        return;
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "Using network ");
        const char *q = strstr(line, "via NET/");
        char word[32] = "";
        if (p)
            sscanf(p + 14, "%31[A-Za-z0-9_]", word);
        else if (q)
            sscanf(q + 8, "%31[A-Za-z0-9_]", word);
        if (word[0])
            snprintf(c->transport, sizeof c->transport, "%s", word);
        if (c->log_to > 0 && ftell(f) >= c->log_to)
            break;
    }
    fclose(f);
}

static int nccl_fail(struct nccl_comm *c, const char *op, ncclResult_t r, herr *e)
{
    return herr_set(e, "NCCL communicator %s: %s failed: %s", c->name, op, ncclGetErrorString(r));
}

/* Polls a non-blocking communicator until its pending work (init or a call) is done. */
static int wait_async(struct nccl_comm *c, const char *op, herr *e)
{
    double deadline = clock_mono_s() + c->timeout_s;
    for (;;) {
        ncclResult_t st;
        ncclResult_t r = ncclCommGetAsyncError(c->comm, &st);
        if (r != ncclSuccess)
            return nccl_fail(c, op, r, e);
        if (st == ncclSuccess)
            return 0;
        if (st != ncclInProgress)
            return nccl_fail(c, op, st, e);
        if (clock_mono_s() > deadline)
            return herr_set(e, "NCCL communicator %s: %s did not complete within %g s (a peer "
                            "missing or stuck)", c->name, op, c->timeout_s);
        usleep(1000);
    }
}

void nccl_comm_free(struct nccl_comm *c)
{
    if (!c)
        return;
    if (c->comm)
        ncclCommAbort(c->comm);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

int nccl_comm_create(struct nccl_comm **out, const struct nccl_comm_spec *s, struct comm *bootstrap,
                     herr *e)
{
    *out = NULL;
    if (s->size < 1 || s->rank < 0 || s->rank >= s->size)
        return herr_set(e, "NCCL communicator %s: rank %d outside 0..%d", s->name, s->rank, s->size - 1);
    if (s->size > 1 && (!bootstrap || comm_size(bootstrap) != s->size || comm_rank(bootstrap) != s->rank))
        return herr_set(e, "NCCL communicator %s: the bootstrap group does not match", s->name);
    struct nccl_comm *c = calloc(1, sizeof *c);
    if (!c)
        return herr_set(e, "out of memory for NCCL communicator %s", s->name);
    snprintf(c->name, sizeof c->name, "%s", s->name ? s->name : "?");
    snprintf(c->planned, sizeof c->planned, "%s", s->net_name ? s->net_name : "");
    c->size = s->size;
    c->rank = s->rank;
    c->timeout_s = s->timeout_s > 0 ? s->timeout_s : 300;
    set_env_once(s);
    cudaError_t ce = cudaSetDevice(s->device);
    if (ce == cudaSuccess)
        ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        herr_set(e, "NCCL communicator %s: CUDA device %d: %s", c->name, s->device, cudaGetErrorString(ce));
        nccl_comm_free(c);
        return -1;
    }
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r = ncclSuccess;
    if (s->rank == 0)
        r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
        nccl_fail(c, "ncclGetUniqueId", r, e);
        nccl_comm_free(c);
        return -1;
    }
    if (s->size > 1 && comm_broadcast(bootstrap, &id, sizeof id, 0, e) != 0) {
        herr_wrap(e, "NCCL communicator %s: sending the unique id", c->name);
        nccl_comm_free(c);
        return -1;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    if (s->net_name && *s->net_name)
        cfg.netName = s->net_name;
    c->log_from = log_size();
    r = ncclCommInitRankConfig(&c->comm, s->size, id, s->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        nccl_fail(c, "ncclCommInitRankConfig", r, e);
        c->comm = NULL;
        nccl_comm_free(c);
        return -1;
    }
    if (wait_async(c, "init", e) != 0) {
        nccl_comm_free(c);
        return -1;
    }
    c->log_to = log_size();
    scan_transport(c);
    *out = c;
    return 0;
}

cudaStream_t nccl_comm_stream(const struct nccl_comm *c) { return c->stream; }
const char *nccl_comm_transport(const struct nccl_comm *c) { return c->transport; }

int nccl_comm_check_transport(const struct nccl_comm *c, herr *e)
{
    struct nccl_comm *m = (struct nccl_comm *)c;
    if (!m->transport[0] && log_path[0]) {
        m->log_to = 0; /* connections are made lazily: read what the first operations logged */
        scan_transport(m);
    }
    if (strcmp(m->planned, "IB") == 0 && strcmp(m->transport, "Socket") == 0)
        return herr_set(e, "NCCL communicator %s: planned for RDMA (IB) but NCCL is using TCP "
                        "sockets; check NCCL_IB_HCA, the GID index and that the HCA ports are "
                        "ACTIVE (traffic will be ~10x slower)", c->name);
    return 0;
}

/* A call on the non-blocking communicator: ncclInProgress means NCCL is still queueing it (a
 * connection made on first use): wait until it has, as NCCL asks before the next call. */
static int check(struct nccl_comm *c, const char *op, ncclResult_t r, herr *e)
{
    if (r == ncclSuccess)
        return 0;
    if (r == ncclInProgress)
        return wait_async(c, op, e);
    return nccl_fail(c, op, r, e);
}

int nccl_comm_all_reduce(struct nccl_comm *c, float *buf, size_t count, herr *e)
{
    return check(c, "all-reduce", ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, c->comm, c->stream), e);
}

int nccl_comm_reduce_scatter(struct nccl_comm *c, const float *send, float *recv, size_t count, herr *e)
{
    return check(c, "reduce-scatter",
                 ncclReduceScatter(send, recv, count, ncclFloat32, ncclSum, c->comm, c->stream), e);
}

int nccl_comm_all_gather(struct nccl_comm *c, const float *send, float *recv, size_t count, herr *e)
{
    return check(c, "all-gather", ncclAllGather(send, recv, count, ncclFloat32, c->comm, c->stream), e);
}

int nccl_comm_all_gather_bytes(struct nccl_comm *c, const void *send, void *recv, size_t bytes,
                               herr *e)
{
    return check(c, "all-gather", ncclAllGather(send, recv, bytes, ncclUint8, c->comm, c->stream), e);
}

int nccl_comm_broadcast(struct nccl_comm *c, void *buf, size_t bytes, int root, herr *e)
{
    return check(c, "broadcast", ncclBroadcast(buf, buf, bytes, ncclUint8, root, c->comm, c->stream), e);
}

int nccl_comm_sendrecv(struct nccl_comm *c, int to, const void *sbuf, size_t sbytes, int from,
                       void *rbuf, size_t rbytes, herr *e)
{
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess && to >= 0)
        r = ncclSend(sbuf, sbytes, ncclUint8, to, c->comm, c->stream);
    if ((r == ncclSuccess || r == ncclInProgress) && from >= 0)
        r = ncclRecv(rbuf, rbytes, ncclUint8, from, c->comm, c->stream);
    ncclResult_t g = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress)
        r = g;
    return check(c, "send/recv", r, e);
}

int nccl_comm_sync(struct nccl_comm *c, herr *e)
{
    double deadline = clock_mono_s() + c->timeout_s;
    for (;;) {
        cudaError_t ce = cudaStreamQuery(c->stream);
        if (ce == cudaSuccess)
            return wait_async(c, "operation", e);
        if (ce != cudaErrorNotReady)
            return herr_set(e, "NCCL communicator %s: stream error: %s", c->name, cudaGetErrorString(ce));
        ncclResult_t st;
        if (ncclCommGetAsyncError(c->comm, &st) == ncclSuccess && st != ncclSuccess &&
            st != ncclInProgress) {
            ncclCommAbort(c->comm);
            c->comm = NULL;
            return nccl_fail(c, "an operation", st, e);
        }
        if (clock_mono_s() > deadline) {
            ncclCommAbort(c->comm);
            c->comm = NULL;
            return herr_set(e, "NCCL communicator %s: an operation did not complete within %g s "
                            "(a peer died or is stuck); communicator aborted", c->name, c->timeout_s);
        }
        usleep(100);
    }
}

int nccl_comm_send(struct nccl_comm *c, int peer, const void *buf, size_t bytes, herr *e)
{
    return check(c, "send", ncclSend(buf, bytes, ncclUint8, peer, c->comm, c->stream), e);
}

int nccl_comm_recv(struct nccl_comm *c, int peer, void *buf, size_t bytes, herr *e)
{
    return check(c, "recv", ncclRecv(buf, bytes, ncclUint8, peer, c->comm, c->stream), e);
}

int nccl_comm_async_error(struct nccl_comm *c, herr *e)
{
    if (!c->comm)
        return herr_peer(e, "NCCL communicator %s was aborted", c->name);
    ncclResult_t st;
    ncclResult_t r = ncclCommGetAsyncError(c->comm, &st);
    if (r != ncclSuccess)
        return nccl_fail(c, "checking for errors", r, e);
    if (st != ncclSuccess && st != ncclInProgress) {
        ncclCommAbort(c->comm);
        c->comm = NULL;
        return herr_peer(e, "NCCL communicator %s: %s (a peer lost?); communicator aborted",
                         c->name, ncclGetErrorString(st));
    }
    return 0;
}

void nccl_comm_abort(struct nccl_comm *c)
{
    if (c && c->comm) {
        ncclCommAbort(c->comm);
        c->comm = NULL;
    }
}
