#include "fakeapi_proc.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int fakeapi_start(struct fakeapi *f, const char *const *extra)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/holmes-fakeapi.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->token, sizeof f->token, "tok-%d", (int)getpid());
    char portfile[128];
    snprintf(portfile, sizeof portfile, "%s/port", f->dir);
    snprintf(f->kubeconfig, sizeof f->kubeconfig, "%s/kubeconfig", f->dir);
    const char *argv[32] = {"/usr/bin/python3", "tests/fakeapi/fakeapi.py", "--port-file", portfile,
                            "--kubeconfig", f->kubeconfig, "--namespace", "default", "--token",
                            f->token};
    int argc = 10;
    for (int i = 0; extra && extra[i] && argc < 30; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open("/dev/null", 1);
        if (fd >= 0)
            dup2(fd, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    f->pid = pid;
    for (int i = 0; i < 200; i++) {
        FILE *pf = fopen(portfile, "r");
        if (pf) {
            int ok = fscanf(pf, "%d", &f->port) == 1;
            fclose(pf);
            if (ok)
                break;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!f->port) {
        fakeapi_stop(f);
        return -1;
    }
    snprintf(f->url, sizeof f->url, "http://127.0.0.1:%d", f->port);
    return 0;
}

void fakeapi_stop(struct fakeapi *f)
{
    if (f->pid > 0) {
        kill(f->pid, SIGTERM);
        waitpid(f->pid, NULL, 0);
        f->pid = 0;
    }
    if (f->dir[0]) {
        char p[160];
        snprintf(p, sizeof p, "%s/port", f->dir);
        unlink(p);
        snprintf(p, sizeof p, "%s/kubeconfig", f->dir);
        unlink(p);
        rmdir(f->dir);
    }
}

struct sink {
    char *out;
    size_t n, len;
};

static size_t on_data(char *p, size_t s, size_t nm, void *ud)
{
    struct sink *k = ud;
    size_t n = s * nm;
    for (size_t i = 0; i < n && k->out && k->len + 1 < k->n; i++)
        k->out[k->len++] = p[i];
    if (k->out)
        k->out[k->len] = '\0';
    return n;
}

int fakeapi_control(struct fakeapi *f, const char *method, const char *path, const char *body,
                    char *out, size_t n)
{
    CURL *h = curl_easy_init();
    if (!h)
        return -1;
    char url[256];
    snprintf(url, sizeof url, "%s%s", f->url, path);
    struct sink k = {out, n, 0};
    if (out && n)
        out[0] = '\0';
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    char auth[80];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", f->token);
    hd = curl_slist_append(hd, auth);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &k);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
    CURLcode cc = curl_easy_perform(h);
    long code = -1;
    if (cc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return (int)code;
}

struct kube_client *fakeapi_start_client(struct fakeapi *f, struct kube_config *cfg,
                                         const struct kube_client_opts *o, herr *e)
{
    if (fakeapi_start(f, NULL) != 0) {
        herr_set(e, "could not start tests/fakeapi/fakeapi.py");
        return NULL;
    }
    if (kube_config_from_kubeconfig(cfg, f->kubeconfig, NULL, e) != 0) {
        fakeapi_stop(f);
        return NULL;
    }
    struct kube_client *kc = kube_client_new(cfg, o, e);
    if (!kc) {
        kube_config_free(cfg);
        fakeapi_stop(f);
    }
    return kc;
}

int fakeapi_run(void (*fn)(struct fakeapi *f, struct kube_client *kc))
{
    struct fakeapi f;
    herr e = {0};
    struct kube_config cfg;
    struct kube_client *kc = fakeapi_start_client(&f, &cfg, NULL, &e);
    if (!kc) {
        printf("FAIL a client of the fake API server: %s\n", e.msg);
        return -1;
    }
    fn(&f, kc);
    kube_client_free(kc);
    kube_config_free(&cfg);
    fakeapi_stop(&f);
    return 0;
}
