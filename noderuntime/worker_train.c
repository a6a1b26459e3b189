#include "worker_train.h"

#include <stdlib.h>

struct worker_train {
    int unused;
};

int worker_train_create(struct worker_train **out, herr *e)
{
    *out = NULL;
    return herr_set(e, "the distributed trainer is not part of this build yet; "
                       "run with --simulate STEPS to exercise the protocol");
}

void worker_train_free(struct worker_train *wt)
{
    free(wt);
}

struct worker_runner worker_train_runner(struct worker_train *wt)
{
    struct worker_runner r = worker_sim_runner;
    r.user = wt;
    return r;
}
