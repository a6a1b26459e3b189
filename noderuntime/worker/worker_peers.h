/* The start message's peers into the worker's plan document: every rank's host and port (the
 * worker's side of the rendezvous, after proto_parse and plan_assignment_from_json). Kept apart
 * from the trainer so that the fuzzer (tests/fuzz) runs it on its own. */
#ifndef HOLMES_WORKER_PEERS_H
#define HOLMES_WORKER_PEERS_H

#include <cjson/cJSON.h>

#include "error.h"
#include "plan_doc.h"

/* Fills in every rank's host and port from start's peers ([{rank, endpoint "host:port"}]); with
 * HOLMES_NO_PACING=1 (the network itself is shaped) clears the plan's emulated pacing. -1 with
 * `e` when a peer is malformed or a rank has no endpoint. */
int worker_plan_endpoints(struct plan_doc *d, const cJSON *peers, herr *e);

#endif
