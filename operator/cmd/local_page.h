/* The live job page of `holmes-operator local` (--page-addr; docs/operator.md, "Job page"): the
 * job's history as the operator's page shows a job in a cluster, with the phase and conditions
 * the operator would write, served by an HTTP server of its own. */
#ifndef HOLMES_LOCAL_PAGE_H
#define HOLMES_LOCAL_PAGE_H

#include "coord_history.h"
#include "coordinator.h"
#include "planner.h"
#include "http_server.h"

struct local_page {
    struct coord_history *history; /* what the page shows; kept even without a server */
    struct http_server *server;    /* NULL: --page-addr 0 */
    const char *ns, *name;         /* the job */
};

/* The history, and the server on addr (HOST:PORT; "0": none) with its URL printed. 0, or -1
 * with the reason printed. */
int local_page_start(struct local_page *pg, const char *addr, const char *ns, const char *name);
/* Stops the server (before what it serves), frees the history. */
void local_page_stop(struct local_page *pg);
/* The plan the workers of w (n of them) got, with the conditions the operator would set. */
void local_page_plan(struct local_page *pg, const struct plan *p, const struct coord_worker *w,
                     int n);
/* A state change or event: the event, the phase and conditions the operator would write for it
 * (restarts: the job's count, shown on a restart). */
void local_page_state(struct local_page *pg, enum coord_job_state s, const char *msg,
                      int restarts);
/* An event of the job (type Normal or Warning). */
void local_page_event(struct local_page *pg, const char *type, const char *reason,
                      const char *msg);
/* A notice of the coordinator: a Warning event, and a condition of the same name. */
void local_page_notice(struct local_page *pg, const char *reason, const char *msg);
/* One worker's step records. */
void local_page_steps(struct local_page *pg, const struct proto_progress *p);

#endif
