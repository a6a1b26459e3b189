#include "vocab_testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

struct tokenizer *test_vocab(const char *dir, const char *const *pieces, int n, int skip)
{
    char path[600];
    snprintf(path, sizeof path, "%s/tok-%d.bin", dir, n);
    FILE *f = fopen(path, "wb");
    if (!f)
        return NULL;
    uint32_t h[256] = {20240328u, 2, (uint32_t)(256 + n + 1), (uint32_t)(256 + n)};
    int ok = fwrite(h, sizeof h, 1, f) == 1;
    for (int b = 0; b < 256; b++) {
        unsigned char rec[2] = {1, (unsigned char)(b == skip ? 'x' : b)};
        ok = ok && fwrite(rec, 1, 2, f) == 2;
    }
    for (int i = 0; i <= n; i++) {
        const char *p = i < n ? pieces[i] : "<|endoftext|>";
        unsigned char len = (unsigned char)strlen(p);
        ok = ok && fwrite(&len, 1, 1, f) == 1 && fwrite(p, 1, len, f) == len;
    }
    if (fclose(f) != 0 || !ok) {
        printf("# %s: not written\n", path);
        return NULL;
    }
    struct tokenizer *t = NULL;
    herr e = {0};
    if (tokenizer_open(&t, path, &e) != 0)
        printf("# %s\n", e.msg);
    return t;
}
