/* Test helper: runs a function in N forked processes that form one TCP group on loopback. */
#ifndef HOLMES_COMM_TESTUTIL_H
#define HOLMES_COMM_TESTUTIL_H

#include "comm.h"

/* fn runs in child `rank` with its own listener and the endpoints of all ranks; it returns 0 on
 * success. skip_rank (or -1) is never started (to test a peer that never connects).
 * Returns the number of children that failed (or -1 if the processes could not start);
 * each child is killed after limit_s. */
typedef int (*group_fn)(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps,
                        void *arg);
int run_group(int n, group_fn fn, void *arg, int skip_rank, double limit_s);
/* Fills a group spec for all n ranks over loopback with the given timeout. */
void group_spec(struct tcp_group_spec *s, const char *name, uint32_t id, int n, int rank,
                const struct tcp_endpoint *eps, double timeout_s);

#endif
