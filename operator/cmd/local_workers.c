#include "local_workers.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"

#define EXIT_RESTART 75 /* a worker stopped for an in-place restart */
#define WRAP_MAX_WORDS 16

int local_workers_job_over(const struct local_workers *ws, enum coord_job_state *st)
{
    if (coord_job_state(ws->c, ws->job->name, st))
        return 1;
    return *st == COORD_SUCCEEDED || *st == COORD_FAILED;
}

static int random_token(char *out, size_t cap)
{
    unsigned char b[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, b, sizeof b);
    close(fd);
    if (n != (ssize_t)sizeof b)
        return -1;
    for (size_t i = 0; i < sizeof b && 2 * i + 2 < cap; i++)
        snprintf(out + 2 * i, cap - 2 * i, "%02x", b[i]);
    return 0;
}

/* path and the folders above it made (those there already are fine). 0, or -1 (errno). */
static int mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) && errno != EEXIST)
            break;
        *p = '/';
    }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

int local_workers_prepare(struct local_workers *ws, const char *run_dir)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "holmes-operator local: cannot find my own binary\n");
        return -1;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    const char *envbin = getenv("HOLMES_NODE_BIN");
    if (envbin)
        snprintf(ws->node_bin, sizeof ws->node_bin, "%s", envbin);
    else
        snprintf(ws->node_bin, sizeof ws->node_bin, "%.*s/holmes-node", PATH_MAX - 16, self);
    if (access(ws->node_bin, X_OK) != 0) {
        fprintf(stderr, "holmes-operator local: %s: not found or not executable (build it with "
                        "make, or set HOLMES_NODE_BIN)\n", ws->node_bin);
        return -1;
    }
    if (run_dir)
        snprintf(ws->run_dir, sizeof ws->run_dir, "%s", run_dir);
    else
        snprintf(ws->run_dir, sizeof ws->run_dir, "local-runs/%s", ws->job->name);
    if (mkdir_p(ws->run_dir) != 0) {
        fprintf(stderr, "holmes-operator local: cannot create %s: %s\n", ws->run_dir,
                strerror(errno));
        return -1;
    }
    if (random_token(ws->token, sizeof ws->token) != 0) {
        fprintf(stderr, "holmes-operator local: /dev/urandom: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

int local_workers_check_engines(const struct local_workers *ws, const char *path)
{
    const struct tj_spec *s = &ws->job->spec;
    if (!tj_real_gpus(s) || ws->simulate)
        return 0;
    char want[32], cmd[PATH_MAX + 32], line[64];
    snprintf(want, sizeof want, "cuda-%s\n", dtype_name(s->training.precision));
    snprintf(cmd, sizeof cmd, "'%s' engines 2>/dev/null", ws->node_bin);
    int found = 0;
    FILE *f = strchr(ws->node_bin, '\'') ? NULL : popen(cmd, "r");
    while (f && fgets(line, sizeof line, f))
        found |= strcmp(line, want) == 0;
    if (f)
        pclose(f);
    if (found)
        return 0;
    want[strlen(want) - 1] = '\0';
    fprintf(stderr, "%s: spec.gpusPerWorker: %d: %s has no %s engine (build it with `make cuda`, "
                    "or point HOLMES_NODE_BIN at a CUDA build); set spec.emulation.gpus: true to "
                    "run a CPU rank per GPU, or gpusPerWorker 0\n",
            path, s->gpus_per_worker, ws->node_bin, want);
    return 2;
}

/* The NIC spec CLASS:FABRIC:GBPS of worker i from spec.emulation (ethernet when absent). */
static void worker_nic(const struct tj_spec *s, int i, char *out, size_t cap)
{
    if (s->emulation.enabled) {
        int k = 0;
        for (int g = 0; g < s->emulation.n_groups; g++) {
            const struct tj_nic_group *ng = &s->emulation.groups[g];
            if (i < k + ng->count) {
                snprintf(out, cap, "%s:%s:%g", ng->cls, ng->fabric, ng->gbps);
                return;
            }
            k += ng->count;
        }
    }
    snprintf(out, cap, "ethernet:local:10");
}

/* Splits the --worker-wrap prefix into argv words for worker i ({i} becomes the index) in
 * buf; returns the word count, or -1 when it has too many words or does not fit. */
static int wrap_words(const char *wrap, int i, char *buf, size_t cap, char **words)
{
    size_t used = 0;
    int n = 0;
    const char *p = wrap;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        if (n == WRAP_MAX_WORDS)
            return -1;
        words[n++] = buf + used;
        while (*p && *p != ' ') {
            if (strncmp(p, "{i}", 3) == 0) {
                int k = snprintf(buf + used, cap - used, "%d", i);
                if (k < 0 || (size_t)k >= cap - used)
                    return -1;
                used += (size_t)k;
                p += 3;
            } else {
                if (used + 1 >= cap)
                    return -1;
                buf[used++] = *p++;
            }
        }
        if (used + 1 >= cap)
            return -1;
        buf[used++] = '\0';
    }
    return n;
}

/* In the child: its log as standard output and error, and the environment a worker sharing
 * this machine's cores needs. */
static void worker_env(const struct local_workers *ws, int i)
{
    char log_path[PATH_MAX + 32];
    snprintf(log_path, sizeof log_path, "%s/worker-%d.log", ws->run_dir, i);
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
    }
    setenv("HOLMES_TOKEN", ws->token, 1);
    /* Several workers share this machine's cores: one compute thread each unless told. */
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    /* ... and each computes on its own share of them (noderuntime/train/cpu_affinity.h) */
    setenv("HOLMES_CPU_AFFINITY", "spread", 0);
    /* They also share its compute: a start-up probe would only measure which worker the
     * scheduler favoured, so all declare the same rate (the planner's CPU default) unless told. */
    setenv("HOLMES_DECLARED_TFLOPS", "0.05", 0);
    /* ... and its memory: likewise the planner's CPU default (PLAN_CPU_MEMORY_GBPS) */
    char membw[32];
    snprintf(membw, sizeof membw, "%g", PLAN_CPU_MEMORY_GBPS);
    setenv("HOLMES_MEMORY_GBPS", membw, 0);
}

/* Starts worker i; its pid, or -1 when fork failed. */
static pid_t spawn_worker(const struct local_workers *ws, int i)
{
    const struct tj_job *job = ws->job;
    char url[320], idx[16], pod[128], nic[300], steps[32], stepms[32];
    snprintf(url, sizeof url, "ws://%s:%d/", ws->bind ? ws->bind : "127.0.0.1", coord_port(ws->c));
    snprintf(idx, sizeof idx, "%d", i);
    tj_worker_pod_name(pod, sizeof pod, job->name, i);
    worker_nic(&job->spec, i, nic, sizeof nic);
    snprintf(steps, sizeof steps, "%ld", job->spec.training.steps);
    snprintf(stepms, sizeof stepms, "%d", ws->step_ms);
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* A worker dies with this process (kill -9 included): nobody would listen to it. The check
     * after prctl catches a parent that died before it took effect. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(127);
    worker_env(ws, i);
    char *argv[24 + WRAP_MAX_WORDS];
    char wrapbuf[1024];
    int a = 0;
    if (ws->wrap) {
        a = wrap_words(ws->wrap, i, wrapbuf, sizeof wrapbuf, argv);
        if (a <= 0) {
            fprintf(stderr, "--worker-wrap: at most %d words of 1 KiB in all\n", WRAP_MAX_WORDS);
            _exit(127);
        }
        argv[a++] = (char *)ws->node_bin;
    } else {
        argv[a++] = (char *)"holmes-node";
    }
    const char *args[] = {"worker", "--coordinator", url, "--job", job->name, "--pod", pod,
                          "--worker", idx, "--node", "localhost", "--emulate-nic", nic,
                          "--progress-ms", "200"};
    for (size_t k = 0; k < sizeof args / sizeof *args; k++)
        argv[a++] = (char *)args[k];
    if (ws->simulate) {
        argv[a++] = (char *)"--simulate";
        argv[a++] = steps;
        argv[a++] = (char *)"--step-ms";
        argv[a++] = stepms;
    }
    argv[a] = NULL;
    if (ws->wrap)
        execvp(argv[0], argv);
    else
        execv(ws->node_bin, argv);
    fprintf(stderr, "cannot run %s: %s\n", ws->node_bin, strerror(errno));
    _exit(127);
}

int local_workers_start(struct local_workers *ws, struct coordinator *c)
{
    const struct tj_job *job = ws->job;
    ws->c = c;
    ws->w = calloc((size_t)job->spec.workers, sizeof *ws->w);
    if (!ws->w)
        return -1;
    for (int i = 0; i < job->spec.workers; i++) {
        ws->w[i].pid = spawn_worker(ws, i);
        ws->w[i].starts = 1;
        if (ws->w[i].pid < 0) {
            fprintf(stderr, "holmes-operator local: fork: %s\n", strerror(errno));
            ws->w[i].pid = 0;
            coord_cancel_job(c, job->name, "could not start the workers", NULL);
        }
    }
    return 0;
}

/* Worker i exited with code: started again while the job needs it (given up on after too many
 * starts: an elastic job's worker then counts as lost once absent long enough, any other job
 * is cancelled). */
static void respawn(struct local_workers *ws, int i, int code)
{
    const struct tj_job *job = ws->job;
    struct local_worker *k = &ws->w[i];
    enum coord_job_state st;
    if (code == 0) {
        k->exited = 1;
        return;
    }
    if (k->lost || k->gave_up || local_workers_job_over(ws, &st))
        return;
    if (code != EXIT_RESTART)
        local_console_say(ws->console, "local", "%s-worker-%d exited with status %d; starting it "
                          "again (log: %s/worker-%d.log)", job->name, i, code, ws->run_dir, i);
    if (k->starts > 3 * (job->spec.restart.max_restarts + 2)) {
        if (tj_is_elastic(&job->spec)) {
            local_console_say(ws->console, "local", "%s-worker-%d keeps failing to start; not "
                              "started again", job->name, i);
            k->gave_up = 1;
        } else {
            coord_cancel_job(ws->c, job->name, "a worker keeps failing to start", NULL);
        }
        return;
    }
    k->pid = spawn_worker(ws, i);
    k->starts++;
    if (k->pid < 0)
        k->pid = 0;
}

void local_workers_reap(struct local_workers *ws)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < ws->job->spec.workers; i++) {
            if (ws->w[i].pid != pid)
                continue;
            ws->w[i].pid = 0;
            respawn(ws, i, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        }
    }
}

void local_workers_watch_absent(struct local_workers *ws)
{
    const struct tj_spec *s = &ws->job->spec;
    if (!tj_is_elastic(s))
        return;
    int state[4096];
    int n = coord_job_workers(ws->c, ws->job->name, state, 4096);
    enum coord_job_state st;
    if (n < 0 || local_workers_job_over(ws, &st))
        return;
    double t = clock_mono_s();
    for (int i = 0; i < n && i < s->workers; i++) {
        struct local_worker *k = &ws->w[i];
        if (state[i] != 0) {
            k->absent_since = 0;
            continue;
        }
        if (k->absent_since == 0)
            k->absent_since = t;
        if (t - k->absent_since < s->elastic.replace_timeout_seconds)
            continue;
        char why[200];
        snprintf(why, sizeof why, "not back in the gang for %d s (spec.elastic.replaceTimeoutSeconds)",
                 s->elastic.replace_timeout_seconds);
        herr e = {0};
        int rc = coord_job_lose_worker(ws->c, ws->job->name, i, why, &e);
        if (rc == 1 && !ws->below_min_said) {
            local_console_say(ws->console, "Waiting", "worker %d is gone but only %d would "
                              "remain, fewer than spec.elastic.minWorkers %d: waiting for it", i,
                              n - 1, s->elastic.min_workers);
            ws->below_min_said = 1;
        } else if (rc == 0) {
            ws->below_min_said = 0;
        }
    }
}

int local_workers_cover_gang(struct local_workers *ws)
{
    const struct tj_spec *s = &ws->job->spec;
    int state[4096], present = 0;
    int n = tj_is_elastic(s) ? coord_job_workers(ws->c, ws->job->name, state, 4096) : -1;
    for (int i = 0; i < n && i < 4096; i++)
        present += state[i] == 1;
    if (n < 0 || present < s->elastic.min_workers)
        return 0;
    local_console_say(ws->console, "local", "%d of %d workers are there (spec.elastic.minWorkers "
                      "%d): the absent ones count as lost after %d s "
                      "(spec.elastic.replaceTimeoutSeconds)", present, s->workers,
                      s->elastic.min_workers, s->elastic.replace_timeout_seconds);
    return 1;
}

void local_workers_lose(struct local_workers *ws, int i)
{
    if (!ws->w || i < 0 || i >= ws->job->spec.workers)
        return;
    ws->w[i].lost = 1;
    if (ws->w[i].pid > 0)
        kill(ws->w[i].pid, SIGKILL); /* reaped, not started again */
}

int local_workers_alive(const struct local_workers *ws)
{
    int alive = 0;
    for (int i = 0; ws->w && i < ws->job->spec.workers; i++)
        alive += ws->w[i].pid > 0;
    return alive;
}

void local_workers_kill(struct local_workers *ws)
{
    for (int i = 0; ws->w && i < ws->job->spec.workers; i++)
        if (ws->w[i].pid > 0)
            kill(ws->w[i].pid, SIGKILL);
}

void local_workers_free(struct local_workers *ws)
{
    for (int i = 0; ws->w && i < ws->job->spec.workers; i++)
        if (ws->w[i].pid > 0) {
            kill(ws->w[i].pid, SIGKILL);
            waitpid(ws->w[i].pid, NULL, 0);
        }
    free(ws->w);
    ws->w = NULL;
}
