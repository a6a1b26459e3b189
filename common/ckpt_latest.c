/* The step <dir>/latest-step names (ckpt_latest.h). */
#include "ckpt_latest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ckpt_read_latest_step(const char *dir, long long *step, herr *e)
{
    char path[4096], buf[40];
    if (snprintf(path, sizeof path, "%s/latest-step", dir) >= (int)sizeof path)
        return herr_config(e, "checkpoint directory %s: too long a path", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT)
            return 1;
        return herr_set_kind(e, herr_kind_of_errno(errno), "cannot read %s: %s", path,
                             strerror(errno));
    }
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int err = ferror(f);
    fclose(f);
    if (err)
        return herr_set_kind(e, HERR_FAULT, "cannot read %s", path);
    buf[n] = '\0';
    size_t digits = strspn(buf, "0123456789");
    int ok = digits > 0 && digits <= 16 && (buf[digits] == '\0' ||
                                            (buf[digits] == '\n' && buf[digits + 1] == '\0'));
    long long v = ok ? strtoll(buf, NULL, 10) : -1;
    if (!ok || v > (1LL << 53)) {
        buf[strcspn(buf, "\n")] = '\0';
        return herr_config(e, "%s must hold a step number (decimal digits, at most 2^53), not "
                           "\"%.24s%s\"", path, buf, n >= sizeof buf - 1 ? "..." : "");
    }
    *step = v;
    return 0;
}
