/* Who may read the operator's metrics and job page (http_auth.h) against the fake API server's
 * TokenReview and SubjectAccessReview (tests/fakeapi): no token, a bad scheme, an unknown token,
 * a known one; allowed and refused access; answers cached (no second review) and expiring; the
 * token in no answer. The TLS keeper (tls_keeper.h): the Secret made once and shared by two
 * replicas, a broken certificate renewed with the same CA; files read again when they change.
 * The HTTPS listener (http_server.h) with the keeper's certificate, and the renewed one. */
#include "fs_testutil.h"
#include "test.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "coord_tls.h"
#include "fakeapi_proc.h"
#include "http_auth.h"
#include "http_server.h"
#include "kube_client.h"
#include "tls_keeper.h"

#define ALICE_TOKEN "alice-token-0123456789abcdef"
#define BOB_TOKEN "bob-token-0123456789abcdef"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_auth(struct fakeapi *f, struct kube_client *kc)
{
    int rc = fakeapi_control(f, "POST", "/_fake/reviews",
        "{\"users\":{\"" ALICE_TOKEN "\":{\"username\":\"alice\",\"uid\":\"u1\",\"groups\":[\"g\"]},"
        "\"" BOB_TOKEN "\":{\"username\":\"bob\"}},"
        "\"allow\":[\"alice get /metrics\",\"bob get holmes.dev/trainingjobs team\"]}", NULL, 0);
    CHECK_INT("fake reviews configured", rc, 200);
    struct http_auth *a = http_auth_new(kc, 0.5);
    cJSON *who = NULL;
    char why[300];
    CHECK("no header: not authenticated, saying a bearer token is needed",
          http_auth_authenticate(a, NULL, &who, why, sizeof why) == 0 && !who && strstr(why, "bearer"));
    CHECK("not a bearer token: not authenticated",
          http_auth_authenticate(a, "Basic YWxpY2U6eA==", &who, why, sizeof why) == 0 && !who);
    CHECK_INT("no review sent for those", http_auth_reviews(a), 0);
    rc = http_auth_authenticate(a, "Bearer not-a-known-token-42", &who, why, sizeof why);
    CHECK("an unknown token: not authenticated, the API's reason, not the token",
          rc == 0 && strstr(why, "invalid bearer token") && !strstr(why, "not-a-known-token-42"));
    rc = http_auth_authenticate(a, "Bearer " ALICE_TOKEN, &who, why, sizeof why);
    CHECK("a known token: authenticated as its user",
          rc == 1 && who && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(who, "username")), "alice"));
    CHECK("... the reason names the user, not the token", !strstr(why, ALICE_TOKEN) && strstr(why, "alice"));
    unsigned long reviews = http_auth_reviews(a);
    cJSON *again = NULL;
    rc = http_auth_authenticate(a, "bearer " ALICE_TOKEN, &again, why, sizeof why);
    CHECK("the same token again: from the cache (no review)", rc == 1 && again && http_auth_reviews(a) == reviews);
    cJSON_Delete(again);
    struct http_access metrics = {.verb = "get", .path = "/metrics"};
    rc = http_auth_authorize(a, who, &metrics, why, sizeof why);
    CHECK("alice may get /metrics", rc == 1);
    reviews = http_auth_reviews(a);
    CHECK("... asked again: cached", http_auth_authorize(a, who, &metrics, why, sizeof why) == 1 &&
                                         http_auth_reviews(a) == reviews);
    struct http_access jobs = {.verb = "get", .group = "holmes.dev", .resource = "trainingjobs", .ns = "team"};
    rc = http_auth_authorize(a, who, &jobs, why, sizeof why);
    CHECK("alice may not get TrainingJobs in team, naming both", rc == 0 && strstr(why, "alice may not get trainingjobs.holmes.dev in team"));
    cJSON *bob = NULL;
    http_auth_authenticate(a, "Bearer " BOB_TOKEN, &bob, why, sizeof why);
    CHECK("bob may get TrainingJobs in team", bob && http_auth_authorize(a, bob, &jobs, why, sizeof why) == 1);
    jobs.ns = "other";
    CHECK("... not in other", bob && http_auth_authorize(a, bob, &jobs, why, sizeof why) == 0);
    CHECK("... nor /metrics", bob && http_auth_authorize(a, bob, &metrics, why, sizeof why) == 0);
    /* grants change; the cache answers until it expires (0.5 s) */
    fakeapi_control(f, "POST", "/_fake/reviews",
                    "{\"users\":{\"" ALICE_TOKEN "\":{\"username\":\"alice\"}},\"allow\":[]}", NULL, 0);
    CHECK("a revoked grant: the cached answer holds for a moment",
          http_auth_authorize(a, who, &metrics, why, sizeof why) == 1);
    sleep_ms(700);
    CHECK("... then the new answer (refused)", http_auth_authorize(a, who, &metrics, why, sizeof why) == 0);
    CHECK("a token no longer known: refused once the cache expired",
          http_auth_authenticate(a, "Bearer " BOB_TOKEN, &again, why, sizeof why) == 0);
    struct metrics_buf b = {0};
    http_auth_metrics(a, &b);
    CHECK("metrics: reviews by kind and cache hits",
          b.data && strstr(b.data, "holmes_auth_reviews_total{kind=\"TokenReview\"}") &&
              strstr(b.data, "holmes_auth_cache_hits_total"));
    free(b.data);
    cJSON_Delete(who);
    cJSON_Delete(bob);
    http_auth_free(a);
}

static const char *const NAMES[] = {"IP:127.0.0.1", "localhost"};

static void test_keeper_secret(struct kube_client *kc)
{
    struct tls_keeper_opts o = {.kc = kc, .secret_ns = "holmes-system", .secret_name = "tls",
                                .names = {NAMES, 2}, .interval_s = 0.2};
    herr e = {0};
    struct tls_keeper *k1 = tls_keeper_start(&o, &e);
    CHECK("keeper makes the Secret", k1 != NULL);
    if (!k1) {
        printf("# %s\n", e.msg);
        return;
    }
    struct tls_keeper *k2 = tls_keeper_start(&o, &e);
    struct coord_tls t1 = {0}, t2 = {0};
    unsigned long g1 = 0, g2 = 0;
    tls_keeper_take(k1, &g1, &t1);
    if (k2)
        tls_keeper_take(k2, &g2, &t2);
    CHECK("a second replica reads the same Secret (same CA and certificate)", k2 && coord_tls_same(&t1, &t2));
    cJSON *s = NULL;
    CHECK_INT("... it is in the API", kube_get(kc, &KUBE_SECRETS, "holmes-system", "tls", &s, &e), 0);
    CHECK("... a kubernetes.io/tls Secret", s && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s, "type")), "kubernetes.io/tls"));
    cJSON_Delete(s);
    /* someone breaks the serving certificate: the next check renews it with the same CA */
    cJSON *patch = cJSON_Parse("{\"data\":{\"tls.crt\":\"bm90IGEgY2VydGlmaWNhdGU=\"}}");
    kube_patch(kc, &KUBE_SECRETS, "holmes-system", "tls", NULL, patch, NULL, &e);
    cJSON_Delete(patch);
    struct coord_tls t3 = {0};
    int renewed = 0;
    for (int i = 0; i < 100 && !renewed; i++) {
        sleep_ms(50);
        renewed = tls_keeper_take(k1, &g1, &t3) == 1;
    }
    CHECK("a broken certificate is renewed", renewed && t3.tls_crt && strcmp(t3.tls_crt, t1.tls_crt) != 0);
    int ca_ok = 0;
    char why[300];
    CHECK("... with the same CA, and it is good", renewed && !strcmp(t3.ca_crt, t1.ca_crt) &&
          coord_tls_check(&t3, &o.names, time(NULL), &ca_ok, why, sizeof why) == 0);
    char *ca = tls_keeper_ca(k1);
    CHECK("the CA for the pods", ca && !strcmp(ca, t1.ca_crt));
    free(ca);
    coord_tls_free(&t1);
    coord_tls_free(&t2);
    coord_tls_free(&t3);
    tls_keeper_stop(k1);
    tls_keeper_stop(k2);
    struct tls_keeper_opts bad = o;
    bad.secret_ns = "no such namespace!";
    CHECK("an unusable Secret is an error naming it", !tls_keeper_start(&bad, &e) && strstr(e.msg, "tls"));
}

static size_t sink(char *p, size_t sz, size_t n, void *ud)
{
    strncat(ud, p, sz * n < 200 ? sz * n : 200);
    return sz * n;
}

static int handler(void *user, const struct http_request *req, struct metrics_buf *b, const char **type)
{
    (void)user, (void)type;
    metrics_printf(b, "path %s auth %s\n", req->path, req->authorization ? req->authorization : "-");
    return strcmp(req->path, "/deny") ? 200 : 401;
}

/* GET url trusting ca: the status (0 when no answer), the body in body. */
static long get(const char *url, const char *ca, const char *header, char *body)
{
    body[0] = '\0';
    CURL *h = curl_easy_init();
    struct curl_slist *hl = header ? curl_slist_append(NULL, header) : NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 5L);
    if (ca)
        curl_easy_setopt(h, CURLOPT_CAINFO, ca);
    if (hl)
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    long code = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    return code;
}

static void test_https_files(void)
{
    char dir[] = "/tmp/holmes-https.XXXXXX";
    if (!mkdtemp(dir)) {
        TEST_FAIL("tmp dir", "mkdtemp");
        return;
    }
    char crt[64], key[64], ca[64], ca2[64];
    snprintf(crt, sizeof crt, "%s/tls.crt", dir);
    snprintf(key, sizeof key, "%s/tls.key", dir);
    snprintf(ca, sizeof ca, "%s/ca.crt", dir);
    snprintf(ca2, sizeof ca2, "%s/ca2.crt", dir);
    struct coord_tls_names names = {NAMES, 2};
    struct coord_tls a = {0}, b = {0};
    herr e = {0};
    int ok = coord_tls_issue(&a, &names, NULL, 1, &e) == 0 && coord_tls_issue(&b, &names, NULL, 1, &e) == 0 &&
             test_write_file(crt, a.tls_crt) == 0 && test_write_file(key, a.tls_key) == 0 &&
             test_write_file(ca, a.ca_crt) == 0 && test_write_file(ca2, b.ca_crt) == 0;
    CHECK("certificates written as cert-manager's mounted Secret would be", ok);
    struct tls_keeper_opts o = {.cert_file = crt, .key_file = key, .ca_file = ca, .interval_s = 0.2};
    struct tls_keeper *k = ok ? tls_keeper_start(&o, &e) : NULL;
    CHECK("keeper reads the files", k != NULL);
    struct http_server *s = k ? http_server_start("127.0.0.1:0", handler, NULL, k, &e) : NULL;
    CHECK("HTTPS listener starts", s != NULL);
    if (s) {
        char url[96], body[512];
        snprintf(url, sizeof url, "https://localhost:%d/metrics", http_server_port(s));
        long code = get(url, ca, "Authorization: Bearer xyz", body);
        CHECK("HTTPS GET trusting the CA: 200, the Authorization header reaches the handler",
              code == 200 && !strcmp(body, "path /metrics auth Bearer xyz\n"));
        CHECK("... not trusting it: no answer", get(url, ca2, NULL, body) == 0);
        snprintf(url, sizeof url, "https://localhost:%d/deny", http_server_port(s));
        CHECK_INT("a 401 from the handler", get(url, ca, NULL, body), 401);
        snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", http_server_port(s));
        CHECK("plain HTTP gets no answer", get(url, NULL, NULL, body) == 0);
        /* cert-manager renews: new files (another CA here, to tell them apart) */
        test_write_file(key, b.tls_key);
        test_write_file(crt, b.tls_crt);
        test_write_file(ca, b.ca_crt);
        snprintf(url, sizeof url, "https://localhost:%d/metrics", http_server_port(s));
        int renewed = 0;
        for (int i = 0; i < 100 && !renewed; i++) {
            sleep_ms(50);
            renewed = get(url, ca2, NULL, body) == 200;
        }
        CHECK("renewed files: served to new connections", renewed);
        char *pem = tls_keeper_ca(k);
        CHECK("... and the new CA for the pods", pem && !strcmp(pem, b.ca_crt));
        free(pem);
    } else {
        printf("# %s\n", e.msg);
    }
    http_server_stop(s);
    tls_keeper_stop(k);
    coord_tls_free(&a);
    coord_tls_free(&b);
    unlink(crt);
    unlink(key);
    unlink(ca);
    unlink(ca2);
    rmdir(dir);
}

static void with_api(struct fakeapi *f, struct kube_client *kc)
{
    test_auth(f, kc);
    test_keeper_secret(kc);
}

/* The request head taken apart (http_head_parse), as serve_one hands it on. */
static void test_head_parse(void)
{
    struct http_head h;
    CHECK("head: a GET with its query and a padded Authorization",
          http_head_parse("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nauthorization:\t Bearer t \r\n"
                          "\r\n", &h) == 0 && !strcmp(h.path, "/metrics") &&
          h.has_authorization && !strcmp(h.authorization, "Bearer t"));
    CHECK("head: no Authorization", http_head_parse("GET / HTTP/1.0\n\n", &h) == 0 &&
          !h.has_authorization && !strcmp(h.path, "/"));
    CHECK_INT("head: a path that is not origin-form (fuzz_http_request: 'GET ?x' left '')",
              http_head_parse("GET ?x HTTP/1.1\r\n\r\n", &h), 400);
    CHECK_INT("head: not GET", http_head_parse("POST /metrics HTTP/1.1\r\n\r\n", &h), 405);
    CHECK_INT("head: nothing", http_head_parse("", &h), 400);
}

int main(void)
{
    test_head_parse();
    test_https_files();
    if (fakeapi_run(with_api))
        return 1;
    TEST_MAIN_END();
}
