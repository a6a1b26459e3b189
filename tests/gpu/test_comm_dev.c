/* The comm seam on device buffers (part of `make test-gpu`): a NCCL communicator of one rank
 * made as the trainer makes them (comm_create_nccl over a TCP bootstrap group) and used through
 * comm_dev_* on GPU buffers, the code path of the groups of a multi-GPU node; and a TCP
 * communicator staging the same buffers through pinned host memory. Each operation is ordered
 * behind work the compute stream queued just before it (a large copy into the buffer) and ahead
 * of work queued after comm_wait (the copy out), so a missing event shows as a wrong value.
 * `--compile-only` just proves it links. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "comm.h"
#include "devmem.h"
#include "devmem_cuda.h"

static int fails;
#define CHECK(name, cond) do { if (cond) printf("PASS %s\n", name); else { printf("FAIL %s\n", name); fails++; } \
        fflush(stdout); } while (0)

enum { N = 4 * 1000003 };

static float val(size_t i, int round) { return (float)((int)((i * 7 + (size_t)round * 3) % 11) - 5); }

/* The buffer filled on the compute stream (queued, not done) from hin, the operation, then the
 * buffer copied out on the compute stream into h: equal to what went in (one rank: every
 * collective keeps the values; the padded and equal-chunk paths alike). hin and h are apart:
 * the copy up may still be reading hin when the host clears h. */
static int round_trip(struct comm *c, struct devmem *m, cudaStream_t s, float *d, float *hin,
                      float *h, int op, int round, const char *name)
{
    herr e;
    if (cudaStreamSynchronize(s) != cudaSuccess) /* hin's last copy up is done */
        return -1;
    for (size_t i = 0; i < N; i++)
        hin[i] = val(i, round);
    if (cudaMemcpyAsync(d, hin, N * sizeof *hin, cudaMemcpyHostToDevice, s) != cudaSuccess)
        return -1;
    memset(h, 0, N * sizeof *h);
    struct comm_req *r = NULL;
    int rc = op == 0   ? comm_dev_iall_reduce(c, d, N, &r, &e)
             : op == 1 ? comm_dev_ireduce_scatter(c, d, N, &r, &e)
                       : comm_dev_iall_gather(c, d, N, sizeof(float), &r, &e);
    if (rc == 0)
        rc = comm_wait(r, &e);
    if (rc != 0)
        fprintf(stderr, "%s: %s\n", name, e.msg);
    if (rc == 0 && (cudaMemcpyAsync(h, d, N * sizeof *h, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
                    devmem_lane_sync(m, NULL, &e) != 0))
        rc = -1;
    for (size_t i = 0; rc == 0 && i < N; i++)
        if (h[i] != val(i, round)) {
            fprintf(stderr, "%s: element %zu = %g, want %g\n", name, i, h[i], val(i, round));
            rc = -1;
        }
    CHECK(name, rc == 0);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--compile-only") == 0)
        return 0;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("FAIL gpu.comm_dev: no GPU\n");
        return 1;
    }
    herr e;
    cudaStream_t s;
    struct devmem *m = NULL;
    struct tcp_listener *l = NULL;
    float *d = NULL, *h = NULL, *hin = NULL;
    if (cudaSetDevice(0) != cudaSuccess || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        devmem_cuda_create(&m, 0, s, 60, &e) != 0 || devmem_alloc(m, N * sizeof *d, (void **)&d, &e) != 0 ||
        devmem_alloc_host(m, N * sizeof *h, (void **)&h, &e) != 0 ||
        devmem_alloc_host(m, N * sizeof *hin, (void **)&hin, &e) != 0 ||
        tcp_listener_open(&l, "127.0.0.1", 0, &e) != 0) {
        printf("FAIL gpu.comm_dev: set-up: %s\n", e.msg);
        return 1;
    }
    struct tcp_endpoint ep = {"127.0.0.1", tcp_listener_port(l)};
    int me = 0;
    struct tcp_group_spec gs = {"boot", 7, 1, 0, &me, &ep, NULL, 60};
    struct comm *boot = NULL, *nc = NULL, *tc = NULL;
    struct comm_nccl_params np = {"dev-test", 0, "Socket", NULL, -1, NULL, 60};
    int ok = comm_create(&boot, l, &gs, &e) == 0 && comm_create_nccl &&
             comm_create_nccl(&nc, boot, &np, &e) == 0 && comm_set_devmem(nc, m, &e) == 0;
    if (!ok)
        fprintf(stderr, "NCCL communicator: %s\n", e.msg);
    CHECK("gpu.comm_dev.nccl_one_rank: created over its bootstrap group, device buffers native",
          ok && comm_dev_native(nc));
    static const char *names[3] = {"all-reduce", "reduce-scatter", "all-gather"};
    for (int op = 0; ok && op < 3; op++) {
        char name[128];
        snprintf(name, sizeof name, "gpu.comm_dev.nccl.%s: ordered after and before the compute "
                 "stream's work", names[op]);
        round_trip(nc, m, s, d, hin, h, op, op, name);
    }
    /* a host all-reduce larger than the staging's 16 Mi-float pieces (comm_nccl_host.c): every
     * piece in its place (one rank keeps the values), and the count of nothing still answers */
    if (ok) {
        size_t big = ((size_t)16 << 20) * 2 + 5;
        float *hb = malloc(big * sizeof *hb);
        int same = hb != NULL;
        for (size_t i = 0; same && i < big; i++)
            hb[i] = val(i, 9);
        same = same && comm_all_reduce(nc, hb, big, &e) == 0;
        for (size_t i = 0; same && i < big; i++)
            same = hb[i] == val(i, 9);
        CHECK("gpu.comm_dev.nccl.host_all_reduce: in 16 Mi-float pieces, every value in place",
              same);
        CHECK("gpu.comm_dev.nccl.host_all_reduce: nothing to sum", comm_all_reduce(nc, hb, 0, &e) == 0);
        free(hb);
    }
    struct tcp_group_spec ts = {"staged", 8, 1, 0, &me, &ep, NULL, 60};
    ok = comm_create(&tc, l, &ts, &e) == 0 && comm_set_devmem(tc, m, &e) == 0;
    CHECK("gpu.comm_dev.tcp: created, device buffers staged", ok && !comm_dev_native(tc));
    for (int op = 0; ok && op < 3; op++) {
        char name[128];
        snprintf(name, sizeof name, "gpu.comm_dev.tcp.%s: staged through pinned memory, in order",
                 names[op]);
        round_trip(tc, m, s, d, hin, h, op, 3 + op, name);
    }
    if (ok)
        CHECK("gpu.comm_dev.tcp: bytes went through the staging", comm_bytes_staged(tc) > 0);
    comm_free(tc);
    comm_free(nc);
    devmem_free(m, d);
    devmem_free_host(m, h);
    devmem_free_host(m, hin);
    devmem_cuda_free(m);
    tcp_listener_close(l);
    cudaStreamDestroy(s);
    return fails ? 1 : 0;
}
