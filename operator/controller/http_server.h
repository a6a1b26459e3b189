/* A minimal HTTP/1.0 server for the metrics, health and job page endpoints: one thread, GET only,
 * one request per connection. */
#ifndef HOLMES_HTTP_SERVER_H
#define HOLMES_HTTP_SERVER_H

#include "error.h"
#include "metrics.h"

/* Fills body for path; returns the HTTP status to send. *content_type starts as the
 * Prometheus text format; a handler serving something else sets it (a static string). */
typedef int (*http_handler_fn)(void *user, const char *path, struct metrics_buf *body,
                               const char **content_type);

struct http_server;

/* addr: "host:port" or ":port" (all interfaces); port 0 picks one (see http_server_port). */
struct http_server *http_server_start(const char *addr, http_handler_fn fn, void *user, herr *e);
int http_server_port(const struct http_server *s);
void http_server_stop(struct http_server *s);

#endif
