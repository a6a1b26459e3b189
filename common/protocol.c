#include "protocol.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static const char *const type_names[] = {
    [PROTO_HELLO] = "hello",   [PROTO_ASSIGN] = "assign",     [PROTO_RENDEZVOUS] = "rendezvous",
    [PROTO_START] = "start",   [PROTO_PROGRESS] = "progress", [PROTO_DONE] = "done",
    [PROTO_ERROR] = "error",   [PROTO_STOP] = "stop",         [PROTO_NOTICE] = "notice",
};
#define NTYPES ((int)(sizeof type_names / sizeof type_names[0]))

const char *proto_type_name(enum proto_type t)
{
    if ((int)t < 0 || (int)t >= NTYPES)
        return "unknown";
    return type_names[t];
}

/* An Event reason as Kubernetes writes them: a letter, then letters and digits. */
static int is_camel(const char *s)
{
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')))
            return 0;
    return 1;
}

/* ---- field readers: each names "type.field" and the rule in errors ---- */

/* ---- per-type schema ---- */

/* A figure the worker sends about itself (`key`, in [1e-6, 1e6], optional) and where it came
 * from (`src_key`: "declared", the default, or "measured"; only with the figure). */
static int hello_figure(const cJSON *j, const char *key, const char *src_key, double *value,
                        int *measured, herr *e)
{
    if (json_num(j, "hello", key, 0, 1e-6, 1e6, value, e))
        return -1;
    char src[16] = "";
    if (json_str(j, "hello", src_key, 0, src, sizeof src, e))
        return -1;
    if (src[0] && strcmp(src, "declared") && strcmp(src, "measured"))
        return herr_set(e, "hello.%s: \"%s\" is not one of declared, measured", src_key, src);
    if (src[0] && *value <= 0)
        return herr_set(e, "hello.%s: given without hello.%s", src_key, key);
    *measured = !strcmp(src, "measured");
    return 0;
}

static int parse_hello(const cJSON *j, struct proto_hello *h, herr *e)
{
    long v = 0;
    memset(h, 0, sizeof *h);
    if (json_str(j, "hello", "job", 1, h->job, sizeof h->job, e) ||
        json_str(j, "hello", "token", 0, h->token, sizeof h->token, e) ||
        json_str(j, "hello", "pod", 1, h->pod, sizeof h->pod, e) ||
        json_str(j, "hello", "node", 0, h->node, sizeof h->node, e))
        return -1;
    if (json_int(j, "hello", "worker", 1, 0, 65535, &v, e))
        return -1;
    h->worker = (int)v;
    v = 0;
    if (json_int(j, "hello", "gpus", 0, 0, 1024, &v, e))
        return -1;
    h->gpus = (int)v;
    if (hello_figure(j, "tflops", "tflopsSource", &h->tflops, &h->tflops_measured, e) ||
        hello_figure(j, "gpuMemoryGb", "gpuMemorySource", &h->gpu_memory_gb,
                     &h->gpu_memory_measured, e) ||
        hello_figure(j, "memoryGbps", "memoryGbpsSource", &h->memory_gbps,
                     &h->memory_gbps_measured, e))
        return -1;
    const cJSON *nic = cJSON_GetObjectItemCaseSensitive(j, "nic");
    if (!nic)
        return herr_set(e, "hello.nic: required (the NIC report or its summary)");
    if (nic_summary_from_json(nic, "hello.nic", &h->nic, e))
        return -1;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "resume");
    if (r && !cJSON_IsNull(r)) {
        if (!cJSON_IsObject(r))
            return herr_set(e, "hello.resume: must be an object {attempt, rank, step}");
        h->running = 1;
        if (json_int(r, "hello.resume", "attempt", 1, 0, 1000000, &v, e))
            return -1;
        h->resume_attempt = (int)v;
        if (json_int(r, "hello.resume", "rank", 1, 0, 65535, &v, e))
            return -1;
        h->resume_rank = (int)v;
        if (json_int(r, "hello.resume", "step", 1, 0, 1L << 40, &v, e))
            return -1;
        h->resume_step = v;
    }
    return 0;
}

static int parse_step(const cJSON *s, int idx, struct proto_step *st, herr *e)
{
    char where[64];
    snprintf(where, sizeof where, "progress.steps[%d]", idx);
    if (!cJSON_IsObject(s))
        return herr_set(e, "%s: must be an object", where);
    memset(st, 0, sizeof *st);
    long v = 0;
    if (json_int(s, where, "step", 1, 0, 1L << 40, &v, e))
        return -1;
    st->step = v;
    if (cJSON_GetObjectItemCaseSensitive(s, "loss")) {
        if (json_num(s, where, "loss", 1, 0, 1e6, &st->loss, e))
            return -1;
        st->has_loss = 1;
    }
    if (cJSON_GetObjectItemCaseSensitive(s, "eval_loss")) {
        if (json_num(s, where, "eval_loss", 1, 0, 1e6, &st->eval_loss, e))
            return -1;
        st->has_eval = 1;
    }
    if (cJSON_GetObjectItemCaseSensitive(s, "grad_norm")) {
        if (json_num(s, where, "grad_norm", 1, 0, 1e30, &st->grad_norm, e))
            return -1;
        st->has_norm = 1;
    }
    const cJSON *sk = cJSON_GetObjectItemCaseSensitive(s, "skipped");
    if (sk && !cJSON_IsBool(sk))
        return herr_set(e, "%s.skipped: must be true or false", where);
    st->skipped = cJSON_IsTrue(sk);
    if (st->skipped && (st->has_loss || st->has_norm))
        return herr_set(e, "%s: a skipped step has no loss or gradient norm", where);
    if (json_num(s, where, "lr", 0, 0, 1e3, &st->lr, e) ||
        json_num(s, where, "tokens_per_s", 0, 0, 1e15, &st->tokens_per_s, e) ||
        json_num(s, where, "step_ms", 1, 0, 1e9, &st->step_ms, e) ||
        json_num(s, where, "compute_ms", 0, 0, 1e9, &st->compute_ms, e) ||
        json_num(s, where, "comm_ms", 0, 0, 1e9, &st->comm_ms, e) ||
        json_num(s, where, "bubble_ms", 0, 0, 1e9, &st->bubble_ms, e))
        return -1;
    return 0;
}

static int parse_progress(const cJSON *j, struct proto_progress *p, herr *e)
{
    long v = 0;
    p->nsteps = 0;
    if (json_int(j, "progress", "rank", 1, 0, 65535, &v, e))
        return -1;
    p->rank = (int)v;
    v = 0;
    if (json_int(j, "progress", "stage", 0, 0, PROTO_MAX_STAGES - 1, &v, e))
        return -1;
    p->stage = (int)v;
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "steps");
    if (!cJSON_IsArray(steps))
        return herr_set(e, "progress.steps: required, an array of step records");
    int n = cJSON_GetArraySize(steps);
    if (n < 1 || n > PROTO_MAX_STEPS)
        return herr_set(e, "progress.steps: must hold 1 to %d records", PROTO_MAX_STEPS);
    const cJSON *s;
    cJSON_ArrayForEach(s, steps) {
        if (parse_step(s, p->nsteps, &p->steps[p->nsteps], e))
            return -1;
        p->nsteps++;
    }
    return 0;
}

static int parse_assign(const cJSON *j, struct proto_msg *m, herr *e)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "assignment");
    if (!cJSON_IsObject(a))
        return herr_set(e, "assign.assignment: required, an object");
    if (plan_assignment_from_json(a, &m->u.assign, e) != 0) {
        if (e) /* the coordinator's plan cannot be run here: the same next time */
            e->kind = HERR_CONFIG;
        return -1;
    }
    m->rank = m->u.assign.rank;
    return 0;
}

static int check_ids(const cJSON *ids, const char *where, herr *e)
{
    if (!ids)
        return 0;
    if (!cJSON_IsObject(ids))
        return herr_set(e, "%s: must be an object of name -> string", where);
    const cJSON *i;
    int n = 0;
    cJSON_ArrayForEach(i, ids) {
        if (!cJSON_IsString(i) || strlen(i->valuestring) > 4096) {
            char path[200];
            json_key_path(path, sizeof path, where, i->string);
            return herr_set(e, "%s: must be a string of at most 4096 characters", path);
        }
        if (++n > 64)
            return herr_set(e, "%s: at most 64 ids", where);
    }
    return 0;
}

static int parse_rendezvous(const cJSON *j, struct proto_msg *m, herr *e)
{
    long v = 0;
    if (json_int(j, "rendezvous", "rank", 1, 0, 65535, &v, e))
        return -1;
    m->rank = (int)v;
    if (json_str(j, "rendezvous", "endpoint", 0, m->endpoint, sizeof m->endpoint, e))
        return -1;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(j, "ids");
    if (check_ids(ids, "rendezvous.ids", e))
        return -1;
    m->ids = ids;
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(j, "endpoints");
    if (!eps)
        return 0;
    if (!cJSON_IsArray(eps) || cJSON_GetArraySize(eps) < 1 || cJSON_GetArraySize(eps) > 1024)
        return herr_set(e, "rendezvous.endpoints: must be an array of 1..1024 \"host:port\" strings");
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, eps) {
        if (!cJSON_IsString(x) || strlen(x->valuestring) >= sizeof m->endpoint)
            return herr_set(e, "rendezvous.endpoints[%d]: must be a string shorter than %zu", i,
                            sizeof m->endpoint);
        i++;
    }
    m->endpoints = eps;
    return 0;
}

static int parse_start(const cJSON *j, struct proto_msg *m, herr *e)
{
    long v = 0;
    if (json_int(j, "start", "step", 0, 0, 1L << 40, &v, e))
        return -1;
    m->step = v;
    const cJSON *peers = cJSON_GetObjectItemCaseSensitive(j, "peers");
    if (!cJSON_IsArray(peers))
        return herr_set(e, "start.peers: required, an array of {rank, endpoint}");
    int n = cJSON_GetArraySize(peers);
    struct proto_start *st = &m->u.start;
    if (n > 0 && !(st->peers = calloc((size_t)n, sizeof *st->peers)))
        return herr_set(e, "out of memory for %d peers", n);
    const cJSON *p;
    cJSON_ArrayForEach(p, peers) {
        char where[48];
        struct proto_peer *pe = &st->peers[st->npeers];
        snprintf(where, sizeof where, "start.peers[%d]", st->npeers++);
        if (!cJSON_IsObject(p))
            return herr_set(e, "%s: must be an object", where);
        if (json_int(p, where, "rank", 1, 0, 65535, &v, e) ||
            json_str(p, where, "endpoint", 0, pe->endpoint, sizeof pe->endpoint, e))
            return -1;
        pe->rank = (int)v;
        char iw[64];
        snprintf(iw, sizeof iw, "%s.ids", where);
        pe->ids = cJSON_GetObjectItemCaseSensitive(p, "ids");
        if (check_ids(pe->ids, iw, e))
            return -1;
    }
    return 0;
}

int proto_parse(const char *text, size_t len, struct proto_msg *out, herr *e)
{
    memset(out, 0, sizeof *out);
    if (!text || len == 0)
        return herr_set(e, "message: empty");
    if (len > PROTO_MAX_MESSAGE)
        return herr_set(e, "message: %zu bytes, more than the limit of %d", len,
                        PROTO_MAX_MESSAGE);
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j)
        return herr_set(e, "message: not valid JSON");
    out->json = j;
    if (!cJSON_IsObject(j)) {
        herr_set(e, "message: must be a JSON object");
        goto fail;
    }
    long v = 0;
    if (json_int(j, "message", "v", 1, 0, 1000, &v, e))
        goto fail;
    if (v != PROTO_VERSION) {
        herr_set(e, "message.v: version %ld is not supported (this build speaks %d)", v,
                 PROTO_VERSION);
        goto fail;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(t)) {
        herr_set(e, "message.type: required, a string");
        goto fail;
    }
    int type = -1;
    for (int i = 0; i < NTYPES; i++)
        if (strcmp(t->valuestring, type_names[i]) == 0)
            type = i;
    if (type < 0) {
        herr_set(e, "message.type: \"%.40s\" is not a message type", t->valuestring);
        goto fail;
    }
    out->type = (enum proto_type)type;
    const char *tn = type_names[type];
    v = 0;
    if (json_int(j, tn, "attempt", 0, 0, 1000000, &v, e))
        goto fail;
    out->attempt = (int)v;

    int rc = 0;
    switch (out->type) {
    case PROTO_HELLO: rc = parse_hello(j, &out->u.hello, e); break;
    case PROTO_ASSIGN: rc = parse_assign(j, out, e); break;
    case PROTO_RENDEZVOUS: rc = parse_rendezvous(j, out, e); break;
    case PROTO_START: rc = parse_start(j, out, e); break;
    case PROTO_PROGRESS: rc = parse_progress(j, &out->u.progress, e); break;
    case PROTO_DONE:
        v = 0;
        rc = json_int(j, "done", "rank", 1, 0, 65535, &v, e);
        out->rank = (int)v;
        v = 0;
        if (!rc)
            rc = json_int(j, "done", "step", 0, 0, 1L << 40, &v, e);
        out->step = v;
        break;
    case PROTO_ERROR:
        v = PROTO_ERR_WORKER;
        rc = json_int(j, "error", "code", 0, 0, 1000, &v, e) ||
             json_str(j, "error", "message", 1, out->u.error.message,
                     sizeof out->u.error.message, e);
        out->u.error.code = (int)v;
        break;
    case PROTO_NOTICE:
        rc = json_str(j, "notice", "reason", 1, out->u.notice.reason, sizeof out->u.notice.reason,
                     e) ||
             json_str(j, "notice", "message", 1, out->u.notice.message,
                     sizeof out->u.notice.message, e);
        if (!rc && !is_camel(out->u.notice.reason))
            rc = herr_set(e, "notice.reason: must be a CamelCase word (letters and digits)");
        break;
    case PROTO_STOP:
        rc = json_str(j, "stop", "reason", 0, out->u.stop.reason, sizeof out->u.stop.reason, e);
        if (!rc) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "restart");
            if (r && !cJSON_IsBool(r))
                rc = herr_set(e, "stop.restart: must be true or false");
            out->u.stop.restart = cJSON_IsTrue(r);
        }
        break;
    }
    if (rc)
        goto fail;
    return 0;
fail:
    proto_msg_free(out);
    return -1;
}

void proto_msg_free(struct proto_msg *m)
{
    if (!m)
        return;
    if (m->type == PROTO_ASSIGN)
        plan_assignment_free(&m->u.assign);
    else if (m->type == PROTO_START)
        free(m->u.start.peers);
    cJSON_Delete(m->json);
    memset(m, 0, sizeof *m);
}

void proto_take_assignment(struct proto_msg *m, struct plan_assignment *a)
{
    *a = m->u.assign;
    memset(&m->u.assign, 0, sizeof m->u.assign);
}

/* ---- encoders ---- */

static cJSON *new_msg(enum proto_type t)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    if (!cJSON_AddNumberToObject(j, "v", PROTO_VERSION) ||
        !cJSON_AddStringToObject(j, "type", type_names[t])) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* Prints and frees `j`; NULL (with "out of memory") when anything failed on the way. */
static char *finish(cJSON *j, int ok, herr *e)
{
    char *s = NULL;
    if (j && ok)
        s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) {
        herr_set(e, "encoding a message: out of memory");
        return NULL;
    }
    if (strlen(s) > PROTO_MAX_MESSAGE) {
        herr_set(e, "encoding a message: %zu bytes, more than the limit of %d", strlen(s),
                 PROTO_MAX_MESSAGE);
        free(s);
        return NULL;
    }
    return s;
}

/* Re-parses an encoded message so a builder never emits what the parser would refuse. */
static char *checked(char *s, herr *e)
{
    if (!s)
        return NULL;
    struct proto_msg m;
    if (proto_parse(s, strlen(s), &m, e)) {
        free(s);
        return NULL;
    }
    proto_msg_free(&m);
    return s;
}

char *proto_hello_encode(const struct proto_hello *h, herr *e)
{
    cJSON *j = new_msg(PROTO_HELLO);
    cJSON *nic = nic_summary_to_json(&h->nic);
    int ok = j && nic;
    if (ok) {
        cJSON_AddItemToObject(j, "nic", nic);
        nic = NULL;
        ok = cJSON_AddStringToObject(j, "job", h->job) &&
             cJSON_AddStringToObject(j, "token", h->token) &&
             cJSON_AddStringToObject(j, "pod", h->pod) &&
             cJSON_AddStringToObject(j, "node", h->node) &&
             cJSON_AddNumberToObject(j, "worker", h->worker) &&
             cJSON_AddNumberToObject(j, "gpus", h->gpus);
    }
    cJSON_Delete(nic);
    if (ok && h->tflops > 0)
        ok = cJSON_AddNumberToObject(j, "tflops", h->tflops) &&
             cJSON_AddStringToObject(j, "tflopsSource", h->tflops_measured ? "measured" : "declared");
    if (ok && h->gpu_memory_gb > 0)
        ok = cJSON_AddNumberToObject(j, "gpuMemoryGb", h->gpu_memory_gb) &&
             cJSON_AddStringToObject(j, "gpuMemorySource",
                                     h->gpu_memory_measured ? "measured" : "declared");
    if (ok && h->memory_gbps > 0)
        ok = cJSON_AddNumberToObject(j, "memoryGbps", h->memory_gbps) &&
             cJSON_AddStringToObject(j, "memoryGbpsSource",
                                     h->memory_gbps_measured ? "measured" : "declared");
    if (ok && h->running) {
        cJSON *r = cJSON_AddObjectToObject(j, "resume");
        ok = r && cJSON_AddNumberToObject(r, "attempt", h->resume_attempt) &&
             cJSON_AddNumberToObject(r, "rank", h->resume_rank) &&
             cJSON_AddNumberToObject(r, "step", (double)h->resume_step);
    }
    return checked(finish(j, ok, e), e);
}

static int add_copy(cJSON *j, const char *key, const cJSON *item)
{
    cJSON *c = cJSON_Duplicate(item, 1);
    if (!c)
        return 0;
    cJSON_AddItemToObject(j, key, c);
    return 1;
}

char *proto_assign_encode(int attempt, const struct plan_assignment *assignment, herr *e)
{
    cJSON *j = new_msg(PROTO_ASSIGN);
    int ok = j && cJSON_AddNumberToObject(j, "attempt", attempt);
    cJSON *a = ok ? plan_assignment_to_json(assignment) : NULL;
    ok = a && cJSON_AddItemToObject(j, "assignment", a);
    if (!ok)
        cJSON_Delete(a);
    return checked(finish(j, ok, e), e);
}

char *proto_rendezvous_encode(int attempt, int rank, const char *endpoint, const cJSON *endpoints,
                              const cJSON *ids, herr *e)
{
    cJSON *j = new_msg(PROTO_RENDEZVOUS);
    int ok = j && cJSON_AddNumberToObject(j, "attempt", attempt) &&
             cJSON_AddNumberToObject(j, "rank", rank) &&
             cJSON_AddStringToObject(j, "endpoint", endpoint ? endpoint : "");
    if (ok && ids)
        ok = add_copy(j, "ids", ids);
    if (ok && endpoints)
        ok = add_copy(j, "endpoints", endpoints);
    return checked(finish(j, ok, e), e);
}

static cJSON *peer_to_json(const struct proto_peer *p)
{
    cJSON *o = cJSON_CreateObject();
    if (o && cJSON_AddNumberToObject(o, "rank", p->rank) &&
        cJSON_AddStringToObject(o, "endpoint", p->endpoint) && (!p->ids || add_copy(o, "ids", p->ids)))
        return o;
    cJSON_Delete(o);
    return NULL;
}

char *proto_start_encode(int attempt, long resume_step, const struct proto_peer *peers,
                         int npeers, herr *e)
{
    cJSON *j = new_msg(PROTO_START);
    int ok = j && cJSON_AddNumberToObject(j, "attempt", attempt) &&
             cJSON_AddNumberToObject(j, "step", (double)resume_step);
    cJSON *arr = ok ? cJSON_AddArrayToObject(j, "peers") : NULL;
    ok = ok && arr;
    for (int i = 0; ok && i < npeers; i++) {
        cJSON *p = peer_to_json(&peers[i]);
        ok = p && cJSON_AddItemToArray(arr, p);
    }
    return checked(finish(j, ok, e), e);
}

char *proto_progress_encode(const struct proto_progress *p, herr *e)
{
    if (p->nsteps < 1 || p->nsteps > PROTO_MAX_STEPS) {
        herr_set(e, "progress: 1 to %d steps", PROTO_MAX_STEPS);
        return NULL;
    }
    cJSON *j = new_msg(PROTO_PROGRESS);
    int ok = j && cJSON_AddNumberToObject(j, "rank", p->rank) &&
             cJSON_AddNumberToObject(j, "stage", p->stage);
    cJSON *steps = ok ? cJSON_AddArrayToObject(j, "steps") : NULL;
    ok = ok && steps;
    for (int i = 0; ok && i < p->nsteps; i++) {
        const struct proto_step *s = &p->steps[i];
        cJSON *o = cJSON_CreateObject();
        ok = o != NULL;
        if (ok)
            cJSON_AddItemToArray(steps, o);
        ok = ok && cJSON_AddNumberToObject(o, "step", (double)s->step) &&
             (!s->has_loss || cJSON_AddNumberToObject(o, "loss", s->loss)) &&
             (!s->has_eval || cJSON_AddNumberToObject(o, "eval_loss", s->eval_loss)) &&
             (!s->has_norm || cJSON_AddNumberToObject(o, "grad_norm", s->grad_norm)) &&
             (!s->skipped || cJSON_AddTrueToObject(o, "skipped")) &&
             cJSON_AddNumberToObject(o, "lr", s->lr) &&
             cJSON_AddNumberToObject(o, "tokens_per_s", s->tokens_per_s) &&
             cJSON_AddNumberToObject(o, "step_ms", s->step_ms) &&
             cJSON_AddNumberToObject(o, "compute_ms", s->compute_ms) &&
             cJSON_AddNumberToObject(o, "comm_ms", s->comm_ms) &&
             cJSON_AddNumberToObject(o, "bubble_ms", s->bubble_ms);
    }
    return checked(finish(j, ok, e), e);
}

char *proto_done_encode(int rank, long step, herr *e)
{
    cJSON *j = new_msg(PROTO_DONE);
    int ok = j && cJSON_AddNumberToObject(j, "rank", rank) &&
             cJSON_AddNumberToObject(j, "step", (double)step);
    return checked(finish(j, ok, e), e);
}

char *proto_error_encode(int code, const char *message, herr *e)
{
    char msg[sizeof ((struct proto_error *)0)->message];
    snprintf(msg, sizeof msg, "%s", message && message[0] ? message : "unspecified error");
    cJSON *j = new_msg(PROTO_ERROR);
    int ok = j && cJSON_AddNumberToObject(j, "code", code) &&
             cJSON_AddStringToObject(j, "message", msg);
    return checked(finish(j, ok, e), e);
}

char *proto_notice_encode(const char *reason, const char *message, herr *e)
{
    char r[sizeof ((struct proto_notice *)0)->reason], m[sizeof ((struct proto_notice *)0)->message];
    snprintf(r, sizeof r, "%s", reason ? reason : "");
    snprintf(m, sizeof m, "%s", message ? message : "");
    cJSON *j = new_msg(PROTO_NOTICE);
    int ok = j && cJSON_AddStringToObject(j, "reason", r) && cJSON_AddStringToObject(j, "message", m);
    return checked(finish(j, ok, e), e);
}

char *proto_stop_encode(int attempt, int restart, const char *reason, herr *e)
{
    char r[sizeof ((struct proto_stop *)0)->reason];
    snprintf(r, sizeof r, "%s", reason ? reason : "");
    cJSON *j = new_msg(PROTO_STOP);
    int ok = j && cJSON_AddNumberToObject(j, "attempt", attempt) &&
             cJSON_AddBoolToObject(j, "restart", restart) &&
             cJSON_AddStringToObject(j, "reason", r);
    return checked(finish(j, ok, e), e);
}
