/* The pod's supervisor (noderuntime/worker/supervisor.c): what each child exit means, and real
 * children (/bin/sh) that stop for an in-place restart, die, fail for good, keep failing, or
 * get SIGTERM through the supervisor. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

#include "clock.h"
#include "supervisor.h"
#include "worker_coord.h"

static char dir[] = "/tmp/holmes-supervisor-XXXXXX";

static int run_sh(const char *script, int max_quick, double *secs)
{
    char *argv[] = {(char *)"sh", (char *)"-c", (char *)script, NULL};
    struct supervisor_opts o = {.exe = "/bin/sh", .argv = argv, .max_quick_failures = max_quick,
                                .backoff_s = 0.01, .backoff_cap_s = 0.02};
    herr e = {0};
    double t0 = clock_mono_s();
    int rc = supervisor_run(&o, &e);
    if (secs)
        *secs = clock_mono_s() - t0;
    return rc;
}

static int starts(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/n", dir);
    int n = (int)test_read_long(p, -1);
    unlink(p);
    return n;
}

static void *term_later(void *arg)
{
    (void)arg;
    usleep(300 * 1000);
    kill(getpid(), SIGTERM);
    return NULL;
}

int main(void)
{
    int code = -1;
    CHECK("exit 0: done, 0", supervisor_decide(0 << 8, &code) == SUPERVISOR_EXIT && code == 0);
    CHECK("exit 2 (usage): done, 2", supervisor_decide(2 << 8, &code) == SUPERVISOR_EXIT && code == 2);
    CHECK("exit 143 (left on SIGTERM): done, 143",
          supervisor_decide(143 << 8, &code) == SUPERVISOR_EXIT && code == 143);
    CHECK("exit 78 (final): done, the pod fails (1)",
          supervisor_decide(WORKER_EXIT_FINAL << 8, &code) == SUPERVISOR_EXIT && code == 1);
    CHECK("exit 75 (in-place restart): started again at once",
          supervisor_decide(WORKER_EXIT_RESTART << 8, &code) == SUPERVISOR_RESTART_NOW);
    CHECK("exit 1: started again after a backoff", supervisor_decide(1 << 8, &code) == SUPERVISOR_RESTART_LATER);
    CHECK("killed by SIGKILL: started again, 137",
          supervisor_decide(SIGKILL, &code) == SUPERVISOR_RESTART_LATER && code == 137);

    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    unsetenv(SUPERVISED_ENV);
    CHECK("this test process is not supervised", !supervisor_is_child());
    char s[1024];
    /* Start 1 stops for an in-place restart, start 2 is killed, start 3 finishes; each records
     * that it runs supervised. */
    snprintf(s, sizeof s,
             "n=$(cat %1$s/n 2>/dev/null || echo 0); n=$((n+1)); echo $n >%1$s/n; "
             "[ \"$HOLMES_SUPERVISED\" = 1 ] && echo ok >>%1$s/env; "
             "[ $n = 1 ] && exit 75; [ $n = 2 ] && kill -9 $$; exit 0", dir);
    CHECK_INT("restart, crash, finish: the supervisor exits 0", run_sh(s, 0, NULL), 0);
    CHECK_INT("... after 3 starts", starts(), 3);
    char envp[128];
    snprintf(envp, sizeof envp, "%s/env", dir);
    FILE *f = fopen(envp, "r");
    int lines = 0;
    for (int ch; f && (ch = fgetc(f)) != EOF;)
        lines += ch == '\n';
    if (f)
        fclose(f);
    CHECK_INT("every child ran with HOLMES_SUPERVISED=1", lines, 3);

    snprintf(s, sizeof s, "n=$(cat %1$s/n 2>/dev/null || echo 0); echo $((n+1)) >%1$s/n; exit 78", dir);
    CHECK_INT("a final failure (78): not started again, the pod fails (1)", run_sh(s, 0, NULL), 1);
    CHECK_INT("... after 1 start", starts(), 1);

    snprintf(s, sizeof s, "n=$(cat %1$s/n 2>/dev/null || echo 0); echo $((n+1)) >%1$s/n; exit 1", dir);
    CHECK_INT("failing at every start: given up (1)", run_sh(s, 4, NULL), 1);
    CHECK_INT("... after max_quick_failures (4) starts", starts(), 4);

    snprintf(s, sizeof s, "exit 2");
    CHECK_INT("usage (2) passes through", run_sh(s, 0, NULL), 2);

    pthread_t th;
    pthread_create(&th, NULL, term_later, NULL);
    double secs = 0;
    int rc = run_sh("exec sleep 30", 0, &secs);
    pthread_join(th, NULL);
    CHECK_INT("SIGTERM to the supervisor reaches the child; the supervisor leaves with 143", rc, 143);
    CHECK("... at once, not after the child's 30 s", secs < 5);

    snprintf(envp, sizeof envp, "rm -rf %s", dir);
    if (system(envp) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    TEST_MAIN_END();
}
