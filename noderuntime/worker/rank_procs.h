/* A worker with several GPUs runs a rank per GPU, each in a process of its own, as torchrun's
 * agent does: the worker (the parent) starts `holmes-node rank` once per rank with the
 * assignment on its standard input and the rank's listening socket, relays the ranks' step
 * reports and notices to the coordinator, passes a stop on as SIGTERM, and fails as a whole when
 * one rank dies (the others are killed): the coordinator then restarts the gang in place from
 * the last checkpoint.
 *
 * The parent's side is rank_procs_run; the child's side (cmd_rank.c) reads its work with
 * rank_procs_read_work and reports through rank_procs_child_sink. Between them, one protocol
 * message (common/protocol.h) a line on the report pipe: progress (one step), notice, or error
 * (code config for a configuration error). */
#ifndef HOLMES_RANK_PROCS_H
#define HOLMES_RANK_PROCS_H

#include "comm_tcp.h"
#include "error.h"
#include "plan_doc.h"
#include "worker_coord.h"
#include "worker_train.h"

/* The child's fds: its listening socket and the write end of its report pipe (stdin holds the
 * work: the assignment with every endpoint filled in, and "local", its index in it). */
#define RANK_PROCS_LISTEN_FD 3
#define RANK_PROCS_REPORT_FD 4

/* Parent: runs the assignment's ranks as processes on `listeners` (one per rank), until all
 * finish (0, *last_step from the rank that reports for the worker: its last stage), a stop
 * request was obeyed (0), or one fails (-1: every other rank killed, `e` names the rank and how
 * it ended; HERR_CONFIG when it said so). */
int rank_procs_run(const struct plan_assignment *a, struct tcp_listener *const *listeners,
                   struct worker_link *link, long *last_step, herr *e);

/* Child: reads the work from fd (the assignment, decoded, and its local index). */
int rank_procs_read_work(int fd, struct plan_assignment *a, int *local, herr *e);
/* Child: a sink writing report lines to fd for global rank `rank` of `stage`; should_stop turns
 * true once `*stop` is set (by the SIGTERM handler). */
struct rank_sink rank_procs_child_sink(int fd, int rank, int stage, volatile int *stop);
/* Child: the error line the parent reads before the exit status. */
void rank_procs_report_error(int fd, const herr *e);
/* Child: the step its run ended at (the parent's done says it: a run resumed from the last
 * step's checkpoint trains no step and reports none). */
void rank_procs_report_done(int fd, int rank, long step);

#endif
