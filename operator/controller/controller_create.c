/* Creating a job's objects: concurrently, in slow-start batches (as the Kubernetes Job
 * and ReplicaSet controllers do): 2, then 4, 8, 16 ... at once, stopping after a batch with
 * an error, so a namespace where creates fail costs 2 requests, not one per worker, and a
 * healthy gang costs a few round trips instead of one per object. The first batch holds the
 * Secret, the Service and the PodGroup, so they exist before the pods that use them. */
#include "controller_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

#define SLOW_START_INITIAL 2

int ctl_creates_add(struct create_list *l, enum api_op op, cJSON *obj, const char *name)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        struct create_job *it = realloc(l->items, (size_t)cap * sizeof *it);
        if (!it)
            return -1;
        l->items = it;
        l->cap = cap;
    }
    struct create_job *j = &l->items[l->n++];
    memset(j, 0, sizeof *j);
    j->op = op;
    j->obj = obj;
    j->rc = -2;
    snprintf(j->name, sizeof j->name, "%s", name);
    return 0;
}

void ctl_creates_free(struct create_list *l)
{
    for (int i = 0; i < l->n; i++)
        cJSON_Delete(l->items[i].obj);
    free(l->items);
    memset(l, 0, sizeof *l);
}

/* Sends the creates not sent yet; 0, or the first error (in e). */
int ctl_creates_run(struct controller *c, const char *ns, struct create_list *l, herr *e)
{
    int first = 0;
    while (first < l->n && l->items[first].rc != -2)
        first++;
    int rc = 0;
    double t0 = clock_mono_s();
    /* The first batch holds every object before the first pod (Secret, Service, PodGroup). */
    int lead = 0;
    while (first + lead < l->n && l->items[first + lead].op != API_CREATE_POD)
        lead++;
    int batch0 = lead > SLOW_START_INITIAL ? lead : SLOW_START_INITIAL;
    for (int batch = batch0, i = first; i < l->n && rc == 0; i += batch, batch *= 2) {
        int m = l->n - i < batch ? l->n - i : batch;
        struct kube_call *calls = calloc((size_t)m, sizeof *calls);
        char **paths = calloc((size_t)m, sizeof *paths);
        int ok = calls && paths;
        for (int k = 0; ok && k < m; k++) {
            paths[k] = kube_path(controller_api_calls[l->items[i + k].op].res, ns, NULL, NULL);
            ok = paths[k] != NULL;
            calls[k] = (struct kube_call){.method = "POST", .path_query = paths[k],
                                          .content_type = "application/json",
                                          .body = l->items[i + k].obj};
        }
        if (ok)
            kube_calls(c->kc, calls, m);
        for (int k = 0; k < m; k++) {
            struct create_job *j = &l->items[i + k];
            if (!ok) {
                j->rc = herr_set(&j->e, "%s/%s: out of memory", ns, j->name);
            } else {
                j->rc = calls[k].rc == 409 ? 0 : calls[k].rc; /* AlreadyExists: it is there */
                j->e = calls[k].e;
            }
            if (j->rc != 0 && rc == 0) {
                rc = j->rc;
                *e = j->e;
            }
            free(paths ? paths[k] : NULL);
        }
        free(paths);
        free(calls);
    }
    ctl_tl_api_s += clock_mono_s() - t0; /* the batches' wall time, counted once */
    return rc;
}
