#include "coord_history.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "error.h"

struct point {
    long step;
    double time;               /* Unix seconds of the first report of the step */
    int nloss;                 /* reports with a loss merged into loss_sum */
    double loss_sum;
    int nrate;
    double tokens_sum;         /* each report is the global batch's rate: averaged */
    double step_s;             /* the slowest report */
    int has_eval;              /* training.eval followed the step: its held-out loss */
    double eval_loss;
    int has_norm;              /* the global gradient norm before clipping (one value) */
    double grad_norm;
};

struct stage_times {
    int set;
    long step;
    double step_s, compute_s, comm_s, bubble_s;
};

struct condition {
    char type[64], reason[64], message[512], time[32];
    int ok;
};

struct event {
    char time[32], type[16], reason[64], message[512];
};

struct job {
    struct job *next;
    char ns[64], name[160];
    char phase[32], message[512];
    int restarts;
    cJSON *plan;
    struct condition cond[COORD_HISTORY_CONDITIONS];
    int ncond;
    struct event ev[COORD_HISTORY_EVENTS];
    int ev_next, nev;          /* ring: next slot to write, events held */
    struct point *pts;         /* ring of h->cap points */
    int pt_head, npts;         /* oldest point, points held */
    int replay;                /* restarting: the next steps are trained again */
    struct stage_times stage[PROTO_MAX_STAGES];
};

struct coord_history {
    pthread_mutex_t mu;
    int cap;
    struct job *jobs;
};

struct coord_history *coord_history_new(int points)
{
    struct coord_history *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    if (pthread_mutex_init(&h->mu, NULL) != 0) {
        free(h);
        return NULL;
    }
    h->cap = points > 0 ? points : COORD_HISTORY_POINTS;
    return h;
}

static void job_free(struct job *j)
{
    cJSON_Delete(j->plan);
    free(j->pts);
    free(j);
}

void coord_history_free(struct coord_history *h)
{
    if (!h)
        return;
    while (h->jobs) {
        struct job *j = h->jobs;
        h->jobs = j->next;
        job_free(j);
    }
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* The job, added at the end when new; with h->mu held. NULL out of memory. */
static struct job *find(struct coord_history *h, const char *ns, const char *name)
{
    struct job **p = &h->jobs;
    for (; *p; p = &(*p)->next)
        if (!strcmp((*p)->ns, ns) && !strcmp((*p)->name, name))
            return *p;
    struct job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->pts = calloc((size_t)h->cap, sizeof *j->pts);
    if (!j->pts) {
        free(j);
        return NULL;
    }
    snprintf(j->ns, sizeof j->ns, "%s", ns);
    snprintf(j->name, sizeof j->name, "%s", name);
    *p = j;
    return j;
}

/* The job with h->mu held (the caller unlocks), or NULL with nothing held. */
static struct job *lock_job(struct coord_history *h, const char *ns, const char *name)
{
    if (!h)
        return NULL;
    pthread_mutex_lock(&h->mu);
    struct job *j = find(h, ns ? ns : "", name);
    if (!j)
        pthread_mutex_unlock(&h->mu);
    return j;
}

static void now_rfc3339(char *buf, size_t cap)
{
    time_t t = (time_t)clock_wall_s();
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void coord_history_phase(struct coord_history *h, const char *ns, const char *job,
                         const char *phase, const char *message)
{
    struct job *j = lock_job(h, ns, job);
    if (!j)
        return;
    snprintf(j->phase, sizeof j->phase, "%s", phase ? phase : "");
    if (message) {
        snprintf(j->message, sizeof j->message, "%s", message);
        herr_clean(j->message); /* cut inside a character: well-formed UTF-8 still */
    }
    pthread_mutex_unlock(&h->mu);
}

void coord_history_condition(struct coord_history *h, const char *ns, const char *job,
                             const char *type, int ok, const char *reason, const char *message)
{
    struct job *j = lock_job(h, ns, job);
    if (!j)
        return;
    int i = 0;
    while (i < j->ncond && strcmp(j->cond[i].type, type) != 0)
        i++;
    if (i == j->ncond && j->ncond < COORD_HISTORY_CONDITIONS)
        j->ncond++;
    if (i < j->ncond) {
        struct condition *c = &j->cond[i];
        if (c->ok != ok || !c->time[0]) /* the time of the last transition */
            now_rfc3339(c->time, sizeof c->time);
        snprintf(c->type, sizeof c->type, "%s", type);
        snprintf(c->reason, sizeof c->reason, "%s", reason ? reason : "");
        snprintf(c->message, sizeof c->message, "%s", message ? message : "");
        herr_clean(c->message);
        c->ok = ok;
    }
    pthread_mutex_unlock(&h->mu);
}

void coord_history_event(struct coord_history *h, const char *ns, const char *job,
                         const char *type, const char *reason, const char *message)
{
    struct job *j = lock_job(h, ns, job);
    if (!j)
        return;
    struct event *ev = &j->ev[j->ev_next];
    now_rfc3339(ev->time, sizeof ev->time);
    snprintf(ev->type, sizeof ev->type, "%s", type ? type : "Normal");
    snprintf(ev->reason, sizeof ev->reason, "%s", reason ? reason : "");
    snprintf(ev->message, sizeof ev->message, "%s", message ? message : "");
    herr_clean(ev->message);
    j->ev_next = (j->ev_next + 1) % COORD_HISTORY_EVENTS;
    if (j->nev < COORD_HISTORY_EVENTS)
        j->nev++;
    pthread_mutex_unlock(&h->mu);
}

void coord_history_plan(struct coord_history *h, const char *ns, const char *job,
                        const cJSON *plan)
{
    cJSON *copy = plan ? cJSON_Duplicate(plan, 1) : NULL;
    struct job *j = lock_job(h, ns, job);
    if (!j) {
        cJSON_Delete(copy);
        return;
    }
    cJSON_Delete(j->plan);
    j->plan = copy;
    memset(j->stage, 0, sizeof j->stage); /* a new plan: the stages are new */
    pthread_mutex_unlock(&h->mu);
}

void coord_history_restarts(struct coord_history *h, const char *ns, const char *job,
                            int restarts)
{
    struct job *j = lock_job(h, ns, job);
    if (j) {
        j->restarts = restarts;
        pthread_mutex_unlock(&h->mu);
    }
}

void coord_history_restarting(struct coord_history *h, const char *ns, const char *job)
{
    struct job *j = lock_job(h, ns, job);
    if (j) {
        j->replay = 1;
        pthread_mutex_unlock(&h->mu);
    }
}

/* The i-th point held, oldest first. */
static struct point *point_at(const struct coord_history *h, struct job *j, int i)
{
    return &j->pts[(j->pt_head + i) % h->cap];
}

/* The point of step s: the one held (the replicas of a stage report each step), else a new
 * one; after a restart the first report drops the points of the steps trained again. */
static struct point *point_for(const struct coord_history *h, struct job *j, long s)
{
    if (j->replay) {
        while (j->npts > 0 && point_at(h, j, j->npts - 1)->step >= s)
            j->npts--;
        j->replay = 0;
    }
    for (int i = j->npts - 1; i >= 0; i--) {
        struct point *p = point_at(h, j, i);
        if (p->step == s)
            return p;
        if (p->step < s)
            break;
    }
    if (j->npts > 0 && point_at(h, j, j->npts - 1)->step > s)
        return NULL; /* older than the points held and not among them: not drawn */
    if (j->npts == h->cap) { /* full: the oldest goes */
        j->pt_head = (j->pt_head + 1) % h->cap;
        j->npts--;
    }
    struct point *p = point_at(h, j, j->npts++);
    *p = (struct point){.step = s, .time = clock_wall_s()};
    return p;
}

void coord_history_steps(struct coord_history *h, const char *ns, const char *job,
                         const struct proto_progress *p)
{
    if (!p || p->nsteps < 1)
        return;
    struct job *j = lock_job(h, ns, job);
    if (!j)
        return;
    for (int i = 0; i < p->nsteps; i++) {
        const struct proto_step *s = &p->steps[i];
        if (!s->has_loss)
            continue; /* the stage that reports loss makes the points */
        struct point *pt = point_for(h, j, s->step);
        if (!pt)
            continue;
        if (s->has_eval) { /* already the mean over the set: every replica reports the same */
            pt->has_eval = 1;
            pt->eval_loss = s->eval_loss;
        }
        if (s->has_norm) { /* global: every replica reports the same */
            pt->has_norm = 1;
            pt->grad_norm = s->grad_norm;
        }
        pt->nloss++;
        pt->loss_sum += s->loss;
        pt->nrate++;
        pt->tokens_sum += s->tokens_per_s;
        if (s->step_ms / 1e3 > pt->step_s)
            pt->step_s = s->step_ms / 1e3;
    }
    if (p->stage >= 0 && p->stage < PROTO_MAX_STAGES) {
        const struct proto_step *s = &p->steps[p->nsteps - 1];
        j->stage[p->stage] = (struct stage_times){.set = 1, .step = s->step,
                                                  .step_s = s->step_ms / 1e3,
                                                  .compute_s = s->compute_ms / 1e3,
                                                  .comm_s = s->comm_ms / 1e3,
                                                  .bubble_s = s->bubble_ms / 1e3};
    }
    pthread_mutex_unlock(&h->mu);
}

void coord_history_forget(struct coord_history *h, const char *ns, const char *job)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    for (struct job **p = &h->jobs; *p; p = &(*p)->next)
        if (!strcmp((*p)->ns, ns ? ns : "") && !strcmp((*p)->name, job)) {
            struct job *j = *p;
            *p = j->next;
            job_free(j);
            break;
        }
    pthread_mutex_unlock(&h->mu);
}

/* ---------------------------------------------------------------- JSON */

static int add_num(cJSON *o, const char *k, double v) { return cJSON_AddNumberToObject(o, k, v) != NULL; }
static int add_str(cJSON *o, const char *k, const char *v) { return cJSON_AddStringToObject(o, k, v) != NULL; }

static cJSON *conditions_json(const struct job *j)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < j->ncond; i++) {
        const struct condition *c = &j->cond[i];
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(a, o) || !add_str(o, "type", c->type) ||
            !add_str(o, "status", c->ok ? "True" : "False") || !add_str(o, "reason", c->reason) ||
            !add_str(o, "message", c->message) || !add_str(o, "lastTransitionTime", c->time)) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

static cJSON *events_json(const struct job *j)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < j->nev; i++) {
        int k = (j->ev_next - j->nev + i + COORD_HISTORY_EVENTS) % COORD_HISTORY_EVENTS;
        const struct event *ev = &j->ev[k];
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(a, o) || !add_str(o, "time", ev->time) ||
            !add_str(o, "type", ev->type) || !add_str(o, "reason", ev->reason) ||
            !add_str(o, "message", ev->message)) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

/* Columns, not rows: one array per series (the page draws them as they are). */
static cJSON *points_json(const struct coord_history *h, struct job *j)
{
    static const char *const keys[] = {"step", "time", "loss", "tokensPerSecond", "stepSeconds",
                                       "evalLoss", "gradNorm"};
    enum { NCOL = sizeof keys / sizeof keys[0] };
    cJSON *o = cJSON_CreateObject(), *col[NCOL];
    for (int k = 0; o && k < NCOL; k++)
        if (!(col[k] = cJSON_AddArrayToObject(o, keys[k]))) {
            cJSON_Delete(o);
            return NULL;
        }
    for (int i = 0; o && i < j->npts; i++) {
        const struct point *p = point_at(h, j, i);
        cJSON *v[NCOL] = {cJSON_CreateNumber((double)p->step), cJSON_CreateNumber(p->time),
                       p->nloss ? cJSON_CreateNumber(p->loss_sum / p->nloss) : cJSON_CreateNull(),
                       cJSON_CreateNumber(p->nrate ? p->tokens_sum / p->nrate : 0),
                       cJSON_CreateNumber(p->step_s),
                       p->has_eval ? cJSON_CreateNumber(p->eval_loss) : cJSON_CreateNull(),
                       p->has_norm ? cJSON_CreateNumber(p->grad_norm) : cJSON_CreateNull()};
        for (int k = 0; k < NCOL; k++)
            if (!v[k] || !cJSON_AddItemToArray(col[k], v[k])) {
                for (int m = k; m < NCOL; m++)
                    cJSON_Delete(v[m]);
                cJSON_Delete(o);
                return NULL;
            }
    }
    return o;
}

static cJSON *stages_json(const struct job *j)
{
    cJSON *a = cJSON_CreateArray();
    for (int s = 0; a && s < PROTO_MAX_STAGES; s++) {
        const struct stage_times *t = &j->stage[s];
        if (!t->set)
            continue;
        double other = t->step_s - t->compute_s - t->comm_s - t->bubble_s;
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(a, o) || !add_num(o, "stage", s) ||
            !add_num(o, "step", (double)t->step) || !add_num(o, "stepSeconds", t->step_s) ||
            !add_num(o, "computeSeconds", t->compute_s) || !add_num(o, "commSeconds", t->comm_s) ||
            !add_num(o, "bubbleSeconds", t->bubble_s) ||
            !add_num(o, "otherSeconds", other > 0 ? other : 0)) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

static cJSON *job_json(const struct coord_history *h, struct job *j)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !add_str(o, "namespace", j->ns) || !add_str(o, "name", j->name) ||
        !add_str(o, "phase", j->phase[0] ? j->phase : "Pending") ||
        !add_str(o, "message", j->message) || !add_num(o, "restarts", j->restarts) ||
        !add_num(o, "pointsKept", h->cap))
        goto oom;
    cJSON *plan = j->plan ? cJSON_Duplicate(j->plan, 1) : cJSON_CreateNull();
    if (!plan || !cJSON_AddItemToObject(o, "plan", plan)) {
        cJSON_Delete(plan);
        goto oom;
    }
    const char *keys[] = {"conditions", "points", "stages", "events"};
    cJSON *parts[] = {conditions_json(j), points_json(h, j), stages_json(j), events_json(j)};
    int ok = 1;
    for (int k = 0; k < 4; k++) {
        if (ok && parts[k] && cJSON_AddItemToObject(o, keys[k], parts[k]))
            continue;
        ok = 0;
        cJSON_Delete(parts[k]);
    }
    if (ok)
        return o;
oom:
    cJSON_Delete(o);
    return NULL;
}

cJSON *coord_history_json(struct coord_history *h, herr *e)
{
    cJSON *a = cJSON_CreateArray();
    if (!a) {
        herr_set(e, "out of memory");
        return NULL;
    }
    if (!h)
        return a;
    pthread_mutex_lock(&h->mu);
    for (struct job *j = h->jobs; j; j = j->next) {
        cJSON *o = job_json(h, j);
        if (!o || !cJSON_AddItemToArray(a, o)) {
            cJSON_Delete(o);
            cJSON_Delete(a);
            a = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&h->mu);
    if (!a)
        herr_set(e, "out of memory");
    return a;
}
