/* The coordinator inside `holmes-operator run`: one WebSocket endpoint for the workers of every
 * TrainingJob, served on its own thread, wired to the controller:
 *   - a hello for "namespace/name" registers the job from the controller's cache (spec, token
 *     from the job's Secret, pods <name>-worker-<i>); the planner makes the assignments;
 *   - pods get holmes.dev/nic-class, holmes.dev/fabric, holmes.dev/nic-gbps on hello and
 *     holmes.dev/stage, holmes.dev/dp-rank once planned;
 *   - status gets phase Planning/Running, nicGroups, plan (per stage: fabric, layers, workers;
 *     predicted step time), progress (step, loss, tokens/s, TFLOPS per GPU, ETA; at most one
 *     write per job every 5 s) with measured vs predicted step time in status.message;
 *   - gang timeouts, failures, restarts and refused connections become Events.
 * An operator restart loses nothing: workers keep training, reconnect, and the job is
 * re-registered and adopted on their hellos. */
#ifndef HOLMES_COORD_OPERATOR_H
#define HOLMES_COORD_OPERATOR_H

#include "controller.h"
#include "error.h"

struct coord_operator;
struct coord_metrics;
struct coord_history;
struct tls_keeper;

struct coord_operator_opts {
    const char *bind;       /* NULL = all interfaces */
    int port;               /* e.g. 8443 */
    struct tls_keeper *tls; /* wss:// with the keeper's certificate, renewed as it renews it;
                             * NULL = plain ws:// */
    int status_interval_ms; /* progress writes per job; 0 = 5000 */
    struct coord_metrics *metrics; /* per-job gauges to keep (coord_metrics.h); NULL = none */
    struct coord_history *history; /* what the job page shows (coord_history.h); NULL = none */
};

/* Starts the coordinator thread. The controller must outlive it. */
struct coord_operator *coord_operator_start(struct controller *ctl,
                                            const struct coord_operator_opts *o, herr *e);
int coord_operator_port(const struct coord_operator *co);
/* Stops the thread and frees everything; workers keep training (see coord_destroy). */
void coord_operator_stop(struct coord_operator *co);

#endif
