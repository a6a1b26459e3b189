/* Errors are returned, not printed: a function that can fail takes a `herr *`
 * and fills it with one readable sentence naming the field, file or peer.
 *
 * An error also says what kind of failure it is, so that whoever decides on a retry (the
 * coordinator) can tell a cause from its consequences: herr_set makes a HERR_FAULT, the
 * sites that know better say so with herr_set_kind, and herr_wrap keeps the kind. */
#ifndef HOLMES_ERROR_H
#define HOLMES_ERROR_H

#include <stddef.h>

enum herr_kind {
    HERR_FAULT = 0,  /* a crash-like failure: retrying may help */
    HERR_CONFIG = 1, /* configuration, data or storage (disk full, bad shard, shape mismatch):
                        it fails the same way again, so it is not retried */
    HERR_PEER = 2,   /* lost a peer (connection closed, timed out waiting): usually the
                        consequence of another rank's failure, not a cause */
};

typedef struct herr {
    char msg[1024];
    int kind; /* enum herr_kind */
} herr;

/* Sets the message (printf-style) with kind HERR_FAULT and returns -1, so `return herr_set(e,
 * ...)` reads well. A NULL `e` is allowed: the message is dropped. */
int herr_set(herr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with a kind. */
int herr_set_kind(herr *e, enum herr_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* herr_set_kind with HERR_CONFIG and with HERR_PEER. */
int herr_config(herr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int herr_peer(herr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes an existing message: "context: old message". Keeps the kind. Returns -1. */
int herr_wrap(herr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Replaces, in place, control characters and bytes that are not well-formed UTF-8 with '?': an
 * error often quotes what came from outside (a JSON key, a peer's message), and it must stay
 * one readable line that a log, an Event or a status condition takes. Every setter above
 * applies it. */
void herr_clean(char *s);
/* The kind an errno from a write or an open means: full or read-only storage, a missing or
 * forbidden path are HERR_CONFIG; anything else HERR_FAULT. */
enum herr_kind herr_kind_of_errno(int err);
const char *herr_kind_name(enum herr_kind k); /* "fault", "config", "peer" */

#endif
