#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int set_va(herr *e, enum herr_kind kind, const char *fmt, va_list ap)
{
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    e->kind = kind;
    return -1;
}

/* herr_set, herr_config, herr_peer: the same setter for each fixed kind. */
#define KIND_SETTER(fn, kind)                                                                      \
    int fn(herr *e, const char *fmt, ...)                                                          \
    {                                                                                              \
        if (!e)                                                                                    \
            return -1;                                                                             \
        va_list ap;                                                                                \
        va_start(ap, fmt);                                                                         \
        set_va(e, kind, fmt, ap);                                                                  \
        va_end(ap);                                                                                \
        return -1;                                                                                 \
    }
KIND_SETTER(herr_set, HERR_FAULT)
KIND_SETTER(herr_config, HERR_CONFIG)
KIND_SETTER(herr_peer, HERR_PEER)

int herr_set_kind(herr *e, enum herr_kind kind, const char *fmt, ...)
{
    if (!e)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    set_va(e, kind, fmt, ap);
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

enum herr_kind herr_kind_of_errno(int err)
{
    switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EROFS:
    case EACCES:
    case EPERM:
    case ENOENT:
    case ENOTDIR:
    case EISDIR:
    case ENAMETOOLONG:
        return HERR_CONFIG;
    default:
        return HERR_FAULT;
    }
}

const char *herr_kind_name(enum herr_kind k)
{
    switch (k) {
    case HERR_CONFIG: return "config";
    case HERR_PEER: return "peer";
    case HERR_FAULT: break;
    }
    return "fault";
}
