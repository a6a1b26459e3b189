/* Coordinator protocol: round trips of every message type, and refusals with the rule broken. */
#include "test.h"

#include <stdlib.h>

#include "protocol.h"

static int parse_str(const char *s, struct proto_msg *m, herr *e)
{
    return proto_parse(s, strlen(s), m, e);
}

/* Expects `text` to be refused with a message that contains `want`. */
static void refused(const char *name, const char *text, const char *want)
{
    struct proto_msg m;
    herr e = {0};
    int rc = parse_str(text, &m, &e);
    if (rc == 0) {
        proto_msg_free(&m);
        TEST_FAIL(name, "accepted: %s", text);
    } else if (!strstr(e.msg, want)) {
        TEST_FAIL(name, "error \"%s\" does not contain \"%s\"", e.msg, want);
    } else {
        TEST_PASS(name);
    }
}

/* A hello with the figure at `value` (sent as `key`, its source as `src_key`) round-trips,
 * declared unless said measured, and is not sent at 0; *field and *measured are reset after. */
static void hello_figure(struct proto_hello *h, double *field, int *measured, double value,
                         const char *key, const char *src_key)
{
    herr e = {0};
    struct proto_msg m;
    char what[96];
    char *s = proto_hello_encode(h, &e);
    snprintf(what, sizeof what, "hello without %s: field not sent", key);
    CHECK(what, s && !strstr(s, key));
    free(s);
    *field = value;
    for (int meas = 0; meas <= 1; meas++) {
        *measured = meas;
        s = proto_hello_encode(h, &e);
        snprintf(what, sizeof what, "hello with %s %s parses", meas ? "measured" : "declared", key);
        CHECK_INT(what, s ? parse_str(s, &m, &e) : -1, 0);
        if (s && m.json) {
            /* the same fields of the parsed hello */
            double got = *(const double *)((const char *)&m.u.hello + ((char *)field - (char *)h));
            int got_meas = *(const int *)((const char *)&m.u.hello + ((char *)measured - (char *)h));
            const cJSON *src = cJSON_GetObjectItem(m.json, src_key);
            snprintf(what, sizeof what, "hello %s carried, %s %s", key, src_key,
                     meas ? "measured" : "declared");
            CHECK(what, got == value && got_meas == meas && cJSON_IsString(src) &&
                            !strcmp(src->valuestring, meas ? "measured" : "declared"));
            proto_msg_free(&m);
        }
        free(s);
    }
    *field = 0;
    *measured = 0;
}

static void test_hello(void)
{
    struct proto_hello h = {0};
    snprintf(h.job, sizeof h.job, "tiny");
    snprintf(h.token, sizeof h.token, "s3cret");
    snprintf(h.pod, sizeof h.pod, "tiny-worker-3");
    snprintf(h.node, sizeof h.node, "node-a");
    h.worker = 3;
    h.gpus = 8;
    h.nic.cls = NIC_ROCE;
    snprintf(h.nic.fabric, sizeof h.nic.fabric, "roce-a");
    h.nic.gbps = 100;
    h.nic.gid_index = 3;
    herr e = {0};
    char *s = proto_hello_encode(&h, &e);
    CHECK("hello encodes", s != NULL);
    struct proto_msg m;
    CHECK_INT("hello parses", s ? parse_str(s, &m, &e) : -1, 0);
    if (s && m.json) {
        CHECK_INT("hello type", m.type, PROTO_HELLO);
        CHECK_STR("hello job", m.u.hello.job, "tiny");
        CHECK_STR("hello token", m.u.hello.token, "s3cret");
        CHECK_STR("hello pod", m.u.hello.pod, "tiny-worker-3");
        CHECK_INT("hello worker", m.u.hello.worker, 3);
        CHECK_INT("hello gpus", m.u.hello.gpus, 8);
        CHECK_INT("hello nic class", m.u.hello.nic.cls, NIC_ROCE);
        CHECK_STR("hello nic fabric", m.u.hello.nic.fabric, "roce-a");
        CHECK_NEAR("hello nic gbps", m.u.hello.nic.gbps, 100, 1e-12);
        CHECK_INT("hello not running", m.u.hello.running, 0);
        CHECK_NEAR("hello without tflops: 0 (an older worker)", m.u.hello.tflops, 0, 0);
        CHECK("hello without tflops: field not sent", !cJSON_GetObjectItem(m.json, "tflops"));
        proto_msg_free(&m);
    }
    free(s);

    /* the figures a worker sends about itself: each with where it came from */
    hello_figure(&h, &h.tflops, &h.tflops_measured, 0.0375, "tflops", "tflopsSource");
    hello_figure(&h, &h.gpu_memory_gb, &h.gpu_memory_measured, 79.6, "gpuMemoryGb",
                 "gpuMemorySource");
    hello_figure(&h, &h.memory_gbps, &h.memory_gbps_measured, 3352.3, "memoryGbps",
                 "memoryGbpsSource");

    h.running = 1;
    h.resume_attempt = 2;
    h.resume_rank = 5;
    h.resume_step = 123;
    s = proto_hello_encode(&h, &e);
    CHECK_INT("hello resume parses", s ? parse_str(s, &m, &e) : -1, 0);
    if (s && m.json) {
        CHECK_INT("hello resume running", m.u.hello.running, 1);
        CHECK_INT("hello resume attempt", m.u.hello.resume_attempt, 2);
        CHECK_INT("hello resume rank", m.u.hello.resume_rank, 5);
        CHECK_INT("hello resume step", m.u.hello.resume_step, 123);
        proto_msg_free(&m);
    }
    free(s);

    h.worker = -1;
    s = proto_hello_encode(&h, &e);
    CHECK("hello bad worker not encoded", s == NULL);
    CHECK("hello bad worker names field", strstr(e.msg, "hello.worker") != NULL);
    free(s);
}

static void test_assign_rendezvous_start(void)
{
    herr e = {0};
    int peers2[] = {0, 3};
    struct plan_assignment a = {.rank = 2, .stage = 1, .stages = 2, .npeers = 2, .peers = peers2};
    char *s = proto_assign_encode(1, &a, &e);
    struct proto_msg m;
    CHECK_INT("assign parses", s ? parse_str(s, &m, &e) : -1, 0);
    if (s && m.json) {
        CHECK_INT("assign type", m.type, PROTO_ASSIGN);
        CHECK_INT("assign attempt", m.attempt, 1);
        CHECK_INT("assign rank", m.rank, 2);
        CHECK("assign decoded: stage and peers", m.u.assign.stage == 1 && m.u.assign.stages == 2 &&
                                                     m.u.assign.npeers == 2 && m.u.assign.peers[1] == 3);
        struct plan_assignment took;
        proto_take_assignment(&m, &took);
        CHECK("assignment taken", took.npeers == 2 && m.u.assign.peers == NULL);
        plan_assignment_free(&took);
        proto_msg_free(&m);
    }
    free(s);
    int rc = parse_str("{\"v\":1,\"type\":\"assign\",\"assignment\":{\"stage\":1}}", &m, &e);
    CHECK("assign without rank refused", rc != 0 && strstr(e.msg, "assignment.rank"));
    rc = parse_str("{\"v\":1,\"type\":\"assign\",\"assignment\":{\"rank\":0,\"stage\":3}}", &m, &e);
    CHECK("an assignment that does not decode is a configuration error",
          rc != 0 && strstr(e.msg, "assignment.stage") && e.kind == HERR_CONFIG);
    rc = parse_str("{\"v\":1,\"type\":\"assign\",\"assignment\":{\"rank\":0,\"peers\":[1.5]}}", &m, &e);
    CHECK("assignment.peers must be ranks", rc != 0 && strstr(e.msg, "assignment.peers[0]"));

    cJSON *ids = cJSON_Parse("{\"dp0\":\"AAECAw==\"}");
    s = proto_rendezvous_encode(1, 2, "127.0.0.1:4000", NULL, ids, &e);
    cJSON_Delete(ids);
    CHECK_INT("rendezvous parses", s ? parse_str(s, &m, &e) : -1, 0);
    if (s && m.json) {
        CHECK_INT("rendezvous rank", m.rank, 2);
        CHECK_STR("rendezvous endpoint", m.endpoint, "127.0.0.1:4000");
        const cJSON *id = cJSON_GetObjectItem(m.ids, "dp0");
        CHECK_STR("rendezvous id", cJSON_IsString(id) ? id->valuestring : NULL, "AAECAw==");
        proto_msg_free(&m);
    }
    free(s);

    cJSON *eps = cJSON_Parse("[\"h:1\", \"h:2\"]");
    s = proto_rendezvous_encode(0, 4, "h:1", eps, NULL, &e);
    cJSON_Delete(eps);
    CHECK_INT("rendezvous with one endpoint per rank parses", s ? parse_str(s, &m, &e) : -1, 0);
    if (s && m.json) {
        CHECK_INT("rendezvous endpoints", cJSON_GetArraySize(m.endpoints), 2);
        CHECK_STR("rendezvous second endpoint", cJSON_GetArrayItem(m.endpoints, 1)->valuestring, "h:2");
        proto_msg_free(&m);
    }
    free(s);
    static const char *const bad_eps[] = {
        "{\"type\":\"rendezvous\",\"v\":1,\"attempt\":0,\"rank\":0,\"endpoints\":\"h:1\"}",
        "{\"type\":\"rendezvous\",\"v\":1,\"attempt\":0,\"rank\":0,\"endpoints\":[]}",
        "{\"type\":\"rendezvous\",\"v\":1,\"attempt\":0,\"rank\":0,\"endpoints\":[\"h:1\",3]}",
    };
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad rendezvous.endpoints %d refused", i);
        rc = parse_str(bad_eps[i], &m, &e);
        CHECK(name, rc != 0 && strstr(e.msg, "rendezvous.endpoints"));
        if (rc == 0)
            proto_msg_free(&m);
    }

    ids = cJSON_Parse("{\"dp0\":\"AAECAw==\"}");
    struct proto_peer peers[] = {{0, "h:1", ids}, {3, "h:2", NULL}};
    s = proto_start_encode(1, 40, peers, 2, &e);
    cJSON_Delete(ids);
    CHECK_INT("start parses", s ? parse_str(s, &m, &e) : -1, 0);
    if (s && m.json) {
        CHECK_INT("start step", m.step, 40);
        CHECK_INT("start peers", m.u.start.npeers, 2);
        CHECK("start peers typed", m.u.start.npeers == 2 && m.u.start.peers[1].rank == 3 &&
                                       !strcmp(m.u.start.peers[1].endpoint, "h:2") &&
                                       cJSON_IsString(cJSON_GetObjectItem(m.u.start.peers[0].ids, "dp0")) &&
                                       !m.u.start.peers[1].ids);
        proto_msg_free(&m);
    }
    free(s);
}

static void test_progress(void)
{
    static struct proto_progress p;
    memset(&p, 0, sizeof p);
    p.rank = 3;
    p.stage = 1;
    p.nsteps = 2;
    p.steps[0] = (struct proto_step){.step = 10, .has_loss = 1, .loss = 4.5, .lr = 3e-4,
                                     .tokens_per_s = 1000, .step_ms = 120, .compute_ms = 80,
                                     .comm_ms = 30, .bubble_ms = 10, .has_norm = 1,
                                     .grad_norm = 0.8125};
    p.steps[1] = (struct proto_step){.step = 11, .step_ms = 110, .has_eval = 1, .eval_loss = 3.25,
                                     .skipped = 1};
    herr e = {0};
    char *s = proto_progress_encode(&p, &e);
    static struct proto_msg m;
    CHECK_INT("progress parses", s ? parse_str(s, &m, &e) : -1, 0);
    if (s && m.json) {
        struct proto_progress *q = &m.u.progress;
        CHECK_INT("progress rank", q->rank, 3);
        CHECK_INT("progress nsteps", q->nsteps, 2);
        CHECK_INT("progress step", q->steps[0].step, 10);
        CHECK_INT("progress has loss", q->steps[0].has_loss, 1);
        CHECK_NEAR("progress loss", q->steps[0].loss, 4.5, 1e-12);
        CHECK_NEAR("progress comm", q->steps[0].comm_ms, 30, 1e-12);
        CHECK_INT("progress second has no loss", q->steps[1].has_loss, 0);
        CHECK("progress: the evaluation's loss only where one ran",
              !q->steps[0].has_eval && q->steps[1].has_eval && q->steps[1].eval_loss == 3.25);
        CHECK("progress: a skipped step (not finite) said so, the others not",
              !q->steps[0].skipped && q->steps[1].skipped);
        CHECK("progress: the gradient norm where there is one",
              q->steps[0].has_norm && q->steps[0].grad_norm == 0.8125 && !q->steps[1].has_norm);
        proto_msg_free(&m);
    }
    free(s);
    p.nsteps = 0;
    s = proto_progress_encode(&p, &e);
    CHECK("progress with no steps refused", s == NULL);
    free(s);
    const char *bad = "{\"v\":1,\"type\":\"progress\",\"rank\":0,\"stage\":0,\"steps\":"
                      "[{\"step\":3,\"step_ms\":1,\"eval_loss\":-1}]}";
    int rc = parse_str(bad, &m, &e);
    CHECK_MSG("progress with a negative evaluation loss refused, naming the field",
              rc != 0 && strstr(e.msg, "progress.steps[0].eval_loss"), "rc %d: %s", rc, e.msg);
    if (rc == 0)
        proto_msg_free(&m);
    const char *bad_skip[][2] = {
        {"[{\"step\":3,\"step_ms\":1,\"skipped\":1}]", "progress.steps[0].skipped: must be true or false"},
        {"[{\"step\":3,\"step_ms\":1,\"loss\":2.5,\"skipped\":true}]",
         "progress.steps[0]: a skipped step has no loss or gradient norm"},
        {"[{\"step\":3,\"step_ms\":1,\"grad_norm\":-0.5}]", "progress.steps[0].grad_norm"}};
    for (int i = 0; i < 3; i++) {
        char msg[256];
        snprintf(msg, sizeof msg, "{\"v\":1,\"type\":\"progress\",\"rank\":0,\"stage\":0,"
                 "\"steps\":%s}", bad_skip[i][0]);
        rc = parse_str(msg, &m, &e);
        CHECK_MSG("progress: a bad skipped step refused, naming the field",
                  rc != 0 && strstr(e.msg, bad_skip[i][1]), "rc %d: %s", rc, e.msg);
        if (rc == 0)
            proto_msg_free(&m);
    }
}

static void test_small_messages(void)
{
    herr e = {0};
    struct proto_msg m;
    char *s = proto_stop_encode(2, 1, "worker 3 failed", &e);
    CHECK_INT("stop parses", s ? parse_str(s, &m, &e) : -1, 0);
    if (s && m.json) {
        CHECK_INT("stop restart", m.u.stop.restart, 1);
        CHECK_INT("stop attempt", m.attempt, 2);
        CHECK_STR("stop reason", m.u.stop.reason, "worker 3 failed");
        proto_msg_free(&m);
    }
    free(s);
    s = proto_error_encode(PROTO_ERR_AUTH, "wrong token", &e);
    CHECK_INT("error parses", s ? parse_str(s, &m, &e) : -1, 0);
    if (s && m.json) {
        CHECK_INT("error code", m.u.error.code, PROTO_ERR_AUTH);
        CHECK_STR("error message", m.u.error.message, "wrong token");
        proto_msg_free(&m);
    }
    free(s);
    s = proto_done_encode(4, 300, &e);
    CHECK_INT("done parses", s ? parse_str(s, &m, &e) : -1, 0);
    if (s && m.json) {
        CHECK_INT("done rank", m.rank, 4);
        CHECK_INT("done step", m.step, 300);
        proto_msg_free(&m);
    }
    free(s);
}

static void test_refusals(void)
{
    refused("garbled", "{\"v\":1,\"type\":", "not valid JSON");
    refused("binary garbage", "\x01\x02\xff\xfe", "not valid JSON");
    refused("array", "[1,2]", "must be a JSON object");
    refused("no version", "{\"type\":\"done\",\"rank\":1}", "message.v: required");
    refused("future version", "{\"v\":2,\"type\":\"done\",\"rank\":1}", "version 2 is not supported");
    refused("unknown type", "{\"v\":1,\"type\":\"reboot\"}", "is not a message type");
    refused("type not string", "{\"v\":1,\"type\":7}", "message.type");
    refused("hello no nic", "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"p\",\"worker\":0}",
            "hello.nic: required");
    refused("hello bad nic",
            "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"p\",\"worker\":0,"
            "\"nic\":{\"class\":\"fddi\",\"fabric\":\"x\",\"gbps\":1}}", "hello.nic.class");
    refused("hello fractional worker",
            "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"p\",\"worker\":1.5,"
            "\"nic\":{\"class\":\"ib\",\"fabric\":\"x\",\"gbps\":1}}", "hello.worker");
    refused("hello negative tflops",
            "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"p\",\"worker\":1,\"tflops\":-2,"
            "\"nic\":{\"class\":\"ib\",\"fabric\":\"x\",\"gbps\":1}}", "hello.tflops: must be a number");
    refused("hello string tflops",
            "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"p\",\"worker\":1,\"tflops\":\"fast\","
            "\"nic\":{\"class\":\"ib\",\"fabric\":\"x\",\"gbps\":1}}", "hello.tflops");
    refused("hello unknown tflopsSource",
            "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"p\",\"worker\":1,\"tflops\":2,"
            "\"tflopsSource\":\"guessed\",\"nic\":{\"class\":\"ib\",\"fabric\":\"x\",\"gbps\":1}}",
            "hello.tflopsSource: \"guessed\" is not one of declared, measured");
    refused("hello tflopsSource without tflops",
            "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"p\",\"worker\":1,"
            "\"tflopsSource\":\"measured\",\"nic\":{\"class\":\"ib\",\"fabric\":\"x\",\"gbps\":1}}",
            "hello.tflopsSource: given without hello.tflops");
    refused("hello zero memory bandwidth",
            "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"p\",\"worker\":1,\"memoryGbps\":0,"
            "\"nic\":{\"class\":\"ib\",\"fabric\":\"x\",\"gbps\":1}}", "hello.memoryGbps: must be a number");
    refused("hello memoryGbpsSource without memoryGbps",
            "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"p\",\"worker\":1,"
            "\"memoryGbpsSource\":\"measured\",\"nic\":{\"class\":\"ib\",\"fabric\":\"x\",\"gbps\":1}}",
            "hello.memoryGbpsSource: given without hello.memoryGbps");
    refused("hello zero GPU memory",
            "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"p\",\"worker\":1,\"gpuMemoryGb\":0,"
            "\"nic\":{\"class\":\"ib\",\"fabric\":\"x\",\"gbps\":1}}", "hello.gpuMemoryGb: must be a number");
    refused("hello unknown gpuMemorySource",
            "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"p\",\"worker\":1,\"gpuMemoryGb\":80,"
            "\"gpuMemorySource\":\"nvml\",\"nic\":{\"class\":\"ib\",\"fabric\":\"x\",\"gbps\":1}}",
            "hello.gpuMemorySource: \"nvml\" is not one of declared, measured");
    refused("hello gpuMemorySource without gpuMemoryGb",
            "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"p\",\"worker\":1,"
            "\"gpuMemorySource\":\"measured\",\"nic\":{\"class\":\"ib\",\"fabric\":\"x\",\"gbps\":1}}",
            "hello.gpuMemorySource: given without hello.gpuMemoryGb");
    refused("hello empty pod",
            "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"pod\":\"\",\"worker\":1,"
            "\"nic\":{\"class\":\"ib\",\"fabric\":\"x\",\"gbps\":1}}", "hello.pod: must not be empty");
    refused("progress nan-ish loss",
            "{\"v\":1,\"type\":\"progress\",\"rank\":0,\"steps\":[{\"step\":1,\"loss\":-1,\"step_ms\":1}]}",
            "progress.steps[0].loss");
    refused("progress no steps", "{\"v\":1,\"type\":\"progress\",\"rank\":0,\"steps\":[]}",
            "progress.steps");
    refused("error no message", "{\"v\":1,\"type\":\"error\",\"code\":10}", "error.message");
    refused("stop restart not bool", "{\"v\":1,\"type\":\"stop\",\"restart\":1}", "stop.restart");
    refused("rendezvous ids not strings",
            "{\"v\":1,\"type\":\"rendezvous\",\"rank\":0,\"ids\":{\"a\":1}}", "rendezvous.ids.a");

    /* Oversized: refused before parsing. */
    size_t n = PROTO_MAX_MESSAGE + 10;
    char *big = malloc(n);
    if (big) {
        memset(big, ' ', n);
        big[0] = '{';
        big[n - 1] = '}';
        struct proto_msg m;
        herr e = {0};
        CHECK_INT("oversized refused", proto_parse(big, n, &m, &e), -1);
        CHECK("oversized names limit", strstr(e.msg, "more than the limit") != NULL);
        free(big);
    }
    struct proto_msg m;
    herr e = {0};
    CHECK_INT("empty refused", proto_parse("", 0, &m, &e), -1);
    /* Not NUL-terminated: only len bytes are read. */
    const char txt[] = "{\"v\":1,\"type\":\"done\",\"rank\":1}GARBAGE";
    CHECK_INT("length respected", proto_parse(txt, strlen(txt) - 7, &m, &e), 0);
    proto_msg_free(&m);
}

int main(void)
{
    test_hello();
    test_assign_rendezvous_start();
    test_progress();
    test_small_messages();
    test_refusals();
    TEST_MAIN_END();
}
