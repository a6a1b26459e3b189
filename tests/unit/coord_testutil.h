/* A coordinator served on a thread of its own, for tests that drive it from clients. */
#ifndef HOLMES_COORD_TESTUTIL_H
#define HOLMES_COORD_TESTUTIL_H

#include <pthread.h>

#include "coordinator.h"
#include "plan_doc.h"

struct coord_thread {
    struct coordinator *c;  /* created by the test */
    pthread_t th;
    pthread_mutex_t mu;     /* held around every coord_service; take it to call coord_* */
    volatile int quit;
};

/* Serves t->c until coord_thread_stop. 0, or -1 when the thread cannot start. */
int coord_thread_start(struct coord_thread *t);
/* Stops serving, joins the thread and destroys the coordinator (t->c = NULL). */
void coord_thread_stop(struct coord_thread *t);

/* A plan hook's assignment: first rank `rank` and, when peer >= 0, the one rank whose endpoint
 * its start lists. 0, or -1 out of memory. */
int coord_test_assign(struct plan_assignment *a, int rank, int peer);

#endif
