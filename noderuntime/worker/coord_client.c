#include "coord_client.h"

#include <libwebsockets.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

struct qmsg {
    struct qmsg *next;
    size_t len;
    unsigned char buf[]; /* LWS_PRE, then text (NUL-terminated for inbound) */
};

struct coord_client {
    struct lws_context *ctx;
    struct lws_protocols protocols[2];
    struct lws *wsi;
    char url[512];
    char ca[256];           /* the CA file given, for messages ("" = the system's CAs) */
    char address[256], path[256];
    int port, tls;
    enum { CL_IDLE, CL_CONNECTING, CL_OPEN, CL_CLOSED } state;
    char close_why[256];
    /* outbound: guarded by mu (any thread may send) */
    pthread_mutex_t mu;
    struct qmsg *out_head, *out_tail;
    /* inbound: only the polling thread */
    struct qmsg *in_head, *in_tail;
    char *rx;
    size_t rx_len, rx_cap;
    int rx_bad;
    lws_sorted_usec_list_t timer;
};

static void q_free(struct qmsg **head, struct qmsg **tail)
{
    while (*head) {
        struct qmsg *m = *head;
        *head = m->next;
        free(m);
    }
    *tail = NULL;
}

static void q_push(struct qmsg **head, struct qmsg **tail, struct qmsg *m)
{
    m->next = NULL;
    if (*tail)
        (*tail)->next = m;
    else
        *head = m;
    *tail = m;
}

static void on_closed(struct coord_client *cl, const char *why)
{
    if (cl->state != CL_CLOSED)
        snprintf(cl->close_why, sizeof cl->close_why, "%s", why);
    cl->state = CL_CLOSED;
    cl->wsi = NULL;
    pthread_mutex_lock(&cl->mu);
    q_free(&cl->out_head, &cl->out_tail);
    pthread_mutex_unlock(&cl->mu);
}

static int on_receive(struct coord_client *cl, struct lws *wsi, const void *in, size_t len)
{
    if (lws_is_first_fragment(wsi))
        cl->rx_len = 0;
    if (cl->rx_len + len > PROTO_MAX_MESSAGE) {
        on_closed(cl, "the coordinator sent a message over the size limit");
        return -1;
    }
    if (cl->rx_len + len + 1 > cl->rx_cap) {
        size_t cap = cl->rx_cap ? cl->rx_cap : 8192;
        while (cap < cl->rx_len + len + 1)
            cap *= 2;
        char *nb = realloc(cl->rx, cap);
        if (!nb) {
            on_closed(cl, "out of memory receiving a message");
            return -1;
        }
        cl->rx = nb;
        cl->rx_cap = cap;
    }
    memcpy(cl->rx + cl->rx_len, in, len);
    cl->rx_len += len;
    if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
        struct qmsg *m = malloc(sizeof *m + cl->rx_len + 1);
        if (!m) {
            on_closed(cl, "out of memory receiving a message");
            return -1;
        }
        m->len = cl->rx_len;
        memcpy(m->buf, cl->rx, cl->rx_len);
        m->buf[cl->rx_len] = '\0';
        q_push(&cl->in_head, &cl->in_tail, m);
        cl->rx_len = 0;
    }
    return 0;
}

static int on_writeable(struct coord_client *cl, struct lws *wsi)
{
    pthread_mutex_lock(&cl->mu);
    struct qmsg *m = cl->out_head;
    if (m) {
        cl->out_head = m->next;
        if (!cl->out_head)
            cl->out_tail = NULL;
    }
    int more = cl->out_head != NULL;
    pthread_mutex_unlock(&cl->mu);
    if (!m)
        return 0;
    int n = lws_write(wsi, m->buf + LWS_PRE, m->len, LWS_WRITE_TEXT);
    free(m);
    if (n < 0) {
        on_closed(cl, "write to the coordinator failed");
        return -1;
    }
    if (more)
        lws_callback_on_writable(wsi);
    return 0;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
    struct coord_client *cl = lws_context_user(lws_get_context(wsi));
    (void)user;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        if (wsi != cl->wsi)
            return -1; /* not the current attempt: close it */
        cl->state = CL_OPEN;
        lws_callback_on_writable(wsi);
        return 0;
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        if (wsi != cl->wsi)
            return 0; /* an attempt already given up on must not close the current one */
        char why[sizeof cl->url + sizeof cl->ca + 200];
        SSL *ssl = cl->tls ? lws_get_ssl(wsi) : NULL;
        long vr = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
        if (vr != X509_V_OK) /* say why TLS failed: OpenSSL's error queue says little */
            snprintf(why, sizeof why, "cannot connect to %s: the coordinator's certificate does "
                     "not verify against %s: %s", cl->url, cl->ca[0] ? cl->ca : "the system's CAs",
                     X509_verify_cert_error_string(vr));
        else
            snprintf(why, sizeof why, "cannot connect to %s: %.100s", cl->url,
                     in ? (const char *)in : "connection error");
        on_closed(cl, why);
        return 0;
    }
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (in && len > 2) {
            int n = len - 2 > 200 ? 200 : (int)(len - 2);
            snprintf(cl->close_why, sizeof cl->close_why,
                     "the coordinator closed the connection: %.*s", n, (const char *)in + 2);
        }
        return 0;
    case LWS_CALLBACK_CLIENT_RECEIVE:
        return cl->wsi == wsi ? on_receive(cl, wsi, in, len) : -1;
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        return cl->wsi == wsi ? on_writeable(cl, wsi) : -1;
    case LWS_CALLBACK_CLIENT_CLOSED:
        if (cl->wsi == wsi)
            on_closed(cl, cl->close_why[0] ? cl->close_why : "the coordinator closed the connection");
        return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (cl && cl->wsi && cl->state == CL_OPEN) {
            pthread_mutex_lock(&cl->mu);
            int pending = cl->out_head != NULL;
            pthread_mutex_unlock(&cl->mu);
            if (pending)
                lws_callback_on_writable(cl->wsi);
        }
        return 0;
    default:
        return 0;
    }
}

/* Only wakes lws_service at a loop's deadline (service_until). */
static void timer_cb(lws_sorted_usec_list_t *sul)
{
    (void)sul;
}

/* One round of lws_service that returns by `until` (monotonic ms; INFINITY: when something
 * happens). libwebsockets 4.1 gives poll() the time to its next timer in whole milliseconds,
 * rounded down: in the millisecond before a timer is due it polls with no timeout, round after
 * round. The 20 ms tick this file had made about 1,000 poll calls a second in every worker, and
 * a wait ended up to a tick late. So the timer is set a millisecond past `until`, and a wait
 * shorter than a millisecond is slept here, not polled. */
static int service_until(struct coord_client *cl, double until)
{
    if (isinf(until)) {
        lws_sul_cancel(&cl->timer);
        return lws_service(cl->ctx, 0);
    }
    double left = until - clock_mono_ms();
    if (left < 1.0) {
        if (left > 0)
            clock_sleep_s(left / 1e3);
        return 0;
    }
    lws_sul_schedule(cl->ctx, 0, &cl->timer, timer_cb,
                     (lws_usec_t)(left * LWS_US_PER_MS) + LWS_US_PER_MS);
    return lws_service(cl->ctx, 0);
}

/* Deadline in ms (monotonic) for timeout_ms; timeout_ms < 0 means none. */
static double deadline(int timeout_ms)
{
    return timeout_ms < 0 ? INFINITY : clock_mono_ms() + timeout_ms;
}

static void lws_log_to_ours(int level, const char *line)
{
    if (level & LLL_ERR)
        log_debug("libwebsockets: %.*s", (int)strcspn(line, "\n"), line);
}

int coord_client_create(struct coord_client **out, const char *url, herr *e)
{
    return coord_client_create_tls(out, url, NULL, e);
}

int coord_client_create_tls(struct coord_client **out, const char *url, const char *ca_file,
                            herr *e)
{
    *out = NULL;
    if (!url || strlen(url) >= sizeof ((struct coord_client *)0)->url)
        return herr_set(e, "coordinator URL: missing or too long");
    if (ca_file && (strlen(ca_file) >= sizeof ((struct coord_client *)0)->ca ||
                    access(ca_file, R_OK) != 0))
        return herr_set(e, "coordinator CA %s: cannot be read (HOLMES_COORDINATOR_CA)", ca_file);
    struct coord_client *cl = calloc(1, sizeof *cl);
    if (!cl)
        return herr_set(e, "out of memory");
    snprintf(cl->url, sizeof cl->url, "%s", url);
    snprintf(cl->ca, sizeof cl->ca, "%s", ca_file ? ca_file : "");
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", url);
    const char *prot = NULL, *ads = NULL, *path = NULL;
    int port = 0;
    if (lws_parse_uri(tmp, &prot, &ads, &port, &path) || !ads || !ads[0] ||
        (strcmp(prot, "ws") != 0 && strcmp(prot, "wss") != 0)) {
        free(cl);
        return herr_set(e, "coordinator URL %s: must look like ws://HOST:PORT/PATH or wss://...",
                        url);
    }
    cl->tls = strcmp(prot, "wss") == 0;
    cl->port = port;
    snprintf(cl->address, sizeof cl->address, "%s", ads);
    snprintf(cl->path, sizeof cl->path, "/%s", path ? path : "");
    pthread_mutex_init(&cl->mu, NULL);
    cl->protocols[0] = (struct lws_protocols){
        .name = "holmes.v1",
        .callback = callback,
        .per_session_data_size = 0,
        .rx_buffer_size = 65536,
    };
    lws_set_log_level(LLL_ERR, lws_log_to_ours);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = cl->protocols;
    info.user = cl;
    info.options = cl->tls ? LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT : 0;
    if (cl->tls && ca_file)
        info.client_ssl_ca_filepath = ca_file;
    cl->ctx = lws_create_context(&info);
    if (!cl->ctx) {
        pthread_mutex_destroy(&cl->mu);
        free(cl);
        return herr_set(e, "coordinator client: cannot create the libwebsockets context");
    }
    *out = cl;
    return 0;
}

void coord_client_destroy(struct coord_client *cl)
{
    if (!cl)
        return;
    lws_sul_cancel(&cl->timer);
    lws_context_destroy(cl->ctx);
    q_free(&cl->out_head, &cl->out_tail);
    q_free(&cl->in_head, &cl->in_tail);
    free(cl->rx);
    pthread_mutex_destroy(&cl->mu);
    free(cl);
}

int coord_client_connect(struct coord_client *cl, int timeout_ms, herr *e)
{
    if (cl->state == CL_OPEN)
        return 0;
    q_free(&cl->in_head, &cl->in_tail);
    cl->close_why[0] = '\0';
    cl->rx_len = 0;
    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = cl->ctx;
    ci.address = cl->address;
    ci.port = cl->port;
    ci.path = cl->path;
    ci.host = cl->address;
    ci.origin = cl->address;
    ci.protocol = cl->protocols[0].name;
    ci.ssl_connection = cl->tls ? LCCSCF_USE_SSL : 0;
    ci.pwsi = &cl->wsi;
    cl->state = CL_CONNECTING;
    if (!lws_client_connect_via_info(&ci)) {
        cl->state = CL_CLOSED;
        cl->wsi = NULL;
        return herr_set(e, "cannot connect to %s", cl->url);
    }
    double until = deadline(timeout_ms);
    while (cl->state == CL_CONNECTING && clock_mono_ms() < until)
        if (service_until(cl, until) < 0)
            break;
    if (cl->state == CL_OPEN)
        return 0;
    if (cl->state == CL_CONNECTING) {
        /* Give up on this attempt and close it now (we are outside any callback): closed
         * later, its callbacks and lws's write through pwsi (&cl->wsi) could land on the next
         * attempt's connection. */
        if (cl->wsi)
            lws_set_timeout(cl->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_SYNC);
        cl->state = CL_CLOSED;
        cl->wsi = NULL;
        return herr_set(e, "cannot connect to %s: no answer within %d ms", cl->url, timeout_ms);
    }
    return herr_set(e, "%s", cl->close_why[0] ? cl->close_why : "connection failed");
}

int coord_client_connected(const struct coord_client *cl)
{
    return cl->state == CL_OPEN;
}

int coord_client_send(struct coord_client *cl, char *text)
{
    if (!text)
        return -1;
    size_t len = strlen(text);
    struct qmsg *m = malloc(sizeof *m + LWS_PRE + len);
    if (!m) {
        free(text);
        return -1;
    }
    m->len = len;
    memcpy(m->buf + LWS_PRE, text, len);
    free(text);
    pthread_mutex_lock(&cl->mu);
    int ok = cl->state == CL_OPEN;
    if (ok)
        q_push(&cl->out_head, &cl->out_tail, m);
    pthread_mutex_unlock(&cl->mu);
    if (!ok) {
        free(m);
        return -1;
    }
    lws_cancel_service(cl->ctx);
    return 0;
}

int coord_client_poll(struct coord_client *cl, int timeout_ms, struct proto_msg *out, herr *e)
{
    double until = deadline(timeout_ms);
    for (;;) {
        if (cl->in_head) {
            struct qmsg *m = cl->in_head;
            cl->in_head = m->next;
            if (!cl->in_head)
                cl->in_tail = NULL;
            int rc = proto_parse((const char *)m->buf, m->len, out, e);
            free(m);
            if (rc)
                return herr_wrap(e, "from the coordinator");
            return 1;
        }
        if (cl->state != CL_OPEN) {
            return herr_set(e, "%s", cl->close_why[0] ? cl->close_why : "not connected");
        }
        if (clock_mono_ms() >= until)
            return 0;
        if (service_until(cl, until) < 0) {
            return herr_set(e, "coordinator connection: event loop failed");
        }
    }
}

void coord_client_flush(struct coord_client *cl, int timeout_ms)
{
    double until = deadline(timeout_ms);
    for (;;) {
        pthread_mutex_lock(&cl->mu);
        int pending = cl->out_head != NULL;
        pthread_mutex_unlock(&cl->mu);
        if (!pending || cl->state != CL_OPEN || clock_mono_ms() >= until)
            break;
        if (service_until(cl, until) < 0)
            break;
    }
}
