/* holmes-operator local JOB.yaml: the whole job on this machine. An embedded coordinator on
 * 127.0.0.1 (local_hooks.h) and one `holmes-node worker` process per worker (local_workers.h),
 * each reporting its emulated NIC (spec.emulation) so the planner places stages inside fabrics
 * and the TCP transport paces the links. Prints the placement table, a live progress line and a
 * summary (local_console.h); --metrics-out writes one JSON object per step (local_metrics.h);
 * the live job page (/jobs) is served on --page-addr (local_page.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_latest.h"
#include "ckpt_owner.h"
#include "cli.h"
#include "clock.h"
#include "commands.h"
#include "local_hooks.h"

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

struct local_args {
    const char *path, *metrics_out, *run_dir, *page_addr;
};

/* The command line into L and a: 0, or the exit status 2 (usage). */
static int parse_args(int argc, char **argv, struct local *L, struct local_args *a)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--metrics-out") == 0 && i + 1 < argc) {
            a->metrics_out = argv[++i];
        } else if (strcmp(argv[i], "--run-dir") == 0 && i + 1 < argc) {
            a->run_dir = argv[++i];
        } else if (strcmp(argv[i], "--simulate") == 0) {
            L->workers.simulate = 1;
        } else if (strcmp(argv[i], "--step-ms") == 0 && i + 1 < argc) {
            L->workers.step_ms = atoi(argv[++i]);
            if (L->workers.step_ms < 0 || L->workers.step_ms > 60000) {
                fprintf(stderr, "holmes-operator local: --step-ms: must be in [0, 60000]\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--quiet") == 0) {
            L->console.quiet = 1;
        } else if (strcmp(argv[i], "--bind") == 0 && i + 1 < argc) {
            L->workers.bind = argv[++i];
        } else if (strcmp(argv[i], "--worker-wrap") == 0 && i + 1 < argc) {
            L->workers.wrap = argv[++i];
        } else if (strcmp(argv[i], "--page-addr") == 0 && i + 1 < argc) {
            a->page_addr = argv[++i];
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

/* The checkpoints of spec.training.checkpoint.path: resumed from, or, from a finished run,
 * moved aside to DIR.previous-<UTC time> (never deleted: each earlier run is kept) so the job
 * trains again from scratch. Another job's directory (its claim, ckpt_owner.h) is neither: the
 * run is refused before anything moves (-1, said on stderr). */
static int prepare_checkpoints(const char *job, const struct tj_spec *s)
{
    herr e = {0};
    if (ckpt_claim_check(s->training.checkpoint.path, job, &e) != 0) {
        fprintf(stderr, "holmes-operator local: spec.training.checkpoint.path: %s\n", e.msg);
        return -1;
    }
    /* The workers read latest-step with the same reader: a file they would refuse is refused
     * here, before anything moves. */
    long long done = -1; /* left so when there is no latest-step */
    if (ckpt_read_latest_step(s->training.checkpoint.path, &done, &e) < 0) {
        fprintf(stderr, "holmes-operator local: spec.training.checkpoint.path: %s (write the "
                "step to resume from there, or move the directory aside to start over)\n", e.msg);
        return -1;
    }
    if (done >= s->training.steps) {
        /* A finished run: its checkpoints moved aside (never deleted), training again. */
        char old[TJ_PATH_MAX + 64], stamp[32];
        time_t now = time(NULL);
        struct tm tm;
        if (!gmtime_r(&now, &tm) || !strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm))
            snprintf(stamp, sizeof stamp, "%lld", (long long)now);
        snprintf(old, sizeof old, "%s.previous-%s", s->training.checkpoint.path, stamp);
        for (int k = 2; k < 100 && access(old, F_OK) == 0; k++) /* runs in the same second */
            snprintf(old, sizeof old, "%s.previous-%s-%d", s->training.checkpoint.path, stamp, k);
        int taken = access(old, F_OK) == 0;
        if (taken || rename(s->training.checkpoint.path, old) != 0) {
            fprintf(stderr, "holmes-operator local: the checkpoints in %s are from a finished run "
                    "and could not be moved aside to %s (%s): move or remove them to train "
                    "again\n", s->training.checkpoint.path, old,
                    taken ? "it exists" : strerror(errno));
            return -1;
        }
        printf("the checkpoints in %s are from a finished run (step %lld): moved to %s, starting "
               "over\n", s->training.checkpoint.path, done, old);
    } else if (done >= 0) {
        printf("resuming from step %lld of the checkpoints in %s (remove that directory to "
               "start over)\n", done, s->training.checkpoint.path);
    }
    return 0;
}

/* Serves the coordinator and keeps the workers running until the job is over and every
 * worker has left (killed 10 s after the end if it does not); the job's final state. A run
 * longer than spec.activeDeadlineSeconds is stopped as an interrupted one is (the workers
 * checkpoint and leave) and fails. */
static enum coord_job_state run_until_over(struct local *L)
{
    enum coord_job_state st = COORD_GATHERING;
    double over_since = -1;
    int deadline = L->job.spec.active_deadline_s;
    for (;;) {
        coord_service(L->c);
        local_workers_reap(&L->workers);
        local_workers_watch_absent(&L->workers);
        if (interrupted) {
            coord_cancel_job(L->c, L->job.name, "interrupted", NULL);
            interrupted = 0;
        }
        if (deadline > 0 && clock_mono_s() - L->t0 >= deadline &&
            !local_workers_job_over(&L->workers, &st)) {
            char why[128];
            snprintf(why, sizeof why, "DeadlineExceeded: running longer than "
                     "spec.activeDeadlineSeconds %d", deadline);
            coord_cancel_job(L->c, L->job.name, why, NULL);
            deadline = 0; /* said once */
        }
        if (L->gang_failed && !local_workers_job_over(&L->workers, &st)) {
            if (local_workers_cover_gang(&L->workers))
                L->gang_failed = 0;
            else
                coord_cancel_job(L->c, L->job.name, "not every worker came up in time", NULL);
        }
        if (local_workers_job_over(&L->workers, &st)) {
            if (over_since < 0)
                over_since = clock_mono_s();
            if (!local_workers_alive(&L->workers))
                break;
            if (clock_mono_s() - over_since > 10) /* workers that do not leave: end them */
                local_workers_kill(&L->workers);
        }
    }
    return st;
}

static void print_summary(struct local *L, enum coord_job_state st, const char *metrics_out)
{
    const struct tj_spec *s = &L->job.spec;
    double wall = clock_mono_s() - L->t0;
    local_console_end_line(&L->console);
    struct coord_progress fin;
    coord_job_progress(L->c, L->job.name, &fin);
    char dur[32];
    local_console_duration(wall, dur, sizeof dur);
    printf("\n%s %s in %s: %ld of %ld steps, %d restart%s\n", L->job.name,
           st == COORD_SUCCEEDED ? "succeeded" : "failed", dur, fin.step,
           s->training.steps, coord_job_restarts(L->c, L->job.name),
           coord_job_restarts(L->c, L->job.name) == 1 ? "" : "s");
    if (L->have_first && L->have_progress && L->last.has_loss)
        printf("  loss %.4f (step %ld) -> %.4f (step %ld)\n", L->first_loss, L->first_step,
               L->last.loss, L->last.step);
    if (fin.eval_step > 0 && s->training.eval.path[0])
        printf("  held-out loss %.4f after step %ld (%s)\n", fin.eval_loss, fin.eval_step,
               s->training.eval.path);
    else if (fin.eval_step > 0)
        printf("  held-out loss %.4f after step %ld (the last %g %% of the training data's "
               "windows, kept out of training: training.eval.holdout)\n", fin.eval_loss,
               fin.eval_step, 100 * s->training.eval.holdout);
    if (L->have_progress && wall > 0)
        printf("  last %.0f tokens/s, %.0f ms/step\n", L->last.tokens_per_s, L->last.step_ms);
    int lost = 0, replans = 0;
    if (tj_is_elastic(s) && coord_job_elastic(L->c, L->job.name, &lost, &replans) == 0 && replans)
        printf("  elastic: %d re-plan%s, %d of %d workers lost, last plan %s\n", replans,
               replans == 1 ? "" : "s", lost, s->workers, L->cp.shape);
    if (s->training.checkpoint.path[0]) {
        printf("  checkpoints: %s\n", s->training.checkpoint.path);
        /* a byte-level model (text data) can be asked for text at once */
        if (st == COORD_SUCCEEDED && s->training.data.format == TJ_DATA_TEXT)
            printf("  its text: %s sample --checkpoint-dir %s --prompt 'The '\n",
                   L->workers.node_bin, s->training.checkpoint.path);
        /* the job's last held-out loss again, from its checkpoint (holmes-node eval) */
        const struct tj_eval *ev = &s->training.eval;
        if (st == COORD_SUCCEEDED && ev->path[0])
            printf("  its held-out loss: %s eval --checkpoint-dir %s --data '%s' --batch %d "
                   "--batches %d --seed %llu\n", L->workers.node_bin,
                   s->training.checkpoint.path, ev->path, s->par.micro_batch_size, ev->batches,
                   s->training.seed);
        else if (st == COORD_SUCCEEDED && ev->holdout > 0 && !s->training.data.n_sources)
            printf("  its held-out loss: %s eval --checkpoint-dir %s --data '%s' --holdout %.15g "
                   "--batch %d --batches %d --seed %llu\n", L->workers.node_bin,
                   s->training.checkpoint.path, s->training.data.path, ev->holdout,
                   s->par.micro_batch_size, ev->batches, s->training.seed);
    }
    if (metrics_out)
        printf("  metrics: %s\n", metrics_out);
    printf("  worker logs: %s/\n", L->workers.run_dir);
    if (st != COORD_SUCCEEDED && L->fail_reason[0])
        printf("  reason: %s\n", L->fail_reason);
}

/* Workers still alive killed and reaped; the coordinator, the plan, metrics and job freed. */
static void local_free(struct local *L)
{
    local_workers_free(&L->workers);
    local_page_stop(&L->page); /* before what it serves */
    coord_destroy(L->c);
    coord_plan_free(&L->cp);
    local_metrics_close(&L->metrics);
    tj_job_free(&L->job);
}

int cmd_local(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    struct local_args a = {.page_addr = "127.0.0.1:0"};
    static struct local L;
    memset(&L, 0, sizeof L);
    L.workers.step_ms = 20;
    L.workers.job = &L.job;
    L.workers.console = &L.console;
    int rc = parse_args(argc, argv, &L, &a);
    if (rc != 0)
        return rc;
    if ((rc = load_job(&L, a.path)) >= 0)
        return rc;
    const struct tj_spec *s = &L.job.spec;
    if (local_workers_prepare(&L.workers, a.run_dir)) {
        tj_job_free(&L.job);
        return 1;
    }
    if ((rc = local_workers_check_engines(&L.workers, a.path)) != 0) {
        tj_job_free(&L.job);
        return rc;
    }
    rc = 1;
    herr e = {0};
    if (a.metrics_out && local_metrics_open(&L.metrics, a.metrics_out, &e) != 0) {
        fprintf(stderr, "holmes-operator local: %s\n", e.msg);
        goto out;
    }
    L.console.tty = isatty(STDOUT_FILENO);
    L.cp.job = &L.job;
    if (L.cp.calibration && check_calibration(L.cp.calibration) != 0) {
        rc = 2;
        goto out;
    }
    if (local_page_start(&L.page, a.page_addr, L.job.namespace_, L.job.name) != 0 ||
        local_start_coordinator(&L) != 0)
        goto out;
    if (s->training.checkpoint.path[0] && !L.workers.simulate &&
        prepare_checkpoints(L.job.name, s) != 0)
        goto out;
    fflush(stdout);

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    L.t0 = clock_mono_s();
    if (local_workers_start(&L.workers, L.c) != 0) {
        fprintf(stderr, "holmes-operator local: out of memory\n");
        goto out;
    }
    enum coord_job_state st = run_until_over(&L);
    print_summary(&L, st, a.metrics_out);
    rc = st == COORD_SUCCEEDED ? 0 : 1;
out:
    local_free(&L);
    return rc;
}
