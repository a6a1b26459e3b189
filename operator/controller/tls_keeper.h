/* Keeps the operator's TLS material current, on a thread of its own: the coordinator's serving
 * certificate and key (also the HTTPS metrics listener's) and the CA workers verify them with.
 * Two sources:
 *   - a Secret the operator manages itself (coord_tls_sync_secret: made at start, renewed a
 *     third of its life before expiry, with the Services' DNS names);
 *   - PEM files (cert-manager's Secret mounted into the pod; kubelet updates them on renewal).
 * Readers poll: each holds the generation it last took and asks for anything newer, so no
 * reader runs on the keeper's thread. */
#ifndef HOLMES_TLS_KEEPER_H
#define HOLMES_TLS_KEEPER_H

#include "coord_tls.h"
#include "error.h"

struct kube_client;
struct tls_keeper;

struct tls_keeper_opts {
    /* either a Secret ... */
    struct kube_client *kc;
    const char *secret_ns, *secret_name;
    struct coord_tls_names names;   /* the serving certificate's names (copied) */
    struct coord_tls_life life;     /* 0s: the defaults */
    /* ... or files (ca_file may be NULL: workers then use the system's CAs) */
    const char *cert_file, *key_file, *ca_file;
    double interval_s;              /* between two checks; 0 = 3600 (Secret) or 60 (files) */
};

/* Loads the material once (an error here is the caller's to report: -1 with e set), then starts
 * the thread. */
struct tls_keeper *tls_keeper_start(const struct tls_keeper_opts *o, herr *e);
void tls_keeper_stop(struct tls_keeper *k);

/* 1 and a copy of the material (free it with coord_tls_free) when its generation is newer than
 * *gen (updated); 0 when not; -1 out of memory. Start with *gen = 0. Thread-safe. */
int tls_keeper_take(struct tls_keeper *k, unsigned long *gen, struct coord_tls *out);
/* A copy of the CA certificate (PEM; caller frees), NULL when there is none. Thread-safe. */
char *tls_keeper_ca(struct tls_keeper *k);
/* What the last check said went wrong ("" when it went well), for logs. Thread-safe. */
void tls_keeper_last_error(struct tls_keeper *k, char *buf, size_t n);

#endif
