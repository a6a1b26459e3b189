/* Base64 as Kubernetes writes it (RFC 4648, padded): a Secret's data, a kubeconfig's *-data. */
#ifndef HOLMES_BASE64_H
#define HOLMES_BASE64_H

#include <stddef.h>

#include "error.h"

/* The NUL-terminated string s in base64; NULL out of memory. */
char *base64_encode(const char *s);
/* The bytes base64 text `in` holds (whitespace in it ignored), NUL-terminated, their count in
 * *out_len (when not NULL); NULL with e naming `what` when it is not base64, or out of memory. */
char *base64_decode(const char *in, size_t *out_len, const char *what, herr *e);

#endif
