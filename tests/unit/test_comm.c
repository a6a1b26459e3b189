/* Collectives and point-to-point over the TCP backend, in forked processes on loopback:
 * each collective against a locally computed reference on random integer-valued data (so sums
 * are exact), odd sizes, 1 rank, 2^k and non-power-of-two rank counts; full duplex; faults. */
#include "test.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "comm.h"
#include "comm_testutil.h"

static float val(int rank, size_t i, int salt)
{
    uint64_t x = (uint64_t)rank * 1000003u + i * 7919u + (uint64_t)salt * 104729u;
    x ^= x >> 13;
    x *= 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return (float)((int)(x % 201) - 100);
}

static int fail(int rank, const char *what, herr *e)
{
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, e ? e->msg : "");
    return 1;
}

static const size_t sizes[] = {0, 1, 5, 7, 1000, 300007};

static int collectives(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_group_spec s;
    group_spec(&s, "test", 7, n, rank, eps, 20);
    struct comm *c;
    if (comm_create(&c, l, &s, &e) != 0)
        return fail(rank, "create", &e);
    int bad = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0] && !bad; si++) {
        size_t cnt = sizes[si];
        float *buf = malloc((cnt + 1) * sizeof *buf);
        float *ref = malloc((cnt + 1) * sizeof *ref);
        if (!buf || !ref)
            return fail(rank, "malloc", NULL);
        for (size_t i = 0; i < cnt; i++) {
            buf[i] = val(rank, i, (int)si);
            ref[i] = 0;
            for (int r = 0; r < n; r++)
                ref[i] += val(r, i, (int)si);
        }
        /* all-reduce */
        if (comm_all_reduce(c, buf, cnt, &e) != 0)
            bad = fail(rank, "all-reduce", &e);
        for (size_t i = 0; i < cnt && !bad; i++)
            if (buf[i] != ref[i]) {
                fprintf(stderr, "rank %d n %d size %zu: all-reduce [%zu] %g != %g\n", rank, n, cnt,
                        i, buf[i], ref[i]);
                bad = 1;
            }
        /* reduce-scatter (async) then all-gather */
        for (size_t i = 0; i < cnt; i++)
            buf[i] = val(rank, i, (int)si);
        struct comm_req *req;
        if (!bad && (comm_ireduce_scatter(c, buf, cnt, &req, &e) != 0 || comm_wait(req, &e) != 0))
            bad = fail(rank, "reduce-scatter", &e);
        size_t off, len;
        comm_chunk(c, cnt, rank, &off, &len);
        for (size_t i = off; i < off + len && !bad; i++)
            if (buf[i] != ref[i]) {
                fprintf(stderr, "rank %d n %d size %zu: reduce-scatter [%zu] %g != %g\n", rank, n,
                        cnt, i, buf[i], ref[i]);
                bad = 1;
            }
        for (size_t i = 0; i < cnt; i++)
            if (i < off || i >= off + len)
                buf[i] = -12345;
        if (!bad && comm_all_gather(c, buf, cnt, sizeof(float), &e) != 0)
            bad = fail(rank, "all-gather", &e);
        for (size_t i = 0; i < cnt && !bad; i++)
            if (buf[i] != ref[i]) {
                fprintf(stderr, "rank %d n %d size %zu: all-gather [%zu] %g != %g\n", rank, n, cnt,
                        i, buf[i], ref[i]);
                bad = 1;
            }
        /* broadcast from the last rank */
        int root = n - 1;
        for (size_t i = 0; i < cnt; i++)
            buf[i] = rank == root ? val(root, i, 99) : 0;
        if (!bad && comm_broadcast(c, buf, cnt * sizeof(float), root, &e) != 0)
            bad = fail(rank, "broadcast", &e);
        for (size_t i = 0; i < cnt && !bad; i++)
            if (buf[i] != val(root, i, 99)) {
                fprintf(stderr, "rank %d: broadcast [%zu] wrong\n", rank, i);
                bad = 1;
            }
        free(buf);
        free(ref);
    }
    if (!bad && comm_barrier(c, &e) != 0)
        bad = fail(rank, "barrier", &e);
    comm_free(c);
    return bad;
}

/* Both ranks send 16 MB to each other at the same time, then tagged messages out of order. */
static int duplex(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_group_spec s;
    group_spec(&s, "duplex", 3, n, rank, eps, 20);
    struct comm *c;
    if (comm_create(&c, l, &s, &e) != 0)
        return fail(rank, "create", &e);
    size_t cnt = 4u << 20;
    float *out = malloc(cnt * sizeof *out), *in = malloc(cnt * sizeof *in);
    if (!out || !in)
        return fail(rank, "malloc", NULL);
    for (size_t i = 0; i < cnt; i++)
        out[i] = val(rank, i, 1);
    int peer = 1 - rank, bad = 0;
    if (comm_send(c, peer, 5, out, cnt * sizeof *out, &e) != 0 ||
        comm_recv(c, peer, 5, in, cnt * sizeof *in, &e) != 0)
        bad = fail(rank, "large exchange", &e);
    for (size_t i = 0; i < cnt && !bad; i++)
        if (in[i] != val(peer, i, 1))
            bad = fail(rank, "large exchange data", NULL);
    int a = 100 + rank, b = 200 + rank, ga = 0, gb = 0;
    if (!bad && (comm_send(c, peer, 1, &a, sizeof a, &e) != 0 || comm_send(c, peer, 2, &b, sizeof b, &e) != 0 ||
                 comm_recv(c, peer, 2, &gb, sizeof gb, &e) != 0 || comm_recv(c, peer, 1, &ga, sizeof ga, &e) != 0))
        bad = fail(rank, "tagged", &e);
    if (!bad && (ga != 100 + peer || gb != 200 + peer))
        bad = fail(rank, "tag matching", NULL);
    /* wrong size is an error, not a crash */
    if (!bad && comm_send(c, peer, 3, &a, sizeof a, &e) != 0)
        bad = fail(rank, "send small", &e);
    double d;
    if (!bad && comm_recv(c, peer, 3, &d, sizeof d, &e) == 0)
        bad = fail(rank, "size mismatch not reported", NULL);
    /* a multi-frame message received with a shorter length is an error too */
    if (!bad && comm_send(c, peer, 6, out, (3u << 20) + 5, &e) != 0)
        bad = fail(rank, "send 3 MB", &e);
    if (!bad && comm_recv(c, peer, 6, in, 2u << 20, &e) == 0)
        bad = fail(rank, "multi-frame size mismatch not reported", NULL);
    else if (!bad && !strstr(e.msg, "another size"))
        bad = fail(rank, "multi-frame mismatch message", &e);
    if (!bad && comm_barrier(c, &e) != 0)
        bad = fail(rank, "barrier", &e);
    free(out);
    free(in);
    comm_free(c);
    return bad;
}

/* Large odd sizes (chunks of several segments, not a multiple of the segment) with one rank
 * starting late, so its left neighbour's first frames wait in the mailbox and are added when the
 * receive is posted; also a point-to-point message that is partly staged, partly received
 * directly. */
static int late_start(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_group_spec s;
    group_spec(&s, "late", 15, n, rank, eps, 20);
    struct comm *c;
    if (comm_create(&c, l, &s, &e) != 0)
        return fail(rank, "create", &e);
    size_t cnt = 1000003;
    float *buf = malloc(cnt * sizeof *buf);
    if (!buf)
        return fail(rank, "malloc", NULL);
    int bad = 0;
    for (int op = 0; op < 2 && !bad; op++) {
        for (size_t i = 0; i < cnt; i++)
            buf[i] = val(rank, i, 20 + op);
        if (rank == 0)
            usleep(150000);
        if ((op == 0 ? comm_all_reduce(c, buf, cnt, &e) : comm_reduce_scatter(c, buf, cnt, &e)) != 0)
            bad = fail(rank, op == 0 ? "late all-reduce" : "late reduce-scatter", &e);
        size_t off = 0, len = cnt;
        if (op == 1)
            comm_chunk(c, cnt, rank, &off, &len);
        for (size_t i = off; i < off + len && !bad; i++) {
            float want = 0;
            for (int r = 0; r < n; r++)
                want += val(r, i, 20 + op);
            if (buf[i] != want) {
                fprintf(stderr, "rank %d op %d: [%zu] %g != %g\n", rank, op, i, buf[i], want);
                bad = 1;
            }
        }
    }
    /* rank 1 sends 3 MB + 8 bytes to rank 0, which posts its receive late */
    size_t pn = (3u << 18) + 2;
    for (size_t i = 0; i < pn; i++)
        buf[i] = rank == 1 ? val(1, i, 30) : -1;
    if (!bad && rank == 1 && comm_send(c, 0, 8, buf, pn * sizeof *buf, &e) != 0)
        bad = fail(rank, "send 3 MB", &e);
    if (!bad && rank == 0) {
        usleep(100000);
        if (comm_recv(c, 1, 8, buf, pn * sizeof *buf, &e) != 0)
            bad = fail(rank, "late recv", &e);
        for (size_t i = 0; i < pn && !bad; i++)
            if (buf[i] != val(1, i, 30))
                bad = fail(rank, "late recv data", NULL);
    }
    if (!bad && comm_barrier(c, &e) != 0)
        bad = fail(rank, "barrier", &e);
    free(buf);
    comm_free(c);
    return bad;
}

/* Rank 1 exits in the middle of a collective: rank 0 must report the lost connection (not a
 * timeout: the timeout here is long) naming rank 1. */
static int dead_peer(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_group_spec s;
    group_spec(&s, "dead", 9, n, rank, eps, 60);
    struct comm *c;
    if (comm_create(&c, l, &s, &e) != 0)
        return fail(rank, "create", &e);
    float x[64] = {0};
    if (rank == 1) {
        comm_send(c, 0, 1, x, 16, &e); /* tell rank 0 we are alive, then die */
        _exit(0);
    }
    if (comm_recv(c, 1, 1, x, 16, &e) != 0)
        return fail(rank, "recv hello", &e);
    int rc = comm_all_reduce(c, x, 64, &e);
    comm_free(c);
    if (rc == 0)
        return fail(rank, "all-reduce succeeded with a dead peer", NULL);
    if (!strstr(e.msg, "lost its connection to rank 1") || (!strstr(e.msg, "all-reduce") &&
        !strstr(e.msg, "reduce-scatter")))
        return fail(rank, "unexpected message", &e);
    return 0;
}

/* Rank 1 starts a slow (paced) all-reduce and dies while rank 0's reader is adding its data
 * into rank 0's buffer: rank 0 reports the lost connection at once, naming rank 1. */
static int dies_mid_reduce(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_pacing p[2] = {{20e6, 0}, {0, 0}};
    struct tcp_group_spec s;
    group_spec(&s, "dies", 16, n, rank, eps, 60);
    if (rank == 1)
        s.pacing = p;
    struct comm *c;
    if (comm_create(&c, l, &s, &e) != 0)
        return fail(rank, "create", &e);
    size_t cnt = 4u << 20;
    float *buf = calloc(cnt, sizeof *buf);
    if (!buf)
        return fail(rank, "malloc", NULL);
    if (rank == 1) {
        struct comm_req *req;
        if (comm_iall_reduce(c, buf, cnt, &req, &e) != 0)
            return fail(rank, "iall_reduce", &e);
        usleep(150000);
        _exit(0);
    }
    int rc = comm_all_reduce(c, buf, cnt, &e), bad = 0;
    if (rc == 0)
        bad = fail(rank, "all-reduce succeeded with a dead peer", NULL);
    else if (!strstr(e.msg, "lost its connection to rank 1") || !strstr(e.msg, "all-reduce"))
        bad = fail(rank, "unexpected message", &e);
    free(buf);
    comm_free(c);
    return bad;
}

/* Rank 1 stops (SIGSTOP) in the middle of a paced all-reduce: rank 0 times out after its
 * timeout with a message naming rank 1 and the operation, then lets rank 1 go on. */
static int stalls_mid_reduce(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_pacing p[2] = {{20e6, 0}, {0, 0}};
    struct tcp_group_spec s;
    group_spec(&s, "stalls", 17, n, rank, eps, 0.5);
    if (rank == 1)
        s.pacing = p;
    struct comm *c;
    if (comm_create(&c, l, &s, &e) != 0)
        return fail(rank, "create", &e);
    size_t cnt = 4u << 20;
    float *buf = calloc(cnt, sizeof *buf);
    if (!buf)
        return fail(rank, "malloc", NULL);
    int pid = (int)getpid(), bad = 0;
    if (rank == 1) {
        struct comm_req *req;
        if (comm_send(c, 0, 1, &pid, sizeof pid, &e) != 0 || comm_iall_reduce(c, buf, cnt, &req, &e) != 0)
            return fail(rank, "start", &e);
        usleep(150000);
        raise(SIGSTOP);
        comm_wait(req, &e); /* fails or not: rank 0 has given up */
    } else {
        if (comm_recv(c, 1, 1, &pid, sizeof pid, &e) != 0)
            return fail(rank, "recv pid", &e);
        if (comm_all_reduce(c, buf, cnt, &e) == 0)
            bad = fail(rank, "all-reduce succeeded with a stopped peer", NULL);
        else if (!strstr(e.msg, "timed out") || !strstr(e.msg, "rank 1") || !strstr(e.msg, "all-reduce"))
            bad = fail(rank, "unexpected message", &e);
        kill(pid, SIGCONT);
    }
    free(buf);
    comm_free(c);
    return bad;
}

/* A paced all-reduce that takes longer than the timeout completes: the timeout counts from the
 * last frame that arrived, not from the start of the (whole-chunk) receive. */
static int slow_but_moving(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_pacing p[2] = {{4e6, 0}, {0, 0}};
    struct tcp_group_spec s;
    group_spec(&s, "slow", 18, n, rank, eps, 0.8);
    if (rank == 1)
        s.pacing = p; /* only 1 -> 0 is slow: rank 0 waits ~1 s for each whole 4 MB chunk */
    struct comm *c;
    if (comm_create(&c, l, &s, &e) != 0)
        return fail(rank, "create", &e);
    size_t cnt = 2u << 20; /* 4 MB chunks: ~1 s per ring step at 4 MB/s */
    float *buf = malloc(cnt * sizeof *buf);
    if (!buf)
        return fail(rank, "malloc", NULL);
    for (size_t i = 0; i < cnt; i++)
        buf[i] = val(rank, i, 40);
    int bad = 0;
    if (comm_all_reduce(c, buf, cnt, &e) != 0)
        bad = fail(rank, "slow all-reduce", &e);
    for (size_t i = 0; i < cnt && !bad; i++)
        if (buf[i] != val(0, i, 40) + val(1, i, 40))
            bad = fail(rank, "slow all-reduce data", NULL);
    free(buf);
    comm_free(c);
    return bad;
}

/* Flow control: while its neighbour has not entered the all-reduce, a rank sends at most one
 * segment (1 MiB) of the 8 MiB chunk; it must not push the whole chunk into its socket and run
 * ahead (on a slow link the next operation would then wait behind that queued data). */
static int no_run_ahead(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_group_spec s;
    group_spec(&s, "ahead", 19, n, rank, eps, 20);
    struct comm *c;
    if (comm_create(&c, l, &s, &e) != 0)
        return fail(rank, "create", &e);
    size_t cnt = 4u << 20; /* 16 MB: 8 MB chunks, 8 segments each */
    float *buf = malloc(cnt * sizeof *buf);
    if (!buf)
        return fail(rank, "malloc", NULL);
    for (size_t i = 0; i < cnt; i++)
        buf[i] = val(rank, i, 50);
    int bad = 0;
    if (rank == 1) {
        usleep(400000);
        if (comm_all_reduce(c, buf, cnt, &e) != 0)
            bad = fail(rank, "all-reduce", &e);
    } else {
        struct comm_req *req;
        if (comm_iall_reduce(c, buf, cnt, &req, &e) != 0)
            return fail(rank, "start", &e);
        usleep(250000);
        uint64_t sent = comm_bytes_sent(c);
        if (sent > ((uint64_t)1 << 20)) {
            fprintf(stderr, "rank 0 sent %llu bytes before its neighbour joined\n", (unsigned long long)sent);
            bad = 1;
        }
        if (comm_wait(req, &e) != 0)
            bad = fail(rank, "all-reduce", &e);
    }
    for (size_t i = 0; i < cnt && !bad; i++)
        if (buf[i] != val(0, i, 50) + val(1, i, 50))
            bad = fail(rank, "all-reduce data", NULL);
    free(buf);
    comm_free(c);
    return bad;
}

/* Rank 1 is never started: rank 0 gets an error naming it within the timeout. */
static int never(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_group_spec s;
    group_spec(&s, "never", 11, n, rank, eps, 1.0);
    struct comm *c;
    if (comm_create(&c, l, &s, &e) == 0) {
        comm_free(c);
        return fail(rank, "create succeeded without peer", NULL);
    }
    if (!strstr(e.msg, "rank 1") || !strstr(e.msg, "never connected"))
        return fail(rank, "unexpected message", &e);
    return 0;
}

/* Rank 0 is never started: rank 1 cannot connect to it and names it. */
static int refused(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_group_spec s;
    group_spec(&s, "refused", 12, n, rank, eps, 1.0);
    struct comm *c;
    if (comm_create(&c, l, &s, &e) == 0) {
        comm_free(c);
        return fail(rank, "create succeeded without peer", NULL);
    }
    if (!strstr(e.msg, "could not connect to rank 0"))
        return fail(rank, "unexpected message", &e);
    return 0;
}

/* A recv nobody answers times out with a message naming the peer and the operation. */
static int timeout(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_group_spec s;
    group_spec(&s, "timeout", 13, n, rank, eps, 0.5);
    struct comm *c;
    if (comm_create(&c, l, &s, &e) != 0)
        return fail(rank, "create", &e);
    int x, bad = 0;
    if (rank == 0) {
        if (comm_recv(c, 1, 4, &x, sizeof x, &e) == 0)
            bad = fail(rank, "recv succeeded", NULL);
        else if (!strstr(e.msg, "timed out") || !strstr(e.msg, "rank 1") || !strstr(e.msg, "recv"))
            bad = fail(rank, "unexpected message", &e);
    } else {
        /* stay connected, silent, well past rank 0's 0.5 s timeout (no receive of our own:
         * one timing out just as a message arrived would end the connection) */
        usleep(1500000);
    }
    comm_free(c);
    return bad;
}

/* Paced link: data still arrives intact. */
static int paced(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    (void)arg;
    herr e;
    struct tcp_pacing p[2] = {{4e6, 0.001}, {4e6, 0.001}};
    struct tcp_group_spec s;
    group_spec(&s, "paced", 14, n, rank, eps, 20);
    s.pacing = p;
    struct comm *c;
    if (comm_create(&c, l, &s, &e) != 0)
        return fail(rank, "create", &e);
    float buf[50001];
    for (size_t i = 0; i < 50001; i++)
        buf[i] = val(rank, i, 3);
    int bad = 0;
    if (comm_all_reduce(c, buf, 50001, &e) != 0)
        bad = fail(rank, "paced all-reduce", &e);
    for (size_t i = 0; i < 50001 && !bad; i++)
        if (buf[i] != val(0, i, 3) + val(1, i, 3))
            bad = fail(rank, "paced data", NULL);
    comm_free(c);
    return bad;
}

int main(void)
{
    static const int ns[] = {1, 2, 3, 4, 5};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "collectives on %d ranks match the reference", ns[i]);
        CHECK_INT(name, run_group(ns[i], collectives, NULL, -1, 120), 0);
    }
    CHECK_INT("full duplex 16 MB both ways + tag matching + size check", run_group(2, duplex, NULL, -1, 60), 0);
    CHECK_INT("dead peer reported at once, naming it", run_group(2, dead_peer, NULL, -1, 30), 0);
    CHECK_INT("large odd sizes, late start: staged frames are added when posted",
              run_group(3, late_start, NULL, -1, 60), 0);
    CHECK_INT("peer dying mid reduce-receive is reported, naming it",
              run_group(2, dies_mid_reduce, NULL, -1, 30), 0);
    CHECK_INT("peer stalling mid reduce-receive times out, naming it",
              run_group(2, stalls_mid_reduce, NULL, -1, 30), 0);
    CHECK_INT("peer that never connects is named", run_group(2, never, NULL, 1, 30), 0);
    CHECK_INT("peer that never listens is named", run_group(2, refused, NULL, 0, 30), 0);
    CHECK_INT("recv timeout names peer and op", run_group(2, timeout, NULL, -1, 30), 0);
    CHECK_INT("paced link delivers", run_group(2, paced, NULL, -1, 30), 0);
    CHECK_INT("no rank runs more than a segment ahead of its neighbour", run_group(2, no_run_ahead, NULL, -1, 30), 0);
    CHECK_INT("collective slower than the timeout completes while data flows",
              run_group(2, slow_but_moving, NULL, -1, 30), 0);
    herr e;
    struct tcp_listener *l;
    CHECK_INT("bad listen port rejected", tcp_listener_open(&l, NULL, 70000, &e), -1);
    CHECK("bad port message names it", strstr(e.msg, "70000") != NULL);
    TEST_MAIN_END();
}
