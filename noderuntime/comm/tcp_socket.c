#include "tcp_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "clock.h"

#define MAX_PENDING 256

/* ---------- listener ---------- */

struct pending_conn {
    int fd;
    uint32_t group_id;
    int from;
    int size;
};

struct tcp_listener {
    int fd;
    int port;
    struct pending_conn pending[MAX_PENDING];
    int npending;
};

int tcp_listener_open(struct tcp_listener **out, const char *bind_host, int port, herr *e)
{
    *out = NULL;
    if (port < 0 || port > 65535)
        return herr_set(e, "listen port %d is out of range 0..65535", port);
    struct tcp_listener *l = calloc(1, sizeof *l);
    if (!l)
        return herr_set(e, "out of memory for the TCP listener");
    l->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        free(l);
        return herr_set(e, "socket: %s", strerror(errno));
    }
    int one = 1;
    setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind_host && *bind_host) {
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int rc = getaddrinfo(bind_host, NULL, &hints, &res);
        if (rc != 0) {
            close(l->fd);
            free(l);
            return herr_set(e, "cannot resolve listen host '%s': %s", bind_host, gai_strerror(rc));
        }
        a.sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
        freeaddrinfo(res);
    }
    if (bind(l->fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(l->fd, 128) != 0) {
        herr_set(e, "cannot listen on %s:%d: %s", bind_host ? bind_host : "*", port, strerror(errno));
        close(l->fd);
        free(l);
        return -1;
    }
    socklen_t alen = sizeof a;
    if (getsockname(l->fd, (struct sockaddr *)&a, &alen) != 0) {
        herr_set(e, "getsockname: %s", strerror(errno));
        close(l->fd);
        free(l);
        return -1;
    }
    l->port = ntohs(a.sin_port);
    *out = l;
    return 0;
}

int tcp_listener_port(const struct tcp_listener *l) { return l->port; }
int tcp_listener_fd(const struct tcp_listener *l) { return l->fd; }

int tcp_listener_adopt(struct tcp_listener **out, int fd, herr *e)
{
    *out = NULL;
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    int listening = 0;
    socklen_t il = sizeof listening;
    if (getsockname(fd, (struct sockaddr *)&a, &alen) != 0 || a.sin_family != AF_INET ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &il) != 0 || !listening)
        return herr_set(e, "fd %d is not a listening TCP socket", fd);
    struct tcp_listener *l = calloc(1, sizeof *l);
    if (!l)
        return herr_set(e, "out of memory for the TCP listener");
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
        free(l);
        return herr_set(e, "fcntl: %s", strerror(errno));
    }
    l->fd = fd;
    l->port = ntohs(a.sin_port);
    *out = l;
    return 0;
}

void tcp_listener_close(struct tcp_listener *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->npending; i++)
        close(l->pending[i].fd);
    close(l->fd);
    free(l);
}

/* Moves exactly len bytes (reading, or writing with MSG_MORE when `more`); 0, or -1 with errno
 * (0 for EOF). */
static int io_full(int fd, void *buf, size_t len, int writing, int more)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = writing ? send(fd, p, len, MSG_NOSIGNAL | (more ? MSG_MORE : 0))
                            : recv(fd, p, len, MSG_WAITALL);
        if (n == 0 && !writing) {
            errno = 0;
            return -1;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int tcp_read_full(int fd, void *buf, size_t len) { return io_full(fd, buf, len, 0, 0); }

int tcp_write_full(int fd, const void *buf, size_t len, int more)
{
    return io_full(fd, (void *)(uintptr_t)buf, len, 1, more);
}

void tcp_set_timeout(int fd, int opt, double s)
{
    struct timeval tv = {(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv);
}

void tcp_tune_socket(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Accepts until a connection for (group_id, from) is stashed or the deadline passes. */
int tcp_listener_take(struct tcp_listener *l, uint32_t group_id, int from, double deadline,
                      int *fd_out)
{
    for (;;) {
        for (int i = 0; i < l->npending; i++) {
            if (l->pending[i].group_id == group_id && l->pending[i].from == from) {
                *fd_out = l->pending[i].fd;
                l->pending[i] = l->pending[--l->npending];
                return 0;
            }
        }
        double left = deadline - clock_mono_s();
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = l->fd, .events = POLLIN};
        int pr = poll(&p, 1, (int)(left * 1000) + 1);
        if (pr <= 0)
            continue;
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        uint32_t hello[4];
        tcp_set_timeout(fd, SO_RCVTIMEO, left > 5 ? 5 : left);
        if (tcp_read_full(fd, hello, sizeof hello) != 0 || hello[0] != HELLO_MAGIC ||
            l->npending == MAX_PENDING) {
            close(fd);
            continue;
        }
        tcp_set_timeout(fd, SO_RCVTIMEO, 0);
        l->pending[l->npending++] = (struct pending_conn){fd, hello[1], (int)hello[2], (int)hello[3]};
    }
}

int tcp_connect_until(const struct tcp_endpoint *ep, double deadline, char *why, size_t whylen)
{
    char port[16];
    snprintf(port, sizeof port, "%d", ep->port);
    snprintf(why, whylen, "no attempt");
    while (clock_mono_s() < deadline) {
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int rc = getaddrinfo(ep->host, port, &hints, &res);
        if (rc != 0) {
            snprintf(why, whylen, "%s", gai_strerror(rc));
            clock_sleep_s(0.05);
            continue;
        }
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            snprintf(why, whylen, "socket: %s", strerror(errno));
            freeaddrinfo(res);
            return -1;
        }
        int cr = connect(fd, res->ai_addr, res->ai_addrlen);
        freeaddrinfo(res);
        if (cr != 0 && errno == EINPROGRESS) {
            double left = deadline - clock_mono_s();
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (left > 0 && poll(&p, 1, (int)(left * 1000) + 1) == 1) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                cr = err ? -1 : 0;
                errno = err ? err : ETIMEDOUT;
            } else {
                errno = ETIMEDOUT;
            }
        }
        if (cr == 0) {
            int flags = fcntl(fd, F_GETFL);
            fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
            return fd;
        }
        snprintf(why, whylen, "%s", strerror(errno));
        close(fd);
        clock_sleep_s(0.05);
    }
    return -1;
}

