/* The coordinator over TLS (wss://), with the operator's own CA (coord_tls.h): a certificate
 * made for 127.0.0.1 and signed by a CA; a client trusting the CA is admitted, one that does not
 * (or that reaches a certificate made for another name) is refused with a reason naming the
 * certificate, a worker with a wrong token is refused and the job goes on; a renewed certificate
 * is served to new connections; the checks that decide a renewal (expiry, names, key, issuer);
 * the Secret's data read back. */
#include "fs_testutil.h"
#include "test.h"
#include "coord_testutil.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord_client.h"
#include "coord_tls.h"
#include "coordinator.h"

#define TOKEN "tls-token-0123456789"

struct server {
    struct coord_thread ct;
    int hellos;
};

static int plan(void *user, const struct coord_worker *w, int n, struct plan_assignment *a,
                herr *e)
{
    (void)user, (void)w, (void)e;
    for (int i = 0; i < n; i++)
        a[i].rank = i;
    return 0;
}

static void on_hello(void *user, const struct coord_worker *w)
{
    (void)w;
    ((struct server *)user)->hellos++;
}

static void hello_of(struct proto_hello *h, int worker, const char *token)
{
    memset(h, 0, sizeof *h);
    snprintf(h->job, sizeof h->job, "tj");
    snprintf(h->token, sizeof h->token, "%s", token);
    snprintf(h->pod, sizeof h->pod, "p%d", worker);
    h->worker = worker;
    h->nic.cls = NIC_ETHERNET;
    snprintf(h->nic.fabric, sizeof h->nic.fabric, "eth");
    h->nic.gbps = 1;
    h->nic.gid_index = -1;
}

/* Connects with ca (NULL: the system's CAs); 0, or -1 with the reason in e. */
static int try_connect(const char *url, const char *ca, struct coord_client **cl, herr *e)
{
    *cl = NULL;
    return coord_client_create_tls(cl, url, ca, e) || coord_client_connect(*cl, 5000, e) ? -1 : 0;
}

static const char *const LOCAL_NAMES[] = {"IP:127.0.0.1", "localhost"};

static void check_renewal_rules(void)
{
    struct coord_tls_names names = {LOCAL_NAMES, 2};
    struct coord_tls t = {0};
    herr e = {0};
    struct coord_tls_life life = {.ca_s = 3000, .cert_s = 300};
    CHECK_INT("CA and serving certificate issued", coord_tls_issue(&t, &names, &life, 1, &e), 0);
    int ca_ok = 0;
    char why[300] = "";
    time_t now = time(NULL);
    CHECK_INT("fresh certificate: nothing to do", coord_tls_check(&t, &names, now, &ca_ok, why, sizeof why), 0);
    CHECK("... and the CA may be kept", ca_ok);
    /* a third of 300 s before expiry (plus the minute of backdating) */
    int rc = coord_tls_check(&t, &names, now + 190, &ca_ok, why, sizeof why);
    CHECK("two thirds through its life: renew", rc == 1 && strstr(why, "tls.crt: expires in"));
    CHECK("... with the same CA", ca_ok);
    rc = coord_tls_check(&t, &names, now + 2100, &ca_ok, why, sizeof why);
    CHECK("CA two thirds through its life: a new CA too", rc == 1 && !ca_ok && strstr(why, "ca.crt"));
    const char *other[] = {"IP:127.0.0.1", "holmes-coordinator.holmes-system.svc"};
    struct coord_tls_names names2 = {other, 2};
    rc = coord_tls_check(&t, &names2, now, &ca_ok, why, sizeof why);
    CHECK("a name it was not made for: renew, naming it",
          rc == 1 && ca_ok && strstr(why, "holmes-coordinator.holmes-system.svc"));
    char *ca_before = strdup(t.ca_crt);
    CHECK_INT("re-issued for the new names, same CA", coord_tls_issue(&t, &names2, &life, 0, &e), 0);
    CHECK("... the CA is unchanged", ca_before && strcmp(ca_before, t.ca_crt) == 0);
    CHECK_INT("... and the certificate now fits", coord_tls_check(&t, &names2, now, &ca_ok, why, sizeof why), 0);
    free(ca_before);
    /* another serving key: the pair does not match */
    struct coord_tls u = {0};
    coord_tls_issue(&u, &names, &life, 1, &e);
    char *k = t.tls_key;
    t.tls_key = u.tls_key;
    rc = coord_tls_check(&t, &names2, now, &ca_ok, why, sizeof why);
    CHECK("a key that is not the certificate's: renew", rc == 1 && strstr(why, "tls.key"));
    t.tls_key = k;
    char *c = t.tls_crt;
    t.tls_crt = u.tls_crt;
    t.tls_key = u.tls_key;
    rc = coord_tls_check(&t, &names, now, &ca_ok, why, sizeof why);
    CHECK("a certificate another CA signed: renew", rc == 1 && strstr(why, "not signed by ca.crt"));
    t.tls_crt = c;
    t.tls_key = k;
    coord_tls_free(&u);
    const char *bad[] = {"a name,with a comma"};
    struct coord_tls_names badn = {bad, 1};
    CHECK("a bad name is refused, named",
          coord_tls_issue(&u, &badn, &life, 1, &e) != 0 && strstr(e.msg, "a name,with a comma"));

    /* the Secret's data: base64 of each PEM */
    cJSON *sec = cJSON_CreateObject(), *data = cJSON_AddObjectToObject(sec, "data");
    const char *keys[] = {"ca.crt", "ca.key", "tls.crt", "tls.key"};
    const char *vals[] = {t.ca_crt, t.ca_key, t.tls_crt, t.tls_key};
    for (int i = 0; i < 4; i++) {
        size_t n = strlen(vals[i]);
        char *b = malloc((n + 2) / 3 * 4 + 1);
        EVP_EncodeBlock((unsigned char *)b, (const unsigned char *)vals[i], (int)n);
        cJSON_AddStringToObject(data, keys[i], b);
        free(b);
    }
    struct coord_tls back = {0};
    CHECK_INT("Secret data read back", coord_tls_from_secret(sec, &back, &e), 0);
    CHECK("... the same PEMs", coord_tls_same(&back, &t));
    cJSON_ReplaceItemInObject(data, "tls.key", cJSON_CreateString("not base64!"));
    CHECK("a value that is not base64 is refused, naming the key",
          coord_tls_from_secret(sec, &back, &e) != 0 && strstr(e.msg, "data.tls.key"));
    cJSON_DeleteItemFromObject(data, "ca.crt");
    CHECK("a missing key is refused, naming it",
          coord_tls_from_secret(sec, &back, &e) != 0 && strstr(e.msg, "data.ca.crt"));
    cJSON_Delete(sec);
    coord_tls_free(&back);
    coord_tls_free(&t);
}

int main(void)
{
    check_renewal_rules();

    char dir[] = "/tmp/holmes-tls.XXXXXX";
    if (!mkdtemp(dir)) {
        TEST_FAIL("tmp dir", "mkdtemp");
        TEST_MAIN_END();
    }
    enum { CA, CA2, CERT, KEY, NFILES };
    static const char *const file_names[NFILES] = {"ca.crt", "ca2.crt", "tls.crt", "tls.key"};
    char files[NFILES][64];
    for (int i = 0; i < NFILES; i++)
        snprintf(files[i], sizeof files[i], "%s/%s", dir, file_names[i]);
    struct coord_tls_names names = {LOCAL_NAMES, 2};
    struct coord_tls t = {0}, t2 = {0}, wrong = {0};
    herr e = {0};
    const char *elsewhere[] = {"coordinator.elsewhere.example"};
    struct coord_tls_names other = {elsewhere, 1};
    int made = coord_tls_issue(&t, &names, NULL, 1, &e) == 0 &&
               coord_tls_issue(&t2, &names, NULL, 1, &e) == 0 &&
               coord_tls_issue(&wrong, &other, NULL, 0, &e) == 0;
    /* "wrong" has its own CA; sign one for another name with t's CA instead */
    coord_tls_free(&wrong);
    struct coord_tls w2 = {0};
    coord_tls_copy(&w2, &t);
    made = made && coord_tls_issue(&w2, &other, NULL, 0, &e) == 0;
    made = made && test_write_file(files[CA], t.ca_crt) == 0 && test_write_file(files[CA2], t2.ca_crt) == 0 &&
           test_write_file(files[CERT], t.tls_crt) == 0 && test_write_file(files[KEY], t.tls_key) == 0;
    CHECK("CAs and certificates made", made);
    if (!made) {
        printf("# %s\n", e.msg);
        TEST_MAIN_END();
    }

    static struct server s;
    pthread_mutex_init(&s.ct.mu, NULL);
    /* files (as cert-manager's mounted Secret): read at start */
    struct coord_options o = {.bind = "127.0.0.1", .tls_cert = files[CERT], .tls_key = files[KEY]};
    int rc = coord_create(&s.ct.c, &o, &e);
    CHECK_INT("coordinator with TLS from files", rc, 0);
    if (rc) {
        printf("# %s\n", e.msg);
        TEST_MAIN_END();
    }
    struct coord_job_spec js = {.name = "tj", .token = TOKEN, .workers = 2,
                                .hooks = {.plan = plan, .on_hello = on_hello}, .user = &s};
    coord_add_job(s.ct.c, &js, &e);
    coord_thread_start(&s.ct);
    char url[64];
    snprintf(url, sizeof url, "wss://127.0.0.1:%d/", coord_port(s.ct.c));

    struct coord_client *cl = NULL, *c1 = NULL;
    rc = try_connect(url, files[CA], &c1, &e);
    CHECK_INT("client trusting the CA connects", rc, 0);
    struct proto_hello h;
    if (rc == 0) {
        hello_of(&h, 0, TOKEN);
        coord_client_send(c1, proto_hello_encode(&h, NULL));
        coord_client_flush(c1, 2000);
    } else {
        printf("# %s\n", e.msg);
    }

    /* a wrong token: refused with a reason; the job keeps its first worker */
    rc = try_connect(url, files[CA], &cl, &e);
    if (rc == 0) {
        hello_of(&h, 1, "wrong-token-0000000000");
        coord_client_send(cl, proto_hello_encode(&h, NULL));
        struct proto_msg m = {0};
        int got = coord_client_poll(cl, 5000, &m, &e);
        CHECK("wrong token: refused with a reason, not the token",
              got == 1 && m.type == PROTO_ERROR && m.u.error.code == PROTO_ERR_AUTH &&
                  strstr(m.u.error.message, "token") && !strstr(m.u.error.message, "wrong-token-"));
        if (got == 1)
            proto_msg_free(&m);
    } else {
        TEST_FAIL("wrong token: refused with a reason", "%s", e.msg);
    }
    coord_client_destroy(cl);
    pthread_mutex_lock(&s.ct.mu);
    enum coord_job_state st = COORD_FAILED;
    coord_job_state(s.ct.c, "tj", &st);
    int connected = coord_job_connected(s.ct.c, "tj");
    pthread_mutex_unlock(&s.ct.mu);
    CHECK("... the job is undisturbed (gathering, its worker still connected)",
          st == COORD_GATHERING && connected == 1);

    /* the second worker: the gang is complete, both get their assignment over TLS */
    rc = try_connect(url, files[CA], &cl, &e);
    if (rc == 0) {
        hello_of(&h, 1, TOKEN);
        coord_client_send(cl, proto_hello_encode(&h, NULL));
        struct proto_msg m = {0};
        int got = coord_client_poll(cl, 5000, &m, &e) == 1 && m.type == PROTO_ASSIGN;
        if (m.json)
            proto_msg_free(&m);
        struct proto_msg m1 = {0};
        got = got && coord_client_poll(c1, 5000, &m1, &e) == 1 && m1.type == PROTO_ASSIGN;
        if (m1.json)
            proto_msg_free(&m1);
        CHECK("assignments received over TLS", got);
    }
    coord_client_destroy(cl);

    /* Without the CA (the system's store does not know it), the handshake must fail, saying so. */
    rc = try_connect(url, NULL, &cl, &e);
    CHECK("untrusted certificate refused, saying it does not verify",
          rc != 0 && strstr(e.msg, "certificate does not verify against the system's CAs"));
    coord_client_destroy(cl);
    rc = try_connect(url, files[CA2], &cl, &e);
    CHECK("another CA: refused", rc != 0);
    coord_client_destroy(cl);
    /* Plain ws:// against the TLS port fails too. */
    char plain[64];
    snprintf(plain, sizeof plain, "ws://127.0.0.1:%d/", coord_port(s.ct.c));
    cl = NULL;
    rc = coord_client_create(&cl, plain, &e) || coord_client_connect(cl, 3000, &e);
    CHECK("plain connection to the TLS port refused", rc != 0);
    coord_client_destroy(cl);

    /* A certificate from the right CA for another name: the host name check refuses it. */
    pthread_mutex_lock(&s.ct.mu);
    rc = coord_tls_reload(s.ct.c, w2.tls_crt, w2.tls_key, &e);
    pthread_mutex_unlock(&s.ct.mu);
    CHECK_INT("certificate reloaded (another name)", rc, 0);
    rc = try_connect(url, files[CA], &cl, &e);
    CHECK("certificate for another name: refused, naming the mismatch",
          rc != 0 && strstr(e.msg, "does not verify against") && strstr(e.msg, "mismatch"));
    coord_client_destroy(cl);
    rc = try_connect(url, "/nonexistent/ca.crt", &cl, &e);
    CHECK("a CA file that cannot be read is named", rc != 0 && strstr(e.msg, "/nonexistent/ca.crt"));
    coord_client_destroy(cl);

    /* Renewal: new connections get the new certificate (here from another CA, to tell them
     * apart); the worker already connected keeps its connection. */
    pthread_mutex_lock(&s.ct.mu);
    rc = coord_tls_reload(s.ct.c, t2.tls_crt, t2.tls_key, &e);
    int bad = coord_tls_reload(s.ct.c, t2.tls_crt, t.tls_key, &e);
    pthread_mutex_unlock(&s.ct.mu);
    CHECK_INT("renewed certificate loaded", rc, 0);
    CHECK("a key that is not the certificate's is refused", bad != 0 && strstr(e.msg, "key"));
    rc = try_connect(url, files[CA2], &cl, &e);
    CHECK_INT("new connections get the renewed certificate", rc, 0);
    coord_client_destroy(cl);
    rc = try_connect(url, files[CA], &cl, &e);
    CHECK("... which the old CA does not verify", rc != 0);
    coord_client_destroy(cl);
    CHECK("the connection made before the renewal is still open", coord_client_connected(c1));
    coord_client_destroy(c1);

    coord_thread_stop(&s.ct);
    CHECK_INT("two workers admitted", s.hellos, 2);

    /* PEMs in memory; a key that does not match is refused at start */
    struct coordinator *c = NULL;
    struct coord_options om = {.bind = "127.0.0.1", .tls_cert_pem = t.tls_crt, .tls_key_pem = t.tls_key};
    CHECK_INT("coordinator with TLS from memory", coord_create(&c, &om, &e), 0);
    coord_destroy(c);
    c = NULL;
    om.tls_key_pem = t2.tls_key;
    CHECK("mismatched key refused at start, saying so",
          coord_create(&c, &om, &e) != 0 && strstr(e.msg, "key"));
    coord_destroy(c);

    coord_tls_free(&t);
    coord_tls_free(&t2);
    coord_tls_free(&w2);
    for (int i = 0; i < NFILES; i++)
        unlink(files[i]);
    rmdir(dir);
    TEST_MAIN_END();
}
