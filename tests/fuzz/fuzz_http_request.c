/* libFuzzer target: what a client sends the operator's HTTP server (metrics, health, the job
 * page; plain or TLS, the same head): the request head as serve_one reads it, at most
 * HTTP_REQUEST_MAX - 1 bytes up to its first NUL, taken apart by http_head_parse. A GET handed
 * on has a path that starts with "/", without its query and without white space, an Authorization value without line
 * breaks or surrounding blanks; anything else is answered 400 or 405. Seeds:
 * tests/fuzz/seeds/http_request (what Prometheus, the kubelet's probe and a browser send). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_server.h"

static void fail(const char *why, const struct http_head *h)
{
    fprintf(stderr, "http_head_parse: %s (method \"%s\", path \"%s\")\n", why, h->method, h->path);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char req[HTTP_REQUEST_MAX];
    static struct http_head h;
    size_t n = size < sizeof req - 1 ? size : sizeof req - 1;
    memcpy(req, data, n);
    req[n] = '\0';
    int code = http_head_parse(req, &h);
    if (code != 0 && code != 400 && code != 405)
        fail("a status other than 0, 400 or 405", &h);
    if (code == 0) {
        if (strcmp(h.method, "GET") != 0)
            fail("a GET handed on that is not one", &h);
        if (h.path[0] != '/' || strchr(h.path, '?') || strpbrk(h.path, " \t\r\n"))
            fail("a path that does not start with /, keeps its query or holds white space", &h);
    }
    if (h.has_authorization) {
        const char *a = h.authorization;
        size_t al = strlen(a);
        if (strpbrk(a, "\r\n") || (al && (a[0] == ' ' || a[0] == '\t' || a[al - 1] == ' ' ||
                                          a[al - 1] == '\t')))
            fail("an Authorization value with a line break or blanks around it", &h);
    }
    return 0;
}
