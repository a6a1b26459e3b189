/* Per-job training gauges for /metrics (Prometheus): what the coordinator sees of each job it
 * runs, kept apart from its state so a scrape (the HTTP server's thread) never touches the
 * coordinator's: the plan's predicted step and the groups it put on TCP, the measured step time,
 * tokens/s and TFLOPS, the loss and the gradient norm, the restarts charged, the newest held-out loss, the
 * steps skipped for a non-finite loss, and each stage's compute, communication and bubble time.
 * Thread-safe. Names and labels: docs/operator.md ("Metrics"). */
#ifndef HOLMES_COORD_METRICS_H
#define HOLMES_COORD_METRICS_H

#include "metrics.h"

struct coord_metrics;

struct coord_metrics *coord_metrics_new(void);
void coord_metrics_free(struct coord_metrics *m);

/* Each sets the job's (namespace, name) gauges, adding the job on first use. */
void coord_metrics_plan(struct coord_metrics *m, const char *ns, const char *job,
                        double predicted_step_s, int socket_groups, int stages);
void coord_metrics_progress(struct coord_metrics *m, const char *ns, const char *job,
                            double step_s, double tokens_per_s, double tflops_per_gpu);
/* training.eval: the newest held-out loss. */
void coord_metrics_eval(struct coord_metrics *m, const char *ns, const char *job, double loss);
/* The training loss of the newest step. */
void coord_metrics_loss(struct coord_metrics *m, const char *ns, const char *job, double loss);
/* The global gradient norm (before clipping) of the newest step. */
void coord_metrics_grad_norm(struct coord_metrics *m, const char *ns, const char *job, double norm);
/* training.maxNonFiniteSteps: the steps skipped so far. */
void coord_metrics_skipped(struct coord_metrics *m, const char *ns, const char *job, long steps);
void coord_metrics_stage(struct coord_metrics *m, const char *ns, const char *job, int stage,
                         double compute_s, double comm_s, double bubble_s);
void coord_metrics_restarts(struct coord_metrics *m, const char *ns, const char *job, int restarts);
/* The job is gone: its series end. */
void coord_metrics_forget(struct coord_metrics *m, const char *ns, const char *job);

/* The holmes_job_* families (HELP, TYPE, one sample per job and stage). */
void coord_metrics_render(struct coord_metrics *m, struct metrics_buf *b);

#endif
