/* Test support: runs tests/fakeapi/fakeapi.py as a child process. */
#ifndef HOLMES_TEST_FAKEAPI_PROC_H
#define HOLMES_TEST_FAKEAPI_PROC_H

#include <sys/types.h>

#include "error.h"
#include "kube_client.h"
#include "kube_config.h"

struct fakeapi {
    pid_t pid;
    int port;
    char url[64];
    char token[32];
    char dir[64]; /* temp dir with the port file and a kubeconfig */
    char kubeconfig[128];
};

/* Starts the server with extra arguments (NULL-terminated, may be NULL); returns 0 or -1. */
int fakeapi_start(struct fakeapi *f, const char *const *extra_args);
void fakeapi_stop(struct fakeapi *f);
/* Starts the server and a client of it (cfg from its kubeconfig, o may be NULL): the client,
 * or NULL with `e` saying which part failed (the server is then stopped). */
struct kube_client *fakeapi_start_client(struct fakeapi *f, struct kube_config *cfg,
                                         const struct kube_client_opts *o, herr *e);
/* Starts the server and a client of it (default options), runs fn(f, kc) and stops both. 0, or
 * -1 with a FAIL line when they could not start. */
int fakeapi_run(void (*fn)(struct fakeapi *f, struct kube_client *kc));
/* POSTs a JSON body to a /_fake/ control path; returns the HTTP status or -1. The answer
 * goes to out (NUL-terminated, truncated to n) when out is non-NULL. */
int fakeapi_control(struct fakeapi *f, const char *method, const char *path, const char *body,
                    char *out, size_t n);

#endif
