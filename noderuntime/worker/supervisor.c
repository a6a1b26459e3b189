#include "supervisor.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "worker_coord.h"

static volatile sig_atomic_t term_sig;
static void on_term(int sig) { term_sig = sig; }

int supervisor_is_child(void)
{
    const char *v = getenv(SUPERVISED_ENV);
    return v && strcmp(v, "1") == 0;
}

enum supervisor_action supervisor_decide(int st, int *code)
{
    if (WIFSIGNALED(st)) {
        *code = 128 + WTERMSIG(st);
        return SUPERVISOR_RESTART_LATER; /* crashed, or killed (OOM killer, kill -9) */
    }
    *code = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    switch (*code) {
    case 0:
    case 2:
    case WORKER_EXIT_TERMINATED:
        return SUPERVISOR_EXIT;
    case WORKER_EXIT_FINAL:
        *code = 1;
        return SUPERVISOR_EXIT;
    case WORKER_EXIT_RESTART:
        return SUPERVISOR_RESTART_NOW;
    default:
        return SUPERVISOR_RESTART_LATER;
    }
}

static pid_t start_child(const struct supervisor_opts *o, herr *e)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        herr_set(e, "supervisor: fork: %s", strerror(errno));
        return -1;
    }
    if (pid > 0)
        return pid;
    /* The child dies with its supervisor: nobody would start it again or pass it signals. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(127);
    if (setenv(SUPERVISED_ENV, "1", 1) != 0)
        _exit(127);
    execv(o->exe, o->argv);
    log_error("supervisor: cannot run %s: %s", o->exe, strerror(errno));
    _exit(127);
}

/* Waits for the child, passing a SIGTERM/SIGINT on (once). Polls: a signal between a check and
 * a blocking waitpid would otherwise be missed. */
static int wait_child(pid_t pid, int *status, herr *e)
{
    int passed = 0;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return 0;
        if (r < 0 && errno != EINTR)
            return herr_set(e, "supervisor: waitpid: %s", strerror(errno));
        if (term_sig && !passed) {
            kill(pid, term_sig);
            passed = 1;
        }
        clock_sleep_s(0.05);
    }
}

/* Sleeps `s` seconds unless a SIGTERM/SIGINT comes first (then 1). */
static int sleep_unless_terminated(double s)
{
    double until = clock_mono_s() + s;
    while (!term_sig && clock_mono_s() < until) {
        clock_sleep_s(0.05);
    }
    return term_sig != 0;
}

static void describe(int st, char *buf, size_t cap)
{
    if (WIFSIGNALED(st))
        snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(buf, cap, "exited with status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

int supervisor_run(const struct supervisor_opts *o, herr *e)
{
    int max_quick = o->max_quick_failures > 0 ? o->max_quick_failures : 10;
    double quick_s = o->quick_s > 0 ? o->quick_s : 60;
    double backoff = o->backoff_s > 0 ? o->backoff_s : 1, cap = o->backoff_cap_s > 0 ? o->backoff_cap_s : 30;
    term_sig = 0;
    struct sigaction sa = {.sa_handler = on_term};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
        return herr_set(e, "supervisor: sigaction: %s", strerror(errno));
    int streak = 0;
    for (int starts = 1;; starts++) {
        if (term_sig)
            return WORKER_EXIT_TERMINATED;
        double t0 = clock_mono_s();
        pid_t pid = start_child(o, e);
        if (pid < 0)
            return -1;
        int st = 0, code = 0;
        if (wait_child(pid, &st, e) != 0)
            return -1;
        enum supervisor_action act = supervisor_decide(st, &code);
        char what[128];
        describe(st, what, sizeof what);
        if (term_sig) /* leaving: whatever the child said, it was told to go */
            return act == SUPERVISOR_EXIT ? code : WORKER_EXIT_TERMINATED;
        if (act == SUPERVISOR_EXIT)
            return code;
        if (act == SUPERVISOR_RESTART_NOW) {
            streak = 0;
            log_info("supervisor: the worker stopped for an in-place restart; starting it again "
                     "in this pod (start %d)", starts + 1);
            continue;
        }
        if (clock_mono_s() - t0 >= quick_s)
            streak = 0;
        if (++streak >= max_quick) {
            log_error("supervisor: the worker %s: %d failures in a row, each within %g s of its "
                      "start; not starting it again", what, streak, quick_s);
            return 1;
        }
        double d = streak == 1 ? 0 : backoff; /* a first failure comes back at once */
        for (int i = 2; i < streak && d < cap; i++)
            d *= 2;
        if (d > cap)
            d = cap;
        log_warn("supervisor: the worker %s; starting it again in this pod in %g s (start %d); the "
                 "coordinator decides whether the gang restarts (spec.restartPolicy)", what, d,
                 starts + 1);
        if (sleep_unless_terminated(d))
            return WORKER_EXIT_TERMINATED;
    }
}
