/* The pod's main process: `holmes-node worker` in coordinator mode runs the worker as a child
 * process and starts it again when it stops for an in-place restart or dies, so a crashed
 * worker comes back inside its pod (no pod is recreated, no image pulled again) and the gang
 * resumes from its last checkpoint. Whether the gang restarts, and how often, is the
 * coordinator's decision (spec.restartPolicy, one counter in status.restarts); the supervisor
 * only keeps the process there to hear it. As torchrun's elastic agent does for its ranks.
 *
 * The child's exit status says what to do (worker_coord.h):
 *   0 finished                       -> the supervisor exits 0 (pod Succeeded)
 *   75 stopped for an in-place restart -> started again at once
 *   1, or killed by a signal          -> started again: at once, then after 1 s, doubling up
 *                                        to 30 s while it keeps failing
 *   78 final: the job failed or this worker cannot run -> exits 1 (pod Failed)
 *   2 usage                          -> exits 2
 *   143 left on SIGTERM              -> exits 143
 * SIGTERM or SIGINT to the supervisor is passed to the child, which checkpoints and leaves; the
 * supervisor then exits with the child's status. A child that keeps dying within `quick_s` of
 * its start `max_quick_failures` times in a row is not started again (exit 1). */
#ifndef HOLMES_SUPERVISOR_H
#define HOLMES_SUPERVISOR_H

#include "error.h"

/* Set in the child's environment: the process is supervised (by this supervisor, or by
 * `holmes-operator local`, which sets it too) and must not supervise itself. */
#define SUPERVISED_ENV "HOLMES_SUPERVISED"

struct supervisor_opts {
    const char *exe;           /* the program to run (e.g. /proc/self/exe) */
    char *const *argv;         /* its argv, NULL-terminated */
    int max_quick_failures;    /* 0 = 10 */
    double quick_s;            /* 0 = 60 */
    double backoff_s;          /* backoff after a second failure in a row; 0 = 1 */
    double backoff_cap_s;      /* 0 = 30 */
};

/* 1 when this process runs under a supervisor (SUPERVISED_ENV is "1"). */
int supervisor_is_child(void);

/* What the supervisor does after a child's wait status. */
enum supervisor_action {
    SUPERVISOR_EXIT,           /* done: exit with *code */
    SUPERVISOR_RESTART_NOW,    /* in-place restart: start it again at once */
    SUPERVISOR_RESTART_LATER,  /* it failed or died: start it again after a backoff */
};
enum supervisor_action supervisor_decide(int wait_status, int *code);

/* Runs the child until it is done; returns the exit status for the process (as above), or -1
 * with `e` when the child cannot be started at all (fork or signal set-up failed). */
int supervisor_run(const struct supervisor_opts *o, herr *e);

#endif
