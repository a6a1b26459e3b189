/* holmes-operator local JOB.yaml: the whole job on this machine. An embedded coordinator on
 * 127.0.0.1 and one `holmes-node worker` process per worker, each reporting its emulated NIC
 * (spec.emulation) so the planner places stages inside fabrics and the TCP transport paces the
 * links. Prints the placement table, a live progress line and a summary; --metrics-out writes
 * one JSON object per step; the live job page (/jobs) is served on --page-addr. Workers stopped for an in-place restart (exit 75), or that died,
 * are started again while the job is alive; they resume from their last checkpoint. With
 * spec.elastic, a worker absent from the gang for replaceTimeoutSeconds (it never came back:
 * hung, or failing to start) counts as lost: it is not started again and the job re-plans on
 * the workers that remain. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "clock.h"
#include "commands.h"
#include "coord_history.h"
#include "coord_plan.h"
#include "coordinator.h"
#include "http_server.h"
#include "job_page.h"
#include "log.h"
#include "trainingjob.h"

#define EXIT_RESTART 75
#define METRIC_SLOTS 4096

static volatile sig_atomic_t interrupted;
static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: holmes-operator local JOB.yaml [--metrics-out FILE] [--run-dir DIR]\n"
        "                                      [--simulate [--step-ms MS]] [--quiet]\n"
        "                                      [--bind ADDR] [--worker-wrap CMD]\n"
        "                                      [--calibration LINKS.yaml] [--page-addr ADDR]\n"
        "Runs a TrainingJob on this machine: an embedded coordinator and one holmes-node worker\n"
        "process per worker over the TCP transport, with the NICs of spec.emulation (each\n"
        "worker pretends to have its group's NIC; links are paced to the emulated bandwidth).\n"
        "Prints the placement, a live progress line (step, loss, tokens/s, ETA) and a summary.\n"
        "  --metrics-out FILE  one JSON object per step: step, time (Unix seconds when the\n"
        "                      step completed on every worker), loss, lr, tokens_per_s, step_ms\n"
        "                      and its per-stage breakdown\n"
        "  --run-dir DIR       worker logs (default local-runs/NAME)\n"
        "  --simulate          workers train nothing and report simulated steps (tests)\n"
        "  --step-ms MS        simulated step time (default 20)\n"
        "  --quiet             no live progress line\n"
        "  --bind ADDR         coordinator address (default 127.0.0.1), e.g. a router\n"
        "                      namespace's address that workers in other namespaces reach\n"
        "  --worker-wrap CMD   start each worker under this command prefix (words split on\n"
        "                      spaces, {i} replaced by the worker index), e.g.\n"
        "                      'ip netns exec fab-w{i}' (the fabric benchmark)\n"
        "  --calibration FILE  link constants for the planner, as `holmes-operator plan\n"
        "                      --calibration FILE` uses them (same plan, same prediction)\n"
        "  --page-addr ADDR    serve the live job page (/jobs; JSON: /api/jobs) on ADDR,\n"
        "                      HOST:PORT (default 127.0.0.1:0: a free port; \"0\" = off);\n"
        "                      its URL is printed when the job starts\n"
        "The workers share this machine's cores: each computes with one thread\n"
        "(OMP_NUM_THREADS) and pins it to its share of the cores, the replicas of one stage\n"
        "on different cores (HOLMES_CPU_AFFINITY=spread; set it to none to leave the\n"
        "placement to the kernel).\n"
        "Exit status: 0 succeeded, 1 failed, 2 usage or invalid job.\n");
}

struct child {
    pid_t pid;
    int exited;          /* finished for good (exit 0) */
    int starts;
    int gave_up;         /* elastic: kept failing to start; not started again */
    int lost;            /* elastic: counted as lost; not started again */
    double absent_since; /* elastic: when it was first seen absent from the gang (0: present) */
};

/* Per-step metrics collected from every worker until the row is complete. */
struct metric_row {
    long step;
    int seen;            /* workers that reported this step */
    int nloss;
    double loss, lr, tokens_per_s, step_ms;
    double stage_ms[PROTO_MAX_STAGES], stage_compute[PROTO_MAX_STAGES],
           stage_comm[PROTO_MAX_STAGES], stage_bubble[PROTO_MAX_STAGES];
};

struct local {
    struct tj_job job;
    struct coord_plan cp;
    struct coordinator *c;
    struct child *kids;
    char token[64];
    char node_bin[PATH_MAX];
    char run_dir[PATH_MAX];
    const char *bind;    /* coordinator address; NULL = 127.0.0.1 */
    const char *wrap;    /* worker command prefix with {i}; NULL = none */
    int simulate, step_ms, quiet, tty;
    FILE *metrics;
    struct metric_row *rows;
    const char *page_addr;       /* --page-addr; "0" = no page */
    struct coord_history *history; /* what the job page shows */
    struct http_server *page;
    int stages;
    double t0;
    struct coord_progress last;
    int have_progress;
    int progress_line_open;
    char fail_reason[1024];
    int gang_failed;
    double first_loss;
    long first_step;
    int have_first;
    char elastic_why[300];       /* why the next plan is a re-plan */
    int below_min_said;          /* "below minWorkers" printed for this absence */
};

static void fmt_duration(double s, char *buf, size_t cap)
{
    if (s < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60)
        snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, cap, "%lds", t);
}

static void end_progress_line(struct local *L)
{
    if (L->progress_line_open) {
        printf("\n");
        L->progress_line_open = 0;
    }
}

/* ---------------------------------------------------------------- hooks */

/* ---------------------------------------------------------------- the job page */

/* The plan into the page's history, with the conditions the operator would set. */
static void page_record_plan(struct local *L, const struct plan *p, const struct coord_worker *w,
                             int n)
{
    const char *ns = L->job.namespace_, *name = L->job.name;
    cJSON *pj = coord_plan_status_json(p, w);
    coord_history_plan(L->history, ns, name, pj);
    cJSON_Delete(pj);
    char gang[96];
    snprintf(gang, sizeof gang, "all %d workers said hello", n);
    coord_history_condition(L->history, ns, name, "GangReady", 1, "AllWorkersConnected", gang);
    coord_history_condition(L->history, ns, name, "Planned", 1, "Planned", "planned");
}

/* A state change or event into the page's history: the event, and the phase and conditions
 * the operator would write for it. */
static void page_record_event(struct local *L, enum coord_job_state s, const char *msg)
{
    static const char *const phases[] = {
        [COORD_GATHERING] = "Discovering", [COORD_RENDEZVOUS] = "Planning",
        [COORD_RUNNING] = "Running", [COORD_RESTARTING] = "Running",
        [COORD_SUCCEEDED] = "Succeeded", [COORD_FAILED] = "Failed"};
    struct coord_history *h = L->history;
    const char *ns = L->job.namespace_, *name = L->job.name;
    int warn = s == COORD_RESTARTING || s == COORD_FAILED || strstr(msg, "gang timeout") ||
               strncmp(msg, "refused", 7) == 0;
    coord_history_event(h, ns, name, warn ? "Warning" : "Normal", coord_state_name(s), msg);
    coord_history_phase(h, ns, name, phases[s], s == COORD_FAILED ? msg : NULL);
    if (s == COORD_RUNNING)
        coord_history_condition(h, ns, name, "Running", 1, "Running", msg);
    else if (s == COORD_RESTARTING) {
        coord_history_condition(h, ns, name, "Running", 0, "Restarting", msg);
        coord_history_restarting(h, ns, name);
        coord_history_restarts(h, ns, name, coord_job_restarts(L->c, name));
    } else if (s == COORD_FAILED)
        coord_history_condition(h, ns, name, "Failed", 1, "JobFailed", msg);
    else if (s == COORD_SUCCEEDED)
        coord_history_condition(h, ns, name, "Succeeded", 1, "Succeeded", msg);
}

static int page_handler(void *user, const struct http_request *req, struct metrics_buf *b,
                        const char **type)
{
    struct local *L = user;
    const char *path = req->path;
    cJSON *jobs = NULL;
    herr e = {0};
    if (strcmp(path, JOB_PAGE_API_PATH) == 0)
        jobs = job_page_jobs(NULL, coord_history_json(L->history, &e));
    return job_page_serve(path, jobs, b, type);
}

/* --page-addr: the history and the page's server, its URL printed. 0, or -1 (said). */
static int start_page(struct local *L)
{
    if (!(L->history = coord_history_new(0))) {
        fprintf(stderr, "holmes-operator local: out of memory\n");
        return -1;
    }
    if (strcmp(L->page_addr, "0") == 0)
        return 0;
    herr e = {0};
    if (!(L->page = http_server_start(L->page_addr, page_handler, L, NULL, &e))) {
        fprintf(stderr, "holmes-operator local: --page-addr: %s\n", e.msg);
        return -1;
    }
    const char *colon = strrchr(L->page_addr, ':');
    int hl = (int)(colon - L->page_addr);
    int any = hl == 0 || (hl == 7 && strncmp(L->page_addr, "0.0.0.0", 7) == 0);
    printf("job page: http://%.*s:%d%s\n", any ? 9 : hl, any ? "127.0.0.1" : L->page_addr,
           http_server_port(L->page), JOB_PAGE_PATH);
    return 0;
}

/* TeraPipe: the slicing the plan carries, beside the unsliced prediction. */
static void print_slices(const struct plan *p)
{
    if (p->slices > 1) {
        char lens[512];
        plan_doc_slice_lengths(p->slice_bounds, p->slices, lens, sizeof lens);
        printf("  token slices: %d (%s tokens), chosen by the %s; unsliced: %.3f s\n", p->slices,
               lens, p->slices_auto ? "planner" : "spec", p->unsliced_step_s);
    } else if (p->slices_auto) {
        printf("  token slices: none (tokenSlices auto: slicing does not pay here%s)\n",
               p->auto_rejected_slices > 1 ? ", the best found was slower" : "");
    }
}

static int hook_plan(void *user, const struct coord_worker *w, int n, cJSON **a, herr *e)
{
    struct local *L = user;
    if (coord_plan_hook(&L->cp, w, n, a, e))
        return -1;
    const struct plan *p = &L->cp.plan;
    L->stages = p->n_stages;
    page_record_plan(L, p, w, n);
    end_progress_line(L);
    if (tj_is_elastic(&L->job.spec) && L->cp.prev_shape[0] && strcmp(L->cp.prev_shape, L->cp.shape)) {
        char msg[1200];
        snprintf(msg, sizeof msg, "%s -> %s: %s%s%s", L->cp.prev_shape, L->cp.shape,
                 L->elastic_why[0] ? L->elastic_why : "the workers changed",
                 L->cp.batch_note[0] ? "; " : "", L->cp.batch_note);
        printf("[Replanned] %s\n", msg);
        coord_history_event(L->history, L->job.namespace_, L->job.name, "Warning", "Replanned", msg);
    }
    char tensor[32] = "";
    if (p->tensor > 1) /* a tensor group inside each worker */
        snprintf(tensor, sizeof tensor, "tensor %d x ", p->tensor);
    printf("placement (%s policy): %spipeline %d x data %d, %d micro-batches of %d\n",
           policy_name(p->policy), tensor, p->pipeline, p->data, p->micro_batches,
           p->micro_batch_size);
    printf("  %-6s %-12s %-9s %s\n", "stage", "fabric", "layers", "workers");
    for (int s = 0; s < p->n_stages; s++) {
        char ws[512] = "";
        size_t used = 0;
        for (int r = 0; r < p->n_ranks; r++) {
            int wi = p->ranks[r].worker, seen = 0, here = 0;
            if (p->ranks[r].stage != s)
                continue;
            for (int q = 0; q < p->n_ranks; q++)
                if (p->ranks[q].stage == s && p->ranks[q].worker == wi) {
                    seen += q < r;
                    here++;
                }
            if (seen)
                continue; /* each worker once: "x2" when it holds two ranks (GPUs) of the stage */
            const struct coord_worker *cw = &w[wi];
            char times[16] = "";
            if (here > 1)
                snprintf(times, sizeof times, " x%d", here);
            int k = snprintf(ws + used, sizeof ws - used, "%s%s%s (%s %g Gb/s)", used ? ", " : "",
                             cw->pod, times, nic_class_name(cw->nic.cls), cw->nic.gbps);
            if (k > 0 && (size_t)k < sizeof ws - used)
                used += (size_t)k;
        }
        char layers[32];
        snprintf(layers, sizeof layers, "%d-%d", p->stages[s].first_layer,
                 p->stages[s].last_layer - 1);
        printf("  %-6d %-12s %-9s %s\n", s, p->stages[s].fabric, layers, ws);
    }
    for (int g = 0; g < p->n_groups; g++) {
        const struct plan_group *pg = &p->groups[g];
        if (pg->kind != GROUP_DP || pg->n < 2)
            continue;
        printf("  data-parallel group of stage %d: %s%s%s\n", pg->stage,
               transport_name(pg->transport.kind), pg->transport.reason[0] ? " - " : "",
               pg->transport.reason);
    }
    printf("  predicted step time %.3f s (model's estimate for the emulated fabrics)\n",
           p->step_s);
    print_slices(p);
    fflush(stdout);
    return 0;
}

static void hook_event(void *user, enum coord_job_state s, const char *msg)
{
    struct local *L = user;
    page_record_event(L, s, msg);
    end_progress_line(L);
    printf("[%s] %s\n", coord_state_name(s), msg);
    fflush(stdout);
    if (strstr(msg, "gang timeout")) {
        L->gang_failed = 1;
        snprintf(L->fail_reason, sizeof L->fail_reason, "%s", msg);
    }
    if (s == COORD_FAILED)
        snprintf(L->fail_reason, sizeof L->fail_reason, "%s", msg);
    if (s == COORD_RESTARTING && L->rows) { /* steps after the checkpoint are trained again */
        memset(L->rows, 0, METRIC_SLOTS * sizeof *L->rows);
        for (int i = 0; i < METRIC_SLOTS; i++)
            L->rows[i].step = -1;
    }
}

static void hook_notice(void *user, const char *reason, const char *msg)
{
    struct local *L = user;
    coord_history_event(L->history, L->job.namespace_, L->job.name, "Warning", reason, msg);
    coord_history_condition(L->history, L->job.namespace_, L->job.name, reason, 1, reason, msg);
    end_progress_line(L);
    printf("[%s] %s\n", reason, msg);
    fflush(stdout);
}

/* spec.elastic: a worker lost (not started again) or back. */
static void hook_elastic(void *user, const struct coord_worker *w, int lost, const char *why)
{
    struct local *L = user;
    end_progress_line(L);
    snprintf(L->elastic_why, sizeof L->elastic_why, "worker %d (%s) %s: %s", w->index, w->pod,
             lost ? "lost" : "back", why);
    printf("[%s] %s\n", lost ? "WorkerLost" : "WorkerBack", L->elastic_why);
    coord_history_event(L->history, L->job.namespace_, L->job.name, lost ? "Warning" : "Normal",
                        lost ? "WorkerLost" : "WorkerBack", L->elastic_why);
    if (lost && w->index >= 0 && w->index < L->job.spec.workers) {
        struct child *k = &L->kids[w->index];
        k->lost = 1;
        if (k->pid > 0)
            kill(k->pid, SIGKILL); /* reaped, not started again */
    }
    fflush(stdout);
}

static void hook_progress(void *user, const struct coord_progress *p)
{
    struct local *L = user;
    L->last = *p;
    L->have_progress = 1;
    if (p->has_loss && !L->have_first) {
        L->have_first = 1;
        L->first_loss = p->loss;
        L->first_step = p->step;
    }
    if (L->quiet)
        return;
    char eta[32];
    fmt_duration(p->eta_s, eta, sizeof eta);
    char line[256];
    snprintf(line, sizeof line, "step %ld/%ld  loss %s  %.0f tokens/s  %.0f ms/step  ETA %s",
             p->step, p->total_steps, "", p->tokens_per_s, p->step_ms, eta);
    if (p->has_loss)
        snprintf(line, sizeof line, "step %ld/%ld  loss %.4f  %.0f tokens/s  %.0f ms/step  ETA %s",
                 p->step, p->total_steps, p->loss, p->tokens_per_s, p->step_ms, eta);
    if (L->tty) {
        printf("\r%-100s", line);
        L->progress_line_open = 1;
    } else {
        static double last_print;
        double t = clock_mono_s();
        if (t - last_print < 5.0 && p->step < p->total_steps)
            return;
        last_print = t;
        printf("%s\n", line);
    }
    fflush(stdout);
}

static void write_row(struct local *L, const struct metric_row *r)
{
    if (!L->metrics)
        return;
    fprintf(L->metrics, "{\"step\":%ld,\"time\":%.3f,", r->step, clock_wall_s());
    if (r->nloss)
        fprintf(L->metrics, "\"loss\":%.6f,", r->loss / r->nloss);
    /* each last-stage replica reports the whole step's rate: their mean */
    fprintf(L->metrics, "\"lr\":%.6g,\"tokens_per_s\":%.1f,\"step_ms\":%.3f,\"stages\":[",
            r->lr, r->nloss ? r->tokens_per_s / r->nloss : 0.0, r->step_ms);
    int n = L->stages > 0 ? L->stages : 1;
    for (int s = 0; s < n && s < PROTO_MAX_STAGES; s++)
        fprintf(L->metrics,
                "%s{\"stage\":%d,\"step_ms\":%.3f,\"compute_ms\":%.3f,\"comm_ms\":%.3f,"
                "\"bubble_ms\":%.3f}", s ? "," : "", s, r->stage_ms[s], r->stage_compute[s],
                r->stage_comm[s], r->stage_bubble[s]);
    fprintf(L->metrics, "]}\n");
    fflush(L->metrics);
}

static double maxd(double a, double b) { return a > b ? a : b; }

static void hook_steps(void *user, const struct coord_worker *w, const struct proto_progress *p)
{
    struct local *L = user;
    (void)w;
    coord_history_steps(L->history, L->job.namespace_, L->job.name, p);
    if (!L->rows)
        return;
    int n = L->cp.workers > 0 ? L->cp.workers : L->job.spec.workers; /* elastic: the plan's */
    for (int i = 0; i < p->nsteps; i++) {
        const struct proto_step *s = &p->steps[i];
        struct metric_row *r = &L->rows[s->step % METRIC_SLOTS];
        if (r->step != s->step) { /* a new step in this slot (or a replay after a restart) */
            memset(r, 0, sizeof *r);
            r->step = s->step;
        }
        r->seen++;
        if (s->has_loss) {
            r->nloss++;
            r->loss += s->loss;
            r->tokens_per_s += s->tokens_per_s;
        }
        if (s->lr > 0)
            r->lr = s->lr;
        r->step_ms = maxd(r->step_ms, s->step_ms);
        int st = p->stage < PROTO_MAX_STAGES ? p->stage : PROTO_MAX_STAGES - 1;
        r->stage_ms[st] = maxd(r->stage_ms[st], s->step_ms);
        r->stage_compute[st] = maxd(r->stage_compute[st], s->compute_ms);
        r->stage_comm[st] = maxd(r->stage_comm[st], s->comm_ms);
        r->stage_bubble[st] = maxd(r->stage_bubble[st], s->bubble_ms);
        if (r->seen == n)
            write_row(L, r);
    }
}

/* ---------------------------------------------------------------- workers */

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

#define WRAP_MAX_WORDS 16

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

static pid_t spawn_worker(struct local *L, int i)
{
    char url[320], idx[16], pod[128], nic[300], log_path[PATH_MAX + 32], steps[32], stepms[32];
    snprintf(url, sizeof url, "ws://%s:%d/", L->bind ? L->bind : "127.0.0.1", coord_port(L->c));
    snprintf(idx, sizeof idx, "%d", i);
    tj_worker_pod_name(pod, sizeof pod, L->job.name, i);
    worker_nic(&L->job.spec, i, nic, sizeof nic);
    snprintf(log_path, sizeof log_path, "%s/worker-%d.log", L->run_dir, i);
    snprintf(steps, sizeof steps, "%ld", L->job.spec.training.steps);
    snprintf(stepms, sizeof stepms, "%d", L->step_ms);
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
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
    }
    setenv("HOLMES_TOKEN", L->token, 1);
    /* Several workers share this machine's cores: one compute thread each unless told. */
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    /* ... and each computes on its own share of them (noderuntime/train/cpu_affinity.h) */
    setenv("HOLMES_CPU_AFFINITY", "spread", 0);
    /* They also share its compute: a start-up probe would only measure which worker the
     * scheduler favoured, so all declare the same rate (the planner's CPU default) unless told. */
    setenv("HOLMES_DECLARED_TFLOPS", "0.05", 0);
    char *argv[24 + WRAP_MAX_WORDS];
    char wrapbuf[1024];
    int a = 0;
    if (L->wrap) {
        a = wrap_words(L->wrap, i, wrapbuf, sizeof wrapbuf, argv);
        if (a <= 0) {
            fprintf(stderr, "--worker-wrap: at most %d words of 1 KiB in all\n", WRAP_MAX_WORDS);
            _exit(127);
        }
        argv[a++] = L->node_bin;
    } else {
        argv[a++] = (char *)"holmes-node";
    }
    argv[a++] = (char *)"worker";
    argv[a++] = (char *)"--coordinator";
    argv[a++] = url;
    argv[a++] = (char *)"--job";
    argv[a++] = L->job.name;
    argv[a++] = (char *)"--pod";
    argv[a++] = pod;
    argv[a++] = (char *)"--worker";
    argv[a++] = idx;
    argv[a++] = (char *)"--node";
    argv[a++] = (char *)"localhost";
    argv[a++] = (char *)"--emulate-nic";
    argv[a++] = nic;
    argv[a++] = (char *)"--progress-ms";
    argv[a++] = (char *)"200";
    if (L->simulate) {
        argv[a++] = (char *)"--simulate";
        argv[a++] = steps;
        argv[a++] = (char *)"--step-ms";
        argv[a++] = stepms;
    }
    argv[a] = NULL;
    if (L->wrap)
        execvp(argv[0], argv);
    else
        execv(L->node_bin, argv);
    fprintf(stderr, "cannot run %s: %s\n", L->node_bin, strerror(errno));
    _exit(127);
}

static int job_over(struct local *L, enum coord_job_state *st)
{
    if (coord_job_state(L->c, L->job.name, st))
        return 1;
    return *st == COORD_SUCCEEDED || *st == COORD_FAILED;
}

/* Reaps exited workers; starts again those the job still needs. */
static void reap_and_respawn(struct local *L)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < L->job.spec.workers; i++) {
            struct child *k = &L->kids[i];
            if (k->pid != pid)
                continue;
            k->pid = 0;
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            enum coord_job_state st;
            if (code == 0) {
                k->exited = 1;
            } else if (k->lost || k->gave_up) {
                continue; /* elastic: lost, or given up on; not started again */
            } else if (!job_over(L, &st)) {
                if (code != EXIT_RESTART) {
                    end_progress_line(L);
                    printf("[local] %s-worker-%d exited with status %d; starting it again "
                           "(log: %s/worker-%d.log)\n", L->job.name, i, code, L->run_dir, i);
                }
                if (k->starts > 3 * (L->job.spec.restart.max_restarts + 2)) {
                    if (tj_is_elastic(&L->job.spec)) { /* counted as lost once absent long enough */
                        printf("[local] %s-worker-%d keeps failing to start; not started again\n",
                               L->job.name, i);
                        k->gave_up = 1;
                        continue;
                    }
                    coord_cancel_job(L->c, L->job.name, "a worker keeps failing to start", NULL);
                    continue;
                }
                k->pid = spawn_worker(L, i);
                k->starts++;
                if (k->pid < 0)
                    k->pid = 0;
            }
        }
    }
}

static int setup_paths(struct local *L, const char *argv0, const char *run_dir)
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
        snprintf(L->node_bin, sizeof L->node_bin, "%s", envbin);
    else
        snprintf(L->node_bin, sizeof L->node_bin, "%.*s/holmes-node", PATH_MAX - 16, self);
    if (access(L->node_bin, X_OK) != 0) {
        fprintf(stderr, "holmes-operator local: %s: not found or not executable (build it with "
                        "make, or set HOLMES_NODE_BIN)\n", L->node_bin);
        return -1;
    }
    (void)argv0;
    if (run_dir)
        snprintf(L->run_dir, sizeof L->run_dir, "%s", run_dir);
    else
        snprintf(L->run_dir, sizeof L->run_dir, "local-runs/%s", L->job.name);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", L->run_dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) && errno != EEXIST)
            break;
        *p = '/';
    }
    if (mkdir(tmp, 0755) && errno != EEXIST) {
        fprintf(stderr, "holmes-operator local: cannot create %s: %s\n", L->run_dir,
                strerror(errno));
        return -1;
    }
    return 0;
}

struct local_args {
    const char *path, *metrics_out, *run_dir;
};

/* The command line into L and a: 0, or the exit status 2 (usage). */
/* Real GPUs (gpusPerWorker without emulation.gpus) need a holmes-node with the CUDA engine of
 * the job's precision: asked of the binary itself (`holmes-node engines`) before any worker
 * starts. 0, or 2 with the reason printed. */
static int check_node_engines(const struct local *L, const char *path)
{
    const struct tj_spec *s = &L->job.spec;
    if (s->gpus_per_worker == 0 || s->emulation.gpus || L->simulate)
        return 0;
    char want[32], cmd[PATH_MAX + 32], line[64];
    snprintf(want, sizeof want, "cuda-%s\n", dtype_name(s->training.precision));
    snprintf(cmd, sizeof cmd, "'%s' engines 2>/dev/null", L->node_bin);
    int found = 0;
    FILE *f = strchr(L->node_bin, '\'') ? NULL : popen(cmd, "r");
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
            path, s->gpus_per_worker, L->node_bin, want);
    return 2;
}

static int parse_args(int argc, char **argv, struct local *L, struct local_args *a)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--metrics-out") == 0 && i + 1 < argc) {
            a->metrics_out = argv[++i];
        } else if (strcmp(argv[i], "--run-dir") == 0 && i + 1 < argc) {
            a->run_dir = argv[++i];
        } else if (strcmp(argv[i], "--simulate") == 0) {
            L->simulate = 1;
        } else if (strcmp(argv[i], "--step-ms") == 0 && i + 1 < argc) {
            L->step_ms = atoi(argv[++i]);
            if (L->step_ms < 0 || L->step_ms > 60000) {
                fprintf(stderr, "holmes-operator local: --step-ms: must be in [0, 60000]\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--quiet") == 0) {
            L->quiet = 1;
        } else if (strcmp(argv[i], "--bind") == 0 && i + 1 < argc) {
            L->bind = argv[++i];
        } else if (strcmp(argv[i], "--worker-wrap") == 0 && i + 1 < argc) {
            L->wrap = argv[++i];
        } else if (strcmp(argv[i], "--page-addr") == 0 && i + 1 < argc) {
            L->page_addr = argv[++i];
        } else if (strcmp(argv[i], "--calibration") == 0 && i + 1 < argc) {
            L->cp.calibration = argv[++i];
        } else if (argv[i][0] == '-' || a->path) {
            fprintf(stderr, "holmes-operator local: unexpected argument %s (see --help)\n",
                    argv[i]);
            return 2;
        } else {
            a->path = argv[i];
        }
    }
    if (!a->path) {
        usage(stderr);
        return 2;
    }
    return 0;
}

/* The one TrainingJob of path into L->job, if local can run it: -1 to go on, else the exit
 * status (the job freed). */
static int load_job(struct local *L, const char *path)
{
    struct tj_job *jobs = NULL;
    int njobs = 0;
    static struct tj_errors errs;
    if (tj_load_file(path, &jobs, &njobs, &errs)) {
        for (int i = 0; i < errs.count && i < TJ_MAX_ERRORS; i++)
            fprintf(stderr, "%s\n", errs.msg[i]);
        return 2;
    }
    if (njobs != 1) {
        fprintf(stderr, "%s: holds %d TrainingJobs; local runs exactly one\n", path, njobs);
        for (int i = 0; i < njobs; i++)
            tj_job_free(&jobs[i]);
        free(jobs);
        return 2;
    }
    L->job = jobs[0];
    free(jobs);
    const struct tj_spec *s = &L->job.spec;
    if (s->suspend) { /* as the operator: a suspended job runs no workers */
        printf("job %s: spec.suspend is true: no workers started (set it to false to run)\n",
               L->job.name);
        tj_job_free(&L->job);
        return 0;
    }
    if (s->image[0] || s->pod_template) /* pod fields: said, not silently dropped */
        printf("note: %s%s%s configure%s the worker pods of a cluster; local runs this build's "
               "holmes-node processes and uses neither\n", s->image[0] ? "spec.image" : "",
               s->image[0] && s->pod_template ? " and " : "", s->pod_template ? "spec.template" : "",
               s->image[0] && s->pod_template ? "" : "s");
    return -1;
}

/* --metrics-out: the file and the rows a step's metrics collect in. 0, or -1 (said). */
static int open_metrics(struct local *L, const char *metrics_out)
{
    L->metrics = fopen(metrics_out, "w");
    L->rows = calloc(METRIC_SLOTS, sizeof *L->rows);
    if (!L->metrics || !L->rows) {
        fprintf(stderr, "holmes-operator local: --metrics-out %s: %s\n", metrics_out,
                strerror(errno));
        return -1;
    }
    for (int i = 0; i < METRIC_SLOTS; i++)
        L->rows[i].step = -1;
    return 0;
}

/* --calibration, refused now rather than when the workers have joined. 0, or -1 (said). */
static int check_calibration(const char *path)
{
    struct cost_links scratch;
    herr ce = {0};
    cost_links_default(&scratch);
    if (cluster_load_calibration(path, &scratch, &ce)) {
        fprintf(stderr, "holmes-operator local: --calibration: %s\n", ce.msg);
        return -1;
    }
    return 0;
}

/* The embedded coordinator, with the job added (its pods: the workers' names). 0, or -1
 * (said). */
static int start_coordinator(struct local *L)
{
    const struct tj_spec *s = &L->job.spec;
    herr e = {0};
    struct coord_options co = {.bind = L->bind ? L->bind : "127.0.0.1", .port = 0};
    if (coord_create(&L->c, &co, &e)) {
        fprintf(stderr, "holmes-operator local: %s\n", e.msg);
        return -1;
    }
    const char **pods = calloc((size_t)s->workers, sizeof *pods);
    char (*podnames)[128] = calloc((size_t)s->workers, sizeof *podnames);
    L->kids = calloc((size_t)s->workers, sizeof *L->kids);
    if (!pods || !podnames || !L->kids) {
        free(pods);
        free(podnames);
        fprintf(stderr, "holmes-operator local: out of memory\n");
        return -1;
    }
    for (int i = 0; i < s->workers; i++) {
        tj_worker_pod_name(podnames[i], sizeof podnames[i], L->job.name, i);
        pods[i] = podnames[i];
    }
    struct coord_job_spec js = {
        .name = L->job.name, .token = L->token, .workers = s->workers, .pods = pods,
        .gang_timeout_ms = s->gang_timeout_seconds * 1000,
        .max_restarts = s->restart.max_restarts, .total_steps = s->training.steps,
        .restart_backoff_ms = s->restart.backoff_seconds * 1000,
        .progress_interval_ms = L->tty ? 250 : 1000,
        .min_workers = tj_is_elastic(s) ? s->elastic.min_workers : 0,
        .scale_up = s->elastic.scale_up,
        .hooks = {.plan = hook_plan, .on_steps = hook_steps, .on_progress = hook_progress,
                  .on_event = hook_event, .on_notice = hook_notice, .on_elastic = hook_elastic},
        .user = L,
    };
    int added = coord_add_job(L->c, &js, &e);
    free(pods);
    free(podnames);
    if (added) {
        fprintf(stderr, "holmes-operator local: %s\n", e.msg);
        return -1;
    }
    printf("job %s: %d workers on this machine, coordinator ws://%s:%d/, logs in %s/\n",
           L->job.name, s->workers, co.bind, coord_port(L->c), L->run_dir);
    return 0;
}

/* The checkpoints of spec.training.checkpoint.path: resumed from, or, from a finished run,
 * moved aside (one previous run kept) so the job trains again from scratch. */
static void prepare_checkpoints(const struct tj_spec *s)
{
    char latest[TJ_PATH_MAX + 32];
    snprintf(latest, sizeof latest, "%s/latest-step", s->training.checkpoint.path);
    FILE *lf = fopen(latest, "r");
    long done = -1;
    if (lf) {
        if (fscanf(lf, "%ld", &done) != 1)
            done = -1;
        fclose(lf);
    }
    if (done >= s->training.steps) {
        /* A finished run: keep its checkpoints aside and train again from scratch. */
        char old[TJ_PATH_MAX + 32];
        snprintf(old, sizeof old, "%s.previous", s->training.checkpoint.path);
        char cmdline[2 * TJ_PATH_MAX + 64];
        if (access(old, F_OK) == 0) { /* keep one previous run */
            snprintf(cmdline, sizeof cmdline, "rm -rf -- '%s'", old);
            if (!strchr(old, '\'') && system(cmdline) != 0)
                fprintf(stderr, "holmes-operator local: could not remove %s\n", old);
        }
        if (rename(s->training.checkpoint.path, old) == 0)
            printf("the checkpoints in %s are from a finished run: moved to %s, starting "
                   "over\n", s->training.checkpoint.path, old);
    } else if (done >= 0) {
        printf("resuming from step %ld of the checkpoints in %s (remove that directory to "
               "start over)\n", done, s->training.checkpoint.path);
    }
}

static void spawn_workers(struct local *L)
{
    for (int i = 0; i < L->job.spec.workers; i++) {
        L->kids[i].pid = spawn_worker(L, i);
        L->kids[i].starts = 1;
        if (L->kids[i].pid < 0) {
            fprintf(stderr, "holmes-operator local: fork: %s\n", strerror(errno));
            L->kids[i].pid = 0;
            coord_cancel_job(L->c, L->job.name, "could not start the workers", NULL);
        }
    }
}

/* spec.elastic: a worker absent from the gang (not connected) for replaceTimeoutSeconds counts
 * as lost; below minWorkers the job keeps waiting for it, and says so once. */
static void watch_absent(struct local *L)
{
    const struct tj_spec *s = &L->job.spec;
    if (!tj_is_elastic(s))
        return;
    int state[4096];
    int n = coord_job_workers(L->c, L->job.name, state, 4096);
    enum coord_job_state st;
    if (n < 0 || job_over(L, &st))
        return;
    double t = clock_mono_s();
    for (int i = 0; i < n && i < s->workers; i++) {
        struct child *k = &L->kids[i];
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
        int rc = coord_job_lose_worker(L->c, L->job.name, i, why, &e);
        if (rc == 1 && !L->below_min_said) {
            end_progress_line(L);
            printf("[Waiting] worker %d is gone but only %d would remain, fewer than "
                   "spec.elastic.minWorkers %d: waiting for it\n", i, n - 1, s->elastic.min_workers);
            L->below_min_said = 1;
        } else if (rc == 0) {
            L->below_min_said = 0;
        }
    }
}

/* spec.elastic: a gang timeout does not end the job while at least minWorkers are there: the
 * absent ones count as lost after replaceTimeoutSeconds and the job re-plans without them. */
static int elastic_covers(struct local *L)
{
    const struct tj_spec *s = &L->job.spec;
    int state[4096], present = 0;
    int n = tj_is_elastic(s) ? coord_job_workers(L->c, L->job.name, state, 4096) : -1;
    for (int i = 0; i < n && i < 4096; i++)
        present += state[i] == 1;
    if (n < 0 || present < s->elastic.min_workers)
        return 0;
    L->gang_failed = 0;
    end_progress_line(L);
    printf("[local] %d of %d workers are there (spec.elastic.minWorkers %d): the absent ones count "
           "as lost after %d s (spec.elastic.replaceTimeoutSeconds)\n", present, s->workers,
           s->elastic.min_workers, s->elastic.replace_timeout_seconds);
    return 1;
}

/* Serves the coordinator and keeps the workers running until the job is over and every
 * worker has left (killed 10 s after the end if it does not); the job's final state. */
static enum coord_job_state run_until_over(struct local *L)
{
    const struct tj_spec *s = &L->job.spec;
    enum coord_job_state st = COORD_GATHERING;
    double over_since = -1;
    for (;;) {
        coord_service(L->c);
        reap_and_respawn(L);
        watch_absent(L);
        if (interrupted) {
            coord_cancel_job(L->c, L->job.name, "interrupted", NULL);
            interrupted = 0;
        }
        if (L->gang_failed && !job_over(L, &st) && !elastic_covers(L))
            coord_cancel_job(L->c, L->job.name, "not every worker came up in time", NULL);
        if (job_over(L, &st)) {
            if (over_since < 0)
                over_since = clock_mono_s();
            int alive = 0;
            for (int i = 0; i < s->workers; i++)
                alive += L->kids[i].pid > 0;
            if (!alive)
                break;
            if (clock_mono_s() - over_since > 10) { /* workers that do not leave: end them */
                for (int i = 0; i < s->workers; i++)
                    if (L->kids[i].pid > 0)
                        kill(L->kids[i].pid, SIGKILL);
            }
        }
    }
    return st;
}

static void print_summary(struct local *L, enum coord_job_state st, const char *metrics_out)
{
    const struct tj_spec *s = &L->job.spec;
    double wall = clock_mono_s() - L->t0;
    end_progress_line(L);
    struct coord_progress fin;
    coord_job_progress(L->c, L->job.name, &fin);
    char dur[32];
    fmt_duration(wall, dur, sizeof dur);
    printf("\n%s %s in %s: %ld of %ld steps, %d restart%s\n", L->job.name,
           st == COORD_SUCCEEDED ? "succeeded" : "failed", dur, fin.step,
           s->training.steps, coord_job_restarts(L->c, L->job.name),
           coord_job_restarts(L->c, L->job.name) == 1 ? "" : "s");
    if (L->have_first && L->have_progress && L->last.has_loss)
        printf("  loss %.4f (step %ld) -> %.4f (step %ld)\n", L->first_loss, L->first_step,
               L->last.loss, L->last.step);
    if (L->have_progress && wall > 0)
        printf("  last %.0f tokens/s, %.0f ms/step\n", L->last.tokens_per_s, L->last.step_ms);
    int lost = 0, replans = 0;
    if (tj_is_elastic(s) && coord_job_elastic(L->c, L->job.name, &lost, &replans) == 0 && replans)
        printf("  elastic: %d re-plan%s, %d of %d workers lost, last plan %s\n", replans,
               replans == 1 ? "" : "s", lost, s->workers, L->cp.shape);
    if (s->training.checkpoint.path[0])
        printf("  checkpoints: %s\n", s->training.checkpoint.path);
    if (metrics_out)
        printf("  metrics: %s\n", metrics_out);
    printf("  worker logs: %s/\n", L->run_dir);
    if (st != COORD_SUCCEEDED && L->fail_reason[0])
        printf("  reason: %s\n", L->fail_reason);
}

/* Workers still alive killed and reaped; the coordinator, the plan, metrics and job freed. */
static void local_free(struct local *L)
{
    if (L->kids) {
        for (int i = 0; i < L->job.spec.workers; i++)
            if (L->kids[i].pid > 0) {
                kill(L->kids[i].pid, SIGKILL);
                waitpid(L->kids[i].pid, NULL, 0);
            }
    }
    http_server_stop(L->page); /* before what it serves */
    coord_history_free(L->history);
    coord_destroy(L->c);
    coord_plan_free(&L->cp);
    if (L->metrics)
        fclose(L->metrics);
    free(L->rows);
    free(L->kids);
    tj_job_free(&L->job);
}

int cmd_local(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    struct local_args a = {0};
    static struct local L;
    memset(&L, 0, sizeof L);
    L.step_ms = 20;
    L.page_addr = "127.0.0.1:0";
    int rc = parse_args(argc, argv, &L, &a);
    if (rc != 0)
        return rc;
    if ((rc = load_job(&L, a.path)) >= 0)
        return rc;
    rc = 1;
    const struct tj_spec *s = &L.job.spec;
    if (setup_paths(&L, argv[0], a.run_dir) || random_token(L.token, sizeof L.token)) {
        tj_job_free(&L.job);
        return 1;
    }
    if ((rc = check_node_engines(&L, a.path)) != 0) {
        tj_job_free(&L.job);
        return rc;
    }
    if (a.metrics_out && open_metrics(&L, a.metrics_out) != 0)
        goto out;
    L.tty = isatty(STDOUT_FILENO);
    L.cp.job = &L.job;
    if (L.cp.calibration && check_calibration(L.cp.calibration) != 0) {
        rc = 2;
        goto out;
    }
    if (start_page(&L) != 0 || start_coordinator(&L) != 0)
        goto out;
    if (s->training.checkpoint.path[0] && !L.simulate)
        prepare_checkpoints(s);
    fflush(stdout);

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    L.t0 = clock_mono_s();
    spawn_workers(&L);
    enum coord_job_state st = run_until_over(&L);
    print_summary(&L, st, a.metrics_out);
    rc = st == COORD_SUCCEEDED ? 0 : 1;
out:
    local_free(&L);
    return rc;
}
