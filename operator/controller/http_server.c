#include "http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct http_server {
    int fd, port;
    volatile int stop;
    pthread_t thread;
    http_handler_fn fn;
    void *user;
};

static void serve_one(struct http_server *s, int c)
{
    char req[2048];
    size_t len = 0;
    struct pollfd p = {c, POLLIN, 0};
    while (len < sizeof req - 1 && poll(&p, 1, 2000) > 0) {
        ssize_t n = read(c, req + len, sizeof req - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        req[len] = '\0';
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
            break;
    }
    req[len] = '\0';
    char method[8] = "", path[512] = "";
    struct metrics_buf body = {0};
    const char *type = "text/plain; version=0.0.4";
    int code;
    if (sscanf(req, "%7s %511s", method, path) != 2) {
        code = 400;
        metrics_printf(&body, "bad request\n");
    } else if (strcmp(method, "GET") != 0) {
        code = 405;
        metrics_printf(&body, "only GET\n");
    } else {
        char *q = strchr(path, '?');
        if (q)
            *q = '\0';
        code = s->fn(s->user, path, &body, &type);
    }
    const char *reason = code == 200 ? "OK" : code == 404 ? "Not Found" : code == 503 ? "Service Unavailable" : "Error";
    char head[384];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nCache-Control: no-store\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", code, reason, type,
                      body.len);
    if (hn > 0 && hn < (int)sizeof head && send(c, head, (size_t)hn, MSG_NOSIGNAL) == hn && body.len) {
        size_t off = 0;
        while (off < body.len) {
            ssize_t n = send(c, body.data + off, body.len - off, MSG_NOSIGNAL); /* a closed peer: no SIGPIPE */
            if (n <= 0)
                break;
            off += (size_t)n;
        }
    }
    free(body.data);
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
        serve_one(s, c);
        close(c);
    }
    return NULL;
}

struct http_server *http_server_start(const char *addr, http_handler_fn fn, void *user, herr *e)
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
    int rc = pthread_create(&s->thread, NULL, run, s);
    if (rc != 0) {
        close(fd);
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
    free(s);
}
