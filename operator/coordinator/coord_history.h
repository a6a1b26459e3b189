/* A bounded record of what the coordinator saw of each job, for the live job page
 * (/api/jobs, docs/operator.md "Job page"): the last steps' loss, tokens/s and step time (a ring
 * of at most `points` steps per job: the oldest dropped first; after an in-place restart the
 * steps trained again replace those held from the checkpoint on), each stage's last compute,
 * communication and step time as its workers report them, and the phase, conditions, plan,
 * restarts and the last COORD_HISTORY_EVENTS events. Memory per job is fixed by `points`.
 * Thread-safe: the coordinator's thread writes, the HTTP server's thread reads. */
#ifndef HOLMES_COORD_HISTORY_H
#define HOLMES_COORD_HISTORY_H

#include <cjson/cJSON.h>

#include "error.h"
#include "protocol.h"

#define COORD_HISTORY_POINTS 600   /* default ring size (steps per job) */
#define COORD_HISTORY_EVENTS 32
#define COORD_HISTORY_CONDITIONS 12

struct coord_history;

/* points: steps kept per job (0 = COORD_HISTORY_POINTS). NULL out of memory. */
struct coord_history *coord_history_new(int points);
void coord_history_free(struct coord_history *h);

/* Each records one fact of the job (namespace, name), adding the job on first use; a NULL
 * history, or no memory for a new job, records nothing. */
void coord_history_phase(struct coord_history *h, const char *ns, const char *job,
                         const char *phase, const char *message);
/* A condition by type: set, or replaced when the type is already there. */
void coord_history_condition(struct coord_history *h, const char *ns, const char *job,
                             const char *type, int ok, const char *reason, const char *message);
void coord_history_event(struct coord_history *h, const char *ns, const char *job,
                         const char *type, const char *reason, const char *message);
/* The plan as the status shows it ({policy, pipeline, data, stages: [{index, fabric, layers,
 * firstLayer, workers}]}); copied. */
void coord_history_plan(struct coord_history *h, const char *ns, const char *job,
                        const cJSON *plan);
/* One worker's step records: loss points (from the stage that reports loss; the replicas'
 * reports of one step averaged) and its stage's last times. */
void coord_history_steps(struct coord_history *h, const char *ns, const char *job,
                         const struct proto_progress *p);
void coord_history_restarts(struct coord_history *h, const char *ns, const char *job,
                            int restarts);
/* The job restarts in place: the steps after its checkpoint are trained again, and their
 * first new report replaces the points held from that step on. */
void coord_history_restarting(struct coord_history *h, const char *ns, const char *job);
/* The job is gone. */
void coord_history_forget(struct coord_history *h, const char *ns, const char *job);

/* Every job as /api/jobs shows it: [{namespace, name, phase, message, conditions: [{type,
 * status, reason, message, lastTransitionTime}], plan, restarts, points: {step: [], loss: [],
 * tokensPerSecond: [], stepSeconds: [], time: []} (loss null where a step has none), pointsKept,
 * stages: [{stage, step, stepSeconds, computeSeconds, commSeconds, bubbleSeconds,
 * otherSeconds}], events: [{time, type, reason, message}] (oldest first)}]. NULL with e. */
cJSON *coord_history_json(struct coord_history *h, herr *e);

#endif
