#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int herr_set(herr *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int herr_wrap(herr *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    char joined[2 * sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(joined, sizeof e->msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof e->msg)
        n = (int)sizeof e->msg - 1;
    snprintf(joined + n, sizeof joined - (size_t)n, ": %s", e->msg);
    /* Keep the front of the sentence when it is too long. */
    memcpy(e->msg, joined, sizeof e->msg - 1);
    e->msg[sizeof e->msg - 1] = '\0';
    return -1;
}
