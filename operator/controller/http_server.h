/* A minimal HTTP/1.0 server for the metrics, health and job page endpoints: one thread, GET only,
 * one request per connection, plain or over TLS (HTTPS with the operator's certificate, taken
 * again from the TLS keeper whenever it renews it). */
#ifndef HOLMES_HTTP_SERVER_H
#define HOLMES_HTTP_SERVER_H

#include "error.h"
#include "metrics.h"

struct tls_keeper;

/* What the handler gets of a request: its path (query removed) and its Authorization header
 * ("Bearer ..." as sent; NULL when absent). */
struct http_request {
    const char *path;
    const char *authorization;
};

/* Fills body for the request; returns the HTTP status to send. *content_type starts as the
 * Prometheus text format; a handler serving something else sets it (a static string). A 401
 * answer carries "WWW-Authenticate: Bearer". */
typedef int (*http_handler_fn)(void *user, const struct http_request *req,
                               struct metrics_buf *body, const char **content_type);

/* A request's head as read (request line and headers), taken apart. */
#define HTTP_REQUEST_MAX 16384 /* request line and headers; a bearer token is 1 to 2 KiB */
struct http_head {
    char method[8], path[512];             /* the path without its query */
    char authorization[HTTP_REQUEST_MAX];  /* the Authorization header's value, trimmed */
    int has_authorization;
};

/* Parses req (NUL-terminated, at most HTTP_REQUEST_MAX - 1 bytes): 0 for a GET to hand to the
 * handler; else the status to answer, 400 (no method and path, or a path not starting with
 * "/") or 405 (not GET). */
int http_head_parse(const char *req, struct http_head *h);

struct http_server;

/* addr: "host:port" or ":port" (all interfaces); port 0 picks one (see http_server_port).
 * tls: NULL = plain HTTP; else HTTPS with the keeper's certificate and key. */
struct http_server *http_server_start(const char *addr, http_handler_fn fn, void *user,
                                      struct tls_keeper *tls, herr *e);
int http_server_port(const struct http_server *s);
void http_server_stop(struct http_server *s);

#endif
