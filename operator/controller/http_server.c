#include "http_server.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "tls_keeper.h"

#define IO_TIMEOUT_S 2      /* a slow client holds the (one) thread at most this long per step */

struct http_server {
    int fd, port;
    volatile int stop;
    pthread_t thread;
    http_handler_fn fn;
    void *user;
    struct tls_keeper *tls;
    unsigned long tls_gen;
    SSL_CTX *ctx;           /* only the server's thread uses it */
};

/* One connection, plain or TLS. */
struct conn {
    int fd;
    SSL *ssl;
};

static ssize_t conn_read(struct conn *c, char *buf, size_t n)
{
    if (!c->ssl)
        return read(c->fd, buf, n);
    int r = SSL_read(c->ssl, buf, (int)n);
    return r > 0 ? r : -1;
}

static int conn_write_all(struct conn *c, const char *buf, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = c->ssl ? SSL_write(c->ssl, buf + off, (int)(n - off))
                           : send(c->fd, buf + off, n - off, MSG_NOSIGNAL); /* no SIGPIPE */
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return 0;
}

/* The value of header `name` (case-insensitive) in the request's head, copied into out. */
static int header_value(const char *req, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    for (const char *line = strchr(req, '\n'); line; line = strchr(line, '\n')) {
        line++;
        if (*line == '\r' || *line == '\n' || !*line)
            break; /* end of the head */
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t vl = strcspn(v, "\r\n");
            while (vl && isspace((unsigned char)v[vl - 1]))
                vl--;
            if (vl >= n)
                return -1;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return 0;
        }
    }
    return -1;
}

int http_head_parse(const char *req, struct http_head *h)
{
    memset(h, 0, sizeof *h);
    h->has_authorization =
        header_value(req, "Authorization", h->authorization, sizeof h->authorization) == 0;
    if (sscanf(req, "%7s %511s", h->method, h->path) != 2)
        return 400;
    if (strcmp(h->method, "GET") != 0)
        return 405;
    if (h->path[0] != '/') /* origin-form only ("GET ?x" left an empty path) */
        return 400;
    char *q = strchr(h->path, '?');
    if (q)
        *q = '\0';
    return 0;
}

static const char *reason_of(int code)
{
    switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

static void serve_one(struct http_server *s, struct conn *c)
{
    char req[HTTP_REQUEST_MAX];
    size_t len = 0;
    struct pollfd p = {c->fd, POLLIN, 0};
    while (len < sizeof req - 1 && ((c->ssl && SSL_pending(c->ssl) > 0) ||
                                    poll(&p, 1, IO_TIMEOUT_S * 1000) > 0)) {
        ssize_t n = conn_read(c, req + len, sizeof req - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        req[len] = '\0';
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
            break;
    }
    req[len] = '\0';
    struct http_head h;
    struct metrics_buf body = {0};
    const char *type = "text/plain; version=0.0.4";
    int code = http_head_parse(req, &h);
    if (code == 400) {
        metrics_printf(&body, "bad request\n");
    } else if (code == 405) {
        metrics_printf(&body, "only GET\n");
    } else {
        struct http_request r = {.path = h.path,
                                 .authorization = h.has_authorization ? h.authorization : NULL};
        code = s->fn(s->user, &r, &body, &type);
    }
    char head[448];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nCache-Control: no-store\r\n%s"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", code, reason_of(code),
                      type, code == 401 ? "WWW-Authenticate: Bearer\r\n" : "", body.len);
    if (hn > 0 && hn < (int)sizeof head && conn_write_all(c, head, (size_t)hn) == 0 && body.len)
        conn_write_all(c, body.data, body.len);
    free(body.data);
    /* a bearer token: do not leave it in memory (explicit_bzero: a store the compiler keeps) */
    explicit_bzero(h.authorization, sizeof h.authorization);
    explicit_bzero(req, len);
}

/* The SSL_CTX with the keeper's newest certificate; 0, or -1 when there is none to serve. */
static int refresh_tls(struct http_server *s)
{
    struct coord_tls t = {0};
    int rc = tls_keeper_take(s->tls, &s->tls_gen, &t);
    if (rc <= 0)
        return s->ctx ? 0 : -1;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    herr e = {0};
    if (!ctx || coord_tls_ctx_use(ctx, t.tls_crt, t.tls_key, &e) != 0) {
        SSL_CTX_free(ctx);
        coord_tls_free(&t);
        return s->ctx ? 0 : -1; /* keep serving the one we have */
    }
    coord_tls_free(&t);
    SSL_CTX_free(s->ctx);
    s->ctx = ctx;
    return 0;
}

static void serve_conn(struct http_server *s, int fd)
{
    struct timeval tv = {IO_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct conn c = {.fd = fd};
    if (s->tls) {
        if (refresh_tls(s) != 0)
            return;
        c.ssl = SSL_new(s->ctx);
        if (!c.ssl || SSL_set_fd(c.ssl, fd) != 1 || SSL_accept(c.ssl) != 1) {
            SSL_free(c.ssl);
            ERR_clear_error();
            return; /* a plain client, a bad handshake or a timeout */
        }
    }
    serve_one(s, &c);
    if (c.ssl) {
        SSL_shutdown(c.ssl);
        SSL_free(c.ssl);
        ERR_clear_error();
    }
}

static void *run(void *arg)
{
    struct http_server *s = arg;
    while (!s->stop) {
        struct pollfd p = {s->fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            continue;
        serve_conn(s, c);
        close(c);
    }
    return NULL;
}

struct http_server *http_server_start(const char *addr, http_handler_fn fn, void *user,
                                      struct tls_keeper *tls, herr *e)
{
    const char *colon = strrchr(addr, ':');
    if (!colon) {
        herr_set(e, "address \"%s\": expected host:port or :port", addr);
        return NULL;
    }
    char host[256];
    size_t hl = (size_t)(colon - addr);
    if (hl >= sizeof host) {
        herr_set(e, "address \"%s\": host too long", addr);
        return NULL;
    }
    memcpy(host, addr, hl);
    host[hl] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535 || end == colon + 1) {
        herr_set(e, "address \"%s\": port must be a number 0..65535", addr);
        return NULL;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!host[0] || strcmp(host, "0.0.0.0") == 0)
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
    else if (strcmp(host, "localhost") == 0)
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        herr_set(e, "address \"%s\": host must be an IPv4 address", addr);
        return NULL;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        herr_set(e, "address %s: socket: %s", addr, strerror(errno));
        return NULL;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 64) != 0) {
        herr_set(e, "address %s: bind/listen: %s", addr, strerror(errno));
        close(fd);
        return NULL;
    }
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    struct http_server *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        herr_set(e, "out of memory");
        return NULL;
    }
    s->fd = fd;
    s->port = ntohs(sa.sin_port);
    s->fn = fn;
    s->user = user;
    s->tls = tls;
    if (tls && refresh_tls(s) != 0) {
        close(fd);
        free(s);
        herr_set(e, "address %s: no usable TLS certificate for HTTPS", addr);
        return NULL;
    }
    int rc = pthread_create(&s->thread, NULL, run, s);
    if (rc != 0) {
        close(fd);
        SSL_CTX_free(s->ctx);
        free(s);
        herr_set(e, "address %s: pthread_create: %s", addr, strerror(rc));
        return NULL;
    }
    return s;
}

int http_server_port(const struct http_server *s) { return s->port; }

void http_server_stop(struct http_server *s)
{
    if (!s)
        return;
    s->stop = 1;
    pthread_join(s->thread, NULL);
    close(s->fd);
    SSL_CTX_free(s->ctx);
    free(s);
}
