/* --metrics-out of `holmes-operator local`: one JSON object per step, written once every worker
 * of the plan has reported that step: step, time (Unix seconds), loss, lr, tokens_per_s,
 * step_ms and each stage's step, compute, communication and bubble times (the slowest of its
 * workers). */
#ifndef HOLMES_LOCAL_METRICS_H
#define HOLMES_LOCAL_METRICS_H

#include <stdio.h>

#include "error.h"
#include "protocol.h"

struct metric_row;

struct local_metrics {
    FILE *f;                 /* NULL: no --metrics-out; every call does nothing */
    struct metric_row *rows; /* the steps being collected, by step modulo their count */
};

/* Opens path for writing. 0, or -1 with e naming it. */
int local_metrics_open(struct local_metrics *m, const char *path, herr *e);
/* The job restarts in place: the steps after its checkpoint come again, collected anew. */
void local_metrics_restart(struct local_metrics *m);
/* One worker's step records, p->stage's; a step's row is written when `workers` reported it,
 * with `stages` stages. */
void local_metrics_add(struct local_metrics *m, const struct proto_progress *p, int workers,
                       int stages);
void local_metrics_close(struct local_metrics *m);

#endif
