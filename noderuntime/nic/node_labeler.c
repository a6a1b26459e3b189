#include "node_labeler.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "kube_config.h"
#include "nic_report.h"
#include "yaml_json.h"

int node_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(islower(c) || isdigit(c) || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

int node_labeler_config_from_env(const char *sa_dir, struct node_labeler_cfg *c, herr *e)
{
    memset(c, 0, sizeof *c);
    const char *node = getenv("NODE_NAME");
    if (!node || !node[0])
        return herr_set(e, "NODE_NAME: not set (the DaemonSet passes spec.nodeName through the "
                           "downward API)");
    if (!node_name_valid(node))
        return herr_set(e, "NODE_NAME \"%.100s\": not a valid Node name (lowercase RFC 1123 "
                           "subdomain, at most 253 characters)", node);
    snprintf(c->node, sizeof c->node, "%s", node);

    const char *url = getenv("HOLMES_KUBE_API_URL");
    if (url && url[0]) {
        if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
            return herr_set(e, "HOLMES_KUBE_API_URL \"%.100s\": must start with http:// or https://", url);
        if (strlen(url) >= sizeof c->api_url)
            return herr_set(e, "HOLMES_KUBE_API_URL: longer than %zu characters", sizeof c->api_url - 1);
        snprintf(c->api_url, sizeof c->api_url, "%s", url);
    } else if (kube_service_url(c->api_url, sizeof c->api_url, e) != 0) {
        return -1;
    }
    /* The service account as the operator reads it (common/kube_config). */
    struct kube_config kc;
    if (kube_config_service_account(&kc, sa_dir, e) != 0)
        return herr_wrap(e, "service-account token");
    int rc = kube_config_token(&kc, c->token, sizeof c->token);
    if (rc == 0 && access(kc.ca_file, R_OK) == 0)
        snprintf(c->ca_file, sizeof c->ca_file, "%s", kc.ca_file);
    kube_config_free(&kc);
    return rc == 0 ? 0 : herr_set(e, "service-account token: empty");
}

char *node_labeler_patch_body(const struct nic_labels *l)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = root ? cJSON_AddObjectToObject(root, "metadata") : NULL;
    cJSON *labels = meta ? nic_labels_to_json(l) : NULL;
    if (!labels || !cJSON_AddItemToObject(meta, "labels", labels)) {
        cJSON_Delete(labels);
        cJSON_Delete(root);
        return NULL;
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

struct resp {
    char buf[2048];
    size_t len;
};

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct resp *r = ud;
    size_t n = size * nmemb, room = sizeof r->buf - 1 - r->len;
    memcpy(r->buf + r->len, ptr, n < room ? n : room);
    r->len += n < room ? n : room;
    r->buf[r->len] = '\0';
    return n;
}

/* The "message" of a Kubernetes Status body, else the body itself. */
static void status_message(const char *body, char *out, size_t cap)
{
    cJSON *j = cJSON_Parse(body);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
    nic_copy(out, cap, cJSON_IsString(m) ? m->valuestring : body);
    cJSON_Delete(j);
}

int node_labeler_patch(const struct node_labeler_cfg *c, const struct nic_labels *l, herr *e)
{
    if (!node_name_valid(c->node))
        return herr_set(e, "node name \"%.100s\": not a valid Node name", c->node);
    char *body = node_labeler_patch_body(l);
    if (!body)
        return herr_set(e, "label patch: out of memory");
    char url[1024], auth[8300];
    snprintf(url, sizeof url, "%s/api/v1/nodes/%s", c->api_url, c->node);
    CURL *h = curl_easy_init();
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/merge-patch+json");
    struct curl_slist *h2 = hdrs ? curl_slist_append(hdrs, "Accept: application/json") : NULL;
    if (h2)
        hdrs = h2;
    if (h2 && c->token[0]) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", c->token);
        h2 = curl_slist_append(hdrs, auth);
        if (h2)
            hdrs = h2;
    }
    int rc = -1;
    if (!h || !h2) {
        herr_set(e, "label patch: out of memory");
        goto out;
    }
    struct resp resp = {.len = 0};
    resp.buf[0] = '\0';
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PATCH");
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (c->ca_file[0])
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        herr_set(e, "PATCH %s: %s", url, curl_easy_strerror(cc));
        goto out;
    }
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status > 299) {
        char msg[512];
        status_message(resp.buf, msg, sizeof msg);
        herr_set(e, "PATCH %s: HTTP %ld: %s", url, status, msg);
        goto out;
    }
    rc = 0;
out:
    curl_slist_free_all(hdrs);
    if (h)
        curl_easy_cleanup(h);
    free(body);
    return rc;
}
