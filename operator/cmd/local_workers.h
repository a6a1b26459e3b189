/* The worker processes of `holmes-operator local`: one `holmes-node worker` per worker of the
 * job, each with its emulated NIC (spec.emulation), its log in the run directory, and the
 * coordinator's address and token. A worker that exits for an in-place restart (75) or dies is
 * started again while the job is alive; it resumes from its last checkpoint. With spec.elastic,
 * a worker absent from the gang for replaceTimeoutSeconds (it never came back: hung, or failing
 * to start) counts as lost: it is not started again and the job re-plans on the workers that
 * remain. */
#ifndef HOLMES_LOCAL_WORKERS_H
#define HOLMES_LOCAL_WORKERS_H

#include <limits.h>
#include <sys/types.h>

#include "coordinator.h"
#include "local_console.h"
#include "trainingjob.h"

struct local_worker {
    pid_t pid;           /* 0: not running */
    int exited;          /* finished for good (exit 0) */
    int starts;
    int gave_up;         /* elastic: kept failing to start; not started again */
    int lost;            /* elastic: counted as lost; not started again */
    double absent_since; /* elastic: when it was first seen absent from the gang (0: present) */
};

struct local_workers {
    /* set before local_workers_prepare */
    const struct tj_job *job;
    const char *bind;    /* the coordinator's address; NULL = 127.0.0.1 */
    const char *wrap;    /* --worker-wrap: a command prefix with {i}; NULL = none */
    int simulate, step_ms;
    struct local_console *console;
    /* local_workers_prepare */
    char token[64];           /* the job's token, random */
    char node_bin[PATH_MAX];  /* holmes-node beside this binary, or HOLMES_NODE_BIN */
    char run_dir[PATH_MAX];   /* their logs */
    /* local_workers_start */
    struct coordinator *c;
    struct local_worker *w;   /* spec.workers of them */
    int below_min_said;       /* "below minWorkers" printed for this absence */
};

/* Finds holmes-node, makes the run directory (run_dir, or local-runs/NAME) and the token. 0,
 * or -1 with the reason printed. */
int local_workers_prepare(struct local_workers *ws, const char *run_dir);
/* Real GPUs (gpusPerWorker without emulation.gpus) need a holmes-node with the CUDA engine of
 * the job's precision: asked of the binary itself (`holmes-node engines`) before any worker
 * starts. 0, or 2 with the reason printed (path: the job's file). */
int local_workers_check_engines(const struct local_workers *ws, const char *path);
/* Starts every worker against coordinator c (the job cancelled when one cannot be). 0, or -1
 * out of memory. */
int local_workers_start(struct local_workers *ws, struct coordinator *c);
/* Reaps the workers that exited; starts again those the job still needs. */
void local_workers_reap(struct local_workers *ws);
/* spec.elastic: a worker absent from the gang (not connected) for replaceTimeoutSeconds counts
 * as lost; below minWorkers the job keeps waiting for it, and says so once. */
void local_workers_watch_absent(struct local_workers *ws);
/* spec.elastic: whether a gang timeout leaves at least minWorkers there (said when it does):
 * the absent ones then count as lost after replaceTimeoutSeconds. */
int local_workers_cover_gang(struct local_workers *ws);
/* Worker i counted as lost: killed, and not started again. */
void local_workers_lose(struct local_workers *ws, int i);
/* How many workers are running. */
int local_workers_alive(const struct local_workers *ws);
/* Kills the workers still running (SIGKILL); reaped by local_workers_reap or _free. */
void local_workers_kill(struct local_workers *ws);
/* Kills and reaps the workers still running, frees the table. */
void local_workers_free(struct local_workers *ws);
/* 1 when the job is over (succeeded, failed, or unknown to the coordinator); its state in *st. */
int local_workers_job_over(const struct local_workers *ws, enum coord_job_state *st);

#endif
