/* The worker side (worker_coord_run with the simulated runner) against a real coordinator, all
 * in threads: a whole job; a worker failure -> in-place restart; and a coordinator that goes
 * away mid-training and comes back on the same port -> the workers keep training, reconnect,
 * are adopted and the job succeeds. */
#include "test.h"
#include "coord_testutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "coordinator.h"
#include "worker_coord.h"

#define TOKEN "worker-test-token"
#define N 4

struct server {
    struct coord_thread ct;
    int plans;
    char events[8192];
};

static int plan2x2(void *user, const struct coord_worker *w, int n, struct plan_assignment *a,
                   herr *e)
{
    struct server *s = user;
    (void)e;
    s->plans++;
    for (int i = 0; i < n; i++) {
        a[i].rank = w[i].index;
        a[i].stage = w[i].index / 2;
        a[i].stages = 2;
    }
    return 0;
}

static void on_event(void *user, enum coord_job_state st, const char *msg)
{
    struct server *s = user;
    coord_test_record_event(s->events, sizeof s->events, st, msg);
}

static int server_start(struct server *s, int port, int restarts)
{
    struct coord_job_spec js = {.name = "wj", .token = TOKEN, .workers = N,
                                .gang_timeout_ms = 60000, .max_restarts = restarts,
                                .total_steps = 40,
                                .hooks = {.plan = plan2x2, .on_event = on_event}, .user = s};
    return coord_thread_serve(&s->ct, port, &js);
}

struct worker {
    pthread_t th;
    int idx;
    int port;
    struct worker_sim sim;
    int fail_first;         /* fail at step 5 on the first run only */
    int runs;
    int rc;                 /* final */
    char err[1024];
};

/* Plays the pod's restart policy (OnFailure): run again after any non-zero exit. */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char url[64], pod[32];
    snprintf(url, sizeof url, "ws://127.0.0.1:%d/", w->port);
    snprintf(pod, sizeof pod, "wj-worker-%d", w->idx);
    struct worker_coord_options o = {.url = url, .job = "wj", .token = TOKEN, .pod = pod,
                                     .node = "n", .worker = w->idx, .progress_interval_ms = 50,
                                     .connect_timeout_ms = 20000};
    o.nic.cls = NIC_ETHERNET;
    snprintf(o.nic.fabric, sizeof o.nic.fabric, "eth");
    o.nic.gbps = 10;
    o.nic.gid_index = -1;
    for (;;) {
        struct worker_sim sim = w->sim;
        if (w->fail_first && w->runs == 0)
            sim.fail_at_step = 5;
        struct worker_runner r = worker_sim_runner;
        r.user = &sim;
        herr e = {0};
        w->runs++;
        w->rc = worker_coord_run(&o, &r, &e);
        snprintf(w->err, sizeof w->err, "%s", e.msg);
        if (w->rc != 0) {
            printf("# worker %d run %d: rc %d: %s\n", w->idx, w->runs, w->rc, w->err);
            fflush(stdout);
        }
        if (w->rc == 0 || w->runs > 5) /* like a pod: restarted on any failure */
            break;
    }
    return NULL;
}

static void start_workers(struct worker *ws, int port, long steps, int step_ms)
{
    for (int i = 0; i < N; i++) {
        ws[i] = (struct worker){.idx = i, .port = port,
                                .sim = {.steps = steps, .step_ms = step_ms}};
    }
}

static void run_workers(struct worker *ws)
{
    for (int i = 0; i < N; i++)
        pthread_create(&ws[i].th, NULL, worker_main, &ws[i]);
}

static void join_workers(struct worker *ws)
{
    for (int i = 0; i < N; i++)
        pthread_join(ws[i].th, NULL);
}

static int all_ok(const struct worker *ws)
{
    int ok = 1;
    for (int i = 0; i < N; i++) {
        if (ws[i].rc != 0) {
            printf("# worker %d: rc %d after %d runs: %s\n", i, ws[i].rc, ws[i].runs, ws[i].err);
            ok = 0;
        }
    }
    return ok;
}

static void test_whole_job_and_restart(void)
{
    static struct server s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.ct.mu, NULL);
    if (server_start(&s, 0, 1)) {
        TEST_FAIL("server", "start");
        return;
    }
    struct worker ws[N];
    start_workers(ws, coord_port(s.ct.c), 20, 2);
    run_workers(ws);
    join_workers(ws);
    CHECK("whole job: every worker finished", all_ok(ws));
    CHECK_INT("whole job: succeeded", coord_thread_job_state(&s.ct, "wj"), COORD_SUCCEEDED);
    coord_thread_stop(&s.ct);

    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.ct.mu, NULL);
    if (server_start(&s, 0, 1)) {
        TEST_FAIL("server", "start");
        return;
    }
    start_workers(ws, coord_port(s.ct.c), 20, 2);
    ws[1].fail_first = 1;
    run_workers(ws);
    join_workers(ws);
    CHECK("failure: every worker finished after the restart", all_ok(ws));
    CHECK_INT("failure: succeeded", coord_thread_job_state(&s.ct, "wj"), COORD_SUCCEEDED);
    CHECK_INT("failure: failing worker ran twice", ws[1].runs, 2);
    CHECK_INT("failure: others restarted in place too", ws[0].runs, 2);
    pthread_mutex_lock(&s.ct.mu);
    CHECK_INT("failure: one restart", coord_job_restarts(s.ct.c, "wj"), 1);
    CHECK("failure: reason relayed", strstr(s.events, "simulated failure at step 5") != NULL);
    CHECK_INT("failure: the plan is reused", s.plans, 1);
    pthread_mutex_unlock(&s.ct.mu);
    coord_thread_stop(&s.ct);
}

static void test_coordinator_restart(void)
{
    static struct server s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.ct.mu, NULL);
    if (server_start(&s, 0, 0)) {
        TEST_FAIL("server", "start");
        return;
    }
    int port = coord_port(s.ct.c);
    struct worker ws[N];
    start_workers(ws, port, 40, 25); /* ~1 s of training */
    run_workers(ws);
    int running = 0;
    for (int i = 0; i < 300 && !running; i++) {
        running = coord_thread_job_state(&s.ct, "wj") == COORD_RUNNING;
        usleep(10000);
    }
    CHECK("coordinator restart: job running", running);
    usleep(200000);
    coord_thread_stop(&s.ct); /* the operator dies: no stop is sent */
    usleep(300000);
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.ct.mu, NULL);
    CHECK_INT("coordinator restart: new coordinator on the same port", server_start(&s, port, 0), 0);
    join_workers(ws);
    CHECK("coordinator restart: every worker finished", all_ok(ws));
    CHECK_INT("coordinator restart: each worker ran once", ws[0].runs + ws[1].runs + ws[2].runs + ws[3].runs, N);
    if (s.ct.c) {
        CHECK_INT("coordinator restart: new coordinator saw success", coord_thread_job_state(&s.ct, "wj"), COORD_SUCCEEDED);
        pthread_mutex_lock(&s.ct.mu);
        CHECK("coordinator restart: adopted", strstr(s.events, "adopted") != NULL);
        CHECK_INT("coordinator restart: no replanning", s.plans, 0);
        pthread_mutex_unlock(&s.ct.mu);
        coord_thread_stop(&s.ct);
    }
}

int main(void)
{
    test_whole_job_and_restart();
    test_coordinator_restart();
    TEST_MAIN_END();
}
