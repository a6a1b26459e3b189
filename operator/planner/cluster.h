/* The planner's cluster file: the workers (name, node, GPUs, TFLOPS, NIC report) and optional
 * link constants, as YAML or JSON. Format in docs/planner.md. */
#ifndef HOLMES_CLUSTER_H
#define HOLMES_CLUSTER_H

#include <cjson/cJSON.h>

#include "cost_model.h"
#include "error.h"
#include "planner.h"
#include "trainingjob.h"

struct cluster {
    int n_workers;
    struct plan_worker *workers;
    struct cost_links links;   /* defaults with the file's `links` applied */
};

/* Reads a cluster document (a JSON object). `where` names it in errors. Each worker:
 * {name, node?, gpus?, gpu_tflops, gpu_memory_gb?, memory_gbps?, nics?, nic, count?};
 * `count: N` expands to N workers named NAME-0 .. NAME-(N-1) on nodes NODE-i (or their own).
 * Returns 0, or -1 naming the field. */
int cluster_from_json(const cJSON *doc, const char *where, struct cluster *out, herr *e);
/* Reads a YAML or JSON file holding one cluster document. */
int cluster_load(const char *path, struct cluster *out, herr *e);
/* Applies a calibration file: an object of link constants, bare or under `links`. */
int cluster_load_calibration(const char *path, struct cost_links *links, herr *e);
/* The workers a TrainingJob's `spec.emulation` block describes (local runs): worker-0 ..
 * worker-(N-1) in group order, `gpus_per_worker` each, `tflops` per device (0: 0.05 for CPU
 * workers, 100 for GPUs — the coordinator's defaults), PLAN_CPU_MEMORY_GBPS for the devices that
 * are CPU processes (CPU workers, emulated GPUs; real GPUs: the links' memory_gbps), as
 * `holmes-operator local`'s workers declare it; crossFabricGbps as links.tcp_gbps. */
int cluster_from_emulation(const struct tj_spec *s, double tflops, struct cluster *out, herr *e);
void cluster_free(struct cluster *c);

#endif
