#include "comm_testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXN 16

void group_spec(struct tcp_group_spec *s, const char *name, uint32_t id, int n, int rank,
                const struct tcp_endpoint *eps, double timeout_s)
{
    *s = (struct tcp_group_spec){.name = name, .group_id = id, .size = n, .index = rank,
                                 .endpoints = eps, .timeout_s = timeout_s};
}

int run_group(int n, group_fn fn, void *arg, int skip_rank, double limit_s)
{
    if (n < 1 || n > MAXN)
        return -1;
    struct tcp_listener *ls[MAXN] = {0};
    struct tcp_endpoint eps[MAXN];
    for (int i = 0; i < n; i++) {
        herr e;
        if (tcp_listener_open(&ls[i], "127.0.0.1", 0, &e) != 0) {
            fprintf(stderr, "%s\n", e.msg);
            for (int j = 0; j < i; j++)
                tcp_listener_close(ls[j]);
            return -1;
        }
        snprintf(eps[i].host, sizeof eps[i].host, "127.0.0.1");
        eps[i].port = tcp_listener_port(ls[i]);
    }
    /* The rank that is never started must not be listening once any child runs: a child
     * connecting before the parent closed it would be queued there and see no refusal. */
    if (skip_rank >= 0 && skip_rank < n) {
        tcp_listener_close(ls[skip_rank]);
        ls[skip_rank] = NULL;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pids[MAXN] = {0};
    for (int i = 0; i < n; i++) {
        if (i == skip_rank)
            continue;
        pids[i] = fork();
        if (pids[i] == 0) {
            for (int j = 0; j < n; j++)
                if (j != i)
                    tcp_listener_close(ls[j]);
            alarm((unsigned)limit_s + 1);
            int rc = fn(i, n, ls[i], eps, arg);
            tcp_listener_close(ls[i]);
            fflush(stderr);
            exit(rc == 0 ? 0 : 1);
        }
    }
    for (int i = 0; i < n; i++)
        tcp_listener_close(ls[i]);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        if (pids[i] <= 0) {
            if (i != skip_rank)
                failed++;
            continue;
        }
        int st = 0;
        if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            if (WIFSIGNALED(st))
                fprintf(stderr, "rank %d died of signal %d\n", i, WTERMSIG(st));
            failed++;
        }
    }
    return failed;
}
