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
 * "spec.parallelism.data"); a key that came from outside is quoted, ids["any text"]. */
static inline int fuzz_names_field(const char *m)
{
    if (!strncmp(m, "out of memory", 13))
        return 1; /* libFuzzer's memory limit: not the input's fault */
    if (!isalpha((unsigned char)m[0]))
        return 0;
    size_t i = 0;
    int spaces = 0;
    for (;;) {
        if (m[i] == '[' && m[i + 1] == '"') { /* a key from outside, quoted: json_key_path */
            i += 2;
            while (m[i] && !(m[i] == '"' && m[i + 1] == ']'))
                i += m[i] == '\\' && m[i + 1] ? 2 : 1;
            if (!m[i])
                return 0;
            i += 2;
            continue;
        }
        if (!m[i])
            return 0;
        if (m[i] == ':' && m[i + 1] == ' ')
            return i >= 2;
        if (!strncmp(m + i, " must ", 6) || !strncmp(m + i, " is ", 4))
            return i >= 2;
        if (m[i] == ' ' && ++spaces > 2)
            return 0;
        if ((unsigned char)m[i] < 0x20)
            return 0;
        i++;
    }
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
