/* The TCP transport's sockets: the listener that accepts peers and stashes each connection by
 * (group, rank) until its communicator takes it, connecting with a deadline, whole reads and
 * writes. comm_tcp.c builds communicators on these. */
#ifndef HOLMES_TCP_SOCKET_H
#define HOLMES_TCP_SOCKET_H

#include <stddef.h>
#include <stdint.h>

#include "comm_tcp.h"

#define HELLO_MAGIC 0x484c4d53u /* "HLMS": a connection's first words {magic, group, from, size} */

/* Exactly len bytes; 0, or -1 with errno (0 for EOF). Writes with MSG_MORE when `more`. */
int tcp_read_full(int fd, void *buf, size_t len);
int tcp_write_full(int fd, const void *buf, size_t len, int more);
void tcp_set_timeout(int fd, int opt, double s); /* SO_RCVTIMEO / SO_SNDTIMEO; 0 = none */
void tcp_tune_socket(int fd);                    /* TCP_NODELAY */

/* Accepts until a connection that said hello for (group_id, from) is stashed, or the monotonic
 * deadline passes (-1). */
int tcp_listener_take(struct tcp_listener *l, uint32_t group_id, int from, double deadline,
                      int *fd_out);
/* Connects to ep, retrying until the monotonic deadline: the fd (blocking), or -1 with the last
 * reason in `why`. */
int tcp_connect_until(const struct tcp_endpoint *ep, double deadline, char *why, size_t whylen);

#endif
