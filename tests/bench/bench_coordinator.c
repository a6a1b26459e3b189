/* make bench-coordinator: N lightweight simulated workers (one libwebsockets client context,
 * N connections) connect to a coordinator running in a child process, say hello with a NIC
 * report, receive their assignments (plans), send their rendezvous and receive start.
 * Prints the time until every plan is delivered, until every start is delivered, and the
 * coordinator process's peak RSS.   usage: bench_coordinator [WORKERS] */
#include <libwebsockets.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coordinator.h"
#include "protocol.h"

#define TOKEN "bench-token-0123456789"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- server (child) */

static volatile sig_atomic_t server_quit;
static void on_term(int s) { (void)s; server_quit = 1; }

static int ring_plan(void *user, const struct coord_worker *w, int n, struct plan_assignment *a,
                     herr *e)
{
    (void)user;
    for (int i = 0; i < n; i++) {
        a[i].rank = w[i].index;
        a[i].stage = w[i].index % 4;
        a[i].stages = 4;
        snprintf(a[i].fabric, sizeof a[i].fabric, "%s", w[i].nic.fabric);
        if (!(a[i].peers = malloc(sizeof *a[i].peers)))
            return herr_set(e, "oom");
        a[i].peers[0] = (w[i].index ^ 1) < n ? (w[i].index ^ 1) : 0;
        a[i].npeers = 1;
    }
    return 0;
}

static long peak_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            v = atol(line + 6);
    if (f)
        fclose(f);
    return v;
}

static int run_server(int n, int port_fd, int rss_fd)
{
    struct coordinator *c;
    struct coord_options o = {.bind = "127.0.0.1", .port = 0};
    herr e = {0};
    if (coord_create(&c, &o, &e)) {
        fprintf(stderr, "server: %s\n", e.msg);
        return 1;
    }
    struct coord_job_spec js = {.name = "bench", .token = TOKEN, .workers = n,
                                .gang_timeout_ms = 600000, .hooks = {.plan = ring_plan}};
    if (coord_add_job(c, &js, &e)) {
        fprintf(stderr, "server: %s\n", e.msg);
        return 1;
    }
    int port = coord_port(c);
    if (write(port_fd, &port, sizeof port) != (ssize_t)sizeof port)
        return 1;
    signal(SIGTERM, on_term);
    while (!server_quit)
        coord_service(c);
    long rss = peak_rss_kib();
    if (write(rss_fd, &rss, sizeof rss) != (ssize_t)sizeof rss)
        return 1;
    coord_destroy(c);
    return 0;
}

/* ---------------------------------------------------------------- simulated workers */

struct sim {
    int idx;
    int rank;
    int want_write;     /* 1 hello, 2 rendezvous */
    char rx[65536];
    size_t rx_len;
};

static int n_workers, n_connected, n_assigned, n_started, n_errors;
static double t_assigned, t_started;
static double t0;

static int send_text(struct lws *wsi, char *text)
{
    if (!text)
        return -1;
    size_t len = strlen(text);
    unsigned char *buf = malloc(LWS_PRE + len);
    if (!buf) {
        free(text);
        return -1;
    }
    memcpy(buf + LWS_PRE, text, len);
    int rc = lws_write(wsi, buf + LWS_PRE, len, LWS_WRITE_TEXT) < (int)len ? -1 : 0;
    free(buf);
    free(text);
    return rc;
}

static int client_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len)
{
    struct sim *s = user;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        n_connected++;
        s->want_write = 1;
        lws_callback_on_writable(wsi);
        return 0;
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        if (s->want_write == 1) {
            struct proto_hello h;
            memset(&h, 0, sizeof h);
            snprintf(h.job, sizeof h.job, "bench");
            snprintf(h.token, sizeof h.token, TOKEN);
            snprintf(h.pod, sizeof h.pod, "bench-worker-%d", s->idx);
            snprintf(h.node, sizeof h.node, "node-%d", s->idx / 8);
            h.worker = s->idx;
            h.gpus = 8;
            h.nic.cls = s->idx % 2 ? NIC_ROCE : NIC_INFINIBAND;
            snprintf(h.nic.fabric, sizeof h.nic.fabric, "%s", s->idx % 2 ? "roce-b" : "ib-a");
            h.nic.gbps = 200;
            h.nic.gid_index = s->idx % 2 ? 3 : -1;
            snprintf(h.nic.ib_hca, sizeof h.nic.ib_hca, "mlx5_0:1,mlx5_1:1");
            s->want_write = 0;
            return send_text(wsi, proto_hello_encode(&h, NULL));
        }
        if (s->want_write == 2) {
            char ep[64];
            snprintf(ep, sizeof ep, "10.0.%d.%d:29500", s->idx / 250, s->idx % 250);
            s->want_write = 0;
            return send_text(wsi, proto_rendezvous_encode(0, s->rank, ep, NULL, NULL, NULL));
        }
        return 0;
    case LWS_CALLBACK_CLIENT_RECEIVE: {
        if (lws_is_first_fragment(wsi))
            s->rx_len = 0;
        if (s->rx_len + len > sizeof s->rx)
            return -1;
        memcpy(s->rx + s->rx_len, in, len);
        s->rx_len += len;
        if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi))
            return 0;
        struct proto_msg *m = malloc(sizeof *m);
        herr e;
        if (!m || proto_parse(s->rx, s->rx_len, m, &e)) {
            n_errors++;
            free(m);
            return -1;
        }
        if (m->type == PROTO_ASSIGN) {
            s->rank = m->rank;
            if (++n_assigned == n_workers)
                t_assigned = now_s() - t0;
            s->want_write = 2;
            lws_callback_on_writable(wsi);
        } else if (m->type == PROTO_START) {
            if (++n_started == n_workers)
                t_started = now_s() - t0;
        } else if (m->type == PROTO_ERROR) {
            n_errors++;
        }
        proto_msg_free(m);
        free(m);
        return 0;
    }
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        n_errors++;
        return 0;
    default:
        return 0;
    }
}

int main(int argc, char **argv)
{
    n_workers = argc > 1 ? atoi(argv[1]) : 4096;
    if (n_workers < 1 || n_workers > 65536) {
        fprintf(stderr, "usage: bench_coordinator [WORKERS 1..65536]\n");
        return 2;
    }
    int pport[2], prss[2];
    if (pipe(pport) || pipe(prss))
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(pport[0]);
        close(prss[0]);
        _exit(run_server(n_workers, pport[1], prss[1]));
    }
    close(pport[1]);
    close(prss[1]);
    int port = 0;
    if (read(pport[0], &port, sizeof port) != (ssize_t)sizeof port) {
        fprintf(stderr, "coordinator did not start\n");
        return 1;
    }

    lws_set_log_level(0, NULL);
    static struct lws_protocols protos[] = {
        {"holmes.v1", client_cb, sizeof(struct sim), 65536, 0, NULL, 0},
        {NULL, NULL, 0, 0, 0, NULL, 0},
    };
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = protos;
    struct lws_context *ctx = lws_create_context(&info);
    if (!ctx)
        return 1;
    struct sim *sims = calloc((size_t)n_workers, sizeof *sims);
    if (!sims)
        return 1;
    t0 = now_s();
    int launched = 0;
    double deadline = t0 + 300;
    while (n_started < n_workers && now_s() < deadline && n_errors == 0) {
        /* Ramp connections up in batches so the listen backlog is not flooded. */
        for (int k = 0; k < 128 && launched < n_workers && launched - n_connected < 512; k++) {
            struct lws_client_connect_info ci;
            memset(&ci, 0, sizeof ci);
            ci.context = ctx;
            ci.address = "127.0.0.1";
            ci.port = port;
            ci.path = "/";
            ci.host = "127.0.0.1";
            ci.origin = "127.0.0.1";
            ci.protocol = protos[0].name;
            sims[launched].idx = launched;
            ci.userdata = &sims[launched];
            if (!lws_client_connect_via_info(&ci))
                n_errors++;
            launched++;
        }
        lws_service(ctx, 0);
    }
    double t_end = now_s() - t0;
    kill(pid, SIGTERM);
    long rss = -1;
    if (read(prss[0], &rss, sizeof rss) != (ssize_t)sizeof rss)
        rss = -1;
    waitpid(pid, NULL, 0);
    lws_context_destroy(ctx);
    free(sims);
    printf("workers %d: connected %d, plans delivered %d, starts delivered %d, errors %d\n",
           n_workers, n_connected, n_assigned, n_started, n_errors);
    printf("time until every plan delivered: %.3f s\n", t_assigned);
    printf("time until every start delivered (rendezvous relayed): %.3f s\n", t_started);
    printf("coordinator peak RSS: %.1f MiB\n", rss / 1024.0);
    (void)t_end;
    return n_started == n_workers && n_errors == 0 ? 0 : 1;
}
