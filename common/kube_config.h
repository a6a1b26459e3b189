/* Where the Kubernetes API is and how to authenticate: from a kubeconfig file (current context
 * or a named one) or from the in-cluster service account. */
#ifndef HOLMES_KUBE_CONFIG_H
#define HOLMES_KUBE_CONFIG_H

#include <pthread.h>
#include <time.h>

#include "error.h"

struct kube_config {
    char *server;           /* "https://host:port" (no trailing slash) */
    char *token;            /* bearer token, or NULL */
    char *token_file;       /* re-read when it changes (service-account rotation), or NULL */
    char *ca_file;          /* PEM file, or NULL */
    char *ca_data;          /* PEM bytes, or NULL */
    size_t ca_data_len;
    char *cert_file, *key_file;   /* client certificate and key files, or NULL */
    char *cert_data, *key_data;   /* client certificate and key PEM bytes, or NULL */
    size_t cert_data_len, key_data_len;
    int insecure;           /* insecure-skip-tls-verify, only when the kubeconfig says so */
    char *namespace;        /* the context's namespace (or the service account's), or NULL */
    /* token_file rotation state */
    pthread_mutex_t lock;
    struct timespec token_mtime;
};

/* Reads a kubeconfig file; context NULL means current-context. Relative file paths in the
 * kubeconfig are taken relative to its directory. */
int kube_config_from_kubeconfig(struct kube_config *c, const char *path, const char *context,
                                herr *e);
#define KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* The API server's address inside a pod: "https://HOST:PORT" from KUBERNETES_SERVICE_HOST
 * (brackets for IPv6) and KUBERNETES_SERVICE_PORT (443 when unset). */
int kube_service_url(char *out, size_t cap, herr *e);
/* The service account's token (re-read on rotation), ca.crt and namespace under dir
 * (NULL = KUBE_SA_DIR); no server. Fails naming the token file when it cannot be read. */
int kube_config_service_account(struct kube_config *c, const char *dir, herr *e);
/* In-cluster: kube_service_url and kube_config_service_account. */
int kube_config_in_cluster(struct kube_config *c, const char *dir, herr *e);
/* The usual order: an explicit kubeconfig path, else $KUBECONFIG, else in-cluster when
 * KUBERNETES_SERVICE_HOST is set, else ~/.kube/config. */
int kube_config_load(struct kube_config *c, const char *kubeconfig, const char *context, herr *e);
/* The bearer token to send now (re-reads token_file when its mtime changed). Copies at most
 * n-1 bytes into buf; returns 0, or -1 when there is none. Thread-safe. */
int kube_config_token(struct kube_config *c, char *buf, size_t n);
void kube_config_free(struct kube_config *c);

#endif
