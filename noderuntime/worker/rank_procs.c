#include "rank_procs.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

extern char **environ;

#define STOP_GRACE_S 60.0 /* a stopped rank checkpoints and leaves within this, or is killed */
#define LINE_MAX_BYTES 8192

/* ---------------------------------------------------------------- child side */

/* One protocol message a line (its text has no newline); the worker gone: PR_SET_PDEATHSIG
 * ends this process. */
static void write_line(int fd, char *text)
{
    if (!text)
        return;
    size_t n = strlen(text);
    for (size_t off = 0; off <= n;) {
        ssize_t w = off < n ? write(fd, text + off, n - off) : write(fd, "\n", 1);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    free(text);
}

static struct {
    int fd, rank, stage;
    volatile int *stop;
} g_child;

static void child_step(void *ctx, const struct proto_step *s)
{
    (void)ctx;
    struct proto_progress p = {.rank = g_child.rank, .stage = g_child.stage, .nsteps = 1};
    p.steps[0] = *s;
    write_line(g_child.fd, proto_progress_encode(&p, NULL));
}

static void child_notice(void *ctx, const char *reason, const char *message)
{
    (void)ctx;
    write_line(g_child.fd, proto_notice_encode(reason, message, NULL));
}

static int child_should_stop(void *ctx)
{
    (void)ctx;
    return g_child.stop && *g_child.stop;
}

struct rank_sink rank_procs_child_sink(int fd, int rank, int stage, volatile int *stop)
{
    g_child.fd = fd;
    g_child.rank = rank;
    g_child.stage = stage < PROTO_MAX_STAGES ? stage : 0;
    g_child.stop = stop;
    return (struct rank_sink){NULL, child_step, child_notice, child_should_stop};
}

void rank_procs_report_done(int fd, int rank, long step)
{
    write_line(fd, proto_done_encode(rank, step, NULL));
}

void rank_procs_report_error(int fd, const herr *e)
{
    write_line(fd, proto_error_encode(e->kind == HERR_CONFIG ? PROTO_ERR_CONFIG : PROTO_ERR_WORKER,
                                      e->msg, NULL));
}

int rank_procs_read_work(int fd, struct plan_assignment *a, int *local, herr *e)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf)
            return herr_set(e, "out of memory reading the work");
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                free(buf);
            buf = nb;
            cap *= 2;
            continue;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            free(buf);
            return herr_set(e, "reading the work from fd %d: %s", fd, strerror(errno));
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    cJSON *doc = cJSON_Parse(buf);
    free(buf);
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(doc, "local");
    int rc = !cJSON_IsNumber(lo)
                 ? herr_set(e, "the work must be {local, assignment} from holmes-node worker")
                 : plan_assignment_from_json(cJSON_GetObjectItemCaseSensitive(doc, "assignment"), a, e);
    if (rc == 0 && (lo->valueint < 0 || lo->valueint >= a->nranks || !a->has_plan)) {
        plan_assignment_free(a);
        rc = herr_set(e, "the work's local %d is not one of the assignment's %d ranks, or it has "
                      "no plan", lo->valueint, a->nranks);
    }
    if (rc == 0)
        *local = lo->valueint;
    cJSON_Delete(doc);
    return rc;
}

/* ---------------------------------------------------------------- parent side */

struct child {
    pid_t pid;
    int rank, local;
    int report;          /* read end, -1 once at EOF */
    char line[LINE_MAX_BYTES];
    size_t used;
    int exited, status;  /* waitpid status once exited */
    char error[512];     /* its error line */
    int config;          /* it said its error was a configuration error */
};

struct family {
    struct child *c;
    int n, reporter;
    struct worker_link *link;
    long last_step;
};

/* A copy of fd at 10 or above (so that dup2 onto 0, 3, 4 always clears close-on-exec). */
static int high_dup(int fd) { return fcntl(fd, F_DUPFD_CLOEXEC, 10); }

/* The child's environment: ours plus its local rank (as torchrun's LOCAL_RANK) and our pid. */
static char **child_env(int local)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 3, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "HOLMES_LOCAL_RANK=", 18) && strncmp(environ[i], "HOLMES_RANK_PARENT=", 19))
            env[k++] = environ[i];
    static char lr[32], pp[48];
    snprintf(lr, sizeof lr, "HOLMES_LOCAL_RANK=%d", local);
    snprintf(pp, sizeof pp, "HOLMES_RANK_PARENT=%ld", (long)getpid());
    env[k++] = lr;
    env[k++] = pp;
    return env;
}

/* Writes the whole work document to fd and closes it. */
static int send_work(int fd, const struct plan_assignment *a, int local, herr *e)
{
    cJSON *doc = cJSON_CreateObject(), *aj = plan_assignment_to_json(a);
    char *text = NULL;
    if (doc && aj && cJSON_AddNumberToObject(doc, "local", local) &&
        cJSON_AddItemToObject(doc, "assignment", aj))
        aj = NULL, text = cJSON_PrintUnformatted(doc);
    cJSON_Delete(aj);
    cJSON_Delete(doc);
    int rc = text ? 0 : herr_set(e, "out of memory");
    for (const char *p = text; !rc && *p;) {
        ssize_t w = write(fd, p, strlen(p));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rc = herr_set(e, "sending rank %d its work: %s", a->ranks[local], strerror(errno));
        else
            p += w;
    }
    free(text);
    close(fd);
    return rc;
}

/* Starts `holmes-node rank` for local rank k on listener l. */
static int spawn_one(const struct plan_assignment *a, int k, struct tcp_listener *l,
                     struct child *c, herr *e)
{
    int work[2], rep[2];
    if (pipe2(work, O_CLOEXEC) != 0)
        return herr_set(e, "pipe: %s", strerror(errno));
    if (pipe2(rep, O_CLOEXEC) != 0) {
        close(work[0]);
        close(work[1]);
        return herr_set(e, "pipe: %s", strerror(errno));
    }
    int w0 = high_dup(work[0]), lf = high_dup(tcp_listener_fd(l)), r1 = high_dup(rep[1]);
    close(work[0]);
    close(rep[1]);
    char **env = child_env(k);
    posix_spawn_file_actions_t fa;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc == 0 && (w0 < 0 || lf < 0 || r1 < 0 || !env))
        rc = env ? EMFILE : ENOMEM;
    if (rc == 0)
        rc = posix_spawn_file_actions_adddup2(&fa, w0, 0) ||
             posix_spawn_file_actions_adddup2(&fa, lf, RANK_PROCS_LISTEN_FD) ||
             posix_spawn_file_actions_adddup2(&fa, r1, RANK_PROCS_REPORT_FD);
    char *argv[] = {"holmes-node", "rank", NULL};
    if (rc == 0)
        rc = posix_spawn(&c->pid, "/proc/self/exe", &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    if (w0 >= 0)
        close(w0);
    if (lf >= 0)
        close(lf);
    if (r1 >= 0)
        close(r1);
    if (rc != 0) {
        close(work[1]);
        close(rep[0]);
        return herr_set(e, "starting the process of rank %d: %s", a->ranks[k], strerror(rc));
    }
    c->rank = a->ranks[k];
    c->local = k;
    c->report = rep[0];
    return send_work(work[1], a, k, e);
}

/* One report line of child c (a protocol message): its steps (relayed when c reports for the
 * worker), a notice (relayed), or its error (kept for the verdict). */
static void handle_line(struct family *f, struct child *c, const char *line)
{
    struct proto_msg m;
    herr e = {0};
    if (proto_parse(line, strlen(line), &m, &e) != 0) {
        log_warn("worker: rank %d's report refused: %s", c->rank, e.msg);
        return;
    }
    if (m.type == PROTO_PROGRESS && c->local == f->reporter) {
        for (int i = 0; i < m.u.progress.nsteps; i++) {
            worker_report_step(f->link, &m.u.progress.steps[i]);
            f->last_step = m.u.progress.steps[i].step;
        }
    } else if (m.type == PROTO_DONE && c->local == f->reporter && m.step > f->last_step) {
        f->last_step = m.step; /* where a round that trained no step stands (resumed at the end) */
    } else if (m.type == PROTO_NOTICE) {
        worker_report_notice(f->link, m.u.notice.reason, m.u.notice.message);
    } else if (m.type == PROTO_ERROR) {
        snprintf(c->error, sizeof c->error, "%s", m.u.error.message);
        c->config = m.u.error.code == PROTO_ERR_CONFIG;
    }
    proto_msg_free(&m);
}

/* Reads what child c has written; at EOF closes its pipe. */
static void drain(struct family *f, struct child *c)
{
    for (;;) {
        if (c->used >= sizeof c->line - 1)
            c->used = 0; /* a line this long is not ours: drop it */
        ssize_t n = read(c->report, c->line + c->used, sizeof c->line - 1 - c->used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            close(c->report);
            c->report = -1;
            return;
        }
        c->used += (size_t)n;
        char *nl;
        while ((nl = memchr(c->line, '\n', c->used)) != NULL) {
            *nl = '\0';
            handle_line(f, c, c->line);
            size_t rest = c->used - (size_t)(nl + 1 - c->line);
            memmove(c->line, nl + 1, rest);
            c->used = rest;
        }
    }
}

static void signal_all(struct family *f, int sig)
{
    for (int i = 0; i < f->n; i++)
        if (f->c[i].pid > 0 && !f->c[i].exited)
            kill(f->c[i].pid, sig);
}

/* Collects the children that have exited; the index of the one that failed first, or -1. Of
 * those found in one pass, one killed by a signal is the cause: the others (its peers, which
 * lost their connections to it within the same poll interval) exited because of it. */
static int reap(struct family *f)
{
    int failed = -1;
    for (int i = 0; i < f->n; i++) {
        struct child *c = &f->c[i];
        if (c->pid <= 0 || c->exited)
            continue;
        int st;
        pid_t r = waitpid(c->pid, &st, WNOHANG);
        if (r != c->pid)
            continue;
        c->exited = 1;
        c->status = st;
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (!ok && (failed < 0 || (WIFSIGNALED(st) && !WIFSIGNALED(f->c[failed].status))))
            failed = i;
    }
    return failed;
}

static int running(const struct family *f)
{
    int n = 0;
    for (int i = 0; i < f->n; i++)
        n += f->c[i].pid > 0 && !f->c[i].exited;
    return n;
}

/* Waits for every child and closes its pipe (after reading what is left). */
static void wait_all(struct family *f)
{
    for (int i = 0; i < f->n; i++) {
        struct child *c = &f->c[i];
        if (c->report >= 0) {
            int fl = fcntl(c->report, F_GETFL);
            fcntl(c->report, F_SETFL, fl & ~O_NONBLOCK);
            drain(f, c);
        }
        if (c->pid > 0 && !c->exited) {
            while (waitpid(c->pid, &c->status, 0) < 0 && errno == EINTR) {
            }
            c->exited = 1;
        }
    }
}

/* How child c ended, for the error. */
static void describe_end(const struct child *c, herr *e)
{
    char how[96];
    if (WIFSIGNALED(c->status))
        snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(c->status),
                 strsignal(WTERMSIG(c->status)));
    else
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(c->status));
    if (c->config)
        herr_set_kind(e, HERR_CONFIG, "rank %d: %s", c->rank, c->error);
    else
        herr_set(e, "rank %d (local rank %d, pid %ld) %s%s%s", c->rank, c->local, (long)c->pid, how,
                 c->error[0] ? ": " : "", c->error);
}

/* The local rank that reports for the worker: the one in the latest stage (it has the loss
 * when the worker holds the last stage). */
static int pick_reporter(const struct plan_assignment *a)
{
    int best = 0;
    for (int k = 1; k < a->nranks; k++)
        if (plan_doc_stage_of(&a->plan, a->ranks[k]) > plan_doc_stage_of(&a->plan, a->ranks[best]))
            best = k;
    return best;
}

/* Until every child has exited: relays reports, passes a stop request on, and on the first
 * failure kills the rest. The index of the failed child, or -1. */
static int supervise(struct family *f)
{
    int stopping = 0, failed = -1;
    double stop_deadline = 0;
    struct pollfd *p = calloc((size_t)f->n, sizeof *p);
    while (running(f) > 0) {
        int np = 0;
        for (int i = 0; p && i < f->n; i++)
            if (f->c[i].report >= 0)
                p[np++] = (struct pollfd){.fd = f->c[i].report, .events = POLLIN};
        if (np > 0)
            poll(p, (nfds_t)np, 100);
        else
            clock_sleep_s(0.05);
        for (int i = 0; i < f->n; i++)
            if (f->c[i].report >= 0)
                drain(f, &f->c[i]);
        int bad = reap(f);
        if (bad >= 0 && failed < 0) {
            failed = bad;
            signal_all(f, SIGKILL); /* the others would wait on it until their timeout */
        }
        if (!stopping && failed < 0 && worker_stop_requested(f->link)) {
            stopping = 1;
            stop_deadline = clock_mono_s() + STOP_GRACE_S;
            signal_all(f, SIGTERM);
        }
        if (stopping && clock_mono_s() > stop_deadline)
            signal_all(f, SIGKILL);
    }
    free(p);
    wait_all(f);
    return failed;
}

int rank_procs_run(const struct plan_assignment *a, struct tcp_listener *const *listeners,
                   struct worker_link *link, long *last_step, herr *e)
{
    *last_step = 0;
    struct family f = {.n = a->nranks, .reporter = pick_reporter(a), .link = link};
    f.c = calloc((size_t)f.n, sizeof *f.c);
    if (!f.c)
        return herr_set(e, "out of memory");
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigaction(SIGPIPE, &ign, NULL); /* a rank that died early: its work pipe says EPIPE */
    int rc = 0;
    for (int k = 0; k < f.n && rc == 0; k++) {
        f.c[k].report = -1;
        rc = spawn_one(a, k, listeners[k], &f.c[k], e);
        if (rc == 0)
            fcntl(f.c[k].report, F_SETFL, fcntl(f.c[k].report, F_GETFL) | O_NONBLOCK);
    }
    if (rc == 0)
        log_info("worker: %d rank processes started (ranks %d..), one per GPU", f.n, a->ranks[0]);
    if (rc != 0)
        signal_all(&f, SIGKILL);
    int failed = supervise(&f);
    if (rc == 0 && failed >= 0) {
        describe_end(&f.c[failed], e);
        rc = -1;
    }
    for (int i = 0; i < f.n; i++)
        if (f.c[i].report >= 0)
            close(f.c[i].report);
    free(f.c);
    *last_step = f.last_step;
    return rc;
}
