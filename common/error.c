#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Length of the well-formed UTF-8 sequence at s (1..4), or 0 when it is not one. */
static int utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || (n == 2 && c < 0xc2) || (n == 4 && c > 0xf4))
        return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if (n == 3) { /* no overlong forms, no UTF-16 surrogates */
        unsigned cp = (c & 0x0f) << 12 | (s[1] & 0x3fu) << 6 | (s[2] & 0x3fu);
        if (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
    }
    if (n == 4) {
        unsigned cp = (c & 0x07) << 18 | (s[1] & 0x3fu) << 12 | (s[2] & 0x3fu) << 6 | (s[3] & 0x3fu);
        if (cp < 0x10000 || cp > 0x10ffff)
            return 0;
    }
    return n;
}

void herr_clean(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        int n = utf8_len(p);
        if (n == 0 || (n == 1 && (*p < 0x20 || *p == 0x7f))) {
            *p++ = '?';
            continue;
        }
        p += n;
    }
}

static int set_va(herr *e, enum herr_kind kind, const char *fmt, va_list ap)
{
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    herr_clean(e->msg);
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
    herr_clean(e->msg);
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
