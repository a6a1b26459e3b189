/* What every fuzz target asserts of a rejection: it names the field (or the whole message, or the
 * stream) and the rule broken - "hello.worker: must be ...", "groups[2]: ...", "message: ..." -
 * never a bare "invalid input". A rejection that does not is a finding: the target aborts with
 * it, and libFuzzer keeps the input. */
#ifndef HOLMES_FUZZ_CHECK_H
#define HOLMES_FUZZ_CHECK_H

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

/* "<field path>: <rule>" (or "<path> must ..." / "<path> is ..."): the path is what comes before,
 * at most three words, starting with a letter ("hello.worker", "groups[2]", "watch stream",
 * "spec.parallelism.data"; a key that came from outside may hold any printable text). */
static inline int fuzz_names_field(const char *m)
{
    if (!strncmp(m, "out of memory", 13))
        return 1; /* libFuzzer's memory limit: not the input's fault */
    if (!isalpha((unsigned char)m[0]))
        return 0;
    const char *end = strstr(m, ": ");
    const char *must = strstr(m, " must "), *is = strstr(m, " is ");
    if (must && (!end || must < end))
        end = must;
    if (is && (!end || is < end))
        end = is;
    if (!end || end - m < 2)
        return 0;
    int spaces = 0;
    for (const char *p = m; p < end; p++)
        spaces += *p == ' ';
    return spaces <= 2;
}

/* One line a log or an Event takes: no control characters, well-formed UTF-8 (herr_clean). */
static inline int fuzz_clean_text(const char *m)
{
    char copy[2048];
    snprintf(copy, sizeof copy, "%s", m);
    herr_clean(copy);
    return strcmp(copy, m) == 0;
}

static inline void fuzz_check_rejection(const char *what, const herr *e)
{
    if (!e->msg[0] || !fuzz_names_field(e->msg)) {
        fprintf(stderr, "%s: a rejection that names no field: \"%s\"\n", what, e->msg);
        abort();
    }
    if (!fuzz_clean_text(e->msg)) {
        fprintf(stderr, "%s: a rejection with control characters or broken UTF-8\n", what);
        abort();
    }
}

#endif
