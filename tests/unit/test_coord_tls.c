/* The coordinator over TLS (wss://): a self-signed certificate for 127.0.0.1 made here with
 * OpenSSL; a client trusting it is admitted, a client that does not trust it cannot connect. */
#include "test.h"
#include "coord_testutil.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "coord_client.h"
#include "coordinator.h"

#define TOKEN "tls-token-0123456789"

static int make_cert(const char *cert_path, const char *key_path)
{
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509 *x = X509_new();
    int ok = key && x;
    if (ok) {
        ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
        X509_gmtime_adj(X509_getm_notBefore(x), -60);
        X509_gmtime_adj(X509_getm_notAfter(x), 3600);
        X509_set_pubkey(x, key);
        X509_NAME *name = X509_get_subject_name(x);
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"127.0.0.1",
                                   -1, -1, 0);
        X509_set_issuer_name(x, name);
        X509V3_CTX ctx;
        X509V3_set_ctx_nodb(&ctx);
        X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
        X509_EXTENSION *san = X509V3_EXT_conf_nid(NULL, &ctx, NID_subject_alt_name,
                                                  "IP:127.0.0.1");
        X509_EXTENSION *bc = X509V3_EXT_conf_nid(NULL, &ctx, NID_basic_constraints, "CA:TRUE");
        ok = san && bc && X509_add_ext(x, san, -1) && X509_add_ext(x, bc, -1) &&
             X509_sign(x, key, EVP_sha256());
        X509_EXTENSION_free(san);
        X509_EXTENSION_free(bc);
    }
    FILE *fc = ok ? fopen(cert_path, "w") : NULL, *fk = ok ? fopen(key_path, "w") : NULL;
    ok = ok && fc && fk && PEM_write_X509(fc, x) &&
         PEM_write_PrivateKey(fk, key, NULL, NULL, 0, NULL, NULL);
    if (fc)
        fclose(fc);
    if (fk)
        fclose(fk);
    X509_free(x);
    EVP_PKEY_free(key);
    return ok ? 0 : -1;
}

struct server {
    struct coord_thread ct;
    int hellos;
};

static int plan(void *user, const struct coord_worker *w, int n, cJSON **a, herr *e)
{
    (void)user, (void)w, (void)e;
    for (int i = 0; i < n; i++) {
        a[i] = cJSON_CreateObject();
        cJSON_AddNumberToObject(a[i], "rank", i);
    }
    return 0;
}

static void on_hello(void *user, const struct coord_worker *w)
{
    (void)w;
    ((struct server *)user)->hellos++;
}

int main(void)
{
    char dir[] = "/tmp/holmes-tls.XXXXXX";
    if (!mkdtemp(dir)) {
        TEST_FAIL("tmp dir", "mkdtemp");
        TEST_MAIN_END();
    }
    char cert[64], key[64];
    snprintf(cert, sizeof cert, "%s/cert.pem", dir);
    snprintf(key, sizeof key, "%s/key.pem", dir);
    CHECK_INT("self-signed certificate made", make_cert(cert, key), 0);

    static struct server s;
    pthread_mutex_init(&s.ct.mu, NULL);
    struct coord_options o = {.bind = "127.0.0.1", .tls_cert = cert, .tls_key = key};
    herr e = {0};
    int rc = coord_create(&s.ct.c, &o, &e);
    CHECK_INT("coordinator with TLS", rc, 0);
    if (rc) {
        printf("# %s\n", e.msg);
        TEST_MAIN_END();
    }
    struct coord_job_spec js = {.name = "tj", .token = TOKEN, .workers = 1,
                                .hooks = {.plan = plan, .on_hello = on_hello}, .user = &s};
    coord_add_job(s.ct.c, &js, &e);
    coord_thread_start(&s.ct);
    char url[64];
    snprintf(url, sizeof url, "wss://127.0.0.1:%d/", coord_port(s.ct.c));

    struct coord_client *cl = NULL;
    rc = coord_client_create_tls(&cl, url, cert, &e) || coord_client_connect(cl, 5000, &e);
    CHECK_INT("client trusting the certificate connects", rc, 0);
    if (rc == 0) {
        struct proto_hello h = {0};
        snprintf(h.job, sizeof h.job, "tj");
        snprintf(h.token, sizeof h.token, TOKEN);
        snprintf(h.pod, sizeof h.pod, "p");
        h.nic.cls = NIC_ETHERNET;
        snprintf(h.nic.fabric, sizeof h.nic.fabric, "eth");
        h.nic.gbps = 1;
        h.nic.gid_index = -1;
        coord_client_send(cl, proto_hello_encode(&h, NULL));
        struct proto_msg m;
        int got = coord_client_poll(cl, 5000, &m, &e) == 1 && m.type == PROTO_ASSIGN;
        if (m.json)
            proto_msg_free(&m);
        CHECK("assignment received over TLS", got);
    } else {
        printf("# %s\n", e.msg);
    }
    coord_client_destroy(cl);

    cl = NULL;
    /* Without the CA (the system's store does not know it), the handshake must fail. */
    rc = coord_client_create_tls(&cl, url, NULL, &e) || coord_client_connect(cl, 5000, &e);
    CHECK("untrusted certificate refused", rc != 0);
    coord_client_destroy(cl);
    /* Plain ws:// against the TLS port fails too. */
    snprintf(url, sizeof url, "ws://127.0.0.1:%d/", coord_port(s.ct.c));
    cl = NULL;
    rc = coord_client_create(&cl, url, &e) || coord_client_connect(cl, 3000, &e);
    CHECK("plain connection to the TLS port refused", rc != 0);
    coord_client_destroy(cl);

    coord_thread_stop(&s.ct);
    CHECK_INT("one worker admitted", s.hellos, 1);
    unlink(cert);
    unlink(key);
    rmdir(dir);
    TEST_MAIN_END();
}
