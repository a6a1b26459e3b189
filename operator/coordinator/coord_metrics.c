#include "coord_metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"

enum value { V_RESTARTS, V_EVAL_LOSS, V_SKIPPED, V_GRAD_NORM, V_LOSS, VALUES };

struct gauges {
    struct gauges *next;
    char ns[64], job[64];
    struct {
        int set;
        double predicted_s;
        int socket_groups, stages;
    } plan;
    struct {
        int set;
        double step_s, tokens_per_s, tflops;
    } prog;
    /* the gauges of one value each (enum value), and whether the job has it yet; restarts and
     * steps skipped are set when the job is registered */
    int has[VALUES];
    double value[VALUES];
    int staged[PROTO_MAX_STAGES];
    double stage[PROTO_MAX_STAGES][3]; /* compute, communication, bubble (seconds) */
};

struct coord_metrics {
    pthread_mutex_t mu;
    struct gauges *jobs;
};

struct coord_metrics *coord_metrics_new(void)
{
    struct coord_metrics *m = calloc(1, sizeof *m);
    if (m)
        pthread_mutex_init(&m->mu, NULL);
    return m;
}

void coord_metrics_free(struct coord_metrics *m)
{
    if (!m)
        return;
    while (m->jobs) {
        struct gauges *g = m->jobs;
        m->jobs = g->next;
        free(g);
    }
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* The job's gauges, added when new; with m->mu held. NULL out of memory. */
static struct gauges *find(struct coord_metrics *m, const char *ns, const char *job)
{
    for (struct gauges *g = m->jobs; g; g = g->next)
        if (!strcmp(g->ns, ns) && !strcmp(g->job, job))
            return g;
    struct gauges *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    snprintf(g->ns, sizeof g->ns, "%s", ns);
    snprintf(g->job, sizeof g->job, "%s", job);
    g->next = m->jobs;
    m->jobs = g;
    return g;
}

/* The job's gauges with m->mu held (the caller unlocks), or NULL (nothing held). */
static struct gauges *lock_job(struct coord_metrics *m, const char *ns, const char *job)
{
    if (!m)
        return NULL;
    pthread_mutex_lock(&m->mu);
    struct gauges *g = find(m, ns, job);
    if (!g)
        pthread_mutex_unlock(&m->mu);
    return g;
}

void coord_metrics_plan(struct coord_metrics *m, const char *ns, const char *job,
                        double predicted_step_s, int socket_groups, int stages)
{
    struct gauges *g = lock_job(m, ns, job);
    if (!g)
        return;
    g->plan.set = 1;
    g->plan.predicted_s = predicted_step_s;
    g->plan.socket_groups = socket_groups;
    g->plan.stages = stages < PROTO_MAX_STAGES ? stages : PROTO_MAX_STAGES;
    memset(g->staged, 0, sizeof g->staged);
    pthread_mutex_unlock(&m->mu);
}

void coord_metrics_progress(struct coord_metrics *m, const char *ns, const char *job,
                            double step_s, double tokens_per_s, double tflops_per_gpu)
{
    struct gauges *g = lock_job(m, ns, job);
    if (g) {
        g->prog.set = 1;
        g->prog.step_s = step_s, g->prog.tokens_per_s = tokens_per_s, g->prog.tflops = tflops_per_gpu;
        pthread_mutex_unlock(&m->mu);
    }
}

static void set_value(struct coord_metrics *m, const char *ns, const char *job, enum value k,
                      double v)
{
    struct gauges *g = lock_job(m, ns, job);
    if (g) {
        g->has[k] = 1;
        g->value[k] = v;
        pthread_mutex_unlock(&m->mu);
    }
}

void coord_metrics_eval(struct coord_metrics *m, const char *ns, const char *job, double loss)
{
    set_value(m, ns, job, V_EVAL_LOSS, loss);
}

void coord_metrics_loss(struct coord_metrics *m, const char *ns, const char *job, double loss)
{
    set_value(m, ns, job, V_LOSS, loss);
}

void coord_metrics_grad_norm(struct coord_metrics *m, const char *ns, const char *job, double norm)
{
    set_value(m, ns, job, V_GRAD_NORM, norm);
}

void coord_metrics_skipped(struct coord_metrics *m, const char *ns, const char *job, long steps)
{
    set_value(m, ns, job, V_SKIPPED, (double)steps);
}

void coord_metrics_stage(struct coord_metrics *m, const char *ns, const char *job, int stage,
                         double compute_s, double comm_s, double bubble_s)
{
    struct gauges *g = stage >= 0 && stage < PROTO_MAX_STAGES ? lock_job(m, ns, job) : NULL;
    if (g) {
        g->staged[stage] = 1;
        memcpy(g->stage[stage], (double[3]){compute_s, comm_s, bubble_s}, sizeof g->stage[stage]);
        pthread_mutex_unlock(&m->mu);
    }
}

void coord_metrics_restarts(struct coord_metrics *m, const char *ns, const char *job, int restarts)
{
    set_value(m, ns, job, V_RESTARTS, restarts);
}

void coord_metrics_forget(struct coord_metrics *m, const char *ns, const char *job)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    for (struct gauges **p = &m->jobs; *p; p = &(*p)->next)
        if (!strcmp((*p)->ns, ns) && !strcmp((*p)->job, job)) {
            struct gauges *g = *p;
            *p = g->next;
            free(g);
            break;
        }
    pthread_mutex_unlock(&m->mu);
}

/* One family: HELP and TYPE, then a sample per job that has the value. `which`: 0-4 the plan's
 * and the progress's figures, 5 + an enum value one of the values (the counters, restarts and
 * steps skipped, 0 until set). */
static void family(struct coord_metrics *m, struct metrics_buf *b, const char *name,
                   const char *help, int which)
{
    metrics_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
    for (struct gauges *g = m->jobs; g; g = g->next) {
        double v;
        int have;
        switch (which) {
        case 0: have = g->plan.set, v = g->plan.predicted_s; break;
        case 1: have = g->plan.set, v = g->plan.socket_groups; break;
        case 2: have = g->prog.set, v = g->prog.step_s; break;
        case 3: have = g->prog.set, v = g->prog.tokens_per_s; break;
        case 4: have = g->prog.set, v = g->prog.tflops; break;
        default: {
            enum value k = (enum value)(which - 5);
            have = g->has[k] || k == V_RESTARTS || k == V_SKIPPED, v = g->value[k];
            break;
        }
        }
        if (have)
            metrics_printf(b, "%s{namespace=\"%s\",job=\"%s\"} %.9g\n", name, g->ns, g->job, v);
    }
}

void coord_metrics_render(struct coord_metrics *m, struct metrics_buf *b)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    family(m, b, "holmes_job_predicted_step_seconds", "The plan's predicted step time.", 0);
    family(m, b, "holmes_job_socket_groups",
           "Data- and tensor-parallel groups the plan put on TCP (no common RDMA fabric).", 1);
    family(m, b, "holmes_job_step_seconds", "Measured step time (the slowest worker's).", 2);
    family(m, b, "holmes_job_tokens_per_second", "Training throughput.", 3);
    family(m, b, "holmes_job_tflops_per_gpu", "Model TFLOPS per device (6 x parameters x tokens/s).", 4);
    family(m, b, "holmes_job_restarts", "In-place gang restarts charged to the job.",
           5 + V_RESTARTS);
    family(m, b, "holmes_job_eval_loss",
           "The newest held-out loss (spec.training.eval): the mean over its batches.",
           5 + V_EVAL_LOSS);
    family(m, b, "holmes_job_loss", "The training loss at the newest step (the last stage's "
           "replicas' mean).", 5 + V_LOSS);
    family(m, b, "holmes_job_grad_norm", "The global gradient norm before clipping at the "
           "newest step.", 5 + V_GRAD_NORM);
    family(m, b, "holmes_job_skipped_steps", "Steps skipped (no update) because their loss or "
           "gradient norm was not finite (spec.training.maxNonFiniteSteps).", 5 + V_SKIPPED);
    static const char *const parts[] = {"compute", "communication", "bubble"};
    metrics_printf(b, "# HELP holmes_job_stage_seconds A stage's last step: compute, communication "
                      "and pipeline bubble time.\n# TYPE holmes_job_stage_seconds gauge\n");
    for (struct gauges *g = m->jobs; g; g = g->next)
        for (int s = 0; s < PROTO_MAX_STAGES; s++)
            for (int k = 0; g->staged[s] && k < 3; k++)
                metrics_printf(b, "holmes_job_stage_seconds{namespace=\"%s\",job=\"%s\",stage=\"%d\","
                                  "part=\"%s\"} %.9g\n", g->ns, g->job, s, parts[k], g->stage[s][k]);
    pthread_mutex_unlock(&m->mu);
}
