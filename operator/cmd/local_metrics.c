#include "local_metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

#define METRIC_SLOTS 4096

/* Per-step metrics collected from every worker until the row is complete. */
struct metric_row {
    long step;
    int seen;            /* workers that reported this step */
    int nloss;
    double loss, lr, tokens_per_s, step_ms;
    int has_eval;
    int skipped;         /* training.maxNonFiniteSteps: the step made no update */
    int has_norm;
    double grad_norm;    /* the global gradient norm before clipping (one value) */
    double eval_loss;    /* training.eval after this step (the mean over its batches) */
    double stage_ms[PROTO_MAX_STAGES], stage_compute[PROTO_MAX_STAGES],
           stage_comm[PROTO_MAX_STAGES], stage_bubble[PROTO_MAX_STAGES];
};

void local_metrics_restart(struct local_metrics *m)
{
    if (!m->rows)
        return;
    memset(m->rows, 0, METRIC_SLOTS * sizeof *m->rows);
    for (int i = 0; i < METRIC_SLOTS; i++)
        m->rows[i].step = -1;
}

int local_metrics_open(struct local_metrics *m, const char *path, herr *e)
{
    m->f = fopen(path, "w");
    m->rows = calloc(METRIC_SLOTS, sizeof *m->rows);
    if (!m->f || !m->rows) {
        herr_set(e, "--metrics-out %s: %s", path, strerror(errno));
        local_metrics_close(m);
        return -1;
    }
    local_metrics_restart(m);
    return 0;
}

void local_metrics_close(struct local_metrics *m)
{
    if (m->f)
        fclose(m->f);
    free(m->rows);
    m->f = NULL;
    m->rows = NULL;
}

static void write_row(FILE *f, const struct metric_row *r, int stages)
{
    fprintf(f, "{\"step\":%ld,\"time\":%.3f,", r->step, clock_wall_s());
    if (r->nloss)
        fprintf(f, "\"loss\":%.6f,", r->loss / r->nloss);
    if (r->has_eval)
        fprintf(f, "\"eval_loss\":%.6f,", r->eval_loss);
    if (r->has_norm)
        fprintf(f, "\"grad_norm\":%.6g,", r->grad_norm);
    if (r->skipped)
        fprintf(f, "\"skipped\":true,");
    /* each last-stage replica reports the whole step's rate: their mean */
    fprintf(f, "\"lr\":%.6g,\"tokens_per_s\":%.1f,\"step_ms\":%.3f,\"stages\":[", r->lr,
            r->nloss ? r->tokens_per_s / r->nloss : 0.0, r->step_ms);
    int n = stages > 0 ? stages : 1;
    for (int s = 0; s < n && s < PROTO_MAX_STAGES; s++)
        fprintf(f,
                "%s{\"stage\":%d,\"step_ms\":%.3f,\"compute_ms\":%.3f,\"comm_ms\":%.3f,"
                "\"bubble_ms\":%.3f}", s ? "," : "", s, r->stage_ms[s], r->stage_compute[s],
                r->stage_comm[s], r->stage_bubble[s]);
    fprintf(f, "]}\n");
    fflush(f);
}

static double maxd(double a, double b) { return a > b ? a : b; }

void local_metrics_add(struct local_metrics *m, const struct proto_progress *p, int workers,
                       int stages)
{
    if (!m->rows)
        return;
    int st = p->stage < PROTO_MAX_STAGES ? p->stage : PROTO_MAX_STAGES - 1;
    for (int i = 0; i < p->nsteps; i++) {
        const struct proto_step *s = &p->steps[i];
        struct metric_row *r = &m->rows[s->step % METRIC_SLOTS];
        if (r->step != s->step) { /* a new step in this slot (or a replay after a restart) */
            memset(r, 0, sizeof *r);
            r->step = s->step;
        }
        r->seen++;
        if (s->has_loss) {
            r->nloss++;
            r->loss += s->loss;
            r->tokens_per_s += s->tokens_per_s;
        }
        if (s->has_eval) {
            r->has_eval = 1;
            r->eval_loss = s->eval_loss;
        }
        r->skipped |= s->skipped;
        if (s->has_norm) {
            r->has_norm = 1;
            r->grad_norm = s->grad_norm;
        }
        if (s->lr > 0)
            r->lr = s->lr;
        r->step_ms = maxd(r->step_ms, s->step_ms);
        r->stage_ms[st] = maxd(r->stage_ms[st], s->step_ms);
        r->stage_compute[st] = maxd(r->stage_compute[st], s->compute_ms);
        r->stage_comm[st] = maxd(r->stage_comm[st], s->comm_ms);
        r->stage_bubble[st] = maxd(r->stage_bubble[st], s->bubble_ms);
        if (r->seen == workers)
            write_row(m->f, r, stages);
    }
}
