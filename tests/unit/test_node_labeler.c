/* node_labeler against a tiny HTTP listener on 127.0.0.1: the request it sends (method, path,
 * headers, merge-patch body), API errors, and configuration from the environment. */
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node_labeler.h"

struct listener {
    int fd;
    int port;
    int status;            /* HTTP status to answer */
    const char *body;      /* response body */
    char request[16384];   /* what was received */
    size_t len;
};

static void *serve_one(void *arg)
{
    struct listener *l = arg;
    int c = accept(l->fd, NULL, NULL);
    if (c < 0)
        return NULL;
    size_t want = 0;
    for (;;) {
        ssize_t n = read(c, l->request + l->len, sizeof l->request - 1 - l->len);
        if (n <= 0)
            break;
        l->len += (size_t)n;
        l->request[l->len] = '\0';
        char *end = strstr(l->request, "\r\n\r\n");
        if (end && !want) {
            const char *cl = strcasestr(l->request, "Content-Length:");
            want = (size_t)(end + 4 - l->request) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
        }
        if (want && l->len >= want)
            break;
    }
    char resp[1024];
    int n = snprintf(resp, sizeof resp,
                     "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s", l->status, strlen(l->body), l->body);
    if (write(c, resp, (size_t)n) < 0)
        perror("write");
    close(c);
    return NULL;
}

static int listen_local(struct listener *l)
{
    l->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&a, sizeof a) || listen(l->fd, 1) ||
        getsockname(l->fd, (struct sockaddr *)&a, &len))
        return -1;
    l->port = ntohs(a.sin_port);
    return 0;
}

static const struct nic_labels labels = {"roce", "roce-ddb4bd7148355363", "100"};

/* node_labeler_patch(c) against l, which answers that one request (c->api_url set to it). */
static int patch_once(struct listener *l, struct node_labeler_cfg *c, herr *e)
{
    if (listen_local(l) != 0) {
        TEST_FAIL("a listener on 127.0.0.1", "cannot listen");
        return -1;
    }
    pthread_t t;
    pthread_create(&t, NULL, serve_one, l);
    snprintf(c->api_url, sizeof c->api_url, "http://127.0.0.1:%d", l->port);
    int rc = node_labeler_patch(c, &labels, e);
    pthread_join(t, NULL);
    close(l->fd);
    return rc;
}

static void patch_ok(void)
{
    static struct listener l = {.status = 200, .body = "{\"kind\":\"Node\"}"};
    struct node_labeler_cfg *c = calloc(1, sizeof *c);
    snprintf(c->node, sizeof c->node, "gpu-node-7");
    snprintf(c->token, sizeof c->token, "tok123");
    herr e = {0};
    int rc = patch_once(&l, c, &e);
    CHECK_INT("patch ok", rc, 0);
    if (rc)
        printf("  error: %s\n", e.msg);
    CHECK("method and path", strncmp(l.request, "PATCH /api/v1/nodes/gpu-node-7 HTTP/1.1", 39) == 0);
    CHECK("merge patch content type", strstr(l.request, "Content-Type: application/merge-patch+json") != NULL);
    CHECK("bearer token", strstr(l.request, "Authorization: Bearer tok123\r\n") != NULL);
    const char *body = strstr(l.request, "\r\n\r\n");
    cJSON *j = body ? cJSON_Parse(body + 4) : NULL;
    const cJSON *lab = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "metadata"), "labels");
    CHECK_STR("class label", cJSON_GetStringValue(cJSON_GetObjectItem(lab, "holmes.dev/nic-class")), "roce");
    CHECK_STR("fabric label", cJSON_GetStringValue(cJSON_GetObjectItem(lab, "holmes.dev/fabric")),
              "roce-ddb4bd7148355363");
    CHECK_STR("gbps label", cJSON_GetStringValue(cJSON_GetObjectItem(lab, "holmes.dev/nic-gbps")), "100");
    cJSON_Delete(j);
    free(c);
}

static void patch_forbidden(void)
{
    static struct listener l = {.status = 403,
                                .body = "{\"kind\":\"Status\",\"message\":\"nodes \\\"n1\\\" is forbidden\"}"};
    struct node_labeler_cfg *c = calloc(1, sizeof *c);
    snprintf(c->node, sizeof c->node, "n1");
    herr e = {0};
    int rc = patch_once(&l, c, &e);
    CHECK_INT("403 fails", rc, -1);
    CHECK("403 names status and message", strstr(e.msg, "HTTP 403") && strstr(e.msg, "is forbidden"));
    CHECK("no token, no Authorization header", strstr(l.request, "Authorization") == NULL);

    /* Nothing listening: a clear error, no crash. */
    rc = node_labeler_patch(c, &labels, &e);
    CHECK_INT("refused fails", rc, -1);
    CHECK("refused names the URL", strstr(e.msg, "/api/v1/nodes/n1") != NULL);
    snprintf(c->node, sizeof c->node, "Bad/Name");
    CHECK_INT("bad node name refused", node_labeler_patch(c, &labels, &e), -1);
    free(c);
}

static void config(void)
{
    char dir[] = "/tmp/holmes-sa-XXXXXX";
    CHECK("temp dir", mkdtemp(dir) != NULL);
    struct node_labeler_cfg *c = calloc(1, sizeof *c);
    herr e;
    unsetenv("NODE_NAME");
    CHECK_INT("no NODE_NAME", node_labeler_config_from_env(dir, c, &e), -1);
    CHECK("names NODE_NAME", strstr(e.msg, "NODE_NAME") != NULL);
    setenv("NODE_NAME", "Node_1", 1);
    CHECK_INT("invalid NODE_NAME", node_labeler_config_from_env(dir, c, &e), -1);
    CHECK("says not valid", strstr(e.msg, "not a valid Node name") != NULL);
    setenv("NODE_NAME", "node-1.example", 1);
    unsetenv("HOLMES_KUBE_API_URL");
    unsetenv("KUBERNETES_SERVICE_HOST");
    CHECK_INT("no service host", node_labeler_config_from_env(dir, c, &e), -1);
    CHECK("names KUBERNETES_SERVICE_HOST", strstr(e.msg, "KUBERNETES_SERVICE_HOST") != NULL);
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
    CHECK_INT("no token file", node_labeler_config_from_env(dir, c, &e), -1);
    CHECK("names the token", strstr(e.msg, "token") != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/token", dir);
    FILE *f = fopen(path, "w");
    fputs("abc.def\n", f);
    fclose(f);
    CHECK_INT("config ok", node_labeler_config_from_env(dir, c, &e), 0);
    CHECK_STR("ipv6 url", c->api_url, "https://[fd00::1]:6443");
    CHECK_STR("token trimmed", c->token, "abc.def");
    CHECK_STR("node", c->node, "node-1.example");
    CHECK_STR("no ca file", c->ca_file, "");
    setenv("HOLMES_KUBE_API_URL", "ftp://x", 1);
    CHECK_INT("bad override", node_labeler_config_from_env(dir, c, &e), -1);
    setenv("HOLMES_KUBE_API_URL", "http://127.0.0.1:8080", 1);
    CHECK_INT("override ok", node_labeler_config_from_env(dir, c, &e), 0);
    CHECK_STR("override url", c->api_url, "http://127.0.0.1:8080");
    unsetenv("HOLMES_KUBE_API_URL");
    unlink(path);
    rmdir(dir);
    free(c);
}

int main(void)
{
    patch_ok();
    patch_forbidden();
    config();
    TEST_MAIN_END();
}
