#include "base64.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

char *base64_encode(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc((n + 2) / 3 * 4 + 1);
    if (out)
        EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
    return out;
}

char *base64_decode(const char *in, size_t *out_len, const char *what, herr *e)
{
    size_t n = strlen(in);
    char *clean = malloc(n + 1);
    if (!clean) {
        herr_set(e, "%s: out of memory", what);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (in[i] != '\n' && in[i] != '\r' && in[i] != ' ' && in[i] != '\t')
            clean[k++] = in[i];
    clean[k] = '\0';
    if (k % 4 != 0) {
        free(clean);
        herr_set(e, "%s: not valid base64 (length %zu is not a multiple of 4)", what, k);
        return NULL;
    }
    unsigned char *out = malloc(k / 4 * 3 + 1);
    if (!out) {
        free(clean);
        herr_set(e, "%s: out of memory", what);
        return NULL;
    }
    int m = k ? EVP_DecodeBlock(out, (unsigned char *)clean, (int)k) : 0;
    if (m < 0) {
        free(clean);
        free(out);
        herr_set(e, "%s: not valid base64", what);
        return NULL;
    }
    size_t len = (size_t)m;
    if (k >= 1 && clean[k - 1] == '=')
        len--;
    if (k >= 2 && clean[k - 2] == '=')
        len--;
    free(clean);
    out[len] = '\0';
    if (out_len)
        *out_len = len;
    return (char *)out;
}
