/* The state of one `holmes-operator local` run and the embedded coordinator that drives it: the
 * coordinator's hooks print the plan and progress (local_console.h), record them for the job
 * page (local_page.h) and --metrics-out (local_metrics.h), and act on the worker processes
 * (local_workers.h) when one is counted as lost. */
#ifndef HOLMES_LOCAL_HOOKS_H
#define HOLMES_LOCAL_HOOKS_H

#include "coord_plan.h"
#include "coordinator.h"
#include "local_console.h"
#include "local_metrics.h"
#include "local_page.h"
#include "local_workers.h"
#include "trainingjob.h"

struct local {
    struct tj_job job;
    struct coord_plan cp;        /* the planner's hook, its plans */
    struct coordinator *c;
    struct local_console console;
    struct local_page page;
    struct local_metrics metrics;
    struct local_workers workers;
    int stages;                  /* of the last plan */
    double t0;                   /* when the workers started */
    struct coord_progress last;  /* the last progress, for the summary */
    int have_progress;
    double first_loss;           /* the first loss reported, for the summary */
    long first_step;
    int have_first;
    char fail_reason[1024];
    int gang_failed;             /* a gang timeout was reported */
    char elastic_why[300];       /* why the next plan is a re-plan */
};

/* The embedded coordinator on L->workers.bind (127.0.0.1 by default, an ephemeral port) with
 * the job added (its pods: the workers' names), its hooks on L. 0, or -1 with the reason
 * printed. */
int local_start_coordinator(struct local *L);

#endif
