/* holmes-node worker: one rank of a distributed training job. With --coordinator (or
 * HOLMES_COORDINATOR) cmd_worker_coord.c takes over. Otherwise (rank-table mode) ranks, peers and
 * transports come from a rank table (--rank-table FILE, or HOLMES_RANK_TABLE /
 * HOLMES_RANK_TABLE_JSON); the run is a TrainingJob spec made of --job and the training flags
 * (cmd_spec.h), configured as a TrainingJob's workers are (trainer_spec.h). Progress goes to
 * stdout (one line per step, JSON with --log-format json); SIGTERM/SIGINT stop every rank after
 * the current step, with a checkpoint. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "cpu_affinity.h"
#include "json.h"
#include "log.h"
#include "rank_table.h"
#include "trainer.h"
#include "trainer_spec.h"
#include "worker_train.h"
#include "cmd_spec.h"

/* Both modes: the coordinator mode first (what TrainingJob pods run), then the rank-table mode. */
static void usage(FILE *f)
{
    fprintf(f,
            "Usage: holmes-node worker --coordinator URL --job NAME --pod POD --worker I [options]\n"
            "       holmes-node worker --rank R --data PATTERN [--rank-table FILE] [options]\n\n"
            "One worker of a distributed training job, in one of two modes:\n"
            "  coordinator mode  (--coordinator URL, or HOLMES_COORDINATOR set): what the pods of\n"
            "                    a TrainingJob and `holmes-operator local` run; the place in the job,\n"
            "                    the model and the run come from the coordinator.\n"
            "  rank-table mode   (otherwise): a fixed job without the operator; ranks, peers and\n"
            "                    transports from a rank table, the model and the run from flags.\n\n");
    cmd_worker_coord_usage(f);
    fprintf(f,
            "\nRank-table mode: runs global rank R of a pipeline x data x tensor parallel job\n"
            "(docs/comm.md). The rank table (planner-style JSON/YAML with each rank's host and port)\n"
            "comes from --rank-table, else HOLMES_RANK_TABLE (a path) or HOLMES_RANK_TABLE_JSON (the\n"
            "document); R may come from HOLMES_RANK. The run is a TrainingJob spec (--job FILE and\n"
            "the training flags below), trained as a TrainingJob's workers train it. Progress goes\n"
            "to stdout (one line per step); SIGTERM/SIGINT stop every rank after the current step,\n"
            "with a checkpoint.\n\n"
            "  --rank R              this process's global rank (or HOLMES_RANK)\n"
            "  --rank-table FILE     the rank table (default: HOLMES_RANK_TABLE[_JSON])\n"
            "  --listen HOST         bind address (default all interfaces)\n"
            "  --log-format text|json   progress format (default text)\n"
            "  --all-ranks           every rank prints progress (default: rank 0)\n"
            "  --profile-step N      time step N by part on the engine (CUDA events on a GPU:\n"
            "                        forward/backward, bf16 copy, zeroing, norm, AdamW, masters,\n"
            "                        other, idle) and the calls asked of it by part, and\n"
            "                        print them after that step's line\n"
            "  -h, --help            this help\n");
    cmd_spec_usage(f);
    fprintf(f, "The rank table's token_slices (a planner's) win over --token-slices.\n\n"
            "Exit status (rank-table mode): 0 finished or stopped, 1 failed, 2 usage.\n");
}

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { (void)sig; stop_requested = 1; }

struct progress {
    int json, print;
};

/* The step's engine time and calls by part (--profile-step), after its line. */
static void print_profile(const struct progress *p, const struct trainer_report *r)
{
    const struct engine_profile *q = &r->profile;
    double parts = 0;
    for (int i = 0; i < ENGINE_PARTS; i++)
        parts += q->ms[i];
    if (p->json) {
        printf("{\"profile_step\":%ld,\"total_ms\":%.3f", r->step, q->total_ms);
        for (int i = 0; i < ENGINE_PARTS; i++) {
            char key[32];
            snprintf(key, sizeof key, "%s", engine_part_name(i));
            for (char *k = key; *k; k++)
                *k = *k == ' ' ? '_' : *k;
            printf(",\"%s_ms\":%.3f,\"%s_calls\":%llu", key, q->ms[i], key,
                   (unsigned long long)q->calls[i]);
        }
        printf(",\"idle_ms\":%.3f,\"launches\":%llu,\"engine_syncs\":%llu,\"lost\":%d}\n",
               q->total_ms - parts, (unsigned long long)q->launches,
               (unsigned long long)q->syncs, q->lost);
        return;
    }
    printf("profile step %ld: %.1f ms on the engine:", r->step, q->total_ms);
    for (int i = 0; i < ENGINE_PARTS; i++)
        printf(" %s %.2f,", engine_part_name(i), q->ms[i]);
    printf(" idle %.2f ms; %llu launches, %llu engine host waits%s; calls:", q->total_ms - parts,
           (unsigned long long)q->launches, (unsigned long long)q->syncs,
           q->lost ? " (some parts not timed)" : "");
    for (int i = 0; i < ENGINE_PARTS; i++)
        printf("%s %s %llu", i ? "," : "", engine_part_name(i), (unsigned long long)q->calls[i]);
    printf("\n");
}

static int print_step(void *ctx, const struct trainer_report *r)
{
    struct progress *p = ctx;
    if (!p->print)
        return 0;
    char lb[32], nb[32];
    if (p->json)
        printf("{\"step\":%ld,\"loss\":%s,\"lr\":%.6g,\"grad_norm\":%s,%s\"tokens_per_s\":%.1f,"
               "\"step_s\":%.4f,\"pipeline_s\":%.4f,\"grad_sync_s\":%.4f,\"optimizer_s\":%.4f,"
               "\"param_sync_s\":%.4f,\"dp_link_bytes_per_s\":%.0f,\"stage\":%d,\"replica\":%d,"
               "\"host_syncs\":%llu,\"h2d_bytes\":%llu,\"d2h_bytes\":%llu}\n",
               r->step, json_fmt_num(lb, sizeof lb, "%.6f", r->loss), r->lr,
               json_fmt_num(nb, sizeof nb, "%.4f", r->grad_norm),
               r->skipped ? "\"skipped\":true," : "", r->tokens_per_s, r->step_s, r->pipeline_s,
               r->grad_sync_s, r->optimizer_s, r->param_sync_s, r->dp_link_bytes_per_s, r->stage,
               r->replica, (unsigned long long)r->host_syncs, (unsigned long long)r->h2d_bytes,
               (unsigned long long)r->d2h_bytes);
    else
        printf("step %ld%s loss %.6f lr %.3g norm %.3f %.0f tok/s %.1f ms (pipeline %.1f, grad "
               "sync %.1f, optimizer %.1f, param sync %.1f) dp link %.1f MB/s; device: %llu "
               "host waits, %llu bytes up, %llu down\n",
               r->step, r->skipped ? " skipped (not finite)" : "", fabs(r->loss), r->lr, fabs(r->grad_norm), r->tokens_per_s, r->step_s * 1e3,
               r->pipeline_s * 1e3, r->grad_sync_s * 1e3, r->optimizer_s * 1e3,
               r->param_sync_s * 1e3, r->dp_link_bytes_per_s / 1e6,
               (unsigned long long)r->host_syncs, (unsigned long long)r->h2d_bytes,
               (unsigned long long)r->d2h_bytes);
    if (r->profiled)
        print_profile(p, r);
    if (r->evaluated && p->json)
        printf("{\"step\":%ld,\"eval_loss\":%.6f,\"eval_s\":%.4f}\n", r->step, r->eval_loss,
               r->eval_s);
    else if (r->evaluated)
        printf("eval after step %ld: loss %.6f (%.1f ms)\n", r->step, r->eval_loss, r->eval_s * 1e3);
    fflush(stdout);
    return 0;
}

static int poll_stop(void *ctx) { (void)ctx; return stop_requested != 0; }

struct worker_args {
    const char *table_path, *data, *fmt, *listen;
    long rank, profile_step;
    int all_ranks;
};

/* HOLMES_RANK and the command line into cs and w: -1 to go on, else the exit status (--help: 0,
 * a bad option: 2). */
static int parse_args(int argc, char **argv, struct cmd_spec *cs, struct worker_args *w)
{
    const char *env_rank = getenv("HOLMES_RANK");
    if (env_rank && cli_long("holmes-node worker", "HOLMES_RANK", env_rank, 0, INT_MAX, &w->rank) != 0)
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--all-ranks") == 0) {
            w->all_ranks = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "holmes-node worker: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "--rank-table") == 0)
            w->table_path = v;
        else if (strcmp(a, "--rank") == 0)
            bad = cli_long("holmes-node worker", a, v, 0, INT_MAX, &w->rank);
        else if (strcmp(a, "--profile-step") == 0)
            bad = cli_long("holmes-node worker", a, v, 1, 1000000000L, &w->profile_step);
        else if (strcmp(a, "--listen") == 0)
            w->listen = v;
        else if (strcmp(a, "--log-format") == 0)
            w->fmt = v;
        else {
            if (strcmp(a, "--data") == 0)
                w->data = v;
            int rc = cmd_spec_flag(cs, a, v);
            if (rc < 0)
                return 2;
            if (rc == 0) {
                fprintf(stderr, "holmes-node worker: unknown option '%s'\n", a);
                usage(stderr);
                return 2;
            }
        }
        if (bad)
            return 2;
    }
    return -1;
}

int cmd_worker(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) { /* both modes' help, whichever mode the rest asks for */
        usage(stdout);
        return 0;
    }
    /* --coordinator URL (or HOLMES_COORDINATOR): the place in the job comes from the
     * coordinator instead of a rank table (cmd_worker_coord.c). */
    if (cmd_worker_coord_wanted(argc, argv))
        return cmd_worker_coord(argc, argv);
    struct cmd_spec cs;
    cmd_spec_init(&cs, "holmes-node worker");
    struct worker_args w = {.fmt = "text", .rank = -1};
    int rc = parse_args(argc, argv, &cs, &w);
    if (rc >= 0)
        return rc;
    enum log_format lf;
    if (log_parse_format(w.fmt, &lf) != 0) {
        fprintf(stderr, "holmes-node worker: --log-format must be text or json, got '%s'\n", w.fmt);
        return 2;
    }
    log_set_format(lf);
    if (w.rank < 0 || (!w.data && !cs.job)) {
        fprintf(stderr, "holmes-node worker: --rank (or HOLMES_RANK) and --data (or --job) are "
                "required\n");
        usage(stderr);
        return 2;
    }
    char comp[32];
    snprintf(comp, sizeof comp, "worker-%ld", w.rank);
    log_set_component(comp);
    herr e;
    struct plan_doc rt;
    if ((w.table_path ? rank_table_load(w.table_path, &rt, &e) : rank_table_from_env(&rt, &e)) != 0) {
        log_error("%s", e.msg);
        cmd_spec_free(&cs);
        return 2;
    }
    long rank = w.rank;
    struct trainer_spec_data data = {0};
    struct trainer_data td;
    int *bounds = NULL;
    struct trainer_config c;
    rc = 2;
    if (cmd_spec_config(&cs, &c, &e) != 0) {
        log_error("%s", e.msg);
        goto out;
    }
    c.listen_host = w.listen;
    c.profile_step = w.profile_step;
    if (rank >= rt.world) {
        log_error("--rank %ld is outside the rank table's 0..%d", rank, rt.world - 1);
        goto out;
    }
    /* several ranks of the table on this machine share its cores (OMP_NUM_THREADS overrides) */
    int share = c.engine == ENGINE_CPU && !getenv("OMP_NUM_THREADS")
                    ? cpu_threads_shared(&rt, (int)rank)
                    : 0;
    if (share > 0 && share < omp_get_max_threads()) {
        log_info("rank %ld: %d compute thread(s), its share of this machine's cores with the "
                 "table's other ranks here (OMP_NUM_THREADS overrides)", rank, share);
        omp_set_num_threads(share);
    }
    if (trainer_spec_data_open(&cs.spec, &c, plan_doc_dp_of(&rt, (int)rank), rt.data, &data, &td,
                               &e) != 0) {
        log_error("data: %s", e.msg);
        goto out;
    }
    /* the rank table's slices (a planner's), else --token-slices cut evenly */
    if (worker_run_slices(&rt, cs.spec.par.token_slices, &c, &bounds, &e) != 0) {
        log_error("--token-slices: %s", e.msg);
        goto out;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct progress pr = {lf == LOG_JSON, w.all_ranks || rank == 0};
    struct trainer_hooks hooks = {.ctx = &pr, .on_step = print_step, .should_stop = poll_stop};
    log_info("rank %ld: stage %d of %d, replica %d of %d", rank, plan_doc_stage_of(&rt, (int)rank),
             rt.pipeline, plan_doc_dp_of(&rt, (int)rank), rt.data);
    rc = trainer_run(&c, &rt, (int)rank, &td, &hooks, &e) != 0;
    if (rc != 0)
        log_error("%s", e.msg);
    else if (stop_requested)
        log_info("stopped on request");
out:
    trainer_spec_data_close(&data);
    plan_doc_free(&rt);
    free(bounds);
    cmd_spec_free(&cs);
    return rc;
}
