/* The coordinator's TLS material: its own CA and a serving certificate for the Services' DNS
 * names, made with OpenSSL, checked (expiry, names, key, issuer), kept in a Secret and read
 * back, or read from PEM files (cert-manager's Secret mounted into the pod).
 *
 * The Secret (type kubernetes.io/tls) holds ca.crt, ca.key, tls.crt and tls.key. Every replica
 * of the operator calls coord_tls_sync_secret now and then: the first one creates the Secret,
 * a replica that finds the serving certificate within a third of its life of expiry, or made for
 * other names, issues a new one with the same CA (workers keep trusting it) and writes it back
 * guarded by the Secret's resourceVersion, so two replicas never both win; the loser reads the
 * winner's. The CA is made again only when it is missing, broken or within a third of its life
 * of expiry (a new CA: pods started before must get the new ca.crt, see docs/operator.md). */
#ifndef HOLMES_COORD_TLS_H
#define HOLMES_COORD_TLS_H

#include <time.h>
#include <cjson/cJSON.h>

#include "error.h"

struct kube_client;

/* PEM texts (malloc'ed, NUL-terminated); any may be NULL. */
struct coord_tls {
    char *ca_crt, *ca_key;   /* ca_key NULL when the CA is someone else's (cert-manager) */
    char *tls_crt, *tls_key;
};
void coord_tls_free(struct coord_tls *t);
/* Deep copy; -1 out of memory. */
int coord_tls_copy(struct coord_tls *dst, const struct coord_tls *src);
/* 1 when both hold the same PEM texts. */
int coord_tls_same(const struct coord_tls *a, const struct coord_tls *b);

/* Lifetimes in seconds (0: the defaults, 10 years and 1 year). A certificate is renewed once a
 * third of its lifetime or less is left. */
struct coord_tls_life {
    long ca_s, cert_s;
};

/* The names a serving certificate is for: DNS names, or IP addresses written "IP:1.2.3.4". */
struct coord_tls_names {
    const char *const *names;
    int n;
};

/* Whether t is good to serve with now for those names: 0 yes; 1 it should be (re)issued,
 * with the reason in why ("tls.crt: expires in ...", "tls.crt: not for name X", "tls.key: does
 * not match tls.crt", "tls.crt: not signed by ca.crt"...); ca_ok says whether the CA may be
 * kept for the new one (present, with its key, not within a third of its life of expiry). */
int coord_tls_check(const struct coord_tls *t, const struct coord_tls_names *names, time_t now,
                    int *ca_ok, char *why, size_t why_len);

/* Issues a new serving certificate (EC P-256) for names, signed by t's CA; makes a new CA first
 * when make_ca (or t has none). Replaces t's PEMs. */
int coord_tls_issue(struct coord_tls *t, const struct coord_tls_names *names,
                    const struct coord_tls_life *life, int make_ca, herr *e);

/* The Secret's data (base64 values of ca.crt, ca.key, tls.crt, tls.key) into t; -1 naming the
 * key that is missing or not base64. */
int coord_tls_from_secret(const cJSON *secret, struct coord_tls *t, herr *e);

/* Reads the Secret ns/name, (re)issues what coord_tls_check asks for, creates or patches the
 * Secret, and leaves in t what it holds now. renewed gets why this call wrote the Secret ("" when
 * it did not). 0, or -1 with the API's answer in e. */
int coord_tls_sync_secret(struct kube_client *kc, const char *ns, const char *name,
                          const struct coord_tls_names *names, const struct coord_tls_life *life,
                          struct coord_tls *t, char *renewed, size_t renewed_len, herr *e);

/* Reads PEM files (ca may be NULL): -1 naming the file that cannot be read or holds no PEM. */
int coord_tls_read_files(const char *cert, const char *key, const char *ca, struct coord_tls *t,
                         herr *e);

/* Puts a serving certificate (PEM: the leaf, then any chain) and its key into an OpenSSL
 * SSL_CTX (passed as void * so that callers need not include OpenSSL), TLS 1.2 at least; new
 * connections use them, open ones keep theirs. -1 naming what is wrong. */
int coord_tls_ctx_use(void *ssl_ctx, const char *cert_pem, const char *key_pem, herr *e);

/* "notAfter" of a PEM certificate as Unix seconds; -1 when it is not one. */
time_t coord_tls_not_after(const char *pem);

#endif
