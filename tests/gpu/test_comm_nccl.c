/* The NCCL backend on this machine's GPUs: every collective and grouped send/recv against a
 * host reference, bounded waits, transport detection. One rank per GPU (forked processes with a
 * TCP bootstrap group) when there are several GPUs, else one rank. Prints PASS/FAIL lines;
 * `--compile-only` just proves it links. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "comm.h"
#include "nccl/comm_nccl.h"

static int fails;
#define CHECK(name, cond) do { if (cond) printf("PASS %s\n", name); else { printf("FAIL %s\n", name); fails++; } \
        fflush(stdout); } while (0)

static float val(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 3) % 11) - 5); }

static int run_rank(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, int quiet)
{
    herr e;
    struct comm *boot = NULL;
    if (n > 1) {
        struct tcp_group_spec s = {"boot", 1, n, rank, NULL, eps, NULL, 60};
        if (comm_create(&boot, l, &s, &e) != 0) {
            fprintf(stderr, "%s\n", e.msg);
            return 1;
        }
    }
    struct nccl_comm_spec spec = {"test", n, rank, "Socket", NULL, -1, NULL, rank, 60};
    struct nccl_comm *c;
    int ok = nccl_comm_create(&c, &spec, boot, &e) == 0;
    if (!ok)
        fprintf(stderr, "rank %d: %s\n", rank, e.msg);
    if (!quiet)
        CHECK("nccl communicator created (ncclCommInitRankConfig, netName Socket)", ok);
    if (!ok)
        return 1;
    size_t cnt = 1000003, chunk = cnt; /* per-rank chunk for reduce-scatter / all-gather */
    float *h = malloc(cnt * n * sizeof *h), *d, *d2;
    if (!h || cudaMalloc((void **)&d, cnt * n * sizeof *h) != cudaSuccess ||
        cudaMalloc((void **)&d2, cnt * n * sizeof *h) != cudaSuccess)
        return 1;
    for (size_t i = 0; i < cnt; i++)
        h[i] = val(rank, i);
    cudaMemcpy(d, h, cnt * sizeof *h, cudaMemcpyHostToDevice);
    ok = nccl_comm_all_reduce(c, d, cnt, &e) == 0 && nccl_comm_sync(c, &e) == 0;
    cudaMemcpy(h, d, cnt * sizeof *h, cudaMemcpyDeviceToHost);
    for (size_t i = 0; ok && i < cnt; i++) {
        float want = 0;
        for (int r = 0; r < n; r++)
            want += val(r, i);
        ok = h[i] == want;
    }
    if (!quiet)
        CHECK("all-reduce matches the reference", ok);
    int bad = !ok;
    for (size_t i = 0; i < chunk * n; i++)
        h[i] = val(rank, i);
    cudaMemcpy(d, h, chunk * n * sizeof *h, cudaMemcpyHostToDevice);
    ok = nccl_comm_reduce_scatter(c, d, d2, chunk, &e) == 0 && nccl_comm_sync(c, &e) == 0;
    cudaMemcpy(h, d2, chunk * sizeof *h, cudaMemcpyDeviceToHost);
    for (size_t i = 0; ok && i < chunk; i++) {
        float want = 0;
        for (int r = 0; r < n; r++)
            want += val(r, (size_t)rank * chunk + i);
        ok = h[i] == want;
    }
    if (!quiet)
        CHECK("reduce-scatter matches the reference", ok);
    bad |= !ok;
    for (size_t i = 0; i < chunk; i++)
        h[i] = val(rank, i) + 100;
    cudaMemcpy(d, h, chunk * sizeof *h, cudaMemcpyHostToDevice);
    ok = nccl_comm_all_gather(c, d, d2, chunk, &e) == 0 && nccl_comm_sync(c, &e) == 0;
    cudaMemcpy(h, d2, chunk * n * sizeof *h, cudaMemcpyDeviceToHost);
    for (size_t i = 0; ok && i < chunk * n; i++)
        ok = h[i] == val((int)(i / chunk), i % chunk) + 100;
    if (!quiet)
        CHECK("all-gather matches the reference", ok);
    bad |= !ok;
    for (size_t i = 0; i < cnt; i++)
        h[i] = rank == 0 ? val(77, i) : 0;
    cudaMemcpy(d, h, cnt * sizeof *h, cudaMemcpyHostToDevice);
    ok = nccl_comm_broadcast(c, d, cnt * sizeof *h, 0, &e) == 0 && nccl_comm_sync(c, &e) == 0;
    cudaMemcpy(h, d, cnt * sizeof *h, cudaMemcpyDeviceToHost);
    for (size_t i = 0; ok && i < cnt; i++)
        ok = h[i] == val(77, i);
    if (!quiet)
        CHECK("broadcast matches the reference", ok);
    bad |= !ok;
    /* ring send/recv (to self with one rank) */
    for (size_t i = 0; i < cnt; i++)
        h[i] = val(rank, i) * 2;
    cudaMemcpy(d, h, cnt * sizeof *h, cudaMemcpyHostToDevice);
    int right = (rank + 1) % n, left = (rank + n - 1) % n;
    ok = nccl_comm_sendrecv(c, right, d, cnt * sizeof *h, left, d2, cnt * sizeof *h, &e) == 0 &&
         nccl_comm_sync(c, &e) == 0;
    cudaMemcpy(h, d2, cnt * sizeof *h, cudaMemcpyDeviceToHost);
    for (size_t i = 0; ok && i < cnt; i++)
        ok = h[i] == val(left, i) * 2;
    if (!quiet)
        CHECK("grouped send/recv delivers", ok);
    bad |= !ok;
    if (!quiet) {
        printf("transport NCCL reports: '%s'\n", nccl_comm_transport(c));
        CHECK("planned Socket is not flagged as an RDMA fallback", nccl_comm_check_transport(c, &e) == 0);
    }
    cudaFree(d);
    cudaFree(d2);
    free(h);
    nccl_comm_free(c);
    comm_free(boot);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--compile-only") == 0) {
        printf("PASS comm_nccl links\n");
        return 0;
    }
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) {
        printf("no GPU: nothing to run\n");
        return 0;
    }
    int n = ngpu > 4 ? 4 : ngpu;
    printf("%d GPU(s): %d rank(s)\n", ngpu, n);
    if (n == 1)
        return run_rank(0, 1, NULL, NULL, 0) || fails ? 1 : 0;
    struct tcp_listener *ls[4];
    struct tcp_endpoint eps[4];
    herr e;
    for (int i = 0; i < n; i++) {
        if (tcp_listener_open(&ls[i], "127.0.0.1", 0, &e) != 0)
            return 1;
        snprintf(eps[i].host, sizeof eps[i].host, "127.0.0.1");
        eps[i].port = tcp_listener_port(ls[i]);
    }
    fflush(stdout);
    pid_t pids[4];
    for (int i = 1; i < n; i++)
        if ((pids[i] = fork()) == 0)
            _exit(run_rank(i, n, ls[i], eps, 1));
    int rc = run_rank(0, n, ls[0], eps, 0);
    for (int i = 1; i < n; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        rc |= !WIFEXITED(st) || WEXITSTATUS(st);
    }
    return rc || fails ? 1 : 0;
}
