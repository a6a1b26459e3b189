/* The coordinator's CA and serving certificate (coord_tls.h): OpenSSL, EC P-256 keys. */
#include "coord_tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "base64.h"
#include "kube_client.h"

#define CA_LIFE_S (10L * 365 * 86400)
#define CERT_LIFE_S (365L * 86400)
#define CA_CN "holmes-coordinator-ca"

static const char *const KEYS[4] = {"ca.crt", "ca.key", "tls.crt", "tls.key"};

static char **field(struct coord_tls *t, int i)
{
    char **f[4] = {&t->ca_crt, &t->ca_key, &t->tls_crt, &t->tls_key};
    return f[i];
}

void coord_tls_free(struct coord_tls *t)
{
    if (!t)
        return;
    for (int i = 0; i < 4; i++) {
        char **p = field(t, i);
        if (*p && (i == 1 || i == 3)) /* private keys: do not leave them in freed memory */
            OPENSSL_cleanse(*p, strlen(*p));
        free(*p);
        *p = NULL;
    }
}

int coord_tls_copy(struct coord_tls *dst, const struct coord_tls *src)
{
    struct coord_tls out = {0};
    for (int i = 0; i < 4; i++) {
        const char *s = *field((struct coord_tls *)src, i);
        if (s && !(*field(&out, i) = strdup(s))) {
            coord_tls_free(&out);
            return -1;
        }
    }
    *dst = out;
    return 0;
}

int coord_tls_same(const struct coord_tls *a, const struct coord_tls *b)
{
    for (int i = 0; i < 4; i++) {
        const char *x = *field((struct coord_tls *)a, i), *y = *field((struct coord_tls *)b, i);
        if ((x == NULL) != (y == NULL) || (x && strcmp(x, y) != 0))
            return 0;
    }
    return 1;
}

/* ---- PEM in and out */

/* The first certificate (key 0) or private key (key 1) of a PEM text; NULL when it holds none. */
static void *pem_read(const char *pem, int key)
{
    BIO *b = pem ? BIO_new_mem_buf(pem, -1) : NULL;
    void *x = !b  ? NULL
              : key ? (void *)PEM_read_bio_PrivateKey(b, NULL, NULL, NULL)
                    : (void *)PEM_read_bio_X509(b, NULL, NULL, NULL);
    BIO_free(b);
    ERR_clear_error();
    return x;
}

static X509 *pem_cert(const char *pem) { return pem_read(pem, 0); }
static EVP_PKEY *pem_key(const char *pem) { return pem_read(pem, 1); }

/* The BIO's contents as a new string. */
static char *bio_string(BIO *b)
{
    char *data;
    long n = BIO_get_mem_data(b, &data);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s) {
        memcpy(s, data, (size_t)n);
        s[n] = '\0';
    }
    return s;
}

static char *cert_pem(X509 *x)
{
    BIO *b = BIO_new(BIO_s_mem());
    char *s = b && PEM_write_bio_X509(b, x) ? bio_string(b) : NULL;
    BIO_free(b);
    return s;
}

static char *key_pem(EVP_PKEY *k)
{
    BIO *b = BIO_new(BIO_s_mem());
    char *s = b && PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL) ? bio_string(b) : NULL;
    BIO_free_all(b);
    return s;
}

time_t coord_tls_not_after(const char *pem)
{
    X509 *x = pem_cert(pem);
    if (!x)
        return -1;
    struct tm tm;
    time_t t = ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) ? timegm(&tm) : -1;
    X509_free(x);
    return t;
}

static time_t not_before(X509 *x)
{
    struct tm tm;
    return ASN1_TIME_to_tm(X509_get0_notBefore(x), &tm) ? timegm(&tm) : -1;
}

static time_t not_after(X509 *x)
{
    struct tm tm;
    return ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) ? timegm(&tm) : -1;
}

/* Whether x is within a third of its lifetime of expiry at now (or expired, or not yet valid). */
static int expiring(X509 *x, time_t now)
{
    time_t nb = not_before(x), na = not_after(x);
    if (nb < 0 || na <= nb)
        return 1;
    return now >= na - (na - nb) / 3 || now + 300 < nb;
}

int coord_tls_ctx_use(void *ssl_ctx, const char *cert_pem, const char *key_pem, herr *e)
{
    SSL_CTX *ctx = ssl_ctx;
    if (!cert_pem || !key_pem)
        return herr_set(e, "TLS: a certificate and a key are required");
    BIO *b = BIO_new_mem_buf(cert_pem, -1);
    X509 *leaf = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    EVP_PKEY *k = pem_key(key_pem);
    int ok = leaf && k && SSL_CTX_use_certificate(ctx, leaf) == 1 &&
             SSL_CTX_use_PrivateKey(ctx, k) == 1 && SSL_CTX_check_private_key(ctx) == 1;
    if (ok) {
        SSL_CTX_clear_chain_certs(ctx);
        X509 *more;
        while (ok && (more = PEM_read_bio_X509(b, NULL, NULL, NULL)))
            if (SSL_CTX_add0_chain_cert(ctx, more) != 1) {
                X509_free(more);
                ok = 0;
            }
        ok = ok && SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1;
    }
    ERR_clear_error();
    X509_free(leaf);
    EVP_PKEY_free(k);
    BIO_free(b);
    if (!ok)
        return herr_set(e, "TLS: %s", !leaf ? "the certificate is not PEM"
                                      : !k  ? "the key is not a PEM private key"
                                            : "the key is not the certificate's");
    return 0;
}

/* ---- checking */

static int has_name(X509 *x, const char *name)
{
    if (strncmp(name, "IP:", 3) == 0)
        return X509_check_ip_asc(x, name + 3, 0) == 1;
    return X509_check_host(x, name, 0, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS, NULL) == 1;
}

static int signed_by(X509 *x, X509 *ca)
{
    EVP_PKEY *pk = X509_get0_pubkey(ca);
    int ok = pk && X509_verify(x, pk) == 1 && X509_check_issued(ca, x) == X509_V_OK;
    ERR_clear_error();
    return ok;
}

int coord_tls_check(const struct coord_tls *t, const struct coord_tls_names *names, time_t now,
                    int *ca_ok, char *why, size_t why_len)
{
    X509 *ca = pem_cert(t->ca_crt), *x = pem_cert(t->tls_crt);
    EVP_PKEY *cak = pem_key(t->ca_key), *k = pem_key(t->tls_key);
    *ca_ok = ca && cak && X509_check_private_key(ca, cak) == 1 && !expiring(ca, now) &&
             X509_check_ca(ca) >= 1;
    ERR_clear_error();
    int rc = 1;
    if (!ca)
        snprintf(why, why_len, "ca.crt: missing or not a PEM certificate");
    else if (!cak)
        snprintf(why, why_len, "ca.key: missing or not a PEM private key");
    else if (!*ca_ok)
        snprintf(why, why_len, "ca.crt: expiring (%ld s left), or not a CA with ca.key's key",
                 (long)(not_after(ca) - now));
    else if (!x)
        snprintf(why, why_len, "tls.crt: missing or not a PEM certificate");
    else if (!k || X509_check_private_key(x, k) != 1)
        snprintf(why, why_len, "tls.key: missing, or not the key of tls.crt");
    else if (!signed_by(x, ca))
        snprintf(why, why_len, "tls.crt: not signed by ca.crt");
    else if (expiring(x, now))
        snprintf(why, why_len, "tls.crt: expires in %ld s (renewed a third of its life before)",
                 (long)(not_after(x) - now));
    else {
        rc = 0;
        for (int i = 0; i < names->n && rc == 0; i++)
            if (!has_name(x, names->names[i])) {
                snprintf(why, why_len, "tls.crt: not made for the name %s", names->names[i]);
                rc = 1;
            }
    }
    ERR_clear_error();
    X509_free(ca);
    X509_free(x);
    EVP_PKEY_free(cak);
    EVP_PKEY_free(k);
    return rc;
}

/* ---- issuing */

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    int ok = ext && X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    return ok;
}

static int random_serial(X509 *x)
{
    unsigned char raw[16];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return 0;
    raw[0] &= 0x7f; /* positive */
    BIGNUM *bn = BN_bin2bn(raw, sizeof raw, NULL);
    int ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
    BN_free(bn);
    return ok;
}

/* A new certificate for key, valid life_s from a minute ago; self-signed when issuer is NULL. */
static X509 *new_cert(EVP_PKEY *key, const char *cn, long life_s, X509 *issuer)
{
    X509 *x = X509_new();
    if (!x)
        return NULL;
    int ok = X509_set_version(x, 2) && random_serial(x) &&
             X509_gmtime_adj(X509_getm_notBefore(x), -60) &&
             X509_gmtime_adj(X509_getm_notAfter(x), life_s) && X509_set_pubkey(x, key);
    X509_NAME *name = X509_get_subject_name(x);
    ok = ok && X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn,
                                          -1, -1, 0);
    ok = ok && X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
    if (!ok) {
        X509_free(x);
        return NULL;
    }
    return x;
}

static int make_ca(EVP_PKEY **key, X509 **crt, long life_s)
{
    *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    *crt = *key ? new_cert(*key, CA_CN, life_s, NULL) : NULL;
    int ok = *crt && add_ext(*crt, *crt, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
             add_ext(*crt, *crt, NID_key_usage, "critical,keyCertSign,cRLSign") &&
             add_ext(*crt, *crt, NID_subject_key_identifier, "hash") &&
             X509_sign(*crt, *key, EVP_sha256());
    return ok;
}

/* "DNS:a,DNS:b,IP:1.2.3.4" for the names; NULL when one is unusable or on OOM. */
static char *san_value(const struct coord_tls_names *names, herr *e)
{
    size_t cap = 16;
    for (int i = 0; i < names->n; i++)
        cap += strlen(names->names[i]) + 6;
    char *s = malloc(cap);
    if (!s) {
        herr_set(e, "out of memory");
        return NULL;
    }
    size_t len = 0;
    s[0] = '\0';
    for (int i = 0; i < names->n; i++) {
        const char *n = names->names[i];
        int ip = strncmp(n, "IP:", 3) == 0;
        const char *v = ip ? n + 3 : n;
        unsigned char buf[16];
        int bad = !*v || strpbrk(v, ",\n\r ") != NULL ||
                  (ip && inet_pton(AF_INET, v, buf) != 1 && inet_pton(AF_INET6, v, buf) != 1);
        if (bad) {
            herr_set(e, "TLS name \"%s\": not a DNS name or IP:address", n);
            free(s);
            return NULL;
        }
        len += (size_t)snprintf(s + len, cap - len, "%s%s:%s", i ? "," : "", ip ? "IP" : "DNS", v);
    }
    return s;
}

int coord_tls_issue(struct coord_tls *t, const struct coord_tls_names *names,
                    const struct coord_tls_life *life, int make_new_ca, herr *e)
{
    if (names->n < 1)
        return herr_set(e, "TLS: a serving certificate needs at least one name");
    long ca_s = life && life->ca_s > 0 ? life->ca_s : CA_LIFE_S;
    long cert_s = life && life->cert_s > 0 ? life->cert_s : CERT_LIFE_S;
    char *san = san_value(names, e);
    if (!san)
        return -1;
    X509 *ca = NULL, *x = NULL;
    EVP_PKEY *cak = NULL, *k = NULL;
    int ok;
    if (make_new_ca || !t->ca_crt || !t->ca_key) {
        ok = make_ca(&cak, &ca, ca_s);
    } else {
        ca = pem_cert(t->ca_crt);
        cak = pem_key(t->ca_key);
        ok = ca && cak;
    }
    if (!ok) {
        herr_set(e, "TLS: cannot make or read the CA");
        goto out;
    }
    k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    const char *cn = strncmp(names->names[0], "IP:", 3) == 0 ? names->names[0] + 3 : names->names[0];
    char cnbuf[64];
    snprintf(cnbuf, sizeof cnbuf, "%s", cn); /* CN is at most 64 characters; SANs hold the names */
    x = k ? new_cert(k, cnbuf, cert_s, ca) : NULL;
    /* A serving certificate lives no longer than its CA. */
    if (x && ASN1_TIME_compare(X509_get0_notAfter(x), X509_get0_notAfter(ca)) > 0)
        ok = X509_set1_notAfter(x, X509_get0_notAfter(ca));
    ok = ok && x && add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE") &&
         add_ext(x, ca, NID_key_usage, "critical,digitalSignature,keyEncipherment") &&
         add_ext(x, ca, NID_ext_key_usage, "serverAuth") &&
         add_ext(x, ca, NID_subject_key_identifier, "hash") &&
         add_ext(x, ca, NID_authority_key_identifier, "keyid:always") &&
         add_ext(x, ca, NID_subject_alt_name, san) && X509_sign(x, cak, EVP_sha256());
    if (!ok) {
        herr_set(e, "TLS: cannot issue the serving certificate");
        goto out;
    }
    struct coord_tls n = {cert_pem(ca), key_pem(cak), cert_pem(x), key_pem(k)};
    if (!n.ca_crt || !n.ca_key || !n.tls_crt || !n.tls_key) {
        coord_tls_free(&n);
        ok = 0;
        herr_set(e, "out of memory");
        goto out;
    }
    coord_tls_free(t);
    *t = n;
out:
    ERR_clear_error();
    free(san);
    X509_free(ca);
    X509_free(x);
    EVP_PKEY_free(cak);
    EVP_PKEY_free(k);
    return ok ? 0 : -1;
}

/* ---- the Secret */

/* The PEM text base64 text s holds; NULL when it holds no text (or out of memory). */
static char *pem_of_base64(const char *s)
{
    size_t n;
    herr e = {0};
    char *out = base64_decode(s, &n, "data", &e);
    if (out && memchr(out, '\0', n)) { /* PEM is text */
        free(out);
        return NULL;
    }
    return out;
}

int coord_tls_from_secret(const cJSON *secret, struct coord_tls *t, herr *e)
{
    struct coord_tls out = {0};
    const cJSON *data = json_at(secret, "data");
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(data, KEYS[i]);
        if (!cJSON_IsString(v)) {
            coord_tls_free(&out);
            return herr_set(e, "data.%s: missing", KEYS[i]);
        }
        if (!(*field(&out, i) = pem_of_base64(v->valuestring))) {
            coord_tls_free(&out);
            return herr_set(e, "data.%s: not base64 of a PEM text", KEYS[i]);
        }
    }
    coord_tls_free(t);
    *t = out;
    return 0;
}

/* {"data": {...}} with t's PEMs base64'd, plus metadata when name is given (a create). */
static cJSON *secret_body(const struct coord_tls *t, const char *ns, const char *name,
                          const char *rv)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    cJSON *data = cJSON_AddObjectToObject(o, "data");
    int ok = md && data;
    if (name) {
        ok = ok && cJSON_AddStringToObject(md, "name", name) &&
             cJSON_AddStringToObject(md, "namespace", ns) &&
             cJSON_AddStringToObject(o, "type", "kubernetes.io/tls");
        cJSON *labels = cJSON_AddObjectToObject(md, "labels");
        ok = ok && labels && cJSON_AddStringToObject(labels, "app.kubernetes.io/managed-by",
                                                     "holmes-operator");
    }
    if (rv)
        ok = ok && cJSON_AddStringToObject(md, "resourceVersion", rv);
    for (int i = 0; ok && i < 4; i++) {
        char *b = base64_encode(*field((struct coord_tls *)t, i));
        ok = b && cJSON_AddStringToObject(data, KEYS[i], b);
        if (b)
            OPENSSL_cleanse(b, strlen(b));
        free(b);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static void wipe_json(cJSON *o)
{
    /* the Secret's values hold private keys: clear them before freeing */
    const cJSON *data = json_at(o, "data");
    const cJSON *v;
    cJSON_ArrayForEach(v, data) {
        if (cJSON_IsString(v))
            OPENSSL_cleanse(v->valuestring, strlen(v->valuestring));
    }
    cJSON_Delete(o);
}

int coord_tls_sync_secret(struct kube_client *kc, const char *ns, const char *name,
                          const struct coord_tls_names *names, const struct coord_tls_life *life,
                          struct coord_tls *t, char *renewed, size_t renewed_len, herr *e)
{
    if (renewed_len)
        renewed[0] = '\0';
    for (int attempt = 0; attempt < 4; attempt++) {
        cJSON *s = NULL;
        int rc = kube_get(kc, &KUBE_SECRETS, ns, name, &s, e);
        if (rc != 0 && rc != 404)
            return herr_wrap(e, "TLS Secret %s/%s", ns, name);
        struct coord_tls cur = {0};
        char why[300] = "the Secret does not exist";
        int ca_ok = 0, need = 1;
        if (rc == 0) {
            herr de = {0};
            if (coord_tls_from_secret(s, &cur, &de) == 0)
                need = coord_tls_check(&cur, names, time(NULL), &ca_ok, why, sizeof why);
            else
                snprintf(why, sizeof why, "%.250s", de.msg);
        }
        if (!need) {
            wipe_json(s);
            coord_tls_free(t);
            *t = cur;
            return 0;
        }
        if (coord_tls_issue(&cur, names, life, !ca_ok, e) != 0) {
            wipe_json(s);
            coord_tls_free(&cur);
            return -1;
        }
        const char *rv = rc == 0 ? json_str_at(s, "metadata.resourceVersion") : NULL;
        cJSON *body = secret_body(&cur, ns, rc == 0 ? NULL : name, rv);
        int wrc = !body ? herr_set(e, "out of memory")
                  : rc == 0 ? kube_patch(kc, &KUBE_SECRETS, ns, name, NULL, body, NULL, e)
                            : kube_create(kc, &KUBE_SECRETS, ns, body, NULL, e);
        wipe_json(body);
        wipe_json(s);
        if (wrc == 0) {
            if (renewed_len)
                snprintf(renewed, renewed_len, "%s", why);
            coord_tls_free(t);
            *t = cur;
            return 0;
        }
        coord_tls_free(&cur);
        if (wrc != 409) /* 409: another replica wrote it first; read theirs */
            return herr_wrap(e, "TLS Secret %s/%s (%s)", ns, name, why);
    }
    return herr_set(e, "TLS Secret %s/%s: still conflicting after 4 attempts", ns, name);
}

/* ---- files */

static char *read_text(const char *path, herr *e)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        herr_set(e, "%s: cannot read", path);
        return NULL;
    }
    size_t cap = 8192, len = 0;
    char *s = malloc(cap);
    while (s) {
        size_t n = fread(s + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
        if (len + 1 >= cap) {
            if (cap >= (1u << 20)) { /* a PEM file is small */
                free(s);
                s = NULL;
                break;
            }
            char *ns = realloc(s, cap * 2);
            if (!ns) {
                free(s);
                s = NULL;
                break;
            }
            s = ns;
            cap *= 2;
        }
    }
    fclose(f);
    if (!s) {
        herr_set(e, "%s: too large or out of memory", path);
        return NULL;
    }
    s[len] = '\0';
    if (!strstr(s, "-----BEGIN ")) {
        free(s);
        herr_set(e, "%s: holds no PEM block", path);
        return NULL;
    }
    return s;
}

int coord_tls_read_files(const char *cert, const char *key, const char *ca, struct coord_tls *t,
                         herr *e)
{
    struct coord_tls out = {0};
    if (!(out.tls_crt = read_text(cert, e)) || !(out.tls_key = read_text(key, e)) ||
        (ca && !(out.ca_crt = read_text(ca, e)))) {
        coord_tls_free(&out);
        return -1;
    }
    coord_tls_free(t);
    *t = out;
    return 0;
}
