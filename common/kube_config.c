#include "kube_config.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base64.h"
#include "yaml_json.h"

static void init(struct kube_config *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
}

void kube_config_free(struct kube_config *c)
{
    if (!c)
        return;
    free(c->server);
    free(c->token);
    free(c->token_file);
    free(c->ca_file);
    free(c->ca_data);
    free(c->cert_file);
    free(c->key_file);
    free(c->cert_data);
    free(c->key_data);
    free(c->namespace);
    pthread_mutex_destroy(&c->lock);
    memset(c, 0, sizeof *c);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static const cJSON *named(const cJSON *list, const char *name, const char *inner)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, list) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return cJSON_GetObjectItemCaseSensitive(it, inner);
    }
    return NULL;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A path from the kubeconfig, relative to its directory unless absolute. */
static char *resolve(const char *dir, const char *p)
{
    if (!p)
        return NULL;
    if (p[0] == '/')
        return strdup(p);
    char *out = NULL;
    if (asprintf(&out, "%s/%s", dir, p) < 0)
        return NULL;
    return out;
}

int kube_config_from_kubeconfig(struct kube_config *c, const char *path, const char *context,
                                herr *e)
{
    init(c);
    cJSON *docs = yaml_parse_file(path, e);
    if (!docs)
        return herr_wrap(e, "kubeconfig");
    const cJSON *root = cJSON_GetArrayItem(docs, 0);
    int rc = -1;
    char *pathcopy = strdup(path);
    if (!pathcopy) {
        herr_set(e, "kubeconfig %s: out of memory", path);
        goto out;
    }
    const char *dir = dirname(pathcopy);
    const char *ctx_name = context ? context : str(root, "current-context");
    if (!ctx_name) {
        herr_set(e, "kubeconfig %s: no current-context and no --context given", path);
        goto out;
    }
    const cJSON *ctx = named(cJSON_GetObjectItemCaseSensitive(root, "contexts"), ctx_name, "context");
    if (!cJSON_IsObject(ctx)) {
        herr_set(e, "kubeconfig %s: contexts: no context named \"%s\"", path, ctx_name);
        goto out;
    }
    const char *cluster_name = str(ctx, "cluster"), *user_name = str(ctx, "user");
    const cJSON *cluster = cluster_name
        ? named(cJSON_GetObjectItemCaseSensitive(root, "clusters"), cluster_name, "cluster") : NULL;
    if (!cJSON_IsObject(cluster)) {
        herr_set(e, "kubeconfig %s: context \"%s\": cluster \"%s\" not found in clusters", path,
                 ctx_name, cluster_name ? cluster_name : "");
        goto out;
    }
    const char *server = str(cluster, "server");
    if (!server || !*server) {
        herr_set(e, "kubeconfig %s: cluster \"%s\": server is required", path, cluster_name);
        goto out;
    }
    c->server = strdup(server);
    if (c->server && c->server[strlen(c->server) - 1] == '/')
        c->server[strlen(c->server) - 1] = '\0';
    c->namespace = dup_or_null(str(ctx, "namespace"));
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(cluster, "insecure-skip-tls-verify");
    c->insecure = cJSON_IsTrue(ins);
    if (str(cluster, "certificate-authority-data")) {
        c->ca_data = base64_decode(str(cluster, "certificate-authority-data"), &c->ca_data_len,
                                "certificate-authority-data", e);
        if (!c->ca_data)
            goto bad;
    }
    c->ca_file = resolve(dir, str(cluster, "certificate-authority"));
    if (user_name) {
        const cJSON *user = named(cJSON_GetObjectItemCaseSensitive(root, "users"), user_name, "user");
        if (!cJSON_IsObject(user)) {
            herr_set(e, "kubeconfig %s: context \"%s\": user \"%s\" not found in users", path,
                     ctx_name, user_name);
            goto out;
        }
        c->token = dup_or_null(str(user, "token"));
        c->token_file = resolve(dir, str(user, "tokenFile"));
        if (str(user, "client-certificate-data")) {
            c->cert_data = base64_decode(str(user, "client-certificate-data"), &c->cert_data_len,
                                      "client-certificate-data", e);
            if (!c->cert_data)
                goto bad;
        }
        if (str(user, "client-key-data")) {
            c->key_data = base64_decode(str(user, "client-key-data"), &c->key_data_len,
                                     "client-key-data", e);
            if (!c->key_data)
                goto bad;
        }
        c->cert_file = resolve(dir, str(user, "client-certificate"));
        c->key_file = resolve(dir, str(user, "client-key"));
        if ((c->cert_data || c->cert_file) != (c->key_data || c->key_file)) {
            herr_set(e, "kubeconfig %s: user \"%s\": a client certificate needs a client key and "
                     "the other way round", path, user_name);
            goto out;
        }
        if (cJSON_GetObjectItemCaseSensitive(user, "exec") ||
            cJSON_GetObjectItemCaseSensitive(user, "auth-provider")) {
            if (!c->token && !c->token_file && !c->cert_data && !c->cert_file) {
                herr_set(e, "kubeconfig %s: user \"%s\": exec and auth-provider credentials are "
                         "not supported; use a token or a client certificate", path, user_name);
                goto out;
            }
        }
    }
    if (!c->server) {
        herr_set(e, "kubeconfig %s: out of memory", path);
        goto out;
    }
    rc = 0;
    goto out;
bad:
    herr_wrap(e, "kubeconfig %s: cluster/user of context \"%s\"", path, ctx_name);
out:
    free(pathcopy);
    cJSON_Delete(docs);
    if (rc != 0)
        kube_config_free(c);
    return rc;
}

int kube_service_url(char *out, size_t cap, herr *e)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host)
        return herr_set(e, "KUBERNETES_SERVICE_HOST: not set (not running in a pod?)");
    if (!port || !*port)
        port = "443";
    int v6 = strchr(host, ':') != NULL;
    int n = snprintf(out, cap, v6 ? "https://[%s]:%s" : "https://%s:%s", host, port);
    if (n < 0 || (size_t)n >= cap)
        return herr_set(e, "KUBERNETES_SERVICE_HOST/PORT: too long");
    return 0;
}

int kube_config_service_account(struct kube_config *c, const char *dir, herr *e)
{
    init(c);
    if (!dir)
        dir = KUBE_SA_DIR;
    if (asprintf(&c->token_file, "%s/token", dir) < 0 || asprintf(&c->ca_file, "%s/ca.crt", dir) < 0) {
        kube_config_free(c);
        return herr_set(e, "service account: out of memory");
    }
    char tok[8];
    if (kube_config_token(c, tok, sizeof tok) != 0) {
        herr_set(e, "cannot read the service-account token %s", c->token_file);
        kube_config_free(c);
        return -1;
    }
    char *nsfile = NULL;
    if (asprintf(&nsfile, "%s/namespace", dir) >= 0) {
        size_t len;
        herr ignore;
        char *ns = read_file_limited(nsfile, 4096, &len, &ignore);
        if (ns) {
            ns[strcspn(ns, "\r\n")] = '\0';
            c->namespace = ns;
        }
        free(nsfile);
    }
    return 0;
}

int kube_config_in_cluster(struct kube_config *c, const char *dir, herr *e)
{
    char url[512];
    if (kube_service_url(url, sizeof url, e) != 0)
        return herr_wrap(e, "in-cluster config");
    if (kube_config_service_account(c, dir, e) != 0)
        return herr_wrap(e, "in-cluster config");
    c->server = strdup(url);
    if (!c->server) {
        kube_config_free(c);
        return herr_set(e, "in-cluster config: out of memory");
    }
    return 0;
}

int kube_config_load(struct kube_config *c, const char *kubeconfig, const char *context, herr *e)
{
    if (kubeconfig && *kubeconfig)
        return kube_config_from_kubeconfig(c, kubeconfig, context, e);
    const char *env = getenv("KUBECONFIG");
    if (env && *env) {
        char *first = strdup(env);
        if (!first)
            return herr_set(e, "KUBECONFIG: out of memory");
        first[strcspn(first, ":")] = '\0'; /* the first file of a list */
        int rc = kube_config_from_kubeconfig(c, first, context, e);
        free(first);
        return rc;
    }
    if (getenv("KUBERNETES_SERVICE_HOST"))
        return kube_config_in_cluster(c, NULL, e);
    const char *home = getenv("HOME");
    char *p = NULL;
    if (!home || asprintf(&p, "%s/.kube/config", home) < 0)
        return herr_set(e, "no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a cluster");
    int rc = kube_config_from_kubeconfig(c, p, context, e);
    free(p);
    return rc;
}

int kube_config_token(struct kube_config *c, char *buf, size_t n)
{
    int rc = -1;
    pthread_mutex_lock(&c->lock);
    if (c->token_file) {
        struct stat st;
        if (stat(c->token_file, &st) == 0 &&
            (!c->token || st.st_mtim.tv_sec != c->token_mtime.tv_sec ||
             st.st_mtim.tv_nsec != c->token_mtime.tv_nsec)) {
            size_t len;
            herr ignore;
            char *t = read_file_limited(c->token_file, 65536, &len, &ignore);
            if (t) {
                while (len > 0 && (t[len - 1] == '\n' || t[len - 1] == '\r' || t[len - 1] == ' '))
                    t[--len] = '\0';
                free(c->token);
                c->token = t;
                c->token_mtime = st.st_mtim;
            }
        }
    }
    if (c->token && *c->token) {
        snprintf(buf, n, "%s", c->token);
        rc = 0;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}
