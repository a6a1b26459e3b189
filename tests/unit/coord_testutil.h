/* A coordinator served on a thread of its own, for tests that drive it from clients, and what
 * those tests share: the job's state, clients connected and sending, events recorded. */
#ifndef HOLMES_COORD_TESTUTIL_H
#define HOLMES_COORD_TESTUTIL_H

#include <pthread.h>

#include <stddef.h>

#include "coord_client.h"
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

/* Makes t->c on 127.0.0.1:port (0: a free port; one still held by a coordinator just stopped
 * is waited for, up to 5 s), adds the job js and serves it (coord_thread_start). t->mu must be
 * initialised. 0, or -1 said on a "#" line. */
int coord_thread_serve(struct coord_thread *t, int port, const struct coord_job_spec *js);
/* The job's state, read under t->mu (COORD_FAILED when the job is unknown). */
enum coord_job_state coord_thread_job_state(struct coord_thread *t, const char *job);
/* Waits (5 s at most) for the job to reach want: 1 when it did. */
int coord_thread_wait_state(struct coord_thread *t, const char *job, enum coord_job_state want);
/* A client connected to t's coordinator, or NULL (said on a "#" line). */
struct coord_client *coord_test_connect(struct coord_thread *t);
/* Sends text (taken) and flushes: a client only talks while it is serviced. */
int coord_test_send(struct coord_client *cl, char *text);
/* The next message of cl (5 s at most), which must be of type want: 1 with *m (free it with
 * proto_msg_free), else 0 (said on a "#" line). */
int coord_test_expect(struct coord_client *cl, enum proto_type want, struct proto_msg *m);
/* Clients cl[idx[i]] (idx NULL: cl[i]), i < n, that said hello: each gets its assignment of
 * `attempt` (its rank into ranks[i]) and sends its rendezvous with the endpoint
 * 127.0.0.1:(port_base + rank). 1 when all did. */
int coord_test_rendezvous(struct coord_client **cl, const int *idx, int n, int attempt,
                          int port_base, int *ranks);
/* Appends "[STATE] msg" and a newline to events (of cap bytes), as the tests' on_event hooks do. */
void coord_test_record_event(char *events, size_t cap, enum coord_job_state st, const char *msg);

/* A plan hook's assignment: first rank `rank` and, when peer >= 0, the one rank whose endpoint
 * its start lists. 0, or -1 out of memory. */
int coord_test_assign(struct plan_assignment *a, int rank, int peer);

#endif
