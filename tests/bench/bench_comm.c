/* bench_comm N [MAX_BYTES]: N forked ranks on loopback. For sizes 1 KB .. MAX_BYTES (x4):
 * all-reduce and ring send/recv (comm_isend + comm_recv) bus bandwidth (nccl-tests: all-reduce busbw = bytes/t *
 * 2(n-1)/n, send/recv busbw = bytes/t) through the communicator, beside a raw TCP ring stream
 * (plain sockets, each rank writes to its right neighbour while reading from its left one)
 * between the same processes in the same run. Rank 0 prints one line per size. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../unit/comm_testutil.h"
#include "comm.h"

static size_t max_bytes = (size_t)256 << 20;
static int raw_listen[16];
static int raw_port[16];

/* CPU seconds (user + system) of this process, all threads. */
static double cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct raw_io {
    int fd;
    char *buf;
    size_t len;
};

static void *raw_writer(void *arg)
{
    struct raw_io *io = arg;
    size_t off = 0;
    while (off < io->len) {
        ssize_t n = send(io->fd, io->buf + off, io->len - off, MSG_NOSIGNAL);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    return NULL;
}

static int raw_read(int fd, char *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = recv(fd, buf + off, len - off, 0);
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    return 0;
}

/* One raw ring exchange of len bytes. */
static int raw_ring(int out_fd, int in_fd, char *sbuf, char *rbuf, size_t len)
{
    struct raw_io io = {out_fd, sbuf, len};
    pthread_t t;
    if (pthread_create(&t, NULL, raw_writer, &io) != 0)
        return -1;
    int rc = raw_read(in_fd, rbuf, len);
    pthread_join(t, NULL);
    return rc;
}

static int iters_for(size_t bytes)
{
    size_t target = (size_t)256 << 20; /* bytes per measurement: steadier large-message rows */
    int it = (int)(target / (bytes ? bytes : 1));
    return it < 3 ? 3 : it > 200 ? 200 : it;
}

static int rank_main(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_group_spec s;
    group_spec(&s, "bench", 1, n, rank, eps, 120);
    struct comm *c;
    if (comm_create(&c, l, &s, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    /* raw ring: connect to the right neighbour's raw listener, accept from the left */
    int right = (rank + 1) % n, out_fd = -1, in_fd = -1;
    if (n > 1) {
        out_fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)raw_port[right])};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (out_fd < 0 || connect(out_fd, (struct sockaddr *)&a, sizeof a) != 0) {
            perror("raw connect");
            return 1;
        }
        in_fd = accept(raw_listen[rank], NULL, NULL);
        if (in_fd < 0) {
            perror("raw accept");
            return 1;
        }
        int one = 1;
        setsockopt(out_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    char *sbuf = malloc(max_bytes), *rbuf = malloc(max_bytes);
    if (!sbuf || !rbuf)
        return 1;
    memset(sbuf, 0, max_bytes);
    memset(rbuf, 0, max_bytes);
    if (rank == 0)
        printf("%10s %12s %12s %12s %8s %9s %9s   (GB/s bus bandwidth, %d ranks; cpu: rank 0's "
               "CPU seconds per GB of bus traffic)\n", "bytes", "allreduce", "sendrecv", "raw-tcp",
               "ar/raw", "ar-cpu", "raw-cpu", n);
    for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
        int it = iters_for(bytes);
        size_t count = bytes / sizeof(float);
        double t_ar = 0, t_sr = 0, t_raw = 0, c_ar = 0, c_raw = 0;
        for (int pass = 0; pass < 2; pass++) { /* pass 0 warms up */
            int reps = pass ? it : 1;
            if (comm_barrier(c, &e) != 0)
                goto fail;
            double t0 = now_s(), c0 = cpu_s();
            for (int i = 0; i < reps; i++)
                if (comm_all_reduce(c, (float *)(void *)sbuf, count, &e) != 0)
                    goto fail;
            double t1 = now_s(), c1 = cpu_s();
            if (comm_barrier(c, &e) != 0)
                goto fail;
            double t2 = now_s();
            for (int i = 0; i < reps && n > 1; i++) {
                struct comm_req *rq;
                if (comm_isend(c, right, 7, sbuf, bytes, &rq, &e) != 0)
                    goto fail;
                int rr = comm_recv(c, (rank + n - 1) % n, 7, rbuf, bytes, &e);
                if (comm_wait(rq, &e) != 0 || rr != 0)
                    goto fail;
            }
            double t3 = now_s();
            if (comm_barrier(c, &e) != 0)
                goto fail;
            double t4 = now_s(), c4 = cpu_s();
            for (int i = 0; i < reps && n > 1; i++)
                if (raw_ring(out_fd, in_fd, sbuf, rbuf, bytes) != 0) {
                    fprintf(stderr, "raw ring failed\n");
                    return 1;
                }
            double t5 = now_s(), c5 = cpu_s();
            if (pass) {
                c_ar = (c1 - c0) / reps;
                c_raw = (c5 - c4) / reps;
                t_ar = (t1 - t0) / reps;
                t_sr = (t3 - t2) / reps;
                t_raw = (t5 - t4) / reps;
            }
        }
        double algbw_ar = (double)bytes / t_ar / 1e9;
        double bus_ar = algbw_ar * 2.0 * (n - 1) / n;
        double bus_sr = n > 1 ? (double)bytes / t_sr / 1e9 : 0;
        double raw = n > 1 ? (double)bytes / t_raw / 1e9 : 0;
        double bus_bytes_ar = (double)bytes * 2.0 * (n - 1) / n;
        if (rank == 0)
            printf("%10zu %12.3f %12.3f %12.3f %7.0f%% %9.2f %9.2f\n", bytes, bus_ar, bus_sr, raw,
                   raw > 0 ? 100.0 * bus_ar / raw : 0, bus_bytes_ar > 0 ? c_ar / bus_bytes_ar * 1e9 : 0,
                   n > 1 ? c_raw / (double)bytes * 1e9 : 0);
        fflush(stdout);
    }
    free(sbuf);
    free(rbuf);
    comm_free(c);
    return 0;
fail:
    fprintf(stderr, "rank %d: %s\n", rank, e.msg);
    return 1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2)
        max_bytes = (size_t)atol(argv[2]);
    if (n < 1 || n > 16 || max_bytes < 1024) {
        fprintf(stderr, "usage: bench_comm N(1..16) [MAX_BYTES >= 1024]\n");
        return 2;
    }
    for (int i = 0; i < n; i++) {
        raw_listen[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t al = sizeof a;
        if (raw_listen[i] < 0 || bind(raw_listen[i], (struct sockaddr *)&a, sizeof a) != 0 ||
            listen(raw_listen[i], 4) != 0 || getsockname(raw_listen[i], (struct sockaddr *)&a, &al) != 0) {
            perror("raw listen");
            return 1;
        }
        raw_port[i] = ntohs(a.sin_port);
    }
    int failed = run_group(n, rank_main, NULL, -1, 590);
    return failed ? 1 : 0;
}
