/* The coordinator's elastic re-planning with simulated workers: a worker that dies and is
 * counted as lost is planned around (the survivors re-plan, the hook hears of it), one more loss
 * below minWorkers is refused and the job waits for the worker, a lost worker that says hello
 * again is planned back in at the next step boundary (scaleUp) or refused (scaleUp false), the
 * job succeeds without its lost worker, a new coordinator goes on without the workers status
 * says were lost, and nothing elastic happens to a job that did not ask for it. */
#include "test.h"
#include "coord_testutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord_client.h"
#include "coord_plan.h"
#include "coordinator.h"
#include "yaml_json.h"

#define TOKEN "token-0123456789"

static const char *pods[] = {"el-w0", "el-w1", "el-w2", "el-w3"};

struct server {
    struct coord_thread ct;
    int plans, last_n;
    int planned_idx[4];     /* the worker indices of the last plan */
    int lost_calls, back_calls;
    int need;               /* the plan fails with fewer workers (0: never) */
    int waiting_calls;
    char events[8192];
};

/* Rank = position among the workers given (the lost ones are not), peers: the next rank. */
static int plan(void *user, const struct coord_worker *w, int n, struct plan_assignment *a,
                herr *e)
{
    struct server *s = user;
    s->plans++;
    s->last_n = n;
    if (n < s->need)
        return herr_set(e, "planner: nothing fits: %d workers cannot hold the model", n);
    for (int i = 0; i < n; i++) {
        s->planned_idx[i] = w[i].index;
        if (coord_test_assign(&a[i], i, (i + 1) % n))
            return herr_set(e, "oom");
    }
    return 0;
}

static void hk_event(void *user, enum coord_job_state st, const char *msg)
{
    struct server *s = user;
    coord_test_record_event(s->events, sizeof s->events, st, msg);
}

static void hk_elastic(void *user, const struct coord_worker *w, int lost, const char *why)
{
    struct server *s = user;
    (void)why;
    if (lost)
        s->lost_calls++;
    else
        s->back_calls++;
    hk_event(user, COORD_RESTARTING, w->pod);
}

static void hk_waiting(void *user, const char *reason, const char *msg)
{
    struct server *s = user;
    s->waiting_calls++;
    hk_event(user, COORD_RESTARTING, reason);
    hk_event(user, COORD_RESTARTING, msg);
}

static int server_start(struct server *s, const char *job, int min_workers, int scale_up,
                        const int *lost, int nlost)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->ct.mu, NULL);
    struct coord_job_spec js = {
        .name = job, .token = TOKEN, .workers = 4, .pods = pods, .gang_timeout_ms = 60000,
        .max_restarts = 5, .total_steps = 100, .progress_interval_ms = 1,
        .min_workers = min_workers, .scale_up = scale_up, .lost = lost, .nlost = nlost,
        .hooks = {.plan = plan, .on_event = hk_event, .on_elastic = hk_elastic,
                  .on_waiting = hk_waiting},
        .user = s,
    };
    return coord_thread_serve(&s->ct, 0, &js);
}

static void server_stop(struct server *s)
{
    coord_thread_stop(&s->ct);
    pthread_mutex_destroy(&s->ct.mu);
}

static int hello(struct coord_client *cl, const char *job, int idx)
{
    struct proto_hello h = {0};
    snprintf(h.job, sizeof h.job, "%s", job);
    snprintf(h.token, sizeof h.token, "%s", TOKEN);
    snprintf(h.pod, sizeof h.pod, "%s", pods[idx]);
    snprintf(h.node, sizeof h.node, "node-%d", idx);
    h.worker = idx;
    h.nic.cls = NIC_ETHERNET;
    snprintf(h.nic.fabric, sizeof h.nic.fabric, "eth");
    h.nic.gbps = 10;
    h.nic.gid_index = -1;
    return coord_test_send(cl, proto_hello_encode(&h, NULL));
}

/* Workers idx[0..n) (already said hello) get their assignment for `attempt`, rendezvous and
 * start. */
static int assign_and_start(struct coord_client **cl, const int *idx, int n, int attempt)
{
    int ranks[4];
    if (!coord_test_rendezvous(cl, idx, n, attempt, 31000, ranks))
        return 0;
    for (int i = 0; i < n; i++) {
        struct proto_msg m;
        if (!coord_test_expect(cl[idx[i]], PROTO_START, &m))
            return 0;
        proto_msg_free(&m);
    }
    return 1;
}

static int gang(struct coord_client **cl, const char *job, const int *idx, int n, int attempt)
{
    for (int i = 0; i < n; i++)
        if (hello(cl[idx[i]], job, idx[i]))
            return 0;
    return assign_and_start(cl, idx, n, attempt);
}

/* Every client in idx gets a stop asking for a restart, closes, and connects again. */
static int stopped_and_back(struct server *s, struct coord_client **cl, const int *idx, int n,
                            const char *reason_has)
{
    int ok = 1;
    for (int i = 0; i < n; i++) {
        struct proto_msg m;
        int got = coord_test_expect(cl[idx[i]], PROTO_STOP, &m);
        ok &= got && m.u.stop.restart && (!reason_has || strstr(m.u.stop.reason, reason_has));
        if (got)
            proto_msg_free(&m);
        coord_client_destroy(cl[idx[i]]);
        cl[idx[i]] = coord_test_connect(&s->ct);
    }
    return ok;
}

static int lose(struct server *s, const char *job, int i, herr *e)
{
    pthread_mutex_lock(&s->ct.mu);
    int rc = coord_job_lose_worker(s->ct.c, job, i, "its node is gone", e);
    pthread_mutex_unlock(&s->ct.mu);
    return rc;
}

static void test_loss_replan_scale_up(void)
{
    struct server s;
    if (server_start(&s, "el", 3, 1, NULL, 0)) {
        TEST_FAIL("start", "server");
        return;
    }
    struct coord_client *cl[4];
    for (int i = 0; i < 4; i++)
        cl[i] = coord_test_connect(&s.ct);
    const int all[] = {0, 1, 2, 3}, three[] = {0, 1, 2}, two[] = {0, 1};
    CHECK("elastic: 4 workers run", gang(cl, "el", all, 4, 0) && coord_thread_wait_state(&s.ct, "el", COORD_RUNNING));
    /* worker 3's node goes: its connection drops, the gang restarts in place and waits */
    coord_client_destroy(cl[3]);
    cl[3] = NULL;
    CHECK("elastic: the survivors restart in place", stopped_and_back(&s, cl, three, 3, "worker 3"));
    for (int i = 0; i < 3; i++)
        hello(cl[i], "el", i);
    usleep(200000);
    int st[4] = {9, 9, 9, 9};
    pthread_mutex_lock(&s.ct.mu);
    int nw = coord_job_workers(s.ct.c, "el", st, 4);
    int plans = s.plans;
    pthread_mutex_unlock(&s.ct.mu);
    CHECK("elastic: the gang waits for worker 3 (absent) until it counts as lost",
          nw == 4 && st[0] == 1 && st[3] == 0 && plans == 1 && coord_thread_job_state(&s.ct, "el") == COORD_RESTARTING);
    herr e = {0};
    CHECK("elastic: a connected worker is not lost", lose(&s, "el", 1, &e) == -1 &&
          strstr(e.msg, "connected"));
    CHECK_INT("elastic: worker 3 counted as lost", lose(&s, "el", 3, &e), 0);
    CHECK("elastic: the 3 survivors are re-planned and start", assign_and_start(cl, three, 3, 1) &&
          coord_thread_wait_state(&s.ct, "el", COORD_RUNNING));
    int lost = -1, replans = -1;
    pthread_mutex_lock(&s.ct.mu);
    coord_job_elastic(s.ct.c, "el", &lost, &replans);
    CHECK("elastic: the plan hook got the 3 survivors, the elastic hook the loss",
          s.plans == 2 && s.last_n == 3 && s.planned_idx[2] == 2 && s.lost_calls == 1 &&
          lost == 1 && replans == 1);
    CHECK("elastic: an event says who was lost and why", strstr(s.events, "worker 3 (el-w3) lost: its node is gone"));
    coord_job_workers(s.ct.c, "el", st, 4);
    pthread_mutex_unlock(&s.ct.mu);
    CHECK("elastic: worker 3 shows as lost", st[3] == -1);
    CHECK("elastic: lost twice is refused", lose(&s, "el", 3, &e) == -1 && strstr(e.msg, "already"));

    /* one more loss would leave 2 < minWorkers 3: the job waits for the worker instead */
    coord_client_destroy(cl[2]);
    cl[2] = NULL;
    CHECK("elastic: a second death restarts the 2 left", stopped_and_back(&s, cl, two, 2, "worker 2"));
    for (int i = 0; i < 2; i++)
        hello(cl[i], "el", i);
    usleep(100000);
    CHECK_INT("elastic: below minWorkers: not lost, the job waits", lose(&s, "el", 2, &e), 1);
    CHECK_INT("elastic: ... still gathering", coord_thread_job_state(&s.ct, "el"), COORD_RESTARTING);
    cl[2] = coord_test_connect(&s.ct);
    hello(cl[2], "el", 2);
    CHECK("elastic: worker 2 back: the 3 run on the same plan", assign_and_start(cl, three, 3, 2) &&
          coord_thread_wait_state(&s.ct, "el", COORD_RUNNING) && s.plans == 2);

    /* scale up: worker 3's replacement says hello while the 3 train */
    cl[3] = coord_test_connect(&s.ct);
    hello(cl[3], "el", 3);
    CHECK("elastic: scale up: the 3 stop at the next step boundary", stopped_and_back(&s, cl, three, 3, "is back"));
    for (int i = 0; i < 3; i++)
        hello(cl[i], "el", i);
    CHECK("elastic: scale up: the 4 are re-planned and start", assign_and_start(cl, all, 4, 3) &&
          coord_thread_wait_state(&s.ct, "el", COORD_RUNNING));
    pthread_mutex_lock(&s.ct.mu);
    coord_job_elastic(s.ct.c, "el", &lost, &replans);
    CHECK("elastic: scale up: plan of 4, hook heard, lost 0, 2 re-plans",
          s.plans == 3 && s.last_n == 4 && s.back_calls == 1 && lost == 0 && replans == 2);
    CHECK_INT("elastic: scale up and loss charged no restart beyond the 2 deaths",
              coord_job_restarts(s.ct.c, "el"), 2);
    pthread_mutex_unlock(&s.ct.mu);
    for (int i = 0; i < 4; i++)
        coord_client_destroy(cl[i]);
    server_stop(&s);
}

/* scaleUp false: a lost worker's hello is refused; the job succeeds without it. A new
 * coordinator told which workers were lost goes on without them. */
static void test_no_scale_up_and_adoption(void)
{
    struct server s;
    const int lost3[] = {3};
    if (server_start(&s, "ad", 3, 0, lost3, 1)) {
        TEST_FAIL("start", "server");
        return;
    }
    struct coord_client *cl[4];
    for (int i = 0; i < 4; i++)
        cl[i] = coord_test_connect(&s.ct);
    const int three[] = {0, 1, 2};
    CHECK("adoption: the gang of 3 starts without the worker status says was lost",
          gang(cl, "ad", three, 3, 0) && s.last_n == 3);
    hello(cl[3], "ad", 3);
    struct proto_msg m;
    int got = coord_test_expect(cl[3], PROTO_ERROR, &m);
    CHECK("no scaleUp: the lost worker's hello is refused, saying why", got &&
          m.u.error.code == PROTO_ERR_UNKNOWN_WORKER && strstr(m.u.error.message, "scaleUp is false"));
    if (got)
        proto_msg_free(&m);
    for (int i = 0; i < 3; i++)
        coord_test_send(cl[i], proto_done_encode(i, 100, NULL));
    CHECK("the job succeeds without its lost worker", coord_thread_wait_state(&s.ct, "ad", COORD_SUCCEEDED));
    for (int i = 0; i < 4; i++)
        coord_client_destroy(cl[i]);
    server_stop(&s);
}

/* Survivors that cannot hold the model (the plan fails for 3): with scaleUp the job waits for
 * the lost worker, its workers connected, and runs on 4 when it is back; without, it fails. */
static void test_capacity_wait(void)
{
    for (int scale_up = 1; scale_up >= 0; scale_up--) {
        struct server s;
        const char *job = scale_up ? "cw" : "cf";
        if (server_start(&s, job, 2, scale_up, NULL, 0)) {
            TEST_FAIL("start", "server");
            return;
        }
        pthread_mutex_lock(&s.ct.mu);
        s.need = 4;
        pthread_mutex_unlock(&s.ct.mu);
        struct coord_client *cl[4];
        for (int i = 0; i < 4; i++)
            cl[i] = coord_test_connect(&s.ct);
        const int all[] = {0, 1, 2, 3}, three[] = {0, 1, 2};
        int ok = gang(cl, job, all, 4, 0) && coord_thread_wait_state(&s.ct, job, COORD_RUNNING);
        coord_client_destroy(cl[3]);
        cl[3] = NULL;
        ok = ok && stopped_and_back(&s, cl, three, 3, "worker 3");
        for (int i = 0; i < 3; i++)
            hello(cl[i], job, i);
        usleep(200000);
        herr e = {0};
        ok = ok && lose(&s, job, 3, &e) == 0;
        usleep(300000);
        int state = coord_thread_job_state(&s.ct, job);
        pthread_mutex_lock(&s.ct.mu);
        int plans = s.plans, waiting = s.waiting_calls;
        int said = strstr(s.events, "InsufficientCapacity") &&
                   strstr(s.events, "the 3 workers that remain cannot hold the model: planner: "
                                    "nothing fits");
        pthread_mutex_unlock(&s.ct.mu);
        if (!scale_up) {
            CHECK_MSG("capacity: without scaleUp, survivors that cannot hold the model fail the "
                      "job with the planner's reason", ok && state == COORD_FAILED &&
                      plans == 2 && waiting == 0 && strstr(s.events, "nothing fits"),
                      "ok %d, state %d, %d plans, %d waits: %s", ok, state, plans, waiting, s.events);
        } else {
            CHECK_MSG("capacity: with scaleUp the job waits (not failed), saying why, once",
                      ok && state == COORD_RESTARTING && plans == 2 && waiting == 1 && said,
                      "ok %d, state %d, %d plans, %d waits: %s", ok, state, plans, waiting, s.events);
            /* a survivor reconnecting while it waits tries no plan */
            coord_client_destroy(cl[1]);
            cl[1] = coord_test_connect(&s.ct);
            hello(cl[1], job, 1);
            usleep(200000);
            pthread_mutex_lock(&s.ct.mu);
            plans = s.plans;
            pthread_mutex_unlock(&s.ct.mu);
            CHECK_INT("capacity: a survivor's hello while waiting tries no plan", plans, 2);
            cl[3] = coord_test_connect(&s.ct);
            hello(cl[3], job, 3);
            CHECK("capacity: the lost worker back: the 4 are planned and run",
                  assign_and_start(cl, all, 4, 1) &&
                      coord_thread_wait_state(&s.ct, job, COORD_RUNNING) && s.plans == 3 &&
                      s.last_n == 4);
        }
        for (int i = 0; i < 4; i++)
            coord_client_destroy(cl[i]);
        server_stop(&s);
    }
}

static void test_not_elastic(void)
{
    struct server s;
    const int lost3[] = {3};
    if (server_start(&s, "ne", 0, 1, lost3, 1)) { /* min_workers 0: not elastic */
        TEST_FAIL("start", "server");
        return;
    }
    herr e = {0};
    CHECK("not elastic: no worker is ever lost", lose(&s, "ne", 3, &e) == -1 &&
          strstr(e.msg, "not elastic"));
    struct coord_client *cl[4];
    for (int i = 0; i < 4; i++)
        cl[i] = coord_test_connect(&s.ct);
    const int three[] = {0, 1, 2};
    for (int i = 0; i < 3; i++)
        hello(cl[i], "ne", i);
    usleep(200000);
    CHECK("not elastic: the gang waits for all 4 (a lost list is ignored)",
          s.plans == 0 && coord_thread_job_state(&s.ct, "ne") == COORD_GATHERING);
    (void)three;
    for (int i = 0; i < 4; i++)
        coord_client_destroy(cl[i]);
    server_stop(&s);
}

/* ---------------------------------------------------------------- the plan hook */

/* examples/local-tiny.yaml's job (2 x InfiniBand + 2 x RoCE), elastic, with microBatches mb. */
static int tiny_job(struct tj_job *job, int layers, int mb)
{
    char doc[2048];
    snprintf(doc, sizeof doc,
             "{\"apiVersion\": \"holmes.dev/v1alpha1\", \"kind\": \"TrainingJob\", "
             "\"metadata\": {\"name\": \"tiny\"}, \"spec\": {\"workers\": 4, \"gpusPerWorker\": 0, "
             "\"model\": {\"layers\": %d, \"hidden\": 64, \"heads\": 4, \"vocab\": 256, \"seqLen\": 64}, "
             "\"parallelism\": {\"pipeline\": 2, \"data\": 2, \"microBatches\": %d, \"microBatchSize\": 4}, "
             "\"training\": {\"steps\": 100, \"checkpoint\": {\"path\": \"/tmp/x\"}}, "
             "\"elastic\": {\"minWorkers\": 2}, "
             "\"emulation\": {\"nics\": [{\"class\": \"infiniband\", \"fabric\": \"ib-a\", \"gbps\": 200, \"count\": 2}, "
             "{\"class\": \"roce\", \"fabric\": \"roce-b\", \"gbps\": 100, \"count\": 2}]}}}", layers, mb);
    cJSON *j = cJSON_Parse(doc);
    struct tj_errors errs = {0};
    int rc = j && tj_job_from_json(j, job, &errs) == 0 ? 0 : -1;
    if (rc)
        printf("# %s\n", errs.count ? errs.msg[0] : "bad json");
    cJSON_Delete(j);
    return rc;
}

static void tiny_workers(struct coord_worker *w)
{
    for (int k = 0; k < 4; k++) {
        memset(&w[k], 0, sizeof w[k]);
        w[k].index = k;
        snprintf(w[k].pod, sizeof w[k].pod, "tiny-worker-%d", k);
        snprintf(w[k].node, sizeof w[k].node, "localhost");
        w[k].nic.cls = k < 2 ? NIC_INFINIBAND : NIC_ROCE;
        snprintf(w[k].nic.fabric, sizeof w[k].nic.fabric, "%s", k < 2 ? "ib-a" : "roce-b");
        w[k].nic.gbps = k < 2 ? 200 : 100;
        w[k].nic.gid_index = -1;
    }
}

static void free_assignments(struct plan_assignment *a, int n)
{
    for (int i = 0; i < n; i++)
        plan_assignment_free(&a[i]);
}

static void test_plan_hook(void)
{
    struct tj_job job;
    struct coord_worker w[4], three[3];
    struct plan_assignment a[4] = {0};
    herr e = {0};
    if (tiny_job(&job, 4, 3) != 0) {
        TEST_FAIL("plan hook: job", "parse");
        return;
    }
    tiny_workers(w);
    struct coord_plan cp = {.job = &job};
    CHECK("plan hook: the full plan (pipeline 2 x data 2, 3 micro-batches)",
          coord_plan_hook(&cp, w, 4, a, &e) == 0 && cp.plan.pipeline == 2 && cp.global_mb == 6);
    free_assignments(a, 4);
    /* worker 1 (InfiniBand) lost: 3 left; a data degree of 1 or 3 divides the 6 micro-batches */
    three[0] = w[0], three[1] = w[2], three[2] = w[3];
    int rc = coord_plan_hook(&cp, three, 3, a, &e);
    if (rc)
        printf("# %s\n", e.msg);
    const struct tj_spec *sp = &a[0].spec;
    int D = sp->par.data, P = sp->par.pipeline, M = sp->par.micro_batches;
    CHECK("plan hook: 3 survivors: pipeline x data = 3, the global batch of 6 kept",
          rc == 0 && P * D == 3 && D * M == 6 && cp.plan.pipeline == P && cp.workers == 3 &&
          cp.global_seqs == 24);
    CHECK("plan hook: the assignments' spec is the survivors' (3 workers, ib-a 1 + roce-b 2)",
          rc == 0 && a[0].has_spec && sp->workers == 3 && sp->emulation.n_groups == 2 &&
          sp->emulation.groups[0].count == 1 && sp->emulation.groups[1].count == 2);
    CHECK("plan hook: the shapes before and after and the batch are said",
          strstr(cp.prev_shape, "pipeline 2 x data 2") && strstr(cp.prev_shape, "4 workers") &&
          strstr(cp.shape, "3 workers") && strstr(cp.batch_note, "global batch kept: 24 sequences"));
    free_assignments(a, 3);
    coord_plan_free(&cp);
    tj_job_free(&job);

    /* 2 layers, 2 micro-batches a replica: a global batch of 4 micro-batches, which no shape of
     * 3 workers keeps (data 1 needs 3 stages of 2 layers; data 3 does not divide 4) */
    if (tiny_job(&job, 2, 2) != 0)
        return;
    struct coord_plan cq = {.job = &job};
    CHECK("plan hook: full plan of a 2-layer model", coord_plan_hook(&cq, w, 4, a, &e) == 0 &&
          cq.global_mb == 4);
    free_assignments(a, 4);
    rc = coord_plan_hook(&cq, three, 3, a, &e);
    if (rc)
        printf("# %s\n", e.msg);
    CHECK("plan hook: a global batch no shape of 3 keeps: planned anyway, the change said",
          rc == 0 && strstr(cq.batch_note, "global batch changed from 16 to 24") &&
          a[0].spec.par.pipeline * a[0].spec.par.data == 3);
    free_assignments(a, 3);
    coord_plan_free(&cq);
    tj_job_free(&job);
}

int main(void)
{
    test_plan_hook();
    test_loss_replan_scale_up();
    test_no_scale_up_and_adoption();
    test_capacity_wait();
    test_not_elastic();
    TEST_MAIN_END();
}
