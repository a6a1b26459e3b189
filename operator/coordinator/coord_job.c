/* A job's state machine (coordinator_impl.h): failures settled by their cause into an in-place
 * restart or a failed job, the gang barrier, the plan and the assignments, the start, and the
 * progress aggregated over workers. */
#include "coordinator_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"

void co_job_event(struct job *j, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (j->hooks.on_event)
        j->hooks.on_event(j->user, j->state, msg);
}

void co_set_state(struct job *j, enum coord_job_state s, const char *why)
{
    j->state = s;
    co_job_event(j, "%s: %s", coord_state_name(s), why);
}

/* Stop to every connected worker of the job. */
void co_job_broadcast_stop(struct job *j, int restart, const char *reason)
{
    for (int i = 0; i < j->n; i++) {
        struct conn *k = j->w[i].conn;
        if (!k || (restart && j->w[i].deferred))
            continue; /* a deferred hello is already the restarted process */
        co_conn_send(k, proto_stop_encode(j->attempt, restart, reason, NULL));
        if (!restart)
            co_conn_close_after(k, "job over");
    }
}

static void job_reset_round(struct job *j)
{
    for (int i = 0; i < j->n; i++) {
        struct slot *s = &j->w[i];
        s->hello = s->running = s->rendezvous = s->done = 0;
        s->reported = 0;
        s->endpoint[0] = '\0';
        cJSON_Delete(s->ids);
        s->ids = NULL;
        cJSON_Delete(s->endpoints);
        s->endpoints = NULL;
    }
    j->gather_since = clock_mono_s();
    j->gang_reported = 0;
}


/* Admits the hellos that waited for a failure's verdict (a restart has just begun). */
static void admit_deferred(struct job *j)
{
    for (int i = 0; i < j->n; i++) {
        struct slot *s = &j->w[i];
        if (!s->deferred)
            continue;
        s->deferred = 0;
        if (s->conn)
            co_admit(s->conn, j, &s->deferred_hello);
    }
}

/* A worker failed: restart in place, or fail the job when restarts are spent. */
static void job_failure(struct job *j, const char *why)
{
    j->fail_deadline = 0;
    j->fail_rank = FAIL_NONE;
    if (j->state == COORD_SUCCEEDED || j->state == COORD_FAILED)
        return;
    if (j->restarts >= j->max_restarts) {
        char reason[700];
        snprintf(reason, sizeof reason, "%s; no restarts left (%d used)", why, j->restarts);
        co_set_state(j, COORD_FAILED, reason);
        co_job_broadcast_stop(j, 0, reason);
        return;
    }
    j->restarts++;
    co_job_broadcast_stop(j, 1, why);
    j->attempt++;
    job_reset_round(j);
    /* restartPolicy.backoffSeconds: the gang starts again no sooner; the gang timeout counts
     * from then */
    j->resume_at = clock_mono_s() + j->restart_backoff_ms / 1000.0;
    j->gather_since = j->resume_at;
    char reason[700];
    if (j->restart_backoff_ms > 0)
        snprintf(reason, sizeof reason, "%s; restarting in place after a %g s backoff (restart %d of %d)",
                 why, j->restart_backoff_ms / 1000.0, j->restarts, j->max_restarts);
    else
        snprintf(reason, sizeof reason, "%s; restarting in place (restart %d of %d)", why,
                 j->restarts, j->max_restarts);
    co_set_state(j, COORD_RESTARTING, reason);
    admit_deferred(j);
}

/* A configuration or data error fails the job at once: a restart would fail the same way. */
static void job_fail_now(struct job *j, const char *why)
{
    j->fail_deadline = 0;
    j->fail_rank = FAIL_NONE;
    if (j->state == COORD_SUCCEEDED || j->state == COORD_FAILED)
        return;
    char reason[800];
    snprintf(reason, sizeof reason, "%s; not retried: a configuration, data or storage error "
             "fails the same way again", why);
    co_set_state(j, COORD_FAILED, reason);
    co_job_broadcast_stop(j, 0, reason);
}

/* Every worker stops at the next step boundary, checkpointing there, and the gang then
 * ("restarts in place from there", "re-plans") in a new round; not charged against
 * maxRestarts. */
static void stop_at_checkpoint(struct job *j, const char *why, const char *then)
{
    j->fail_deadline = 0;
    j->fail_rank = FAIL_NONE;
    co_job_broadcast_stop(j, 1, why);
    j->attempt++;
    job_reset_round(j);
    char reason[900];
    snprintf(reason, sizeof reason, "%.700s; every worker checkpoints at the next step boundary "
             "and the gang %s (not counted against maxRestarts)", why, then);
    co_set_state(j, COORD_RESTARTING, reason);
}

/* A worker received SIGTERM (eviction, drain, preemption) and checkpoints at the next step
 * boundary: every worker stops there too and the gang restarts in place from that checkpoint.
 * Not a fault of the job: maxRestarts is not charged. */
void co_job_preempted(struct job *j, const char *why)
{
    if (j->state != COORD_RENDEZVOUS && j->state != COORD_RUNNING)
        return;
    stop_at_checkpoint(j, why, "restarts in place from there");
    admit_deferred(j);
}

/* A worker's own fault and its configuration error tell as much: the first one kept wins. */
static int fail_weight(enum fail_rank r)
{
    return r == FAIL_CONFIG ? FAIL_FAULT : (int)r;
}

/* Records one report of a failure of the running gang; the verdict comes in job_settle. */
void co_job_report_failure(struct job *j, enum fail_rank rank, const char *why)
{
    if (j->state != COORD_RENDEZVOUS && j->state != COORD_RUNNING)
        return; /* a failure is already being handled, or the gang is not running */
    if (!j->fail_deadline)
        j->fail_deadline = clock_mono_s() + FAILURE_WINDOW_S;
    if (fail_weight(rank) > fail_weight(j->fail_rank)) {
        j->fail_rank = rank;
        snprintf(j->fail_why, sizeof j->fail_why, "%s", why);
    }
}

/* The verdict on a failure once its window has passed: its cause decides. */
void co_job_settle(struct job *j, double now)
{
    if (!j->fail_deadline || now < j->fail_deadline)
        return;
    char why[sizeof j->fail_why];
    snprintf(why, sizeof why, "%s", j->fail_why);
    if (j->fail_rank == FAIL_CONFIG)
        job_fail_now(j, why);
    else
        job_failure(j, why);
}

/* Each worker's ranks from its assignment (its first rank, and its ranks when it has several),
 * and the worker and local index of every rank: all of 0..world-1, each once. */
static int index_ranks(struct job *j, herr *e)
{
    int world = 0;
    for (int i = 0; i < j->n; i++) {
        struct slot *s = &j->w[i];
        if (s->lost) { /* elastic: planned without it */
            s->nranks = 0;
            s->info.rank = -1;
            continue;
        }
        const struct plan_assignment *a = j->assign[i];
        s->nranks = a->nranks > 0 ? a->nranks : 1;
        if (s->nranks > PLAN_MAX_LOCAL_RANKS)
            return herr_set(e, "plan: worker %d has %d ranks (1..%d)", i, s->nranks,
                            PLAN_MAX_LOCAL_RANKS);
        for (int k = 0; k < s->nranks; k++)
            s->ranks[k] = a->nranks > 0 ? a->ranks[k] : a->rank;
        s->info.rank = s->ranks[0];
        world += s->nranks;
    }
    int *wr = malloc((size_t)world * sizeof *wr), *lr = malloc((size_t)world * sizeof *lr);
    free(j->worker_of_rank);
    free(j->local_of_rank);
    j->worker_of_rank = wr;
    j->local_of_rank = lr;
    j->world = wr && lr ? world : 0;
    if (!wr || !lr)
        return herr_set(e, "out of memory");
    for (int r = 0; r < world; r++)
        wr[r] = -1;
    for (int i = 0; i < j->n; i++)
        for (int k = 0; k < j->w[i].nranks; k++) {
            int rank = j->w[i].ranks[k];
            if (rank < 0 || rank >= world || wr[rank] >= 0)
                return herr_set(e, "plan: rank %d of worker %d is out of range or taken", rank, i);
            wr[rank] = i;
            lr[rank] = k;
        }
    return 0;
}

/* ---------------------------------------------------------------- gang barrier, plan, start */

void co_assignment_free(struct plan_assignment *a)
{
    plan_assignment_free(a);
    free(a);
}

static int job_plan(struct job *j, herr *e)
{
    if (!j->assign) {
        j->assign = calloc((size_t)j->n, sizeof *j->assign);
        if (!j->assign)
            return herr_set(e, "out of memory");
    }
    int have = 1;
    for (int i = 0; i < j->n; i++)
        have = have && (j->w[i].lost || j->assign[i]);
    if (!have) {
        /* the workers the plan is for: all of them, less the lost ones of an elastic job */
        struct coord_worker *ws = malloc((size_t)j->n * sizeof *ws);
        struct plan_assignment *as = calloc((size_t)j->n, sizeof *as);
        if (!ws || !as) {
            free(ws);
            free(as);
            return herr_set(e, "out of memory");
        }
        int n = 0;
        for (int i = 0; i < j->n; i++)
            if (!j->w[i].lost)
                ws[n++] = j->w[i].info;
        int rc = j->hooks.plan(j->user, ws, n, as, e);
        for (int i = 0, k = 0; i < j->n; i++)
            if (!j->w[i].lost) {
                co_assignment_free(j->assign[i]);
                j->assign[i] = malloc(sizeof *j->assign[i]);
                if (j->assign[i])
                    *j->assign[i] = as[k];
                else
                    plan_assignment_free(&as[k]);
                if (!j->assign[i] && !rc)
                    rc = herr_set(e, "out of memory");
                k++;
            }
        free(ws);
        free(as);
        if (rc)
            return -1;
    }
    return index_ranks(j, e);
}

/* An elastic job whose remaining workers cannot hold the model (why: the planner's reason) waits
 * for a lost worker to come back when it can come back (spec.elastic.scaleUp), its workers
 * connected and its checkpoints kept, rather than failing: 1 when it waits. */
static int wait_for_capacity(struct job *j, const char *why)
{
    if (!co_elastic(j) || !j->scale_up || j->nlost == 0)
        return 0;
    j->capacity_wait = 1;
    char msg[1200];
    snprintf(msg, sizeof msg, "waiting for a lost worker to come back (spec.elastic.scaleUp): "
             "the %d workers that remain cannot hold the model: %.1000s", j->n - j->nlost, why);
    co_job_event(j, "%s", msg);
    if (j->hooks.on_waiting)
        j->hooks.on_waiting(j->user, "InsufficientCapacity", msg);
    return 1;
}

static void job_send_assignments(struct job *j)
{
    herr e = {0};
    if (job_plan(j, &e)) {
        co_job_forget_plan(j);
        if (wait_for_capacity(j, e.msg))
            return;
        co_set_state(j, COORD_FAILED, e.msg);
        for (int i = 0; i < j->n; i++)
            if (j->w[i].conn) {
                co_conn_send(j->w[i].conn, proto_error_encode(PROTO_ERR_PLAN, e.msg, NULL));
            }
        co_job_broadcast_stop(j, 0, e.msg);
        return;
    }
    for (int i = 0; i < j->n; i++)
        if (!j->w[i].lost)
            co_conn_send(j->w[i].conn, proto_assign_encode(j->attempt, j->assign[i], NULL));
    co_set_state(j, COORD_RENDEZVOUS, "assignments sent");
}


/* Running with every worker done: the job succeeded. */
void co_job_succeed_if_all_done(struct job *j)
{
    for (int i = 0; i < j->n; i++)
        if (!j->w[i].done && !j->w[i].lost)
            return;
    co_job_maybe_emit(j, 1);
    co_set_state(j, COORD_SUCCEEDED, "every worker finished");
    co_job_broadcast_stop(j, 0, "the job succeeded");
}

/* All present with hello: adopt a running gang, or plan and assign. */
static void job_gang_complete(struct job *j)
{
    int first = 0;
    while (first < j->n - 1 && j->w[first].lost)
        first++;
    int all_running = 1, attempt = j->w[first].resume_attempt;
    for (int i = 0; i < j->n; i++)
        all_running = all_running && (j->w[i].lost || (j->w[i].running &&
                                                       j->w[i].resume_attempt == attempt));
    if (all_running) {
        j->attempt = attempt;
        co_set_state(j, COORD_RUNNING, "every worker reconnected mid-training; adopted");
        co_job_succeed_if_all_done(j); /* some or all may have finished while we were away */
        return;
    }
    int any_running = 0;
    for (int i = 0; i < j->n; i++)
        any_running = any_running || j->w[i].running;
    if (any_running) {
        /* A partial gang of survivors cannot be resumed as is: restart everyone in place. */
        job_failure(j, "workers reconnected from different attempts");
        return;
    }
    job_send_assignments(j);
}

void co_job_check_gang(struct job *j)
{
    if ((j->state != COORD_GATHERING && j->state != COORD_RESTARTING) || j->capacity_wait)
        return;
    for (int i = 0; i < j->n; i++)
        if (!j->w[i].hello && !j->w[i].lost)
            return;
    if (clock_mono_s() < j->resume_at)
        return; /* restart backoff: tick() checks again */
    job_gang_complete(j);
}

/* ---------------------------------------------------------------- elastic */

/* The assignments go: the next gang plans again (with the workers it has then). */
void co_job_forget_plan(struct job *j)
{
    for (int i = 0; j->assign && i < j->n; i++) {
        co_assignment_free(j->assign[i]);
        j->assign[i] = NULL;
    }
}

/* A running gang stops at the next step boundary, every worker checkpointing there, and
 * gathers again (not charged against maxRestarts): the way to a new plan while it trains. */
static void replan_running(struct job *j, const char *why)
{
    stop_at_checkpoint(j, why, "re-plans");
}

int co_job_lose(struct job *j, int index, const char *why, herr *e)
{
    if (!co_elastic(j))
        return herr_set(e, "job %s is not elastic (spec.elastic.minWorkers %d, workers %d)",
                        j->name, j->min_workers, j->n);
    if (index < 0 || index >= j->n)
        return herr_set(e, "job %s has no worker %d", j->name, index);
    struct slot *s = &j->w[index];
    if (s->lost)
        return herr_set(e, "worker %d of job %s is lost already", index, j->name);
    if (s->conn)
        return herr_set(e, "worker %d of job %s is connected", index, j->name);
    if (j->state == COORD_SUCCEEDED || j->state == COORD_FAILED)
        return herr_set(e, "job %s is over", j->name);
    int left = j->n - j->nlost - 1;
    if (left < j->min_workers)
        return 1;
    s->lost = 1;
    s->hello = s->running = s->deferred = 0;
    j->nlost++;
    j->replans++;
    co_job_forget_plan(j);
    char msg[800];
    snprintf(msg, sizeof msg, "worker %d (%s) lost: %s; re-planning onto the %d workers that remain "
             "(spec.elastic.minWorkers %d)", index, s->info.pod[0] ? s->info.pod
             : j->pods ? j->pods[index] : "?", why, left, j->min_workers);
    if (j->hooks.on_elastic) {
        struct coord_worker w = s->info;
        if (!w.pod[0] && j->pods)
            snprintf(w.pod, sizeof w.pod, "%s", j->pods[index]);
        j->hooks.on_elastic(j->user, &w, 1, why);
    }
    if (j->state == COORD_RUNNING || j->state == COORD_RENDEZVOUS)
        replan_running(j, msg);
    else
        co_job_event(j, "%s", msg);
    co_job_check_gang(j);
    return 0;
}

/* A lost worker said hello again (spec.elastic.scaleUp): planned in at once when the gang is
 * gathering, else after a stop at the next step boundary, where every worker checkpoints. */
void co_job_regain(struct job *j, struct conn *k, const struct proto_hello *h)
{
    struct slot *s = &j->w[h->worker];
    s->lost = 0;
    j->nlost--;
    j->capacity_wait = 0; /* more workers: the plan is tried again */
    j->replans++;
    co_job_forget_plan(j);
    char msg[600];
    snprintf(msg, sizeof msg, "worker %d (%s) is back; re-planning onto %d workers", h->worker,
             h->pod, j->n - j->nlost);
    if (j->hooks.on_elastic) {
        struct coord_worker w = s->info;
        snprintf(w.pod, sizeof w.pod, "%s", h->pod);
        j->hooks.on_elastic(j->user, &w, 0, "its pod is ready again");
    }
    if (j->state == COORD_RUNNING || j->state == COORD_RENDEZVOUS) {
        /* its hello waits for the gang's, as a process back during a failure's verdict */
        k->job = j;
        k->worker = h->worker;
        s->conn = k;
        s->deferred = 1;
        s->deferred_hello = *h;
        s->deferred_hello.running = 0;
        replan_running(j, msg);
        admit_deferred(j);
        return;
    }
    co_job_event(j, "%s", msg);
    co_admit(k, j, h);
}

/* Rank r's entry in start.peers: its endpoint, and its worker's ids with its first rank. */
static struct proto_peer peer_entry(const struct job *j, int r)
{
    const struct slot *s = &j->w[j->worker_of_rank[r]];
    int k = j->local_of_rank[r];
    const cJSON *ep = k > 0 ? cJSON_GetArrayItem(s->endpoints, k) : NULL;
    struct proto_peer p = {.rank = r, .ids = k == 0 ? s->ids : NULL};
    snprintf(p.endpoint, sizeof p.endpoint, "%s", cJSON_IsString(ep) ? ep->valuestring : s->endpoint);
    return p;
}

void co_job_send_start(struct job *j)
{
    int cap = j->world;
    for (int i = 0; i < j->n; i++)
        if (!j->w[i].lost && j->assign[i]->npeers > cap)
            cap = j->assign[i]->npeers;
    struct proto_peer *peers = malloc(((size_t)cap + 1) * sizeof *peers);
    if (!peers) {
        job_failure(j, "out of memory building the start messages");
        return;
    }
    for (int i = 0; i < j->n; i++) {
        if (j->w[i].lost)
            continue;
        const struct plan_assignment *a = j->assign[i];
        int n = 0;
        for (int k = 0; a->peers && k < a->npeers; k++) /* the peers its plan names */
            if (a->peers[k] < j->world)
                peers[n++] = peer_entry(j, a->peers[k]);
        for (int r = 0; !a->peers && r < j->world; r++) /* else every rank */
            peers[n++] = peer_entry(j, r);
        co_conn_send(j->w[i].conn, proto_start_encode(j->attempt, 0, peers, n, NULL));
    }
    free(peers);
    co_set_state(j, COORD_RUNNING, "rendezvous complete; training started");
}

/* ---------------------------------------------------------------- progress */

void co_job_aggregate(const struct job *j, struct coord_progress *p)
{
    memset(p, 0, sizeof *p);
    p->attempt = j->attempt;
    p->total_steps = j->total_steps;
    p->step = -1;
    p->skipped_steps = j->skipped_steps;
    p->skipped_last = j->skipped_last;
    int nloss = 0, nnorm = 0;
    for (int i = 0; i < j->n; i++) {
        const struct slot *s = &j->w[i];
        if (!s->reported)
            continue;
        if (p->step < 0 || s->last.step < p->step)
            p->step = s->last.step;
        if (s->last.step_ms > p->step_ms)
            p->step_ms = s->last.step_ms;
        if (s->eval_step > p->eval_step) {
            p->eval_step = s->eval_step;
            p->eval_loss = s->eval_loss;
        }
        if (s->last.has_loss) {
            p->loss += s->last.loss;
            p->tokens_per_s += s->last.tokens_per_s;
            nloss++;
        }
        if (s->last.has_norm) {
            p->grad_norm += s->last.grad_norm;
            nnorm++;
        }
    }
    if (p->step < 0)
        p->step = 0;
    if (nloss) {
        /* every last-stage replica reports the loss and the whole step's tokens/s (its global
         * batch over its step time): the mean of each, not the sum */
        p->has_loss = 1;
        p->loss /= nloss;
        p->tokens_per_s /= nloss;
    }
    if (nnorm) { /* one global value; the replicas' last steps may differ by a step */
        p->has_norm = 1;
        p->grad_norm /= nnorm;
    }
    p->eta_s = j->pace_attempt == j->attempt
                   ? coord_eta(j->total_steps, p->step, p->step_ms, j->pace_step0, j->pace_t0,
                               clock_mono_s())
                   : coord_eta(j->total_steps, p->step, p->step_ms, p->step, 0, 0);
}

double coord_eta(long total, long step, double step_ms, long step0, double t0, double now)
{
    if (total <= 0)
        return -1;
    if (step >= total)
        return 0;
    double left = (double)(total - step);
    if (now - t0 >= COORD_ETA_PACE_S && step - step0 >= 2)
        return left * (now - t0) / (double)(step - step0);
    return step_ms > 0 ? left * step_ms / 1000.0 : -1;
}

void co_job_maybe_emit(struct job *j, int force)
{
    if (!j->progress_dirty || !j->hooks.on_progress)
        return;
    double t = clock_mono_s();
    if (!force && (t - j->last_emit) * 1000.0 < j->progress_interval_ms)
        return;
    j->progress_dirty = 0;
    int reported = 0;
    for (int i = 0; i < j->n; i++)
        reported |= j->w[i].reported;
    if (!reported)
        return; /* a restarted gang that has not stepped yet: the last progress still stands */
    co_job_aggregate(j, &j->emitted);
    /* the ETA's pace counts from the attempt's first report (a restart's steps go back) */
    if (j->pace_attempt != j->attempt || j->emitted.step < j->pace_step0) {
        j->pace_attempt = j->attempt;
        j->pace_step0 = j->emitted.step;
        j->pace_t0 = t;
    }
    j->last_emit = t;
    j->hooks.on_progress(j->user, &j->emitted);
}
