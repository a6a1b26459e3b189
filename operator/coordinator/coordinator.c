/* The coordinator (coordinator.h): connections and their messages (hello, rendezvous, progress,
 * done, error), the libwebsockets glue and timer, and the public API. A job's state machine is in
 * coord_job.c. */
#include "coordinator_impl.h"

#include <libwebsockets.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "coord_tls.h"
#include "log.h"

#define TICK_US (100 * 1000)
#define RX_CHUNK 16384
/* Bounds on what one connection may cost (docs/protocol.md, "Limits"): before its hello a
 * connection is nobody's, so its messages are small (a hello is a few KiB); a peer that does not
 * read gets its connection closed once this much is queued for it. */
#define PRE_HELLO_MAX_MESSAGE 16384
#define OUT_QUEUE_MAX (8u << 20)
#define DEFAULT_MAX_PENDING 1024

const char *coord_state_name(enum coord_job_state s)
{
    switch (s) {
    case COORD_GATHERING: return "Gathering";
    case COORD_RENDEZVOUS: return "Rendezvous";
    case COORD_RUNNING: return "Running";
    case COORD_RESTARTING: return "Restarting";
    case COORD_SUCCEEDED: return "Succeeded";
    case COORD_FAILED: return "Failed";
    }
    return "Unknown";
}

/* ---------------------------------------------------------------- sending */

/* Queues `text` (taken over and freed) on the connection. */
int co_conn_send(struct conn *k, char *text)
{
    if (!text)
        return -1;
    size_t len = strlen(text);
    struct outmsg *m = malloc(sizeof *m + LWS_PRE + len);
    if (!m) {
        free(text);
        return -1;
    }
    m->next = NULL;
    m->len = len;
    memcpy(m->buf + LWS_PRE, text, len);
    free(text);
    if (k->queued + len > OUT_QUEUE_MAX) {
        /* the peer does not read: it is not going to catch up; close instead of growing */
        free(m);
        k->closing = 1;
        k->close_code = LWS_CLOSE_STATUS_POLICY_VIOLATION;
        snprintf(k->close_reason, sizeof k->close_reason, "not reading: %u MiB queued",
                 OUT_QUEUE_MAX >> 20);
        lws_set_timeout(k->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
        return -1;
    }
    k->queued += len;
    if (k->tail)
        k->tail->next = m;
    else
        k->head = m;
    k->tail = m;
    lws_callback_on_writable(k->wsi);
    return 0;
}

/* Sends an error and closes the connection once it is flushed. */
static void conn_refuse(struct conn *k, int code, const char *why)
{
    if (k->closing)
        return;
    co_conn_send(k, proto_error_encode(code, why, NULL));
    k->closing = 1;
    k->close_code = code == PROTO_ERR_BAD_MESSAGE ? LWS_CLOSE_STATUS_POLICY_VIOLATION
                                                  : LWS_CLOSE_STATUS_NORMAL;
    snprintf(k->close_reason, sizeof k->close_reason, "%s", why);
    k->c->refused++;
    lws_callback_on_writable(k->wsi);
}

void co_conn_close_after(struct conn *k, const char *why)
{
    k->closing = 1;
    k->close_code = LWS_CLOSE_STATUS_NORMAL;
    snprintf(k->close_reason, sizeof k->close_reason, "%s", why);
    lws_callback_on_writable(k->wsi);
}

static void conn_free_queue(struct conn *k)
{
    while (k->head) {
        struct outmsg *m = k->head;
        k->head = m->next;
        free(m);
    }
    k->tail = NULL;
    k->queued = 0;
}

/* ---------------------------------------------------------------- messages */

static struct job *find_job(const struct coordinator *c, const char *name)
{
    for (struct job *j = c->jobs; j; j = j->next)
        if (strcmp(j->name, name) == 0)
            return j;
    return NULL;
}

/* Constant-time comparison of the presented token with the job's. */
static int token_ok(const char *want, const char *got)
{
    size_t lw = strlen(want), lg = strlen(got);
    unsigned char d = (unsigned char)(lw != lg);
    for (size_t i = 0; i < lw; i++)
        d |= (unsigned char)(want[i] ^ (i < lg ? got[i] : 0));
    return d == 0 && lw > 0;
}

/* Accepts a worker's hello into its job's gathering round (or a running worker's reconnect). */
void co_admit(struct conn *k, struct job *j, const struct proto_hello *h)
{
    struct slot *s = &j->w[h->worker];
    lws_set_timeout(k->wsi, NO_PENDING_TIMEOUT, 0);
    k->job = j;
    k->worker = h->worker;
    s->conn = k;
    s->info.connected = 1;
    snprintf(s->info.pod, sizeof s->info.pod, "%s", h->pod);
    snprintf(s->info.node, sizeof s->info.node, "%s", h->node);
    s->info.gpus = h->gpus;
    s->info.tflops = h->tflops;
    s->info.tflops_measured = h->tflops_measured;
    s->info.gpu_memory_gb = h->gpu_memory_gb;
    s->info.gpu_memory_measured = h->gpu_memory_measured;
    s->info.memory_gbps = h->memory_gbps;
    s->info.memory_gbps_measured = h->memory_gbps_measured;
    s->info.nic = h->nic;
    if (j->hooks.on_hello)
        j->hooks.on_hello(j->user, &s->info);
    if (j->state == COORD_RUNNING) {
        /* Reconnect of a running worker after a coordinator glitch: keep going. */
        return;
    }
    s->hello = 1;
    s->running = h->running;
    s->resume_attempt = h->resume_attempt;
    if (h->running)
        s->info.rank = h->resume_rank;
    co_job_check_gang(j);
}

static void on_hello(struct conn *k, const struct proto_hello *h)
{
    struct coordinator *c = k->c;
    if (k->job && k->worker >= 0) {
        struct slot *s = &k->job->w[k->worker];
        if (s->hello || strcmp(h->job, k->job->name) != 0 || h->worker != k->worker) {
            conn_refuse(k, PROTO_ERR_BAD_MESSAGE, "hello: already introduced on this connection");
            return;
        }
    }
    struct job *j = find_job(c, h->job);
    int resolved = j || !c->resolve_job ? 0 : c->resolve_job(c->user, c, h->job);
    if (resolved == 0 && !j)
        j = find_job(c, h->job);
    if (resolved == 1) { /* a job that is over: its workers leave for good */
        co_conn_send(k, proto_stop_encode(0, 0, "the job is over", NULL));
        co_conn_close_after(k, "job over");
        return;
    }
    if (!j || !token_ok(j->token, h->token)) {
        conn_refuse(k, PROTO_ERR_AUTH, h->token[0] ? "hello: unknown job or wrong token"
                                                   : "hello: token required");
        if (j)
            co_job_event(j, "refused a connection claiming pod %s: wrong or missing token", h->pod);
        return;
    }
    if (h->worker >= j->n || (j->pods && strcmp(j->pods[h->worker], h->pod) != 0)) {
        char why[300];
        snprintf(why, sizeof why, "hello: pod %s (worker %d) is not part of job %s", h->pod,
                 h->worker, j->name);
        conn_refuse(k, PROTO_ERR_UNKNOWN_WORKER, why);
        co_job_event(j, "refused %s", why + 7);
        return;
    }
    struct slot *s = &j->w[h->worker];
    if (s->conn && s->conn != k) {
        conn_refuse(k, PROTO_ERR_DUPLICATE, "hello: that worker is already connected");
        return;
    }
    if (s->lost && j->state != COORD_SUCCEEDED && j->state != COORD_FAILED) {
        if (!j->scale_up) {
            char why[300];
            snprintf(why, sizeof why, "hello: worker %d (%s) was lost and the job re-planned without "
                     "it; spec.elastic.scaleUp is false", h->worker, h->pod);
            conn_refuse(k, PROTO_ERR_UNKNOWN_WORKER, why);
            return;
        }
        co_job_regain(j, k, h); /* spec.elastic.scaleUp: planned in again */
        return;
    }
    if (j->fail_deadline && !h->running) {
        /* Back while its gang's failure is being settled: wait for the verdict. */
        k->job = j;
        k->worker = h->worker;
        s->conn = k;
        s->deferred = 1;
        s->deferred_hello = *h;
        return;
    }
    if (j->state == COORD_SUCCEEDED || j->state == COORD_FAILED) {
        co_conn_send(k, proto_stop_encode(j->attempt, 0, "the job is over", NULL));
        co_conn_close_after(k, "job over");
        return;
    }
    if (j->state == COORD_RENDEZVOUS || (j->state == COORD_RUNNING && !h->running)) {
        /* Someone joins a gang that already started: treat as a failure of that worker. */
        s->conn = k;
        k->job = j;
        k->worker = h->worker;
        char why[300];
        snprintf(why, sizeof why, "worker %d (%s) rejoined while the job was running",
                 h->worker, h->pod);
        co_job_report_failure(j, FAIL_DISCONNECT, why);
        return;
    }
    co_admit(k, j, h);
}

static void on_rendezvous(struct conn *k, const struct proto_msg *m)
{
    struct job *j = k->job;
    struct slot *s = &j->w[k->worker];
    if (j->state != COORD_RENDEZVOUS || m->attempt != j->attempt)
        return; /* stale: from an attempt that was stopped */
    if (m->rank != s->info.rank) {
        conn_refuse(k, PROTO_ERR_BAD_MESSAGE, "rendezvous.rank: not the rank assigned");
        return;
    }
    int neps = m->endpoints ? cJSON_GetArraySize(m->endpoints) : 1;
    if (neps != s->nranks) {
        conn_refuse(k, PROTO_ERR_BAD_MESSAGE, "rendezvous.endpoints: not one per rank assigned");
        return;
    }
    snprintf(s->endpoint, sizeof s->endpoint, "%s", m->endpoint);
    cJSON_Delete(s->endpoints);
    s->endpoints = m->endpoints ? cJSON_Duplicate(m->endpoints, 1) : NULL;
    cJSON_Delete(s->ids);
    s->ids = m->ids ? cJSON_Duplicate(m->ids, 1) : NULL;
    s->rendezvous = 1;
    for (int i = 0; i < j->n; i++)
        if (!j->w[i].rendezvous && !j->w[i].lost)
            return;
    co_job_send_start(j);
}

static void on_progress(struct conn *k, const struct proto_msg *m)
{
    struct job *j = k->job;
    struct slot *s = &j->w[k->worker];
    if (j->state != COORD_RUNNING)
        return;
    const struct proto_progress *p = &m->u.progress;
    s->last = p->steps[p->nsteps - 1];
    for (int i = 0; i < p->nsteps; i++) {
        if (p->steps[i].has_eval && p->steps[i].step >= s->eval_step) {
            s->eval_step = p->steps[i].step;
            s->eval_loss = p->steps[i].eval_loss;
        }
        /* every rank skips the same steps and reports its own in order: counting the steps
         * above the newest counted counts each once (a step run again after a restart too) */
        if (p->steps[i].skipped && p->steps[i].step > j->skipped_last) {
            j->skipped_steps++;
            j->skipped_last = p->steps[i].step;
        }
    }
    s->reported = 1;
    j->progress_dirty = 1;
    if (j->hooks.on_steps)
        j->hooks.on_steps(j->user, &s->info, p);
}

static void on_done(struct conn *k, const struct proto_msg *m)
{
    struct job *j = k->job;
    struct slot *s = &j->w[k->worker];
    if (j->state == COORD_GATHERING && s->running) {
        /* A worker that finished while no coordinator was there reconnects and reports done
         * before the rest of the gang is back: keep it for the adoption (it sends done once). */
        s->done = 1;
        return;
    }
    if (j->state != COORD_RUNNING)
        return;
    /* Its last step is in its progress already, unless this round trained none: a gang that
     * restarts (a re-plan, a preemption) as it reaches the end resumes from the checkpoint of
     * the last step, while the old round's last progress, sent after the stop, was dropped.
     * Its done then says where it is, or the status would stay a few steps short. */
    if (m->step > 0 && (!s->reported || m->step > s->last.step)) {
        s->last.step = m->step;
        s->reported = 1;
        j->progress_dirty = 1;
    }
    s->done = 1;
    co_job_succeed_if_all_done(j);
}

static void on_message(struct conn *k, const char *text, size_t len)
{
    struct proto_msg *m = malloc(sizeof *m);
    herr e = {0};
    if (!m) {
        conn_refuse(k, PROTO_ERR_BAD_MESSAGE, "coordinator out of memory");
        return;
    }
    if (proto_parse(text, len, m, &e)) {
        conn_refuse(k, PROTO_ERR_BAD_MESSAGE, e.msg);
        free(m);
        return;
    }
    if (m->type == PROTO_HELLO) {
        on_hello(k, &m->u.hello);
        if (k->job && k->pending) { /* introduced: no longer counted against max_pending */
            k->pending = 0;
            k->c->npending--;
        }
    } else if (!k->job) {
        conn_refuse(k, PROTO_ERR_AUTH, "the first message must be hello");
    } else {
        switch (m->type) {
        case PROTO_RENDEZVOUS: on_rendezvous(k, m); break;
        case PROTO_PROGRESS: on_progress(k, m); break;
        case PROTO_DONE: on_done(k, m); break;
        case PROTO_NOTICE:
            if (k->job->hooks.on_notice) {
                char msg[700];
                snprintf(msg, sizeof msg, "worker %d (%s): %s", k->worker,
                         k->job->w[k->worker].info.pod, m->u.notice.message);
                k->job->hooks.on_notice(k->job->user, m->u.notice.reason, msg);
            }
            break;
        case PROTO_ERROR: {
            char why[700];
            snprintf(why, sizeof why, "worker %d (%s) reported: %s", k->worker,
                     k->job->w[k->worker].info.pod, m->u.error.message);
            /* Only a failure of the running gang counts; after a failure the survivors often
             * report their broken links too - that is the same failure, and not its cause. */
            switch (m->u.error.code) {
            case PROTO_ERR_PREEMPTED: co_job_preempted(k->job, why); break;
            case PROTO_ERR_CONFIG: co_job_report_failure(k->job, FAIL_CONFIG, why); break;
            case PROTO_ERR_PEER: co_job_report_failure(k->job, FAIL_PEER, why); break;
            default: co_job_report_failure(k->job, FAIL_FAULT, why); break;
            }
            break;
        }
        default:
            conn_refuse(k, PROTO_ERR_BAD_MESSAGE, "message type not accepted from a worker");
        }
    }
    proto_msg_free(m);
    free(m);
}

static void on_closed(struct conn *k)
{
    struct job *j = k->job;
    if (j && k->worker >= 0 && j->w[k->worker].conn == k) {
        struct slot *s = &j->w[k->worker];
        s->conn = NULL;
        s->info.connected = 0;
        s->deferred = 0;
        int was_in_round = s->hello;
        s->hello = 0;
        if ((j->state == COORD_RENDEZVOUS || j->state == COORD_RUNNING) && !s->done) {
            char why[300];
            snprintf(why, sizeof why, "worker %d (%s) disconnected", k->worker, s->info.pod);
            co_job_report_failure(j, FAIL_DISCONNECT, why);
        } else if (was_in_round && (j->state == COORD_GATHERING || j->state == COORD_RESTARTING)) {
            s->running = 0;
        }
    }
    conn_free_queue(k);
    free(k->rx);
    k->c->nconns--;
    if (k->pending)
        k->c->npending--;
    if (k->prev)
        k->prev->next = k->next;
    else
        k->c->conns = k->next;
    if (k->next)
        k->next->prev = k->prev;
    free(k);
}

/* ---------------------------------------------------------------- lws glue */

/* An oversized message is read to its end and dropped before the refusal goes out: closing while
 * the peer is still writing would reset the connection and lose the error frame on its side.
 * Reading is bounded: past DISCARD_MAX bytes the connection is refused at once (before hello the
 * hello timeout bounds it as well). */
#define DISCARD_MAX (8 * (size_t)PROTO_MAX_MESSAGE)

static void refuse_oversized(struct conn *k, size_t limit)
{
    char why[100];
    snprintf(why, sizeof why, "message: larger than the limit of %zu bytes%s", limit,
             k->job ? "" : " before hello");
    conn_refuse(k, PROTO_ERR_BAD_MESSAGE, why);
}

static int receive(struct conn *k, const void *in, size_t len)
{
    if (k->closing)
        return 0;
    int last = lws_is_final_fragment(k->wsi) && !lws_remaining_packet_payload(k->wsi);
    if (lws_is_first_fragment(k->wsi))
        k->rx_len = 0, k->rx_discarded = 0;
    if (lws_frame_is_binary(k->wsi)) {
        conn_refuse(k, PROTO_ERR_BAD_MESSAGE, "message: binary frames are not accepted");
        return 0;
    }
    size_t limit = k->job ? PROTO_MAX_MESSAGE : PRE_HELLO_MAX_MESSAGE;
    if (k->rx_discarded || k->rx_len + len > limit) {
        k->rx_discarded += k->rx_len + len;
        k->rx_len = 0;
        if (last || k->rx_discarded > DISCARD_MAX)
            refuse_oversized(k, limit);
        return 0;
    }
    if (k->rx_len + len > k->rx_cap) {
        size_t cap = k->rx_cap ? k->rx_cap : 4096;
        while (cap < k->rx_len + len)
            cap *= 2;
        char *nb = realloc(k->rx, cap);
        if (!nb) {
            conn_refuse(k, PROTO_ERR_BAD_MESSAGE, "coordinator out of memory");
            return 0;
        }
        k->rx = nb;
        k->rx_cap = cap;
    }
    memcpy(k->rx + k->rx_len, in, len);
    k->rx_len += len;
    if (last) {
        on_message(k, k->rx, k->rx_len);
        k->rx_len = 0;
        if (k->rx_cap > 65536) { /* do not keep a large buffer around */
            free(k->rx);
            k->rx = NULL;
            k->rx_cap = 0;
        }
    }
    return 0;
}

static int writeable(struct conn *k)
{
    struct outmsg *m = k->head;
    if (m) {
        if (lws_write(k->wsi, m->buf + LWS_PRE, m->len, LWS_WRITE_TEXT) < (int)m->len)
            return -1;
        k->head = m->next;
        if (!k->head)
            k->tail = NULL;
        free(m);
        if (k->head || k->closing)
            lws_callback_on_writable(k->wsi);
        return 0;
    }
    if (k->closing) {
        lws_close_reason(k->wsi, (enum lws_close_status)k->close_code,
                         (unsigned char *)k->close_reason, strlen(k->close_reason));
        return -1;
    }
    return 0;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
    struct coordinator *c = lws_context_user(lws_get_context(wsi));
    struct conn **pk = user;
    switch (reason) {
    case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS:
        /* the vhost's SSL_CTX, made for us (LWS_SERVER_OPTION_CREATE_VHOST_SSL_CTX): our
         * certificate goes in here, now and at each renewal */
        c->ssl_ctx = user;
        if (c->tls_cert_pem &&
            coord_tls_ctx_use(c->ssl_ctx, c->tls_cert_pem, c->tls_key_pem, NULL) != 0)
            c->tls_load_failed = 1;
        return 0;
    case LWS_CALLBACK_ESTABLISHED: {
        if (c->npending >= c->max_pending) {
            c->refused++;
            return -1; /* a flood of connections nobody introduced: close the newest */
        }
        struct conn *k = calloc(1, sizeof *k);
        if (!k)
            return -1;
        c->nconns++;
        c->npending++;
        k->pending = 1;
        k->wsi = wsi;
        k->c = c;
        k->worker = -1;
        k->next = c->conns;
        if (c->conns)
            c->conns->prev = k;
        c->conns = k;
        *pk = k;
        lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, c->hello_timeout_s);
        return 0;
    }
    case LWS_CALLBACK_RECEIVE:
        return *pk ? receive(*pk, in, len) : -1;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return *pk ? writeable(*pk) : -1;
    case LWS_CALLBACK_CLOSED:
        if (*pk) {
            on_closed(*pk);
            *pk = NULL;
        }
        return 0;
    default:
        return 0;
    }
}

static void tick(lws_sorted_usec_list_t *sul)
{
    struct coordinator *c = lws_container_of(sul, struct coordinator, tick);
    double t = clock_mono_s();
    for (struct job *j = c->jobs; j; j = j->next) {
        co_job_settle(j, t);
        co_job_maybe_emit(j, 0);
        if (j->state == COORD_RESTARTING && j->resume_at > 0 && t >= j->resume_at)
            co_job_check_gang(j); /* the backoff is over: start when the gang is complete */
        if ((j->state == COORD_GATHERING || j->state == COORD_RESTARTING) && !j->gang_reported &&
            (t - j->gather_since) * 1000.0 >= j->gang_timeout_ms) {
            char missing[800] = "";
            size_t used = 0;
            int count = 0;
            for (int i = 0; i < j->n; i++) {
                if (j->w[i].hello || j->w[i].lost)
                    continue;
                count++;
                if (used < sizeof missing - 40) {
                    int w = snprintf(missing + used, sizeof missing - used, "%s%d%s%s%s",
                                     used ? ", " : "", i, j->pods ? " (" : "",
                                     j->pods ? j->pods[i] : "", j->pods ? ")" : "");
                    if (w > 0)
                        used += (size_t)w;
                }
            }
            j->gang_reported = 1;
            co_job_event(j, "gang timeout after %d ms: %d of %d workers missing: %s%s",
                      j->gang_timeout_ms, count, j->n, missing,
                      used >= sizeof missing - 40 ? ", ..." : "");
        }
    }
    lws_sul_schedule(c->ctx, 0, &c->tick, tick, TICK_US);
}

static void lws_log_to_ours(int level, const char *line)
{
    if (level & LLL_ERR)
        log_debug("libwebsockets: %.*s", (int)strcspn(line, "\n"), line);
}

/* How the coordinator treats idle and slow peers (docs/protocol.md, "Limits"): an admitted
 * worker that has sent nothing for 30 s is pinged and dropped when nothing comes back within
 * 60 s more (a half-open connection); a peer that does not finish its WebSocket or TLS handshake
 * within 10 s, or sends nothing for 5 s, is dropped; 2,048 handshakes are read at once (2 KiB of
 * headers each: a flood of idle connections does not make a worker's handshake wait). */
static const lws_retry_bo_t idle_policy = {
    .secs_since_valid_ping = 30,
    .secs_since_valid_hangup = 90,
};

int coord_create(struct coordinator **out, const struct coord_options *opt, herr *e)
{
    *out = NULL;
    struct coordinator *c = calloc(1, sizeof *c);
    if (!c)
        return herr_set(e, "coordinator: out of memory");
    c->hello_timeout_s = opt->hello_timeout_s > 0 ? opt->hello_timeout_s : 10;
    c->max_pending = opt->max_pending > 0 ? opt->max_pending : DEFAULT_MAX_PENDING;
    c->resolve_job = opt->resolve_job;
    c->user = opt->user;
    c->protocols[0] = (struct lws_protocols){
        .name = "holmes.v1",
        .callback = callback,
        .per_session_data_size = sizeof(struct conn *),
        .rx_buffer_size = RX_CHUNK,
    };
    lws_set_log_level(LLL_ERR, lws_log_to_ours);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = opt->port > 0 ? opt->port : 0;
    info.iface = opt->bind;
    info.protocols = c->protocols;
    info.user = c;
    info.options = LWS_SERVER_OPTION_VALIDATE_UTF8;
    info.timeout_secs = 10;
    info.timeout_secs_ah_idle = 5;
    info.max_http_header_pool = 2048;
    info.max_http_header_data = 2048;
    info.retry_and_idle_policy = &idle_policy;
    info.ka_time = 60; /* TCP keepalive: a peer gone without a FIN is noticed */
    info.ka_probes = 3;
    info.ka_interval = 10;
    struct coord_tls files = {0};
    if (opt->tls_cert_pem || opt->tls_key_pem || opt->tls_cert || opt->tls_key) {
        if (opt->tls_cert_pem || opt->tls_key_pem) {
            c->tls_cert_pem = opt->tls_cert_pem;
            c->tls_key_pem = opt->tls_key_pem;
        } else if (!opt->tls_cert || !opt->tls_key) {
            free(c);
            return herr_set(e, "coordinator: TLS needs both a certificate and a key file");
        } else if (coord_tls_read_files(opt->tls_cert, opt->tls_key, NULL, &files, e) != 0) {
            free(c);
            return herr_wrap(e, "coordinator");
        } else {
            c->tls_cert_pem = files.tls_crt;
            c->tls_key_pem = files.tls_key;
        }
        if (!c->tls_cert_pem || !c->tls_key_pem) {
            coord_tls_free(&files);
            free(c);
            return herr_set(e, "coordinator: TLS needs both a certificate and a key");
        }
        /* lws makes the vhost's SSL_CTX; the callback puts our PEMs in it */
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT |
                        LWS_SERVER_OPTION_CREATE_VHOST_SSL_CTX;
    }
    info.options |= LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
    c->ctx = lws_create_context(&info);
    if (!c->ctx) {
        coord_tls_free(&files);
        free(c);
        return herr_set(e, "coordinator: cannot create the libwebsockets context");
    }
    struct lws_vhost *vh = lws_create_vhost(c->ctx, &info); /* port 0: the kernel picks */
    int tls_bad = c->tls_cert_pem && (!c->ssl_ctx || c->tls_load_failed);
    c->tls_cert_pem = c->tls_key_pem = NULL;
    coord_tls_free(&files);
    if (!vh || tls_bad) {
        lws_context_destroy(c->ctx);
        free(c);
        if (tls_bad)
            return herr_set(e, "coordinator: the TLS certificate or key cannot be used (not PEM, "
                               "or the key is not the certificate's)");
        return herr_set(e, "coordinator: cannot listen on %s:%d (in use?)",
                        opt->bind ? opt->bind : "*", opt->port);
    }
    c->port = lws_get_vhost_listen_port(vh);
    lws_sul_schedule(c->ctx, 0, &c->tick, tick, TICK_US);
    *out = c;
    return 0;
}

int coord_tls_reload(struct coordinator *c, const char *cert_pem, const char *key_pem, herr *e)
{
    if (!c->ssl_ctx)
        return herr_set(e, "coordinator: not serving TLS");
    return coord_tls_ctx_use(c->ssl_ctx, cert_pem, key_pem, e);
}

int coord_connections(const struct coordinator *c, int *pending)
{
    if (pending)
        *pending = c->npending;
    return c->nconns;
}

static void job_free(struct job *j)
{
    for (int i = 0; i < j->n; i++) {
        cJSON_Delete(j->w[i].ids);
        cJSON_Delete(j->w[i].endpoints);
        if (j->assign)
            co_assignment_free(j->assign[i]);
        if (j->pods)
            free(j->pods[i]);
    }
    free(j->pods);
    free(j->assign);
    free(j->w);
    free(j->worker_of_rank);
    free(j->local_of_rank);
    free(j->name);
    free(j->token);
    free(j);
}

void coord_destroy(struct coordinator *c)
{
    if (!c)
        return;
    /* Workers are not stopped: they keep training and reconnect to the next coordinator
     * (operator restart, leader change). Use coord_cancel_job first to stop a job. Queued
     * messages (e.g. a cancel's stops) get a short chance to go out. */
    for (int i = 0; i < 5; i++) {
        int pending = 0;
        for (struct conn *k = c->conns; k; k = k->next)
            pending += k->head != NULL;
        if (!pending)
            break;
        lws_service(c->ctx, 0);
    }
    lws_sul_cancel(&c->tick);
    /* Detach connections from jobs before lws closes them. */
    for (struct conn *k = c->conns; k; k = k->next)
        k->job = NULL;
    lws_context_destroy(c->ctx);
    while (c->conns) { /* normally freed by LWS_CALLBACK_CLOSED */
        struct conn *k = c->conns;
        c->conns = k->next;
        conn_free_queue(k);
        free(k->rx);
        free(k);
    }
    while (c->jobs) {
        struct job *j = c->jobs;
        c->jobs = j->next;
        job_free(j);
    }
    free(c);
}

int coord_port(const struct coordinator *c)
{
    return c->port;
}

int coord_add_job(struct coordinator *c, const struct coord_job_spec *spec, herr *e)
{
    if (!spec->name || !spec->name[0])
        return herr_set(e, "job: a name is required");
    if (find_job(c, spec->name))
        return herr_set(e, "job %s: already registered", spec->name);
    if (!spec->token || strlen(spec->token) < 8)
        return herr_set(e, "job %s: token must have at least 8 characters", spec->name);
    if (spec->workers < 1 || spec->workers > 65536)
        return herr_set(e, "job %s: workers must be in [1, 65536]", spec->name);
    if (!spec->hooks.plan)
        return herr_set(e, "job %s: a plan hook is required", spec->name);
    struct job *j = calloc(1, sizeof *j);
    if (!j)
        return herr_set(e, "out of memory");
    j->n = spec->workers;
    j->name = strdup(spec->name);
    j->token = strdup(spec->token);
    j->w = calloc((size_t)j->n, sizeof *j->w);
    int ok = j->name && j->token && j->w;
    if (ok && spec->pods) {
        j->pods = calloc((size_t)j->n, sizeof *j->pods);
        ok = j->pods != NULL;
        for (int i = 0; ok && i < j->n; i++)
            ok = (j->pods[i] = strdup(spec->pods[i] ? spec->pods[i] : "")) != NULL;
    }
    if (!ok) {
        job_free(j);
        return herr_set(e, "out of memory");
    }
    for (int i = 0; i < j->n; i++) {
        j->w[i].info.index = i;
        j->w[i].info.rank = -1;
    }
    j->gang_timeout_ms = spec->gang_timeout_ms > 0 ? spec->gang_timeout_ms : 300000;
    j->max_restarts = spec->max_restarts > 0 ? spec->max_restarts : 0;
    j->restarts = spec->restarts_used > 0 ? spec->restarts_used : 0;
    j->restart_backoff_ms = spec->restart_backoff_ms > 0 ? spec->restart_backoff_ms : 0;
    j->progress_interval_ms = spec->progress_interval_ms > 0 ? spec->progress_interval_ms : 2000;
    j->total_steps = spec->total_steps;
    j->pace_attempt = -1; /* no pace measured yet */
    j->skipped_steps = spec->skipped_steps > 0 ? spec->skipped_steps : 0;
    j->skipped_last = spec->skipped_last > 0 ? spec->skipped_last : 0;
    j->min_workers = spec->min_workers > 0 && spec->min_workers < j->n ? spec->min_workers : 0;
    j->scale_up = spec->scale_up;
    for (int i = 0; co_elastic(j) && i < spec->nlost && spec->lost; i++) {
        int x = spec->lost[i];
        if (x >= 0 && x < j->n && !j->w[x].lost && j->n - j->nlost - 1 >= j->min_workers) {
            j->w[x].lost = 1;
            j->nlost++;
        }
    }
    j->hooks = spec->hooks;
    j->user = spec->user;
    j->state = COORD_GATHERING;
    j->gather_since = clock_mono_s();
    j->last_emit = -1e9;
    j->next = c->jobs;
    c->jobs = j;
    return 0;
}

int coord_remove_job(struct coordinator *c, const char *name)
{
    struct job **pj = &c->jobs;
    while (*pj && strcmp((*pj)->name, name) != 0)
        pj = &(*pj)->next;
    struct job *j = *pj;
    if (!j)
        return -1;
    for (struct conn *k = c->conns; k; k = k->next) {
        if (k->job != j)
            continue;
        k->job = NULL;
        k->worker = -1;
        co_conn_close_after(k, "job removed");
    }
    *pj = j->next;
    job_free(j);
    return 0;
}

int coord_cancel_job(struct coordinator *c, const char *name, const char *reason, herr *e)
{
    struct job *j = find_job(c, name);
    if (!j)
        return herr_set(e, "job %s: not registered", name);
    if (j->state == COORD_SUCCEEDED || j->state == COORD_FAILED)
        return 0;
    co_set_state(j, COORD_FAILED, reason);
    co_job_broadcast_stop(j, 0, reason);
    return 0;
}

int coord_job_state(const struct coordinator *c, const char *name, enum coord_job_state *s)
{
    const struct job *j = find_job(c, name);
    if (!j)
        return -1;
    *s = j->state;
    return 0;
}

int coord_job_progress(const struct coordinator *c, const char *name, struct coord_progress *p)
{
    const struct job *j = find_job(c, name);
    if (!j)
        return -1;
    co_job_aggregate(j, p);
    return 0;
}

int coord_job_connected(const struct coordinator *c, const char *name)
{
    const struct job *j = find_job(c, name);
    if (!j)
        return -1;
    int n = 0;
    for (int i = 0; i < j->n; i++)
        n += j->w[i].conn != NULL;
    return n;
}

int coord_job_lose_worker(struct coordinator *c, const char *name, int index, const char *why,
                          herr *e)
{
    struct job *j = find_job(c, name);
    if (!j)
        return herr_set(e, "job %s: not registered", name);
    return co_job_lose(j, index, why, e);
}

int coord_job_workers(const struct coordinator *c, const char *name, int *state, int cap)
{
    const struct job *j = find_job(c, name);
    if (!j)
        return -1;
    for (int i = 0; i < j->n && i < cap; i++)
        state[i] = j->w[i].lost ? -1 : j->w[i].conn && !j->w[i].deferred ? 1 : 0;
    return j->n;
}

int coord_job_elastic(const struct coordinator *c, const char *name, int *lost, int *replans)
{
    const struct job *j = find_job(c, name);
    if (!j)
        return -1;
    *lost = j->nlost;
    *replans = j->replans;
    return 0;
}

int coord_job_restarts(const struct coordinator *c, const char *name)
{
    const struct job *j = find_job(c, name);
    return j ? j->restarts : -1;
}

long coord_refused(const struct coordinator *c)
{
    return c->refused;
}

int coord_service(struct coordinator *c)
{
    return lws_service(c->ctx, 0) < 0 ? -1 : 0;
}
