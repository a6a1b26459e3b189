/* Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: the holder renews
 * spec.renewTime every retry period; another candidate takes over once it has seen the same
 * record unchanged for leaseDurationSeconds; a holder that cannot renew within the renew
 * deadline steps down; a clean shutdown releases the lease (holderIdentity cleared) so a
 * successor takes over at once. Updates carry metadata.resourceVersion (409 on a race). */
#ifndef HOLMES_KUBE_LEASE_H
#define HOLMES_KUBE_LEASE_H

#include "error.h"
#include "kube_client.h"

struct kube_lease_opts {
    const char *ns, *name, *identity;
    double duration_s;       /* default 15 */
    double renew_deadline_s; /* default 10 */
    double retry_s;          /* default 2 */
};

struct kube_lease;

struct kube_lease *kube_lease_new(struct kube_client *kc, const struct kube_lease_opts *o,
                                  herr *e);
/* Blocks until this process holds the lease (0) or *stop becomes non-zero (-1). Starts the
 * renewing thread; on_lost(user) is called once if leadership is lost later. */
int kube_lease_run(struct kube_lease *l, const volatile int *stop, void (*on_lost)(void *),
                   void *user);
int kube_lease_is_leader(struct kube_lease *l);
/* Stops renewing and, when holding the lease, releases it. */
void kube_lease_release(struct kube_lease *l);
void kube_lease_free(struct kube_lease *l);

/* One acquire-or-renew attempt (exposed for tests): 1 = leader, 0 = someone else, -1 error. */
int kube_lease_try(struct kube_lease *l, herr *e);

#endif
