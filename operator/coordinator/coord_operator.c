#include "coord_operator.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "json.h"
#include "coord_history.h"
#include "coord_metrics.h"
#include "coord_plan.h"
#include "coordinator.h"
#include "log.h"
#include "nic_labels.h"
#include "tls_keeper.h"
#include "trainingjob.h"

struct opjob {
    struct opjob *next;
    struct coord_operator *co;
    char key[160];              /* namespace/name, the coordinator's job name */
    char ns[TJ_NAME_MAX], name[TJ_NAME_MAX];
    struct tj_job tj;
    struct coord_plan cp;
    double last_refusal_event;
    double failed_seen;         /* when its status was first seen Failed (by the coordinator or the
                                   controller: spec.activeDeadlineSeconds); removed a little later */
    int restarts_written;       /* status.restarts as last written */
    /* spec.elastic */
    double *absent_since;       /* [workers] when a missing worker's pod was first seen
                                   unschedulable or its node NotReady or gone (0: not so) */
    char elastic_why[400];      /* what the next plan re-plans for */
    int waiting_said;           /* the BelowMinWorkers condition is set */
};

struct coord_operator {
    struct controller *ctl;
    struct coordinator *c;
    pthread_t th;
    volatile int quit;
    int status_interval_ms;
    struct opjob *jobs;
    struct coord_metrics *metrics; /* per-job gauges for /metrics (the caller's; may be NULL) */
    struct coord_history *history; /* for the job page (the caller's; may be NULL) */
    struct tls_keeper *tls;        /* the serving certificate, renewed (may be NULL: ws://) */
    unsigned long tls_gen;
};

/* A label value: at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends. */
static void rfc3339_now(char *buf, size_t cap)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void patch_status(struct opjob *j, cJSON *fields)
{
    herr e = {0};
    if (fields && controller_patch_job_status(j->co->ctl, j->ns, j->name, fields, &e))
        log_warn("job %s: status update: %s", j->key, e.msg);
    cJSON_Delete(fields);
}

static void event(struct opjob *j, const char *type, const char *reason, const char *msg)
{
    herr e = {0};
    coord_history_event(j->co->history, j->ns, j->name, type, reason, msg);
    if (controller_emit_event(j->co->ctl, j->ns, j->name, type, reason, msg, &e))
        log_warn("job %s: event: %s", j->key, e.msg);
}

/* One status condition, the others kept (controller_set_job_condition). */
static void condition(struct opjob *j, const char *type, int ok, const char *reason,
                      const char *msg)
{
    herr e = {0};
    if (controller_set_job_condition(j->co->ctl, j->ns, j->name, type, ok, reason, msg, &e))
        log_warn("job %s: %s", j->key, e.msg);
}

static void patch_labels(struct opjob *j, const char *pod, cJSON *labels)
{
    herr e = {0};
    if (labels && controller_patch_pod_labels(j->co->ctl, j->ns, pod, labels, &e))
        log_warn("job %s: labels of pod %s: %s", j->key, pod, e.msg);
    cJSON_Delete(labels);
}

/* ---------------------------------------------------------------- hooks */

static void on_hello(void *user, const struct coord_worker *w)
{
    struct opjob *j = user;
    /* The same labels, by the same function, as the NIC labeller puts on the worker's Node. */
    struct nic_labels nl;
    herr e = {0};
    if (nic_labels_from_summary(&w->nic, &nl, &e) != 0) {
        log_warn("job %s: pod %s: no NIC labels: %s", j->key, w->pod, e.msg);
        return;
    }
    patch_labels(j, w->pod, nic_labels_to_json(&nl));
}

static cJSON *nic_groups_json(const struct coord_worker *w, int n)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < n; i++) {
        cJSON *g = NULL, *it;
        cJSON_ArrayForEach(it, arr) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(it, "fabric");
            if (cJSON_IsString(f) && strcmp(f->valuestring, w[i].nic.fabric) == 0)
                g = it;
        }
        if (g) {
            cJSON *cnt = cJSON_GetObjectItemCaseSensitive(g, "workers");
            cJSON_SetNumberValue(cnt, cnt->valuedouble + 1);
            continue;
        }
        g = cJSON_CreateObject();
        if (!g)
            break;
        cJSON_AddItemToArray(arr, g);
        cJSON_AddStringToObject(g, "class", nic_class_name(w[i].nic.cls));
        cJSON_AddStringToObject(g, "fabric", w[i].nic.fabric);
        cJSON_AddNumberToObject(g, "gbps", w[i].nic.gbps);
        cJSON_AddNumberToObject(g, "workers", 1);
    }
    return arr;
}

/* ---------------------------------------------------------------- spec.elastic */

/* status.elastic: the workers planned, lost (their pods) and re-plans so far, and the global
 * batch the plan keeps, into st. */
static void elastic_status(struct opjob *j, cJSON *st)
{
    if (!tj_is_elastic(&j->tj.spec))
        return;
    int n = j->tj.spec.workers, lost = 0, replans = 0;
    int *state = calloc((size_t)n, sizeof *state);
    cJSON *el = cJSON_AddObjectToObject(st, "elastic");
    if (!state || !el || coord_job_workers(j->co->c, j->key, state, n) < 0 ||
        coord_job_elastic(j->co->c, j->key, &lost, &replans) < 0) {
        free(state);
        return;
    }
    cJSON *names = cJSON_AddArrayToObject(el, "lostWorkers");
    for (int i = 0; names && i < n; i++)
        if (state[i] < 0) {
            char pod[300];
            tj_worker_pod_name(pod, sizeof pod, j->name, i);
            cJSON_AddItemToArray(names, cJSON_CreateString(pod));
        }
    cJSON_AddNumberToObject(el, "workersPlanned", n - lost);
    cJSON_AddNumberToObject(el, "workersLost", lost);
    cJSON_AddNumberToObject(el, "replans", replans);
    if (j->cp.global_seqs > 0)
        cJSON_AddNumberToObject(el, "globalBatch", j->cp.global_seqs);
    free(state);
}

/* A worker counted as lost (its pod deleted: the controller makes a new one that waits for
 * capacity when scaleUp) or back. The re-plan that follows says old shape -> new shape. */
static void on_elastic(void *user, const struct coord_worker *w, int lost, const char *why)
{
    struct opjob *j = user;
    snprintf(j->elastic_why, sizeof j->elastic_why, "worker %d (%s) %s: %s", w->index, w->pod,
             lost ? "lost" : "back", why);
    event(j, lost ? "Warning" : "Normal", lost ? "WorkerLost" : "WorkerBack", j->elastic_why);
    herr e = {0};
    if (lost && controller_delete_pod(j->co->ctl, j->ns, w->pod, &e))
        log_warn("job %s: deleting the lost worker's pod %s: %s", j->key, w->pod, e.msg);
    cJSON *st = cJSON_CreateObject();
    if (st)
        elastic_status(j, st);
    patch_status(j, st);
    j->waiting_said = 0;
}

/* The workers left cannot hold the model: the job waits for a lost one (Elastic False). */
static void on_waiting(void *user, const char *reason, const char *msg)
{
    struct opjob *j = user;
    event(j, "Warning", reason, msg);
    condition(j, "Elastic", 0, reason, msg);
}

/* Why worker i's pod keeps it away for good, or NULL when nothing does: the pod unschedulable,
 * its node NotReady or gone, the pod itself gone. */
static const char *absence_cause(struct opjob *j, const cJSON *pods, int i, char *buf, size_t cap)
{
    char name[300];
    tj_worker_pod_name(name, sizeof name, j->name, i);
    const cJSON *pod = NULL, *p;
    cJSON_ArrayForEach(p, pods) {
        const char *pn = json_str_at(p, "metadata.name");
        if (pn && !strcmp(pn, name) && !json_at(p, "metadata.deletionTimestamp"))
            pod = p;
    }
    if (!pod) {
        snprintf(buf, cap, "its pod %s is gone", name);
        return buf;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, json_at(pod, "status.conditions")) {
        const char *t = json_str_at(c, "type"), *r = json_str_at(c, "reason");
        if (t && !strcmp(t, "PodScheduled") && r && !strcmp(r, "Unschedulable")) {
            const char *m = json_str_at(c, "message");
            snprintf(buf, cap, "its pod %s is unschedulable (%s)", name, m ? m : "no reason given");
            return buf;
        }
    }
    const char *node = json_str_at(pod, "spec.nodeName");
    if (!node)
        return NULL;
    herr e = {0};
    int ns = controller_node_state(j->co->ctl, node, &e);
    if (ns == 2)
        snprintf(buf, cap, "its node %s is gone", node);
    else if (ns == 0)
        snprintf(buf, cap, "its node %s is NotReady", node);
    else
        return NULL;
    return buf;
}

/* An elastic job gathering without some of its workers: each absent one whose pod stays
 * unschedulable, or whose node stays NotReady or gone, for replaceTimeoutSeconds counts as
 * lost; below minWorkers the job waits for it, with a condition that says so. */
static void elastic_watch(struct opjob *j)
{
    const struct tj_spec *s = &j->tj.spec;
    enum coord_job_state cs;
    if (!tj_is_elastic(s) || coord_job_state(j->co->c, j->key, &cs) ||
        (cs != COORD_GATHERING && cs != COORD_RESTARTING))
        return;
    int n = s->workers;
    if (!j->absent_since && !(j->absent_since = calloc((size_t)n, sizeof *j->absent_since)))
        return;
    int *state = calloc((size_t)n, sizeof *state);
    if (!state || coord_job_workers(j->co->c, j->key, state, n) < 0) {
        free(state);
        return;
    }
    cJSON *pods = NULL;
    double t = clock_mono_s();
    for (int i = 0; i < n; i++) {
        if (state[i] != 0) {
            j->absent_since[i] = 0;
            continue;
        }
        if (!pods && !(pods = controller_job_pods(j->co->ctl, j->ns, j->name)))
            break;
        char cause[600];
        if (!absence_cause(j, pods, i, cause, sizeof cause)) {
            j->absent_since[i] = 0;
            continue;
        }
        if (j->absent_since[i] == 0)
            j->absent_since[i] = t;
        double gone = t - j->absent_since[i];
        if (gone < s->elastic.replace_timeout_seconds)
            continue;
        char why[800];
        snprintf(why, sizeof why, "%s for %.0f s (spec.elastic.replaceTimeoutSeconds %d)", cause,
                 gone, s->elastic.replace_timeout_seconds);
        herr e = {0};
        int rc = coord_job_lose_worker(j->co->c, j->key, i, why, &e);
        if (rc == 1 && !j->waiting_said) {
            int lost = 0, replans = 0;
            coord_job_elastic(j->co->c, j->key, &lost, &replans);
            char msg[1100];
            snprintf(msg, sizeof msg, "waiting for worker %d: %s; without it %d workers would "
                     "remain, fewer than spec.elastic.minWorkers %d", i, why, n - lost - 1,
                     s->elastic.min_workers);
            condition(j, "Elastic", 0, "BelowMinWorkers", msg);
            event(j, "Warning", "BelowMinWorkers", msg);
            j->waiting_said = 1;
        } else if (rc < 0) {
            log_warn("job %s: %s", j->key, e.msg);
        }
    }
    cJSON_Delete(pods);
    free(state);
}

static int on_plan(void *user, const struct coord_worker *w, int n, struct plan_assignment *a,
                   herr *e)
{
    struct opjob *j = user;
    if (coord_plan_hook(&j->cp, w, n, a, e)) {
        char msg[1100];
        snprintf(msg, sizeof msg, "planning failed: %s", e->msg);
        event(j, "Warning", "PlanFailed", msg);
        condition(j, "Planned", 0, "PlanFailed", msg);
        return -1;
    }
    const struct plan *p = &j->cp.plan;
    coord_metrics_plan(j->co->metrics, j->ns, j->name, p->step_s, p->n_socket_groups, p->n_stages);
    cJSON *st = cJSON_CreateObject();
    if (st) {
        cJSON_AddStringToObject(st, "phase", "Planning");
        cJSON *ng = nic_groups_json(w, n), *pj = coord_plan_status_json(p, w);
        coord_history_plan(j->co->history, j->ns, j->name, pj);
        if (ng)
            cJSON_AddItemToObject(st, "nicGroups", ng);
        if (pj)
            cJSON_AddItemToObject(st, "plan", pj);
        elastic_status(j, st);
    }
    patch_status(j, st);
    if (tj_is_elastic(&j->tj.spec)) {
        char msg[1400];
        int replanned = j->cp.prev_shape[0] && strcmp(j->cp.prev_shape, j->cp.shape);
        if (replanned) {
            snprintf(msg, sizeof msg, "%s -> %s: %s%s%s", j->cp.prev_shape, j->cp.shape,
                     j->elastic_why[0] ? j->elastic_why : "the workers changed",
                     j->cp.batch_note[0] ? "; " : "", j->cp.batch_note);
            event(j, "Warning", "Replanned", msg);
        }
        snprintf(msg, sizeof msg, "%s%s%s", j->cp.shape, j->cp.batch_note[0] ? "; " : "",
                 j->cp.batch_note);
        condition(j, "Elastic", 1, n < j->tj.spec.workers ? "Replanned" : "AllWorkers", msg);
        j->elastic_why[0] = '\0';
    }
    for (int r = 0; r < p->n_ranks; r++) {
        if (p->ranks[r].local != 0)
            continue;
        char stage[16], dp[16];
        snprintf(stage, sizeof stage, "%d", p->ranks[r].stage);
        snprintf(dp, sizeof dp, "%d", p->ranks[r].dp_rank);
        cJSON *l = cJSON_CreateObject();
        if (l && cJSON_AddStringToObject(l, "holmes.dev/stage", stage) &&
            cJSON_AddStringToObject(l, "holmes.dev/dp-rank", dp))
            patch_labels(j, w[p->ranks[r].worker].pod, l);
        else
            cJSON_Delete(l);
    }
    char msg[256];
    snprintf(msg, sizeof msg, "planned %d stages x %d replicas (%s policy), predicted %.3f s/step",
             p->n_stages, p->data, policy_name(p->policy), p->step_s);
    event(j, "Normal", "Planned", msg);
    char gang[96];
    snprintf(gang, sizeof gang, "all %d workers said hello", n);
    condition(j, "GangReady", 1, "AllWorkersConnected", gang);
    condition(j, "Planned", 1, "Planned", msg);
    return 0;
}

static void on_progress(void *user, const struct coord_progress *pr)
{
    struct opjob *j = user;
    const struct tj_spec *s = &j->tj.spec;
    double devices = (double)tj_world_size(s); /* workers x tj_ranks_per_worker */
    double tflops = 6.0 * (double)tj_model_params(&s->model) * pr->tokens_per_s / devices / 1e12;
    coord_metrics_progress(j->co->metrics, j->ns, j->name, pr->step_ms / 1000.0, pr->tokens_per_s,
                           tflops);
    char now[32];
    rfc3339_now(now, sizeof now);
    cJSON *st = cJSON_CreateObject();
    cJSON *p = st ? cJSON_AddObjectToObject(st, "progress") : NULL;
    if (!p) {
        cJSON_Delete(st);
        return;
    }
    cJSON_AddNumberToObject(p, "step", (double)pr->step);
    if (pr->has_loss) { /* 4 decimals: what `kubectl get tj` shows in its Loss column */
        cJSON_AddNumberToObject(p, "loss", round(pr->loss * 1e4) / 1e4);
        coord_metrics_loss(j->co->metrics, j->ns, j->name, pr->loss);
    }
    if (pr->has_norm) { /* 4 significant digits: a norm spans orders of magnitude */
        char g[32];
        snprintf(g, sizeof g, "%.4g", pr->grad_norm);
        cJSON_AddNumberToObject(p, "gradNorm", strtod(g, NULL));
        coord_metrics_grad_norm(j->co->metrics, j->ns, j->name, pr->grad_norm);
    }
    cJSON_AddNumberToObject(p, "tokensPerSecond", pr->tokens_per_s);
    cJSON_AddNumberToObject(p, "tflopsPerGpu", tflops);
    if (pr->eta_s >= 0)
        cJSON_AddNumberToObject(p, "etaSeconds", pr->eta_s);
    if (pr->step_ms > 0)
        cJSON_AddNumberToObject(p, "stepSeconds", pr->step_ms / 1000.0);
    cJSON_AddStringToObject(p, "updated", now);
    if (pr->eval_step > 0) { /* training.eval: the newest held-out loss */
        cJSON *ev = cJSON_AddObjectToObject(st, "evalLoss");
        if (ev) {
            cJSON_AddNumberToObject(ev, "step", (double)pr->eval_step);
            cJSON_AddNumberToObject(ev, "loss", round(pr->eval_loss * 1e4) / 1e4);
        }
        coord_metrics_eval(j->co->metrics, j->ns, j->name, pr->eval_loss);
    }
    if (pr->skipped_steps > 0) { /* training.maxNonFiniteSteps: how many, the newest */
        cJSON *sk = cJSON_AddObjectToObject(st, "skippedSteps");
        if (sk) {
            cJSON_AddNumberToObject(sk, "count", (double)pr->skipped_steps);
            cJSON_AddNumberToObject(sk, "lastStep", (double)pr->skipped_last);
        }
        coord_metrics_skipped(j->co->metrics, j->ns, j->name, pr->skipped_steps);
    }
    if (j->cp.planned && j->cp.plan.step_s > 0 && pr->step_ms > 0) {
        char msg[200];
        double measured = pr->step_ms / 1000.0, predicted = j->cp.plan.step_s;
        snprintf(msg, sizeof msg, "step time %.3f s measured vs %.3f s predicted (%+.0f%%)",
                 measured, predicted, (measured / predicted - 1.0) * 100.0);
        cJSON_AddStringToObject(st, "message", msg);
    }
    patch_status(j, st);
}

/* A worker's step records: its stage's last compute, communication and bubble times. */
static void on_steps(void *user, const struct coord_worker *w, const struct proto_progress *p)
{
    struct opjob *j = user;
    (void)w;
    if (p->nsteps < 1)
        return;
    coord_history_steps(j->co->history, j->ns, j->name, p);
    const struct proto_step *s = &p->steps[p->nsteps - 1];
    coord_metrics_stage(j->co->metrics, j->ns, j->name, p->stage, s->compute_ms / 1000.0,
                        s->comm_ms / 1000.0, s->bubble_ms / 1000.0);
}

static void on_notice(void *user, const char *reason, const char *msg)
{
    struct opjob *j = user;
    event(j, "Warning", reason, msg);
    condition(j, reason, 1, reason, msg);
}

/* status.restarts: the coordinator's one counter (charged restarts only). */
static void status_restarts(struct opjob *j)
{
    int n = coord_job_restarts(j->co->c, j->key);
    if (n <= j->restarts_written)
        return;
    char now[32];
    rfc3339_now(now, sizeof now);
    cJSON *st = cJSON_CreateObject();
    if (st && cJSON_AddNumberToObject(st, "restarts", n) &&
        cJSON_AddStringToObject(st, "lastRestartTime", now)) {
        j->restarts_written = n;
        coord_metrics_restarts(j->co->metrics, j->ns, j->name, n);
        coord_history_restarts(j->co->history, j->ns, j->name, n);
        patch_status(j, st);
    } else {
        cJSON_Delete(st);
    }
}

/* The job failed for good (restarts spent, or a failure a restart would repeat). */
static void status_failed(struct opjob *j, const char *msg)
{
    char now[32];
    rfc3339_now(now, sizeof now);
    cJSON *st = cJSON_CreateObject();
    if (st && cJSON_AddStringToObject(st, "phase", "Failed") &&
        cJSON_AddStringToObject(st, "message", msg) &&
        cJSON_AddStringToObject(st, "completionTime", now))
        patch_status(j, st);
    else
        cJSON_Delete(st);
    const char *reason = strstr(msg, "no restarts left") ? "RestartLimitExceeded"
                         : strstr(msg, "not retried")    ? "NotRetried"
                                                         : "JobFailed";
    condition(j, "Failed", 1, reason, msg);
}

static void on_event(void *user, enum coord_job_state s, const char *msg)
{
    struct opjob *j = user;
    const char *type = "Normal", *reason = coord_state_name(s);
    if (strstr(msg, "gang timeout")) {
        type = "Warning";
        reason = "GangTimeout";
    } else if (strncmp(msg, "refused", 7) == 0) {
        double t = clock_mono_s();
        if (t - j->last_refusal_event < 10)
            return;
        j->last_refusal_event = t;
        type = "Warning";
        reason = "ConnectionRefused";
    } else if (s == COORD_RESTARTING || s == COORD_FAILED) {
        type = "Warning";
    }
    event(j, type, reason, msg);
    if (s == COORD_RUNNING && strstr(msg, "Running:")) {
        cJSON *st = cJSON_CreateObject();
        if (st && cJSON_AddStringToObject(st, "phase", "Running"))
            patch_status(j, st);
        else
            cJSON_Delete(st);
        condition(j, "Running", 1, "Running", msg);
    }
    /* Conditions as well as Events and status.message: the gang's and the run's state. */
    if (strstr(msg, "gang timeout"))
        condition(j, "GangReady", 0, "GangTimeout", msg);
    else if (s == COORD_RESTARTING)
        condition(j, "Running", 0, "Restarting", msg);
    else if (s == COORD_FAILED)
        condition(j, "Running", 0, "CoordinatorFailed", msg);
    if (s == COORD_RESTARTING) {
        coord_history_restarting(j->co->history, j->ns, j->name);
        status_restarts(j);
    }
    if (s == COORD_FAILED) {
        status_failed(j, msg);
    } else if (strstr(msg, "gang timeout")) {
        cJSON *st = cJSON_CreateObject();
        if (st && cJSON_AddStringToObject(st, "message", msg))
            patch_status(j, st);
        else
            cJSON_Delete(st);
    }
}

/* ---------------------------------------------------------------- jobs */

static void opjob_free(struct opjob *j)
{
    free(j->absent_since);
    coord_plan_free(&j->cp);
    tj_job_free(&j->tj);
    free(j);
}

static int resolve(void *user, struct coordinator *c, const char *key)
{
    struct coord_operator *co = user;
    const char *slash = strchr(key, '/');
    if (!slash || slash == key || (size_t)(slash - key) >= TJ_NAME_MAX ||
        strlen(slash + 1) >= TJ_NAME_MAX || !slash[1])
        return -1;
    struct opjob *j = calloc(1, sizeof *j);
    if (!j)
        return -1;
    j->co = co;
    snprintf(j->key, sizeof j->key, "%s", key);
    snprintf(j->ns, sizeof j->ns, "%.*s", (int)(slash - key), key);
    snprintf(j->name, sizeof j->name, "%s", slash + 1);
    cJSON *obj = controller_get_job(co->ctl, j->ns, j->name);
    char *token = obj ? controller_job_token(co->ctl, j->ns, j->name) : NULL;
    static struct tj_errors errs; /* only this thread resolves */
    int rc = -1;
    char (*pods)[128] = NULL;
    const char **podp = NULL;
    if (!obj || !token || tj_job_from_json(obj, &j->tj, &errs))
        goto out;
    const char *phase = json_str_at(obj, "status.phase");
    if (phase && (!strcmp(phase, "Failed") || !strcmp(phase, "Succeeded"))) {
        rc = 1; /* over: a worker started again after the end hears so, nothing restarts */
        goto out;
    }
    int n = j->tj.spec.workers;
    pods = calloc((size_t)n, sizeof *pods);
    podp = calloc((size_t)n, sizeof *podp);
    if (!pods || !podp)
        goto out;
    for (int i = 0; i < n; i++) {
        tj_worker_pod_name(pods[i], sizeof pods[i], j->name, i);
        podp[i] = pods[i];
    }
    j->cp.job = &j->tj;
    /* spec.elastic: the workers status says were lost stay lost for a new coordinator, and the
     * global batch the re-plans keep is the one status recorded */
    int *lost = calloc((size_t)n, sizeof *lost), nlost = 0;
    if (!lost)
        goto out;
    const cJSON *it;
    cJSON_ArrayForEach(it, json_at(obj, "status.elastic.lostWorkers"))
        for (int i = 0; cJSON_IsString(it) && i < n; i++)
            if (!strcmp(pods[i], it->valuestring) && nlost < n)
                lost[nlost++] = i;
    int B = j->tj.spec.par.micro_batch_size;
    if (tj_is_elastic(&j->tj.spec) && nlost > 0 && B > 0)
        j->cp.global_mb = (int)json_num_at(obj, "status.elastic.globalBatch", 0) / B;
    struct coord_job_spec js = {
        .name = j->key, .token = token, .workers = n, .pods = podp,
        .gang_timeout_ms = j->tj.spec.gang_timeout_seconds * 1000,
        .max_restarts = j->tj.spec.restart.max_restarts,
        .restarts_used = (int)json_num_at(obj, "status.restarts", 0),
        .restart_backoff_ms = j->tj.spec.restart.backoff_seconds * 1000,
        .total_steps = j->tj.spec.training.steps,
        .skipped_steps = (long)json_num_at(obj, "status.skippedSteps.count", 0),
        .skipped_last = (long)json_num_at(obj, "status.skippedSteps.lastStep", 0),
        .progress_interval_ms = co->status_interval_ms,
        .min_workers = tj_is_elastic(&j->tj.spec) ? j->tj.spec.elastic.min_workers : 0,
        .scale_up = j->tj.spec.elastic.scale_up, .lost = lost, .nlost = nlost,
        .hooks = {.plan = on_plan, .on_hello = on_hello, .on_steps = on_steps,
                  .on_progress = on_progress, .on_event = on_event, .on_notice = on_notice,
                  .on_waiting = on_waiting,
                  .on_elastic = on_elastic},
        .user = j,
    };
    herr e = {0};
    int added = coord_add_job(c, &js, &e);
    free(lost);
    if (added) {
        log_warn("job %s: %s", key, e.msg);
        goto out;
    }
    j->restarts_written = js.restarts_used;
    coord_metrics_restarts(co->metrics, j->ns, j->name, js.restarts_used);
    if (js.skipped_steps > 0)
        coord_metrics_skipped(co->metrics, j->ns, j->name, js.skipped_steps);
    coord_history_restarts(co->history, j->ns, j->name, js.restarts_used);
    log_info("coordinator: job %s registered (%d workers, %d of %d restarts used)", key, n,
             js.restarts_used, js.max_restarts);
    j->next = co->jobs;
    co->jobs = j;
    j = NULL;
    rc = 0;
out:
    free(pods);
    free(podp);
    if (token) {
        memset(token, 0, strlen(token));
        free(token);
    }
    cJSON_Delete(obj);
    if (j)
        opjob_free(j);
    return rc;
}

/* Forgets jobs whose TrainingJob is gone, and failed jobs a few seconds after their status says
 * Failed, whoever failed them (a worker that says hello after that hears the job is over:
 * resolve). */
static void sweep(struct coord_operator *co)
{
    struct opjob **pj = &co->jobs;
    double t = clock_mono_s();
    while (*pj) {
        struct opjob *j = *pj;
        cJSON *obj = controller_get_job(co->ctl, j->ns, j->name);
        int gone = obj == NULL;
        const char *ph = json_str_at(obj, "status.phase");
        int over = ph && !strcmp(ph, "Failed");
        if (over && j->failed_seen <= 0)
            j->failed_seen = t;
        int failed = over && t - j->failed_seen > 5;
        cJSON_Delete(obj);
        if (!gone && !failed)
            elastic_watch(j);
        if (gone || failed) {
            coord_remove_job(co->c, j->key);
            *pj = j->next;
            log_info("coordinator: job %s forgotten (%s)", j->key, gone ? "deleted" : "failed");
            coord_metrics_forget(co->metrics, j->ns, j->name);
            if (gone) /* a failed job's page keeps its curves and events */
                coord_history_forget(co->history, j->ns, j->name);
            opjob_free(j);
            continue;
        }
        pj = &j->next;
    }
}

/* A renewed certificate from the keeper: new connections get it (on this, the serving thread). */
static void renew_tls(struct coord_operator *co)
{
    struct coord_tls t = {0};
    if (!co->tls || tls_keeper_take(co->tls, &co->tls_gen, &t) != 1)
        return;
    herr e = {0};
    if (coord_tls_reload(co->c, t.tls_crt, t.tls_key, &e) != 0)
        log_warn("coordinator: the renewed certificate cannot be used (keeping the old): %s", e.msg);
    else
        log_info("coordinator: serving the renewed certificate (expires %ld)",
                 (long)coord_tls_not_after(t.tls_crt));
    coord_tls_free(&t);
}

static void *serve(void *arg)
{
    struct coord_operator *co = arg;
    double last_sweep = clock_mono_s();
    while (!co->quit) {
        coord_service(co->c);
        if (clock_mono_s() - last_sweep > 2) {
            sweep(co);
            renew_tls(co);
            last_sweep = clock_mono_s();
        }
    }
    return NULL;
}

struct coord_operator *coord_operator_start(struct controller *ctl,
                                            const struct coord_operator_opts *o, herr *e)
{
    struct coord_operator *co = calloc(1, sizeof *co);
    if (!co) {
        herr_set(e, "coordinator: out of memory");
        return NULL;
    }
    co->ctl = ctl;
    co->metrics = o->metrics;
    co->history = o->history;
    co->status_interval_ms = o->status_interval_ms > 0 ? o->status_interval_ms : 5000;
    co->tls = o->tls;
    struct coord_tls t = {0};
    if (co->tls && tls_keeper_take(co->tls, &co->tls_gen, &t) != 1) {
        free(co);
        herr_set(e, "coordinator: no TLS certificate to serve with");
        return NULL;
    }
    struct coord_options copt = {.bind = o->bind, .port = o->port, .tls_cert_pem = t.tls_crt,
                                 .tls_key_pem = t.tls_key, .resolve_job = resolve, .user = co};
    int rc = coord_create(&co->c, &copt, e);
    coord_tls_free(&t);
    if (rc) {
        free(co);
        return NULL;
    }
    if (pthread_create(&co->th, NULL, serve, co) != 0) {
        coord_destroy(co->c);
        free(co);
        herr_set(e, "coordinator: cannot start its thread");
        return NULL;
    }
    return co;
}

int coord_operator_port(const struct coord_operator *co)
{
    return coord_port(co->c);
}

void coord_operator_stop(struct coord_operator *co)
{
    if (!co)
        return;
    co->quit = 1;
    pthread_join(co->th, NULL);
    coord_destroy(co->c);
    while (co->jobs) {
        struct opjob *j = co->jobs;
        co->jobs = j->next;
        opjob_free(j);
    }
    free(co);
}
