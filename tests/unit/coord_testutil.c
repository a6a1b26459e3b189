#include "coord_testutil.h"

#include <stdlib.h>
#include <unistd.h>

static void *serve(void *arg)
{
    struct coord_thread *t = arg;
    while (!t->quit) {
        pthread_mutex_lock(&t->mu);
        coord_service(t->c);
        pthread_mutex_unlock(&t->mu);
        usleep(200); /* let the test thread take the lock */
    }
    return NULL;
}

int coord_thread_start(struct coord_thread *t)
{
    t->quit = 0;
    return pthread_create(&t->th, NULL, serve, t) == 0 ? 0 : -1;
}

void coord_thread_stop(struct coord_thread *t)
{
    t->quit = 1;
    pthread_join(t->th, NULL);
    coord_destroy(t->c);
    t->c = NULL;
}

int coord_test_assign(struct plan_assignment *a, int rank, int peer)
{
    a->rank = rank;
    if (peer < 0)
        return 0;
    if (!(a->peers = malloc(sizeof *a->peers)))
        return -1;
    a->peers[0] = peer;
    a->npeers = 1;
    return 0;
}
