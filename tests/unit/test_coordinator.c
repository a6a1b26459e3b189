/* The coordinator with simulated workers (coord_client in this process): gang barrier, plan,
 * rendezvous relay, progress, success, in-place restart after a drop, adoption of running
 * workers by a new coordinator, gang timeout, plan failure, and refusals (wrong token, unknown
 * pod, garbled and oversized frames) that leave the job unaffected. */
#include "test.h"

#include <math.h>
#include "coord_testutil.h"

#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <unistd.h>

#include "clock.h"
#include "coord_client.h"
#include "coordinator.h"

#define TOKEN "token-0123456789"

struct server {
    struct coord_thread ct;
    /* recorded by hooks, under mu */
    int hellos;
    int plans;
    int fail_plan;
    int gpus;           /* > 1: each worker gets that many ranks ("ranks"), no peers list */
    int progress_calls;
    struct coord_progress last;
    int steps_seen;
    char events[8192];
};

/* Ring of n workers: rank = n-1-index (so rank != index), peers = next rank. */
static int plan_ring(void *user, const struct coord_worker *w, int n, struct plan_assignment *a,
                     herr *e)
{
    struct server *s = user;
    s->plans++;
    if (s->fail_plan)
        return herr_set(e, "planner: no stage fits in one fabric");
    for (int i = 0; i < n && s->gpus > 1; i++) { /* worker i: ranks g*(n-1-i) + g-1 .. down */
        for (int k = 0; k < s->gpus; k++)
            a[i].ranks[k] = s->gpus * (n - 1 - w[i].index) + s->gpus - 1 - k;
        a[i].nranks = s->gpus;
        a[i].rank = a[i].ranks[0];
    }
    for (int i = 0; i < n && s->gpus <= 1; i++) {
        int rank = n - 1 - w[i].index;
        if (coord_test_assign(&a[i], rank, (rank + 1) % n))
            return herr_set(e, "oom");
        snprintf(a[i].fabric, sizeof a[i].fabric, "%s", w[i].nic.fabric);
    }
    return 0;
}

static void hk_hello(void *user, const struct coord_worker *w)
{
    ((struct server *)user)->hellos++;
    (void)w;
}

static void hk_steps(void *user, const struct coord_worker *w, const struct proto_progress *p)
{
    ((struct server *)user)->steps_seen += p->nsteps;
    (void)w;
}

static void hk_progress(void *user, const struct coord_progress *p)
{
    struct server *s = user;
    s->progress_calls++;
    s->last = *p;
}

static void hk_event(void *user, enum coord_job_state st, const char *msg)
{
    struct server *s = user;
    coord_test_record_event(s->events, sizeof s->events, st, msg);
}

static const char *pods4[] = {"job-w0", "job-w1", "job-w2", "job-w3"};

static int server_start(struct server *s, const char *job, int n, int gang_ms, int restarts)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->ct.mu, NULL);
    struct coord_job_spec js = {
        .name = job, .token = TOKEN, .workers = n, .pods = n == 4 ? pods4 : NULL,
        .gang_timeout_ms = gang_ms, .max_restarts = restarts, .total_steps = 100,
        .skipped_steps = 5, .skipped_last = 8, /* as read back from status.skippedSteps */
        .progress_interval_ms = 1,
        .hooks = {.plan = plan_ring, .on_hello = hk_hello, .on_steps = hk_steps,
                  .on_progress = hk_progress, .on_event = hk_event},
        .user = s,
    };
    return coord_thread_serve(&s->ct, 0, &js);
}

static void server_stop(struct server *s)
{
    coord_thread_stop(&s->ct);
    pthread_mutex_destroy(&s->ct.mu);
}

static int send_hello(struct coord_client *cl, const char *job, const char *token, const char *pod,
                      int idx, int running)
{
    struct proto_hello h = {0};
    snprintf(h.job, sizeof h.job, "%s", job);
    snprintf(h.token, sizeof h.token, "%s", token);
    snprintf(h.pod, sizeof h.pod, "%s", pod);
    snprintf(h.node, sizeof h.node, "node-%d", idx);
    h.worker = idx;
    h.nic.cls = idx < 2 ? NIC_INFINIBAND : NIC_ROCE;
    snprintf(h.nic.fabric, sizeof h.nic.fabric, "%s", idx < 2 ? "ib-a" : "roce-b");
    h.nic.gbps = 100;
    h.nic.gid_index = -1;
    if (running) {
        h.running = 1;
        h.resume_attempt = 0;
        h.resume_rank = idx;
        h.resume_step = 50;
    }
    return coord_test_send(cl, proto_hello_encode(&h, NULL));
}

/* Polls for one message of type `want`; returns 1 and fills m, else 0. */
/* After a refusal: an error with `code`, then the connection closes. */
static int refused_with(struct coord_client *cl, int code)
{
    struct proto_msg m;
    if (!coord_test_expect(cl, PROTO_ERROR, &m))
        return 0;
    int ok = m.u.error.code == code;
    if (!ok)
        printf("# error code %d (%s), want %d\n", m.u.error.code, m.u.error.message, code);
    proto_msg_free(&m);
    herr e = {0};
    int rc = coord_client_poll(cl, 5000, &m, &e);
    if (rc == 1)
        proto_msg_free(&m);
    return ok && rc == -1 && !coord_client_connected(cl);
}

/* A record of `step` skipped as not finite (training.maxNonFiniteSteps): no loss. */
static int send_skipped(struct coord_client *cl, int rank, long step)
{
    static struct proto_progress p;
    memset(&p, 0, sizeof p);
    p.rank = rank;
    p.nsteps = 1;
    p.steps[0] = (struct proto_step){.step = step, .skipped = 1, .step_ms = 10.0};
    return coord_test_send(cl, proto_progress_encode(&p, NULL));
}

static int send_progress(struct coord_client *cl, int rank, long step, int with_loss)
{
    static struct proto_progress p;
    memset(&p, 0, sizeof p);
    p.rank = rank;
    p.nsteps = 1;
    p.steps[0] = (struct proto_step){.step = step, .has_loss = with_loss, .loss = 3.0 + rank,
                                     .tokens_per_s = 100 + 20 * rank, .step_ms = 10.0 * (rank + 1),
                                     .has_norm = with_loss, .grad_norm = 1.0 + rank};
    return coord_test_send(cl, proto_progress_encode(&p, NULL));
}

/* Runs hello → assign → rendezvous → start for workers cl[0..n). Fills ranks. */
static int run_gang(struct coord_client **cl, int n, const char *job, int attempt, int *ranks)
{
    const char *pods[] = {"job-w0", "job-w1", "job-w2", "job-w3"};
    for (int i = 0; i < n; i++)
        if (send_hello(cl[i], job, TOKEN, n == 4 ? pods[i] : "any", i, 0))
            return 0;
    if (!coord_test_rendezvous(cl, NULL, n, attempt, 30000, ranks))
        return 0;
    for (int i = 0; i < n; i++) {
        struct proto_msg m;
        if (!coord_test_expect(cl[i], PROTO_START, &m))
            return 0;
        /* The plan names one peer: the next rank. */
        const struct proto_start *st = &m.u.start;
        char want[64];
        snprintf(want, sizeof want, "127.0.0.1:%d", 30000 + (ranks[i] + 1) % n);
        int ok = st->npeers == 1 && st->peers[0].rank == (ranks[i] + 1) % n &&
                 strcmp(st->peers[0].endpoint, want) == 0;
        proto_msg_free(&m);
        if (!ok)
            return 0;
    }
    return 1;
}

static void test_gang_and_security(void)
{
    struct server s;
    if (server_start(&s, "job", 4, 60000, 0)) {
        TEST_FAIL("server start", "could not start");
        return;
    }
    /* Refusals first: none of them may disturb the job. Hellos that must not be admitted: */
    static const struct {
        const char *name, *job, *token, *pod;
        int index, code;
    } refused_hellos[] = {
        {"wrong token refused", "job", "wrong-token-xyz", "job-w0", 0, PROTO_ERR_AUTH},
        {"no token refused", "job", "", "job-w0", 0, PROTO_ERR_AUTH},
        {"unknown job refused", "other-job", TOKEN, "job-w0", 0, PROTO_ERR_AUTH},
        {"unknown pod refused", "job", TOKEN, "intruder-pod", 1, PROTO_ERR_UNKNOWN_WORKER},
        {"index out of range refused", "job", TOKEN, "job-w9", 9, PROTO_ERR_UNKNOWN_WORKER},
    };
    for (size_t i = 0; i < sizeof refused_hellos / sizeof *refused_hellos; i++) {
        struct coord_client *bad = coord_test_connect(&s.ct);
        CHECK("a refused client connects", bad != NULL);
        if (!bad)
            continue;
        send_hello(bad, refused_hellos[i].job, refused_hellos[i].token, refused_hellos[i].pod,
                   refused_hellos[i].index, 0);
        CHECK(refused_hellos[i].name, refused_with(bad, refused_hellos[i].code));
        coord_client_destroy(bad);
    }
    /* ... and frames: garbled, before any hello, over the size limit */
    size_t n = PROTO_MAX_MESSAGE + 4096;
    char *big = malloc(n + 1);
    if (big) {
        memset(big, 'x', n);
        big[n] = '\0';
    }
    struct {
        const char *name;
        char *frame;
        int code;
    } frames[] = {
        {"garbled frame refused", strdup("{\"v\":1,\"type\":\"hello\",\"job\":"), PROTO_ERR_BAD_MESSAGE},
        {"message before hello refused", proto_done_encode(0, 1, NULL), PROTO_ERR_AUTH},
        {"oversized frame refused", big, PROTO_ERR_BAD_MESSAGE},
    };
    for (size_t i = 0; i < sizeof frames / sizeof *frames; i++) {
        struct coord_client *bad = coord_test_connect(&s.ct);
        if (!bad || !frames[i].frame) {
            TEST_FAIL(frames[i].name, "no client or no frame");
            free(frames[i].frame);
            coord_client_destroy(bad);
            continue;
        }
        coord_test_send(bad, frames[i].frame);
        CHECK(frames[i].name, refused_with(bad, frames[i].code));
        coord_client_destroy(bad);
    }
    pthread_mutex_lock(&s.ct.mu);
    long refused = coord_refused(s.ct.c);
    int hellos = s.hellos;
    pthread_mutex_unlock(&s.ct.mu);
    CHECK_INT("refusals counted", refused, 8);
    CHECK_INT("no refused hello admitted", hellos, 0);
    CHECK_INT("job still gathering", coord_thread_job_state(&s.ct, "job"), COORD_GATHERING);
    pthread_mutex_lock(&s.ct.mu);
    CHECK("refused pod named in an event", strstr(s.events, "intruder-pod") != NULL);
    pthread_mutex_unlock(&s.ct.mu);

    struct coord_client *cl[4] = {0};
    int ok = 1;
    for (int i = 0; i < 4; i++)
        ok = ok && (cl[i] = coord_test_connect(&s.ct)) != NULL;
    CHECK("workers connect", ok);
    int ranks[4] = {0};
    if (ok) {
        /* A duplicate of worker 0 while the real one is connected is refused. */
        send_hello(cl[0], "job", TOKEN, "job-w0", 0, 0);
        struct coord_client *dup = coord_test_connect(&s.ct);
        usleep(100000);
        if (dup) {
            send_hello(dup, "job", TOKEN, "job-w0", 0, 0);
            CHECK("duplicate worker refused", refused_with(dup, PROTO_ERR_DUPLICATE));
            coord_client_destroy(dup);
        }
        /* cl[0] already said hello; run_gang sends it again: a second hello on the same
         * connection is refused, so use fresh hellos for 1..3 and handle 0 by hand. */
        for (int i = 1; i < 4; i++)
            send_hello(cl[i], "job", TOKEN, pods4[i], i, 0);
        struct proto_msg m;
        int got = 1;
        for (int i = 0; i < 4; i++) {
            got = got && coord_test_expect(cl[i], PROTO_ASSIGN, &m);
            if (got) {
                ranks[i] = m.rank;
                proto_msg_free(&m);
            }
        }
        CHECK("every worker assigned after the gang barrier", got);
        CHECK("ranks from the plan", ranks[0] == 3 && ranks[1] == 2 && ranks[2] == 1 && ranks[3] == 0);
        pthread_mutex_lock(&s.ct.mu);
        CHECK_INT("planned once", s.plans, 1);
        CHECK_INT("four admitted", s.hellos, 4);
        pthread_mutex_unlock(&s.ct.mu);
        CHECK_INT("state rendezvous", coord_thread_job_state(&s.ct, "job"), COORD_RENDEZVOUS);
        for (int i = 0; i < 4; i++) {
            char ep[64];
            snprintf(ep, sizeof ep, "127.0.0.1:%d", 30000 + ranks[i]);
            cJSON *ids = NULL;
            if (ranks[i] == 0)
                ids = cJSON_Parse("{\"nccl-dp0\":\"c2VjcmV0\"}");
            coord_test_send(cl[i], proto_rendezvous_encode(0, ranks[i], ep, NULL, ids, NULL));
            cJSON_Delete(ids);
        }
        int starts = 1;
        for (int i = 0; i < 4; i++) {
            if (!coord_test_expect(cl[i], PROTO_START, &m)) {
                starts = 0;
                continue;
            }
            const struct proto_start *st = &m.u.start;
            char want[64];
            snprintf(want, sizeof want, "127.0.0.1:%d", 30000 + (ranks[i] + 1) % 4);
            starts = starts && st->npeers == 1 && st->peers[0].rank == (ranks[i] + 1) % 4 &&
                     strcmp(st->peers[0].endpoint, want) == 0;
            if (ranks[i] == 3 && st->npeers == 1) { /* its peer is rank 0, which published an id */
                const cJSON *id = cJSON_GetObjectItem(st->peers[0].ids, "nccl-dp0");
                CHECK_STR("nccl id relayed", cJSON_IsString(id) ? id->valuestring : NULL, "c2VjcmV0");
            }
            proto_msg_free(&m);
        }
        CHECK("start carries the peers' endpoints", starts);
        CHECK("state running", coord_thread_wait_state(&s.ct, "job", COORD_RUNNING));

        /* Refusals while running leave the job running. */
        struct coord_client *bad = coord_test_connect(&s.ct);
        if (bad) {
            send_hello(bad, "job", "wrong-token-xyz", "job-w1", 1, 0);
            CHECK("wrong token refused while running", refused_with(bad, PROTO_ERR_AUTH));
            coord_client_destroy(bad);
        }
        CHECK_INT("still running after refusal", coord_thread_job_state(&s.ct, "job"), COORD_RUNNING);

        for (int i = 0; i < 4; i++)
            send_progress(cl[i], ranks[i], 10 + i, ranks[i] == 0 || ranks[i] == 1);
        usleep(300000);
        pthread_mutex_lock(&s.ct.mu);
        struct coord_progress agg;
        coord_job_progress(s.ct.c, "job", &agg);
        int steps_seen = s.steps_seen, calls = s.progress_calls;
        pthread_mutex_unlock(&s.ct.mu);
        CHECK_INT("progress records relayed", steps_seen, 4);
        CHECK("progress hook called", calls >= 1);
        CHECK_INT("aggregate step is the slowest", agg.step, 10);
        CHECK_NEAR("aggregate loss is the mean of loss reporters", agg.loss, 3.5, 1e-9);
        CHECK("aggregate gradient norm is the mean of its reporters",
              agg.has_norm && fabs(agg.grad_norm - 1.5) < 1e-9);
        /* each last-stage replica reports the whole step's rate: their mean, not their sum */
        CHECK_NEAR("aggregate tokens/s is the mean of loss reporters", agg.tokens_per_s, 110, 1e-9);
        CHECK_NEAR("aggregate step time is the slowest", agg.step_ms, 40, 1e-9);
        CHECK_NEAR("eta", agg.eta_s, (100 - 10) * 0.040, 1e-9);
        CHECK("skipped steps read back (5, the newest 8) before any is reported",
              agg.skipped_steps == 5 && agg.skipped_last == 8);

        /* Steps skipped as not finite: every rank reports the same ones, each in order, and
         * each step counts once, whichever rank is ahead; step 8 again (a replay after a
         * restart) is not counted twice. */
        send_skipped(cl[0], ranks[0], 13); /* a rank ahead of the others */
        send_skipped(cl[0], ranks[0], 14);
        for (int i = 1; i < 4; i++) {
            send_skipped(cl[i], ranks[i], 13);
            send_skipped(cl[i], ranks[i], 14);
        }
        send_skipped(cl[2], ranks[2], 8);
        usleep(300000);
        pthread_mutex_lock(&s.ct.mu);
        coord_job_progress(s.ct.c, "job", &agg);
        pthread_mutex_unlock(&s.ct.mu);
        CHECK_MSG("skipped steps 13 and 14 counted once each, on top of the 5 read back",
                  agg.skipped_steps == 7 && agg.skipped_last == 14, "%ld skipped, the newest %ld",
                  agg.skipped_steps, agg.skipped_last);

        for (int i = 0; i < 4; i++)
            coord_test_send(cl[i], proto_done_encode(ranks[i], 100, NULL));
        int stops = 1;
        for (int i = 0; i < 4; i++) {
            if (coord_test_expect(cl[i], PROTO_STOP, &m)) {
                stops = stops && !m.u.stop.restart;
                proto_msg_free(&m);
            } else {
                stops = 0;
            }
        }
        CHECK("final stop without restart", stops);
        CHECK("succeeded", coord_thread_wait_state(&s.ct, "job", COORD_SUCCEEDED));
    }
    for (int i = 0; i < 4; i++)
        coord_client_destroy(cl[i]);
    server_stop(&s);
}

/* A gang restarted as it reached the end (here a worker lost; in a cluster as often a re-plan or a
 * preemption) resumes from the checkpoint of the last step: that round trains no step and sends
 * no progress, only done with its last step, and the old round's last progress came after the
 * stop and was dropped. The job ends with the status at the last step, not a few short. */
static void test_restart_at_last_step(void)
{
    struct server s;
    if (server_start(&s, "ls", 2, 60000, 1)) {
        TEST_FAIL("server start", "could not start");
        return;
    }
    struct coord_client *cl[2] = {coord_test_connect(&s.ct), coord_test_connect(&s.ct)};
    int ranks[2];
    int ok = cl[0] && cl[1] && run_gang(cl, 2, "ls", 0, ranks);
    CHECK("last step: first gang runs", ok);
    for (int i = 0; ok && i < 2; i++)
        send_progress(cl[i], ranks[i], 97, 1);
    coord_client_destroy(cl[1]); /* worker 1 goes as the gang trains its last steps */
    cl[1] = NULL;
    struct proto_msg m;
    if (cl[0] && coord_test_expect(cl[0], PROTO_STOP, &m))
        proto_msg_free(&m);
    coord_client_destroy(cl[0]);
    cl[0] = coord_test_connect(&s.ct);
    cl[1] = coord_test_connect(&s.ct);
    ok = cl[0] && cl[1] && run_gang(cl, 2, "ls", 1, ranks);
    CHECK("last step: the gang runs again from the checkpoint of step 100", ok);
    for (int i = 0; ok && i < 2; i++)
        coord_test_send(cl[i], proto_done_encode(ranks[i], 100, NULL));
    CHECK("last step: succeeded", coord_thread_wait_state(&s.ct, "ls", COORD_SUCCEEDED));
    pthread_mutex_lock(&s.ct.mu);
    long step = s.last.step, total = s.last.total_steps;
    pthread_mutex_unlock(&s.ct.mu);
    CHECK_MSG("last step: the progress the job ends with is its last step, from done",
              step == 100 && total == 100, "step %ld of %ld", step, total);
    for (int i = 0; i < 2; i++)
        coord_client_destroy(cl[i]);
    server_stop(&s);
}

static void test_restart_in_place(void)
{
    struct server s;
    if (server_start(&s, "rj", 2, 60000, 1)) {
        TEST_FAIL("server start", "could not start");
        return;
    }
    struct coord_client *cl[2] = {coord_test_connect(&s.ct), coord_test_connect(&s.ct)};
    int ranks[2];
    CHECK("restart: first gang runs", cl[0] && cl[1] && run_gang(cl, 2, "rj", 0, ranks));
    CHECK("restart: running", coord_thread_wait_state(&s.ct, "rj", COORD_RUNNING));
    /* Worker 1 dies. */
    coord_client_destroy(cl[1]);
    cl[1] = NULL;
    struct proto_msg m;
    int got = cl[0] && coord_test_expect(cl[0], PROTO_STOP, &m);
    CHECK("restart: survivor told to stop", got);
    if (got) {
        CHECK_INT("restart: stop asks for a restart", m.u.stop.restart, 1);
        CHECK("restart: reason names the worker", strstr(m.u.stop.reason, "worker 1") != NULL);
        proto_msg_free(&m);
    }
    CHECK_INT("restart: state restarting", coord_thread_job_state(&s.ct, "rj"), COORD_RESTARTING);
    /* Both come back (survivor reconnects as a new process would). */
    coord_client_destroy(cl[0]);
    cl[0] = coord_test_connect(&s.ct);
    cl[1] = coord_test_connect(&s.ct);
    CHECK("restart: second gang runs with attempt 1",
          cl[0] && cl[1] && run_gang(cl, 2, "rj", 1, ranks));
    pthread_mutex_lock(&s.ct.mu);
    CHECK_INT("restart: plan reused", s.plans, 1);
    CHECK_INT("restart: one restart used", coord_job_restarts(s.ct.c, "rj"), 1);
    pthread_mutex_unlock(&s.ct.mu);
    /* A second failure exhausts max_restarts = 1. */
    if (cl[0] && cl[1]) {
        coord_test_send(cl[1], proto_error_encode(PROTO_ERR_WORKER, "loss is NaN", NULL));
        got = coord_test_expect(cl[0], PROTO_STOP, &m);
        CHECK("restart: exhausted stop", got && !m.u.stop.restart);
        if (got)
            proto_msg_free(&m);
        CHECK("restart: job failed", coord_thread_wait_state(&s.ct, "rj", COORD_FAILED));
        pthread_mutex_lock(&s.ct.mu);
        CHECK("restart: error text in event", strstr(s.events, "loss is NaN") != NULL);
        pthread_mutex_unlock(&s.ct.mu);
    }
    coord_client_destroy(cl[0]);
    coord_client_destroy(cl[1]);
    server_stop(&s);
}

/* A coordinator whose plan gives each of 2 workers 2 ranks, both workers connected, hello said
 * and assigned: 1 with lead[i] = worker i's first rank, else 0. */
static int gpu_gang_assigned(struct server *s, const char *job, struct coord_client **cl, int *lead)
{
    cl[0] = cl[1] = NULL;
    if (server_start(s, job, 2, 60000, 0)) {
        TEST_FAIL("server start", "could not start");
        coord_destroy(s->ct.c); /* its thread never started */
        s->ct.c = NULL;
        return 0;
    }
    pthread_mutex_lock(&s->ct.mu);
    s->gpus = 2;
    pthread_mutex_unlock(&s->ct.mu);
    cl[0] = coord_test_connect(&s->ct);
    cl[1] = coord_test_connect(&s->ct);
    int ok = cl[0] && cl[1];
    for (int i = 0; ok && i < 2; i++)
        ok = !send_hello(cl[i], job, TOKEN, "any", i, 0);
    for (int i = 0; ok && i < 2; i++) {
        struct proto_msg m;
        ok = coord_test_expect(cl[i], PROTO_ASSIGN, &m);
        if (ok) {
            lead[i] = m.rank;
            ok = m.u.assign.nranks == 2;
            proto_msg_free(&m);
        }
    }
    return ok;
}

static void gpu_gang_end(struct server *s, struct coord_client **cl)
{
    coord_client_destroy(cl[0]);
    coord_client_destroy(cl[1]);
    if (s->ct.c)
        server_stop(s);
}

/* Workers with several ranks (a rank per GPU): the assignment lists them, the rendezvous gives
 * one endpoint each, and start lists every rank of the job with its own endpoint. */
static void test_ranks_per_worker(void)
{
    struct server s;
    struct coord_client *cl[2];
    int lead[2] = {-1, -1};
    int ok = gpu_gang_assigned(&s, "gj", cl, lead);
    CHECK("several ranks: each worker assigned two", ok && lead[0] == 3 && lead[1] == 1);
    /* worker 1 (ranks 1, 0) says one endpoint for two ranks: refused */
    if (ok) {
        coord_test_send(cl[1], proto_rendezvous_encode(0, 1, "127.0.0.1:30001", NULL, NULL, NULL));
        CHECK("several ranks: one endpoint for two ranks refused", refused_with(cl[1], PROTO_ERR_BAD_MESSAGE));
    }
    gpu_gang_end(&s, cl);

    /* again, properly */
    ok = gpu_gang_assigned(&s, "gk", cl, lead);
    for (int i = 0; ok && i < 2; i++) { /* ranks lead, lead-1: endpoints 127.0.0.1:30000+rank */
        cJSON *eps = cJSON_CreateArray();
        for (int k = 0; k < 2; k++) {
            char ep[64];
            snprintf(ep, sizeof ep, "127.0.0.1:%d", 30000 + lead[i] - k);
            cJSON_AddItemToArray(eps, cJSON_CreateString(ep));
        }
        ok = !coord_test_send(cl[i], proto_rendezvous_encode(0, lead[i], cJSON_GetArrayItem(eps, 0)->valuestring,
                                                   eps, NULL, NULL));
        cJSON_Delete(eps);
    }
    int peers_ok = ok;
    for (int i = 0; ok && i < 2; i++) {
        struct proto_msg m;
        ok = coord_test_expect(cl[i], PROTO_START, &m);
        if (!ok)
            break;
        peers_ok = peers_ok && m.u.start.npeers == 4;
        for (int r = 0; peers_ok && r < 4; r++) {
            const struct proto_peer *p = &m.u.start.peers[r];
            char want[64];
            snprintf(want, sizeof want, "127.0.0.1:%d", 30000 + r);
            peers_ok = p->rank == r && strcmp(p->endpoint, want) == 0;
        }
        proto_msg_free(&m);
    }
    CHECK("several ranks: start lists all 4 ranks, each with its own endpoint", ok && peers_ok);
    CHECK("several ranks: running", coord_thread_wait_state(&s.ct, "gk", COORD_RUNNING));
    gpu_gang_end(&s, cl);
}

static void test_adopt_gang_timeout_plan_failure(void)
{
    struct server s;
    if (server_start(&s, "aj", 2, 200, 0)) {
        TEST_FAIL("server start", "could not start");
        return;
    }
    struct coord_client *cl[2] = {coord_test_connect(&s.ct), NULL};
    if (cl[0])
        send_hello(cl[0], "aj", TOKEN, "p0", 0, 1);
    usleep(600000);
    pthread_mutex_lock(&s.ct.mu);
    CHECK("gang timeout event names the missing worker",
          strstr(s.events, "gang timeout") && strstr(s.events, "1 of 2 workers missing: 1"));
    pthread_mutex_unlock(&s.ct.mu);
    CHECK_INT("gang timeout keeps waiting", coord_thread_job_state(&s.ct, "aj"), COORD_GATHERING);
    cl[1] = coord_test_connect(&s.ct);
    if (cl[1])
        send_hello(cl[1], "aj", TOKEN, "p1", 1, 1);
    CHECK("running workers adopted", coord_thread_wait_state(&s.ct, "aj", COORD_RUNNING));
    pthread_mutex_lock(&s.ct.mu);
    CHECK_INT("adoption does not replan", s.plans, 0);
    pthread_mutex_unlock(&s.ct.mu);
    for (int i = 0; i < 2; i++)
        if (cl[i])
            coord_test_send(cl[i], proto_done_encode(i, 100, NULL));
    CHECK("adopted job succeeds", coord_thread_wait_state(&s.ct, "aj", COORD_SUCCEEDED));
    coord_client_destroy(cl[0]);
    coord_client_destroy(cl[1]);
    server_stop(&s);

    /* Workers that finished while no coordinator was up reconnect and say done at once, before
     * the rest of the gang is back (a worker sends done once per connection): the new
     * coordinator must keep those and end the job when it adopts the gang. */
    if (server_start(&s, "dj", 2, 60000, 0)) {
        TEST_FAIL("server start", "could not start");
        return;
    }
    cl[0] = coord_test_connect(&s.ct);
    if (cl[0]) {
        send_hello(cl[0], "dj", TOKEN, "p0", 0, 1);
        coord_test_send(cl[0], proto_done_encode(0, 100, NULL));
    }
    usleep(200000);
    CHECK_INT("done before the gang is back: still gathering", coord_thread_job_state(&s.ct, "dj"), COORD_GATHERING);
    cl[1] = coord_test_connect(&s.ct);
    if (cl[1]) {
        send_hello(cl[1], "dj", TOKEN, "p1", 1, 1);
        coord_test_send(cl[1], proto_done_encode(1, 100, NULL));
    }
    CHECK("finished gang adopted and succeeded", coord_thread_wait_state(&s.ct, "dj", COORD_SUCCEEDED));
    struct proto_msg dm;
    int final_stop = cl[0] && coord_test_expect(cl[0], PROTO_STOP, &dm);
    if (final_stop) {
        final_stop = !dm.u.stop.restart;
        proto_msg_free(&dm);
    }
    CHECK("the early finisher gets the final stop", final_stop);
    coord_client_destroy(cl[0]);
    coord_client_destroy(cl[1]);
    server_stop(&s);

    if (server_start(&s, "pf", 2, 60000, 3)) {
        TEST_FAIL("server start", "could not start");
        return;
    }
    s.fail_plan = 1;
    cl[0] = coord_test_connect(&s.ct);
    cl[1] = coord_test_connect(&s.ct);
    for (int i = 0; i < 2; i++)
        if (cl[i])
            send_hello(cl[i], "pf", TOKEN, "p", i, 0);
    struct proto_msg m;
    int got = cl[0] && coord_test_expect(cl[0], PROTO_ERROR, &m);
    CHECK("plan failure reported to workers", got && m.u.error.code == PROTO_ERR_PLAN &&
                                                  strstr(m.u.error.message, "fabric"));
    if (got)
        proto_msg_free(&m);
    CHECK("plan failure fails the job", coord_thread_wait_state(&s.ct, "pf", COORD_FAILED));
    coord_client_destroy(cl[0]);
    coord_client_destroy(cl[1]);
    server_stop(&s);
}

static void test_api_errors(void)
{
    struct coordinator *c = NULL;
    struct coord_options o = {.bind = "127.0.0.1"};
    herr e = {0};
    if (coord_create(&c, &o, &e)) {
        TEST_FAIL("api create", "%s", e.msg);
        return;
    }
    struct coord_job_spec js = {.name = "x", .token = "short", .workers = 2,
                                .hooks = {.plan = plan_ring}};
    CHECK_INT("short token refused", coord_add_job(c, &js, &e), -1);
    CHECK("short token message", strstr(e.msg, "token") != NULL);
    js.token = TOKEN;
    js.workers = 0;
    CHECK_INT("zero workers refused", coord_add_job(c, &js, &e), -1);
    js.workers = 2;
    CHECK_INT("job added", coord_add_job(c, &js, &e), 0);
    CHECK_INT("duplicate job refused", coord_add_job(c, &js, &e), -1);
    enum coord_job_state st;
    CHECK_INT("unknown job state", coord_job_state(c, "nope", &st), -1);
    CHECK_INT("cancel", coord_cancel_job(c, "x", "user asked", &e), 0);
    CHECK_INT("cancelled is failed", coord_job_state(c, "x", &st) == 0 ? (int)st : -1, COORD_FAILED);
    coord_destroy(c);

    struct coord_client *cl = NULL;
    CHECK_INT("bad url refused", coord_client_create(&cl, "http://x:1/", &e), -1);
    CHECK_INT("connect refused port", coord_client_create(&cl, "ws://127.0.0.1:1/", &e), 0);
    if (cl) {
        CHECK_INT("connect to closed port fails", coord_client_connect(cl, 2000, &e), -1);
        coord_client_destroy(cl);
    }
}

static int resolve_calls;
static int resolve(void *user, struct coordinator *c, const char *job)
{
    struct server *s = user;
    resolve_calls++;
    if (strcmp(job, "ns/lazy") != 0)
        return -1;
    struct coord_job_spec js = {.name = job, .token = TOKEN, .workers = 2,
                                .hooks = {.plan = plan_ring, .on_hello = hk_hello}, .user = s};
    return coord_add_job(c, &js, NULL);
}

static void test_resolve_and_remove(void)
{
    static struct server s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.ct.mu, NULL);
    struct coord_options o = {.bind = "127.0.0.1", .resolve_job = resolve, .user = &s};
    herr e = {0};
    if (coord_create(&s.ct.c, &o, &e) || coord_thread_start(&s.ct)) {
        TEST_FAIL("resolve: server", "%s", e.msg);
        return;
    }
    struct coord_client *cl = coord_test_connect(&s.ct), *bad = coord_test_connect(&s.ct);
    if (cl && bad) {
        send_hello(cl, "ns/lazy", TOKEN, "lazy-0", 0, 0);
        send_hello(bad, "ns/other", TOKEN, "x", 0, 0);
        CHECK("resolve: unresolvable job refused", refused_with(bad, PROTO_ERR_AUTH));
        usleep(200000);
        pthread_mutex_lock(&s.ct.mu);
        CHECK_INT("resolve: job registered on first hello", coord_job_connected(s.ct.c, "ns/lazy"), 1);
        CHECK_INT("resolve: hook asked twice", resolve_calls, 2);
        CHECK_INT("resolve: worker admitted", s.hellos, 1);
        CHECK_INT("remove: removed", coord_remove_job(s.ct.c, "ns/lazy"), 0);
        CHECK_INT("remove: gone", coord_job_connected(s.ct.c, "ns/lazy"), -1);
        CHECK_INT("remove: unknown", coord_remove_job(s.ct.c, "ns/lazy"), -1);
        pthread_mutex_unlock(&s.ct.mu);
        struct proto_msg m;
        int rc = coord_client_poll(cl, 5000, &m, &e);
        if (rc == 1)
            proto_msg_free(&m);
        CHECK("remove: its connections are closed", rc == -1 && !coord_client_connected(cl));
    } else {
        TEST_FAIL("resolve: connect", "no connection");
    }
    coord_client_destroy(cl);
    coord_client_destroy(bad);
    server_stop(&s);
}

/* A server that accepts TCP but never answers the WebSocket handshake: each connect gives up
 * with a clear error, the abandoned attempts are closed at once (ASan checks the close), and the
 * client stays usable for the next attempt. */
static void test_silent_server(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    CHECK("silent listener", fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                                 listen(fd, 8) == 0 &&
                                 getsockname(fd, (struct sockaddr *)&a, &al) == 0);
    char url[64];
    snprintf(url, sizeof url, "ws://127.0.0.1:%d/", ntohs(a.sin_port));
    struct coord_client *cl = NULL;
    herr e = {0};
    CHECK("client for the silent server", coord_client_create(&cl, url, &e) == 0);
    for (int i = 0; cl && i < 3; i++) {
        herr ce = {0};
        int rc = coord_client_connect(cl, 200, &ce);
        CHECK("silent server: connect gives up", rc != 0 && !coord_client_connected(cl));
        CHECK("silent server: the error says no answer", strstr(ce.msg, "no answer within 200 ms") != NULL);
    }
    coord_client_destroy(cl);
    if (fd >= 0)
        close(fd);
}

/* CPU time of the calling thread, in ms. */
static double thread_cpu_ms(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_THREAD, &u) != 0)
        return -1;
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
           (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

/* A worker waits on an open, quiet connection most of a run: each wait ends at its deadline,
 * not before and not a second after (a wait with no timer set would block until the next of
 * libwebsockets' own), and sleeps meanwhile (a wait that polled without a timeout spent 807 ms
 * of CPU in 816 ms). The client's old 20 ms tick took 2.9 ms of CPU over these ten waits and
 * ended each about 9 ms late; the timer at the deadline, 0.55 ms and on time (2026-11-29). */
static void test_quiet_wait(void)
{
    struct server s;
    if (server_start(&s, "job", 1, 60000, 0)) {
        TEST_FAIL("quiet wait: server start", "could not start");
        return;
    }
    struct coord_client *cl = coord_test_connect(&s.ct);
    CHECK("quiet wait: the client connects", cl != NULL);
    int early = 0, late = 0, other = 0;
    double t0 = clock_mono_ms(), cpu0 = thread_cpu_ms();
    for (int i = 0; cl && i < 10; i++) {
        struct proto_msg m;
        herr e = {0};
        double t = clock_mono_ms();
        int rc = coord_client_poll(cl, 50 + 7 * i, &m, &e);
        double took = clock_mono_ms() - t;
        if (rc == 1)
            proto_msg_free(&m);
        other += rc != 0;
        early += took < 50 + 7 * i;
        late += took > 50 + 7 * i + 1000;
    }
    double wall = clock_mono_ms() - t0, cpu = thread_cpu_ms() - cpu0;
    CHECK("quiet wait: every wait ends by its deadline with nothing (0)", cl && other == 0);
    CHECK("quiet wait: no wait ends before its deadline", cl && early == 0);
    CHECK("quiet wait: no wait overruns its deadline by a second", cl && late == 0);
    CHECK_MSG("quiet wait: it sleeps (CPU under a fiftieth of the time waited)",
              cl && cpu >= 0 && cpu < wall / 50, "%.1f ms of CPU in %.0f ms of waiting", cpu, wall);
    coord_client_destroy(cl);
    server_stop(&s);
}

/* The ETA: the measured pace once it spans 10 s and 2 steps (pauses between steps counted: a
 * held-out evaluation, a checkpoint), the last step time before that. */
static void test_eta(void)
{
    CHECK_NEAR("eta: before 10 s of pace, the steps left at the step time",
               coord_eta(100, 20, 50, 10, 0, 5), 80 * 0.05, 1e-12);
    CHECK_NEAR("eta: then the steps left at the pace (10 steps in 20 s: pauses counted)",
               coord_eta(100, 20, 50, 10, 0, 20), 80 * 2.0, 1e-12);
    CHECK_NEAR("eta: a pace of fewer than 2 steps is not one", coord_eta(100, 11, 50, 10, 0, 60),
               89 * 0.05, 1e-12);
    CHECK("eta: 0 at the last step, -1 without a total or a step time",
          coord_eta(100, 100, 50, 10, 0, 20) == 0 && coord_eta(0, 5, 50, 0, 0, 20) == -1 &&
              coord_eta(100, 5, 0, 5, 0, 1) == -1);
}

int main(void)
{
    test_eta();
    test_resolve_and_remove();
    test_api_errors();
    test_gang_and_security();
    test_restart_in_place();
    test_restart_at_last_step();
    test_ranks_per_worker();
    test_adopt_gang_timeout_plan_failure();
    test_silent_server();
    test_quiet_wait();
    TEST_MAIN_END();
}
