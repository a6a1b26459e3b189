/* holmes-node rank: one rank of a worker with several GPUs (noderuntime/worker/rank_procs.h).
 * Started by `holmes-node worker`, never by hand: its work (the assignment with every endpoint,
 * and which of its ranks this is) comes on standard input, its listening socket on fd 3, and it
 * reports on fd 4. Exit status: 0 trained (or stopped by SIGTERM after a checkpoint), 78 a
 * configuration error, 1 any other failure. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "commands.h"
#include "log.h"
#include "rank_procs.h"
#include "worker_coord.h"
#include "worker_train.h"

static volatile int g_stop;
static void on_term(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* Trains the rank; the exit status. */
static int run_rank(struct plan_assignment *a, int local, int report_fd, herr *e)
{
    struct tcp_listener *l = NULL;
    if (!a->has_spec)
        return herr_set_kind(e, HERR_CONFIG, "assignment.spec: required");
    int rc = tcp_listener_adopt(&l, RANK_PROCS_LISTEN_FD, e);
    if (rc == 0 && (rc = plan_doc_check_endpoints(&a->plan, "the work's plan", e)) == 0) {
        struct rank_sink out = rank_procs_child_sink(report_fd, a->ranks[local],
                                                     plan_doc_stage_of(&a->plan, a->ranks[local]),
                                                     &g_stop);
        long last = 0;
        rc = worker_train_rank(a, local, l, CPU_AFFINITY_NONE, &out, &last, e);
        if (rc == 0) {
            log_info("rank %d: %s at step %ld", a->ranks[local], g_stop ? "stopped" : "finished",
                     last);
            rank_procs_report_done(report_fd, a->ranks[local], last);
        }
    }
    tcp_listener_close(l);
    return rc;
}

int cmd_rank(int argc, char **argv)
{
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "holmes-node rank: takes no arguments; it is started by holmes-node worker "
                        "for each GPU of a worker with several\n");
        return 2;
    }
    const char *parent = getenv("HOLMES_RANK_PARENT");
    /* The worker gone (killed), its ranks go too. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || !parent || atol(parent) != (long)getppid()) {
        fprintf(stderr, "holmes-node rank: not started by holmes-node worker (HOLMES_RANK_PARENT)\n");
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct plan_assignment a;
    int local = 0;
    herr e = {0};
    int rc = rank_procs_read_work(0, &a, &local, &e);
    if (rc == 0) {
        char comp[64];
        snprintf(comp, sizeof comp, "rank-%d", a.ranks[local]);
        log_set_component(comp);
        rc = run_rank(&a, local, RANK_PROCS_REPORT_FD, &e);
        plan_assignment_free(&a);
    }
    if (rc == 0)
        return 0;
    log_error("%s", e.msg);
    rank_procs_report_error(RANK_PROCS_REPORT_FD, &e);
    return e.kind == HERR_CONFIG ? WORKER_EXIT_FINAL : 1;
}
