#include "local_hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hook_plan(void *user, const struct coord_worker *w, int n, struct plan_assignment *a,
                     herr *e)
{
    struct local *L = user;
    if (coord_plan_hook(&L->cp, w, n, a, e))
        return -1;
    const struct plan *p = &L->cp.plan;
    L->stages = p->n_stages;
    local_page_plan(&L->page, p, w, n);
    if (tj_is_elastic(&L->job.spec) && L->cp.prev_shape[0] && strcmp(L->cp.prev_shape, L->cp.shape)) {
        char msg[1200];
        snprintf(msg, sizeof msg, "%s -> %s: %s%s%s", L->cp.prev_shape, L->cp.shape,
                 L->elastic_why[0] ? L->elastic_why : "the workers changed",
                 L->cp.batch_note[0] ? "; " : "", L->cp.batch_note);
        local_console_say(&L->console, "Replanned", "%s", msg);
        local_page_event(&L->page, "Warning", "Replanned", msg);
    }
    local_console_placement(&L->console, p, w);
    return 0;
}

static void hook_event(void *user, enum coord_job_state s, const char *msg)
{
    struct local *L = user;
    local_page_state(&L->page, s, msg,
                     s == COORD_RESTARTING ? coord_job_restarts(L->c, L->job.name) : 0);
    local_console_say(&L->console, coord_state_name(s), "%s", msg);
    if (strstr(msg, "gang timeout")) {
        L->gang_failed = 1;
        snprintf(L->fail_reason, sizeof L->fail_reason, "%s", msg);
    }
    if (s == COORD_FAILED)
        snprintf(L->fail_reason, sizeof L->fail_reason, "%s", msg);
    if (s == COORD_RESTARTING) /* steps after the checkpoint are trained again */
        local_metrics_restart(&L->metrics);
}

static void hook_notice(void *user, const char *reason, const char *msg)
{
    struct local *L = user;
    local_page_notice(&L->page, reason, msg);
    local_console_say(&L->console, reason, "%s", msg);
}

/* spec.elastic: a worker lost (not started again) or back. */
static void hook_elastic(void *user, const struct coord_worker *w, int lost, const char *why)
{
    struct local *L = user;
    snprintf(L->elastic_why, sizeof L->elastic_why, "worker %d (%s) %s: %s", w->index, w->pod,
             lost ? "lost" : "back", why);
    const char *reason = lost ? "WorkerLost" : "WorkerBack";
    local_console_say(&L->console, reason, "%s", L->elastic_why);
    local_page_event(&L->page, lost ? "Warning" : "Normal", reason, L->elastic_why);
    if (lost)
        local_workers_lose(&L->workers, w->index);
}

static void hook_progress(void *user, const struct coord_progress *p)
{
    struct local *L = user;
    L->last = *p;
    L->have_progress = 1;
    if (p->has_loss && !L->have_first) {
        L->have_first = 1;
        L->first_loss = p->loss;
        L->first_step = p->step;
    }
    local_console_progress(&L->console, p);
}

static void hook_steps(void *user, const struct coord_worker *w, const struct proto_progress *p)
{
    struct local *L = user;
    (void)w;
    local_page_steps(&L->page, p);
    int n = L->cp.workers > 0 ? L->cp.workers : L->job.spec.workers; /* elastic: the plan's */
    local_metrics_add(&L->metrics, p, n, L->stages);
}

int local_start_coordinator(struct local *L)
{
    const struct tj_spec *s = &L->job.spec;
    herr e = {0};
    struct coord_options co = {.bind = L->workers.bind ? L->workers.bind : "127.0.0.1", .port = 0};
    if (coord_create(&L->c, &co, &e)) {
        fprintf(stderr, "holmes-operator local: %s\n", e.msg);
        return -1;
    }
    const char **pods = calloc((size_t)s->workers, sizeof *pods);
    char (*podnames)[128] = calloc((size_t)s->workers, sizeof *podnames);
    if (!pods || !podnames) {
        free(pods);
        free(podnames);
        fprintf(stderr, "holmes-operator local: out of memory\n");
        return -1;
    }
    for (int i = 0; i < s->workers; i++) {
        tj_worker_pod_name(podnames[i], sizeof podnames[i], L->job.name, i);
        pods[i] = podnames[i];
    }
    struct coord_job_spec js = {
        .name = L->job.name, .token = L->workers.token, .workers = s->workers, .pods = pods,
        .gang_timeout_ms = s->gang_timeout_seconds * 1000,
        .max_restarts = s->restart.max_restarts, .total_steps = s->training.steps,
        .restart_backoff_ms = s->restart.backoff_seconds * 1000,
        .progress_interval_ms = L->console.tty ? 250 : 1000,
        .min_workers = tj_is_elastic(s) ? s->elastic.min_workers : 0,
        .scale_up = s->elastic.scale_up,
        .hooks = {.plan = hook_plan, .on_steps = hook_steps, .on_progress = hook_progress,
                  .on_event = hook_event, .on_notice = hook_notice, .on_elastic = hook_elastic,
                            .on_waiting = hook_notice},
        .user = L,
    };
    int added = coord_add_job(L->c, &js, &e);
    free(pods);
    free(podnames);
    if (added) {
        fprintf(stderr, "holmes-operator local: %s\n", e.msg);
        return -1;
    }
    printf("job %s: %d workers on this machine, coordinator ws://%s:%d/, logs in %s/\n",
           L->job.name, s->workers, co.bind, coord_port(L->c), L->workers.run_dir);
    return 0;
}
