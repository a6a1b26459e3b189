/* Offline parts of the Kubernetes client: map, JSON stream splitter, work queue, kubeconfig. */
#include "fs_testutil.h"
#include "test.h"

#include <stdlib.h>
#include <unistd.h>

#include "kube_config.h"
#include "kube_map.h"
#include "kube_queue.h"
#include "kube_watch.h"

static void test_map(void)
{
    struct kube_map *m = kube_map_new();
    char k[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(k, sizeof k, "ns/obj-%d", i);
        kube_map_put(m, k, (void *)(long)(i + 1), NULL);
    }
    CHECK_INT("map size after 5000 puts", kube_map_size(m), 5000);
    CHECK_INT("map get", (long)kube_map_get(m, "ns/obj-4321"), 4322);
    void *old = NULL;
    kube_map_put(m, "ns/obj-7", (void *)99L, &old);
    CHECK_INT("map replace returns old", (long)old, 8);
    CHECK_INT("map remove", (long)kube_map_remove(m, "ns/obj-7"), 99);
    CHECK("map get removed", kube_map_get(m, "ns/obj-7") == NULL);
    CHECK_INT("map size after remove", kube_map_size(m), 4999);
    kube_map_free(m, NULL);
}

struct collected {
    int n;
    char names[16][32];
};

static int collect(cJSON *v, void *user)
{
    struct collected *c = user;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(v, "object");
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(md, "name");
    if (c->n < 16)
        snprintf(c->names[c->n], 32, "%s", cJSON_IsString(nm) ? nm->valuestring : "?");
    c->n++;
    cJSON_Delete(v);
    return 0;
}

static void test_stream(void)
{
    const char *text =
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"},\"s\":\"br}ace\\\"{\"}}\n"
        "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"b\"},\"l\":[1,{\"x\":[]}]}}\n"
        "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"c\"}}}";
    size_t len = strlen(text);
    int all_ok = 1;
    /* Every split point, and byte-by-byte. */
    for (size_t cut = 0; cut <= len; cut++) {
        struct kube_json_stream *s = kube_json_stream_new(0);
        struct collected c = {0};
        herr e;
        int rc = kube_json_stream_feed(s, text, cut, collect, &c, &e);
        rc |= kube_json_stream_feed(s, text + cut, len - cut, collect, &c, &e);
        if (rc != 0 || c.n != 3 || strcmp(c.names[0], "a") || strcmp(c.names[1], "b") ||
            strcmp(c.names[2], "c")) {
            all_ok = 0;
            TEST_FAIL("stream split", "cut at %zu: rc %d, %d values", cut, rc, c.n);
        }
        kube_json_stream_free(s);
    }
    CHECK("stream: events split at every byte offset parse identically", all_ok);
    struct kube_json_stream *s = kube_json_stream_new(0);
    struct collected c = {0};
    herr e;
    for (size_t i = 0; i < len; i++)
        kube_json_stream_feed(s, text + i, 1, collect, &c, &e);
    CHECK_INT("stream: byte by byte", c.n, 3);
    kube_json_stream_free(s);

    /* A 3 MB object fed in 1000-byte reads. */
    size_t big = 3u << 20;
    char *b = malloc(big + 100);
    int n = snprintf(b, 100, "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"big\"},\"d\":\"");
    memset(b + n, 'x', big);
    strcpy(b + n + big, "\"}}\n");
    size_t blen = strlen(b);
    s = kube_json_stream_new(0);
    memset(&c, 0, sizeof c);
    int rc = 0;
    for (size_t off = 0; off < blen && rc == 0; off += 1000)
        rc = kube_json_stream_feed(s, b + off, blen - off < 1000 ? blen - off : 1000, collect, &c, &e);
    CHECK("stream: 3 MB object in 1000-byte reads", rc == 0 && c.n == 1 && !strcmp(c.names[0], "big"));
    kube_json_stream_free(s);
    s = kube_json_stream_new(1u << 20);
    rc = kube_json_stream_feed(s, b, blen, collect, &c, &e);
    CHECK("stream: value above the limit is an error", rc == -1 && strstr(e.msg, "larger than"));
    kube_json_stream_free(s);
    free(b);
    s = kube_json_stream_new(0);
    rc = kube_json_stream_feed(s, "{\"a\":}\n", 7, collect, &c, &e);
    CHECK("stream: bad JSON is an error", rc == -1 && strstr(e.msg, "not JSON"));
    kube_json_stream_free(s);
    s = kube_json_stream_new(0);
    rc = kube_json_stream_feed(s, "hello", 5, collect, &c, &e);
    CHECK("stream: non-object is an error", rc == -1);
    kube_json_stream_free(s);
}

static void test_queue(void)
{
    struct kube_queue *q = kube_queue_new(0.01, 0.04);
    kube_queue_add(q, "a");
    kube_queue_add(q, "b");
    kube_queue_add(q, "a");
    CHECK_INT("queue dedups", kube_queue_len(q), 2);
    char *k1 = kube_queue_get(q);
    CHECK_STR("queue FIFO", k1, "a");
    kube_queue_add(q, "a"); /* while processing: not handed out twice */
    char *k2 = kube_queue_get(q);
    CHECK_STR("queue skips key in processing", k2, "b");
    char *none = kube_queue_get_timeout(q, 50);
    CHECK("queue: nothing while a is processing", none == NULL);
    kube_queue_done(q, k1);
    char *k3 = kube_queue_get_timeout(q, 1000);
    CHECK_STR("queue: re-added during processing comes back after done", k3, "a");
    kube_queue_done(q, k2);
    kube_queue_done(q, k3);
    free(k1);
    free(k2);
    free(k3);

    double d1 = kube_queue_add_rate_limited(q, "c");
    char *k = kube_queue_get_timeout(q, 2000);
    kube_queue_done(q, k);
    free(k);
    double d2 = kube_queue_add_rate_limited(q, "c");
    k = kube_queue_get_timeout(q, 2000);
    kube_queue_done(q, k);
    free(k);
    double d3 = kube_queue_add_rate_limited(q, "c");
    double d4 = kube_queue_add_rate_limited(q, "c");
    CHECK("queue backoff doubles", d1 == 0.01 && d2 == 0.02 && d3 == 0.04);
    CHECK("queue backoff capped", d4 == 0.04);
    CHECK_INT("queue failures counted", kube_queue_failures(q, "c"), 4);
    k = kube_queue_get_timeout(q, 2000);
    CHECK_STR("queue delayed key arrives", k, "c");
    CHECK_INT("queue delayed key arrives once", kube_queue_len(q), 0);
    kube_queue_done(q, k);
    free(k);
    kube_queue_forget(q, "c");
    CHECK_INT("queue forget resets", kube_queue_failures(q, "c"), 0);
    kube_queue_add_after(q, "d", 30);
    kube_queue_add_after(q, "d", 0.01);
    k = kube_queue_get_timeout(q, 2000);
    CHECK_STR("queue earlier add_after wins", k, "d");
    kube_queue_done(q, k);
    free(k);
    kube_queue_shutdown(q);
    CHECK("queue shutdown releases get", kube_queue_get(q) == NULL);
    kube_queue_free(q);
}

static void test_config(void)
{
    char dir[] = "/tmp/holmes-kcfg.XXXXXX";
    if (!mkdtemp(dir)) {
        TEST_FAIL("config tmpdir", "mkdtemp");
        return;
    }
    char p[128];
    snprintf(p, sizeof p, "%s/config", dir);
    /* "LS0tLS1CRUdJTg==" is base64 of "-----BEGIN" */
    test_write_file(p, "apiVersion: v1\ncurrent-context: a\n"
                  "clusters:\n- name: c1\n  cluster:\n    server: https://10.0.0.1:6443/\n"
                  "    certificate-authority-data: LS0tLS1CRUdJTg==\n"
                  "- name: c2\n  cluster: {server: https://k2:443, insecure-skip-tls-verify: true}\n"
                  "contexts:\n- name: a\n  context: {cluster: c1, user: u1, namespace: team}\n"
                  "- name: b\n  context: {cluster: c2, user: u2}\n"
                  "- name: broken\n  context: {cluster: nope, user: u1}\n"
                  "users:\n- name: u1\n  user: {token: abc}\n"
                  "- name: u2\n  user: {client-certificate: certs/c.pem, client-key: /abs/k.pem}\n");
    struct kube_config c;
    herr e;
    int rc = kube_config_from_kubeconfig(&c, p, NULL, &e);
    CHECK_INT("kubeconfig current context loads", rc, 0);
    if (rc == 0) {
        char tok[64];
        CHECK_STR("kubeconfig server (trailing / dropped)", c.server, "https://10.0.0.1:6443");
        CHECK_STR("kubeconfig namespace", c.namespace, "team");
        CHECK("kubeconfig CA data decoded", c.ca_data && c.ca_data_len == 10 &&
                                                !memcmp(c.ca_data, "-----BEGIN", 10));
        CHECK("kubeconfig token", kube_config_token(&c, tok, sizeof tok) == 0 && !strcmp(tok, "abc"));
        CHECK_INT("kubeconfig secure by default", c.insecure, 0);
        kube_config_free(&c);
    }
    rc = kube_config_from_kubeconfig(&c, p, "b", &e);
    CHECK_INT("kubeconfig --context b", rc, 0);
    if (rc == 0) {
        char want[160];
        snprintf(want, sizeof want, "%s/certs/c.pem", dir);
        CHECK_INT("kubeconfig insecure when it says so", c.insecure, 1);
        CHECK_STR("kubeconfig relative cert path", c.cert_file, want);
        CHECK_STR("kubeconfig absolute key path", c.key_file, "/abs/k.pem");
        kube_config_free(&c);
    }
    rc = kube_config_from_kubeconfig(&c, p, "missing", &e);
    CHECK("kubeconfig unknown context named", rc == -1 && strstr(e.msg, "\"missing\""));
    rc = kube_config_from_kubeconfig(&c, p, "broken", &e);
    CHECK("kubeconfig unknown cluster named", rc == -1 && strstr(e.msg, "cluster \"nope\""));

    /* In-cluster, with token rotation. */
    char sa[160];
    snprintf(sa, sizeof sa, "%s/token", dir);
    test_write_file(sa, "first\n");
    snprintf(sa, sizeof sa, "%s/namespace", dir);
    test_write_file(sa, "holmes-system");
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    rc = kube_config_in_cluster(&c, dir, &e);
    CHECK_INT("in-cluster loads", rc, 0);
    if (rc == 0) {
        char tok[64];
        CHECK_STR("in-cluster server", c.server, "https://10.96.0.1:443");
        CHECK_STR("in-cluster namespace", c.namespace, "holmes-system");
        kube_config_token(&c, tok, sizeof tok);
        CHECK_STR("in-cluster token", tok, "first");
        usleep(20000);
        snprintf(sa, sizeof sa, "%s/token", dir);
        test_write_file(sa, "second-rotated\n");
        kube_config_token(&c, tok, sizeof tok);
        CHECK_STR("in-cluster token re-read after rotation", tok, "second-rotated");
        kube_config_free(&c);
    }
    unsetenv("KUBERNETES_SERVICE_HOST");
    rc = kube_config_in_cluster(&c, dir, &e);
    CHECK("in-cluster without env is a clear error", rc == -1 && strstr(e.msg, "KUBERNETES_SERVICE_HOST"));
    unlink(p);
    snprintf(sa, sizeof sa, "%s/token", dir);
    unlink(sa);
    snprintf(sa, sizeof sa, "%s/namespace", dir);
    unlink(sa);
    rmdir(dir);
}

int main(void)
{
    test_map();
    test_stream();
    test_queue();
    test_config();
    TEST_MAIN_END();
}
