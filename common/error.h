/* Errors are returned, not printed: a function that can fail takes a `herr *`
 * and fills it with one readable sentence naming the field, file or peer. */
#ifndef HOLMES_ERROR_H
#define HOLMES_ERROR_H

#include <stddef.h>

typedef struct herr {
    char msg[1024];
} herr;

/* Sets the message (printf-style) and returns -1, so `return herr_set(e, ...)` reads well.
 * A NULL `e` is allowed: the message is dropped. */
int herr_set(herr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes an existing message: "context: old message". Returns -1. */
int herr_wrap(herr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
