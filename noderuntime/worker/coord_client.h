/* The worker's connection to the coordinator (libwebsockets client, ws:// or wss://).
 *
 * One thread drives it (coord_client_poll); any thread may queue messages with
 * coord_client_send (e.g. the trainer's progress hook). Messages are common/protocol.h texts. */
#ifndef HOLMES_COORD_CLIENT_H
#define HOLMES_COORD_CLIENT_H

#include "error.h"
#include "protocol.h"

struct coord_client;

/* Parses `url` (ws://host:port/path or wss://...) and prepares a context; does not connect. */
int coord_client_create(struct coord_client **out, const char *url, herr *e);
/* The same; for wss:// the coordinator's certificate is checked against ca_file (PEM) when
 * given, else against the system's CAs. */
int coord_client_create_tls(struct coord_client **out, const char *url, const char *ca_file,
                            herr *e);
void coord_client_destroy(struct coord_client *cl);

/* Connects (again, after a drop), waiting at most timeout_ms for the handshake.
 * Returns 0 when connected, -1 with the reason in `e`. Messages queued while disconnected
 * are dropped (the caller re-sends hello after a reconnect). */
int coord_client_connect(struct coord_client *cl, int timeout_ms, herr *e);
int coord_client_connected(const struct coord_client *cl);

/* Queues `text` (ownership taken; NULL is refused) for sending. Thread-safe.
 * Returns -1 when not connected (the text is freed). */
int coord_client_send(struct coord_client *cl, char *text);

/* Services the connection until a message arrives (returns 1 and fills `out`; free it with
 * proto_msg_free), timeout_ms passes (returns 0), or the connection is closed or the
 * coordinator sent something unparsable (returns -1 with the reason in `e`).
 * timeout_ms < 0 waits without limit. */
int coord_client_poll(struct coord_client *cl, int timeout_ms, struct proto_msg *out, herr *e);

/* Services the connection once until queued sends are flushed or timeout_ms passes. */
void coord_client_flush(struct coord_client *cl, int timeout_ms);

#endif
