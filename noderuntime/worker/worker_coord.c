#include "worker_coord.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "coord_client.h"
#include "log.h"

struct worker_link {
    pthread_mutex_t mu;
    struct proto_step steps[PROTO_MAX_STEPS];
    int nsteps;
    long last_step;
    volatile int stop;
    int nnotices;
    struct proto_notice notices[4];
};

void worker_report_step(struct worker_link *l, const struct proto_step *s)
{
    pthread_mutex_lock(&l->mu);
    if (l->nsteps == PROTO_MAX_STEPS) { /* the coordinator is away: keep the newest */
        memmove(l->steps, l->steps + 1, (PROTO_MAX_STEPS - 1) * sizeof l->steps[0]);
        l->nsteps--;
    }
    l->steps[l->nsteps++] = *s;
    l->last_step = s->step;
    pthread_mutex_unlock(&l->mu);
}

void worker_report_notice(struct worker_link *l, const char *reason, const char *message)
{
    pthread_mutex_lock(&l->mu);
    if (l->nnotices < (int)(sizeof l->notices / sizeof l->notices[0])) {
        struct proto_notice *n = &l->notices[l->nnotices++];
        snprintf(n->reason, sizeof n->reason, "%s", reason);
        snprintf(n->message, sizeof n->message, "%s", message);
    }
    pthread_mutex_unlock(&l->mu);
}

int worker_stop_requested(const struct worker_link *l)
{
    return l->stop;
}

/* ---------------------------------------------------------------- training thread */

struct train_thread {
    pthread_t th;
    const struct worker_runner *r;
    struct plan_assignment *assignment;
    const struct proto_start *start;
    long resume_step;
    struct worker_link *link;
    volatile int finished;
    int rc;
    long last_step;
    herr e;
};

static void *train_main(void *arg)
{
    struct train_thread *t = arg;
    t->rc = t->r->run(t->r->user, t->assignment, t->start, t->resume_step, t->link,
                      &t->last_step, &t->e);
    t->finished = 1;
    return NULL;
}

/* ---------------------------------------------------------------- protocol */

struct session {
    const struct worker_coord_options *o;
    const struct worker_runner *r;
    struct coord_client *cl;
    struct worker_link link;
    int attempt, rank, stage;
    int training;
};

static int send_hello(struct session *s, herr *e)
{
    struct proto_hello h;
    memset(&h, 0, sizeof h);
    snprintf(h.job, sizeof h.job, "%s", s->o->job);
    snprintf(h.token, sizeof h.token, "%s", s->o->token ? s->o->token : "");
    snprintf(h.pod, sizeof h.pod, "%s", s->o->pod);
    snprintf(h.node, sizeof h.node, "%s", s->o->node ? s->o->node : "");
    h.worker = s->o->worker;
    h.gpus = s->o->gpus;
    h.tflops = s->o->tflops;
    h.tflops_measured = s->o->tflops_measured;
    h.gpu_memory_gb = s->o->gpu_memory_gb;
    h.gpu_memory_measured = s->o->gpu_memory_measured;
    h.memory_gbps = s->o->memory_gbps;
    h.memory_gbps_measured = s->o->memory_gbps_measured;
    h.nic = s->o->nic;
    if (s->training) {
        h.running = 1;
        h.resume_attempt = s->attempt;
        h.resume_rank = s->rank;
        pthread_mutex_lock(&s->link.mu);
        h.resume_step = s->link.last_step > 0 ? s->link.last_step : 0;
        pthread_mutex_unlock(&s->link.mu);
    }
    char *text = proto_hello_encode(&h, e);
    if (!text)
        return -1;
    if (coord_client_send(s->cl, text))
        return herr_set(e, "coordinator connection lost before hello");
    return 0;
}

static int terminating(const struct session *s)
{
    return s->o->terminate && *s->o->terminate;
}

/* Connects, retrying every 500 ms for at most budget_ms, then says hello; gives up at once on
 * SIGTERM (a pod deleted while its coordinator is unreachable leaves within a connect attempt,
 * not when the budget runs out). */
static int connect_and_hello(struct session *s, int budget_ms, herr *e)
{
    double until = clock_mono_s() + budget_ms / 1000.0;
    for (;;) {
        if (coord_client_connect(s->cl, 3000, e) == 0)
            return send_hello(s, e);
        if (terminating(s))
            return herr_wrap(e, "SIGTERM while connecting: nothing to checkpoint");
        if (clock_mono_s() >= until)
            return herr_wrap(e, "gave up after %d ms", budget_ms);
        for (int i = 0; i < 10 && !terminating(s); i++)
            usleep(50 * 1000);
    }
}

/* Sends the steps batched since the last call (if any). */
static void flush_progress(struct session *s)
{
    static __thread struct proto_progress p;
    pthread_mutex_lock(&s->link.mu);
    p.nsteps = s->link.nsteps;
    memcpy(p.steps, s->link.steps, (size_t)p.nsteps * sizeof p.steps[0]);
    int connected = coord_client_connected(s->cl);
    if (connected)
        s->link.nsteps = 0;
    struct proto_notice notices[sizeof s->link.notices / sizeof s->link.notices[0]];
    int nn = connected ? s->link.nnotices : 0;
    memcpy(notices, s->link.notices, (size_t)nn * sizeof notices[0]);
    if (connected)
        s->link.nnotices = 0;
    pthread_mutex_unlock(&s->link.mu);
    for (int i = 0; i < nn; i++)
        coord_client_send(s->cl, proto_notice_encode(notices[i].reason, notices[i].message, NULL));
    if (!connected || p.nsteps == 0)
        return;
    p.rank = s->rank;
    p.stage = s->stage;
    coord_client_send(s->cl, proto_progress_encode(&p, NULL));
}

/* The protocol's error code for a failure of this kind: the coordinator tells a cause from
 * its consequences by it, and does not retry a configuration error. */
static int error_code_of(const herr *e)
{
    switch (e->kind) {
    case HERR_CONFIG: return PROTO_ERR_CONFIG;
    case HERR_PEER: return PROTO_ERR_PEER;
    default: return PROTO_ERR_WORKER;
    }
}

/* SIGTERM mid-training: the coordinator hears it first (so it stops everyone at the same step
 * boundary), and this worker asks its runner to stop there too, in case nobody is listening. */
static void announce_termination(struct session *s)
{
    pthread_mutex_lock(&s->link.mu);
    long at = s->link.last_step;
    pthread_mutex_unlock(&s->link.mu);
    char msg[256];
    snprintf(msg, sizeof msg, "received SIGTERM (eviction, drain or preemption) after step %ld; "
             "checkpointing at the next step boundary", at);
    log_info("%s", msg);
    coord_client_send(s->cl, proto_error_encode(PROTO_ERR_PREEMPTED, msg, NULL));
    s->link.stop = 1;
}

/* Waits for one message; reconnects (hello with resume) when training and the link drops. */
static int next_message(struct session *s, int timeout_ms, struct proto_msg *m, herr *e)
{
    int rc = coord_client_poll(s->cl, timeout_ms, m, e);
    if (rc >= 0 || !s->training)
        return rc;
    /* Mid-training: the coordinator went away. Keep training; try to reconnect. */
    herr ce = {0};
    if (connect_and_hello(s, 0, &ce) != 0)
        usleep((useconds_t)timeout_ms * 1000);
    return 0;
}

/* Before training: hello was said; take the assignment (the runner binds its endpoint and
 * rendezvous), until the start. 1 when started (*assignment and *start set), else 0 with the
 * result of the run in *result (`e` says why). */
static int await_start(struct session *s, struct plan_assignment *assignment,
                       struct proto_msg *start, int *result, herr *e)
{
    const struct worker_runner *r = s->r;
    int have = 0;
    *result = -1;
    for (;;) {
        if (terminating(s)) {
            *result = WORKER_EXIT_TERMINATED;
            herr_set(e, "SIGTERM before training started: nothing to checkpoint");
            return 0;
        }
        struct proto_msg m;
        int rc = next_message(s, 250, &m, e);
        if (rc < 0 && e->kind == HERR_CONFIG) {
            /* an assignment that does not decode: the same again next time (proto_parse) */
            coord_client_send(s->cl, proto_error_encode(PROTO_ERR_CONFIG, e->msg, NULL));
            coord_client_flush(s->cl, 1000);
            *result = WORKER_EXIT_FINAL;
            return 0;
        }
        if (rc < 0 && !terminating(s))
            return 0;
        if (rc <= 0)
            continue;
        if (m.type == PROTO_ASSIGN) {
            plan_assignment_free(assignment);
            s->attempt = m.attempt;
            s->rank = m.rank;
            proto_take_assignment(&m, assignment);
            proto_msg_free(&m);
            have = 1;
            s->stage = assignment->stage < PROTO_MAX_STAGES ? assignment->stage : 0;
            cJSON *eps = NULL, *ids = NULL;
            if (r->prepare(r->user, assignment, s->attempt, &eps, &ids, e)) {
                herr pe = *e;
                coord_client_send(s->cl, proto_error_encode(error_code_of(&pe), pe.msg, NULL));
                coord_client_flush(s->cl, 1000);
                if (pe.kind == HERR_CONFIG)
                    *result = WORKER_EXIT_FINAL;
                return 0;
            }
            const cJSON *first = cJSON_GetArrayItem(eps, 0);
            char *text = proto_rendezvous_encode(s->attempt, s->rank,
                                                 cJSON_IsString(first) ? first->valuestring : "",
                                                 cJSON_GetArraySize(eps) > 1 ? eps : NULL, ids, e);
            cJSON_Delete(eps);
            cJSON_Delete(ids);
            if (!text || coord_client_send(s->cl, text))
                return 0;
        } else if (m.type == PROTO_START) {
            if (!have || m.attempt != s->attempt) {
                proto_msg_free(&m);
                continue;
            }
            *start = m;
            return 1;
        } else if (m.type == PROTO_STOP) {
            *result = m.u.stop.restart ? WORKER_EXIT_RESTART : WORKER_EXIT_FINAL;
            if (!m.u.stop.restart)
                herr_set(e, "stopped by the coordinator before training: %s", m.u.stop.reason);
            proto_msg_free(&m);
            return 0;
        } else if (m.type == PROTO_ERROR) {
            herr_set(e, "the coordinator refused: %s", m.u.error.message);
            /* Not part of the job, or a plan that cannot be: the same again next time. A
             * token or job not known yet (caches catching up) is worth another try. */
            if (m.u.error.code == PROTO_ERR_UNKNOWN_WORKER || m.u.error.code == PROTO_ERR_PLAN)
                *result = WORKER_EXIT_FINAL;
            proto_msg_free(&m);
            return 0;
        } else {
            proto_msg_free(&m);
        }
    }
}

/* Training, on the runner's thread, while this one streams progress and listens for a stop or
 * SIGTERM. 1 when the runner finished its steps (report done next), else 0 with the result in
 * *result. */
static int train_until_done(struct session *s, struct train_thread *t, int interval_ms,
                            int *result, herr *e)
{
    double last_flush = clock_mono_s();
    int stopped = 0, restart = 0, preempting = 0;
    char stop_reason[512] = "";
    while (!t->finished) {
        if (!preempting && terminating(s)) {
            preempting = 1;
            announce_termination(s);
        }
        struct proto_msg m;
        int rc = next_message(s, 100, &m, e);
        if (rc == 1) {
            if (m.type == PROTO_STOP) {
                stopped = 1;
                restart = m.u.stop.restart;
                snprintf(stop_reason, sizeof stop_reason, "%s", m.u.stop.reason);
                s->link.stop = 1;
            }
            proto_msg_free(&m);
        }
        if (stopped)
            break;
        if ((clock_mono_s() - last_flush) * 1000.0 >= interval_ms) {
            flush_progress(s);
            last_flush = clock_mono_s();
        }
    }
    s->link.stop = stopped || preempting;
    pthread_join(t->th, NULL);
    s->training = 0;
    *result = -1;
    if (preempting && !t->rc) {
        flush_progress(s);
        coord_client_flush(s->cl, 1000);
        *result = WORKER_EXIT_TERMINATED;
        herr_set(e, "left on SIGTERM after step %ld, checkpointed there", t->last_step);
        return 0;
    }
    if (stopped) {
        *result = restart ? WORKER_EXIT_RESTART : WORKER_EXIT_FINAL;
        if (!restart)
            herr_set(e, "stopped by the coordinator: %s", stop_reason);
        return 0;
    }
    flush_progress(s);
    if (t->rc) {
        *e = t->e;
        coord_client_send(s->cl, proto_error_encode(error_code_of(&t->e), t->e.msg, NULL));
        coord_client_flush(s->cl, 2000);
        if (t->e.kind == HERR_CONFIG)
            *result = WORKER_EXIT_FINAL;
        return 0;
    }
    return 1;
}

/* Reports done and waits for the coordinator's verdict (the others may still be training). If
 * the coordinator is away, reconnects (hello with resume) and reports again. The result. */
static int report_done(struct session *s, long last_step)
{
    int done_sent = 0, result = 0;
    double give_up = clock_mono_s() +
                     (s->o->connect_timeout_ms > 0 ? s->o->connect_timeout_ms : 60000) / 1e3;
    s->training = 1; /* a reconnecting hello still says where we are */
    for (;;) {
        if (!coord_client_connected(s->cl)) {
            done_sent = 0;
            herr ce = {0};
            if (clock_mono_s() > give_up) {
                result = 0; /* our part is finished; nobody is left to tell */
                break;
            }
            if (connect_and_hello(s, 0, &ce)) {
                usleep(500 * 1000);
                continue;
            }
        }
        if (!done_sent) {
            /* steps batched while the coordinator was away go first, so its progress
             * reaches the last step before it hears we are done */
            flush_progress(s);
            coord_client_send(s->cl, proto_done_encode(s->rank, last_step, NULL));
            done_sent = 1;
        }
        struct proto_msg m;
        herr pe = {0};
        int rc = coord_client_poll(s->cl, 1000, &m, &pe);
        if (rc <= 0)
            continue;
        int is_stop = m.type == PROTO_STOP;
        if (is_stop) {
            /* After our done, a final stop means the job is over: our part succeeded.
             * A restart means another worker failed before the end. */
            result = m.u.stop.restart ? WORKER_EXIT_RESTART : 0;
        }
        proto_msg_free(&m);
        if (is_stop)
            break;
    }
    s->training = 0;
    return result;
}

int worker_coord_run(const struct worker_coord_options *o, const struct worker_runner *r, herr *e)
{
    struct session s;
    memset(&s, 0, sizeof s);
    s.o = o;
    s.r = r;
    s.rank = -1;
    pthread_mutex_init(&s.link.mu, NULL);
    int interval_ms = o->progress_interval_ms > 0 ? o->progress_interval_ms : 500;
    int result = -1;
    struct plan_assignment assignment;
    memset(&assignment, 0, sizeof assignment);
    struct proto_msg start = {0};
    struct train_thread t;
    memset(&t, 0, sizeof t);

    if (coord_client_create_tls(&s.cl, o->url, o->ca_file, e))
        goto out;
    if (connect_and_hello(&s, o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 60000, e)) {
        if (terminating(&s))
            result = WORKER_EXIT_TERMINATED;
        goto out;
    }
    if (!await_start(&s, &assignment, &start, &result, e))
        goto out;
    t.r = r;
    t.assignment = &assignment;
    t.start = &start.u.start;
    t.resume_step = start.step;
    t.link = &s.link;
    if (pthread_create(&t.th, NULL, train_main, &t) != 0) {
        herr_set(e, "cannot start the training thread");
        goto out;
    }
    s.training = 1;
    if (train_until_done(&s, &t, interval_ms, &result, e)) /* joins the training thread */
        result = report_done(&s, t.last_step);
out:
    proto_msg_free(&start);
    plan_assignment_free(&assignment);
    if (s.cl)
        coord_client_flush(s.cl, 500);
    coord_client_destroy(s.cl);
    pthread_mutex_destroy(&s.link.mu);
    return result;
}

/* ---------------------------------------------------------------- simulated runner */

static int sim_prepare(void *user, const struct plan_assignment *a, int attempt, cJSON **endpoints,
                       cJSON **ids, herr *e)
{
    (void)user;
    (void)attempt;
    *ids = NULL;
    *endpoints = cJSON_CreateArray();
    for (int i = 0; *endpoints && i < a->nranks; i++) {
        char ep[32];
        snprintf(ep, sizeof ep, "sim:%d", a->ranks[i]);
        if (!cJSON_AddItemToArray(*endpoints, cJSON_CreateString(ep))) {
            cJSON_Delete(*endpoints);
            *endpoints = NULL;
        }
    }
    return *endpoints ? 0 : herr_set(e, "out of memory");
}

static int sim_run(void *user, struct plan_assignment *a, const struct proto_start *start,
                   long resume_step, struct worker_link *link, long *last_step, herr *e)
{
    const struct worker_sim *sim = user;
    (void)start;
    int last = a->stage == a->stages - 1;
    *last_step = resume_step;
    for (long step = resume_step + 1; step <= sim->steps; step++) {
        if (worker_stop_requested(link))
            return 0;
        if (sim->fail_at_step > 0 && step == sim->fail_at_step)
            return herr_set(e, "simulated failure at step %ld", step);
        if (sim->step_ms > 0)
            usleep((useconds_t)sim->step_ms * 1000);
        struct proto_step s = {.step = step, .step_ms = sim->step_ms, .compute_ms = sim->step_ms,
                               .lr = 1e-3, .tokens_per_s = 1000};
        if (last) { /* a falling loss, and a gradient norm falling with it */
            s.has_loss = 1;
            s.loss = 1.0 + 9.0 / (1.0 + (double)step / 10.0);
            s.has_norm = 1;
            s.grad_norm = 0.2 + 2.0 / (1.0 + (double)step / 10.0);
        }
        /* training.eval, simulated: a held-out loss a little above the training loss */
        const struct tj_eval *ev = a->has_spec ? &a->spec.training.eval : NULL;
        if (last && ev && ev->path[0] &&
            ((ev->every_steps > 0 && step % ev->every_steps == 0) || step == sim->steps)) {
            s.has_eval = 1;
            s.eval_loss = s.loss * 1.02;
        }
        worker_report_step(link, &s);
        *last_step = step;
    }
    return 0;
}

const struct worker_runner worker_sim_runner = {
    .user = NULL,
    .prepare = sim_prepare,
    .run = sim_run,
};
