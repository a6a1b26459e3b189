/* holmes-node worker: one rank of a distributed training job. With --coordinator (or
 * HOLMES_COORDINATOR) cmd_worker_coord.c takes over. Otherwise (rank-table mode) ranks, peers and
 * transports come from a rank table (--rank-table FILE, or HOLMES_RANK_TABLE /
 * HOLMES_RANK_TABLE_JSON); the model and the run from flags. Progress goes to stdout (one line per step, JSON with
 * --log-format json); SIGTERM/SIGINT stop every rank after the current step, with a checkpoint. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "dataloader.h"
#include "log.h"
#include "rank_table.h"
#include "trainer.h"
#include "worker_train.h"

/* Both modes: the coordinator mode first (what TrainingJob pods run), then the rank-table mode. */
void cmd_worker_usage(FILE *f)
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
            "\nRank-table mode: runs global rank R of a pipeline x data parallel job (docs/comm.md).\n"
            "The rank table (planner-style JSON/YAML with each rank's host and port) comes from\n"
            "--rank-table, else HOLMES_RANK_TABLE (a path) or HOLMES_RANK_TABLE_JSON (the\n"
            "document); R may come from HOLMES_RANK. Progress goes to stdout (one line per step);\n"
            "SIGTERM/SIGINT stop every rank after the current step, with a checkpoint.\n\n"
            "  --rank R              this process's global rank (or HOLMES_RANK)\n"
            "  --rank-table FILE     the rank table (default: HOLMES_RANK_TABLE[_JSON])\n"
            "  --data PATTERN        llm.c .bin shards or text files (glob)\n"
            "  --layers N --channels N --heads N --vocab N --max-seq N   model (default 4 64 4 256 64)\n"
            "  --init-from FILE      start from llm.c GPT-2 weights of that shape (each stage loads\n"
            "                        its layers; a resume from --checkpoint-dir takes precedence)\n"
            "  --batch B --seq T     sequences per micro-batch, tokens per sequence (default 4 32)\n"
            "  --micro-batches M     per data-parallel replica per step (default 2)\n"
            "  --token-slices N      TeraPipe: cut each sequence into N slices of its tokens,\n"
            "                        pipelined (default 1; a rank table's token_slices win)\n"
            "  --steps N             total optimizer steps (default 20)\n"
            "  --schedule S          1f1b | gpipe (default 1f1b)\n"
            "  --engine E            cpu | cuda-fp32 | cuda-bf16 (default cpu; CUDA needs the\n"
            "                        CUDA build, see `holmes-node engines`)\n"
            "  --device N            CUDA device of this rank (default 0)\n"
            "  --pipeline-dtype D    fp32 | bf16: activations between stages (default fp32)\n"
            "  --param-gather-dtype D   fp32 | bf16: parameters all-gathered and computed with,\n"
            "                        bf16 rounded from fp32 masters (default fp32)\n"
            "  --lr X --warmup N --min-lr-ratio X --clip X --weight-decay X --seed N\n"
            "                        optimizer (default 3e-4 constant, clip 1, weight decay 0.1,\n"
            "                        seed 1337)\n"
            "  --bucket N            ZeRO bucket size in floats (default 1048576)\n"
            "  --checkpoint-dir DIR --checkpoint-every N --keep K   (resume from DIR's latest)\n"
            "  --listen HOST         bind address (default all interfaces)\n"
            "  --log-format text|json   progress format (default text)\n"
            "  --all-ranks           every rank prints progress (default: rank 0)\n"
            "  -h, --help            this help\n\n"
            "Exit status (rank-table mode): 0 finished or stopped, 1 failed, 2 usage.\n");
}

static void usage(FILE *f) { cmd_worker_usage(f); }

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { (void)sig; stop_requested = 1; }

struct progress {
    int json, print;
};

static int print_step(void *ctx, const struct trainer_report *r)
{
    struct progress *p = ctx;
    if (!p->print)
        return 0;
    if (p->json)
        printf("{\"step\":%ld,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.4f,\"tokens_per_s\":%.1f,"
               "\"step_s\":%.4f,\"pipeline_s\":%.4f,\"grad_sync_s\":%.4f,\"optimizer_s\":%.4f,"
               "\"param_sync_s\":%.4f,\"dp_link_bytes_per_s\":%.0f,\"stage\":%d,\"replica\":%d,"
               "\"host_syncs\":%llu,\"h2d_bytes\":%llu,\"d2h_bytes\":%llu}\n",
               r->step, r->loss, r->lr, r->grad_norm, r->tokens_per_s, r->step_s, r->pipeline_s,
               r->grad_sync_s, r->optimizer_s, r->param_sync_s, r->dp_link_bytes_per_s, r->stage,
               r->replica, (unsigned long long)r->host_syncs, (unsigned long long)r->h2d_bytes,
               (unsigned long long)r->d2h_bytes);
    else
        printf("step %ld loss %.6f lr %.3g norm %.3f %.0f tok/s %.1f ms (pipeline %.1f, grad "
               "sync %.1f, optimizer %.1f, param sync %.1f) dp link %.1f MB/s; device: %llu "
               "host waits, %llu bytes up, %llu down\n",
               r->step, r->loss, r->lr, r->grad_norm, r->tokens_per_s, r->step_s * 1e3,
               r->pipeline_s * 1e3, r->grad_sync_s * 1e3, r->optimizer_s * 1e3,
               r->param_sync_s * 1e3, r->dp_link_bytes_per_s / 1e6,
               (unsigned long long)r->host_syncs, (unsigned long long)r->h2d_bytes,
               (unsigned long long)r->d2h_bytes);
    fflush(stdout);
    return 0;
}

static int poll_stop(void *ctx) { (void)ctx; return stop_requested != 0; }

/* fp32 | bf16: what an element type option (--pipeline-dtype, --param-gather-dtype) selects. */
static int parse_wire(const char *opt, const char *s, enum dtype *out)
{
    if (strcmp(s, "fp32") && strcmp(s, "bf16")) {
        fprintf(stderr, "holmes-node worker: %s: '%s' is not one of fp32, bf16\n", opt, s);
        return -1;
    }
    *out = strcmp(s, "bf16") ? DTYPE_FP32 : DTYPE_BF16;
    return 0;
}

/* cpu | cuda-fp32 | cuda-bf16 (--engine); one this binary lacks is refused here, by name. */
static int parse_engine(const char *s, struct trainer_config *c)
{
    if (!strcmp(s, "cpu")) {
        c->engine = ENGINE_CPU;
        c->precision = DTYPE_FP32;
    } else if (!strcmp(s, "cuda-fp32") || !strcmp(s, "cuda-bf16")) {
        c->engine = ENGINE_CUDA;
        c->precision = strcmp(s, "cuda-bf16") ? DTYPE_FP32 : DTYPE_BF16;
    } else {
        fprintf(stderr, "holmes-node worker: --engine: '%s' is not one of cpu, cuda-fp32, cuda-bf16\n", s);
        return -1;
    }
    char why[256];
    if (!engine_available(c->engine, c->precision, why, sizeof why)) {
        fprintf(stderr, "holmes-node worker: --engine %s: %s\n", s, why);
        return -1;
    }
    return 0;
}

struct worker_args {
    const char *table_path, *data, *fmt;
    long rank;
    int all_ranks;
};

/* HOLMES_RANK and the command line into c and w: -1 to go on, else the exit status (--help: 0,
 * a bad option: 2). */
static int parse_args(int argc, char **argv, struct trainer_config *c, struct worker_args *w)
{
    const char *env_rank = getenv("HOLMES_RANK");
    if (env_rank && cli_long("holmes-node worker", "HOLMES_RANK", env_rank, 0, INT_MAX, &w->rank) != 0)
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
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
        else if (strcmp(a, "--data") == 0)
            w->data = v;
        else if (strcmp(a, "--layers") == 0 && !(bad = cli_long("holmes-node worker", a, v, 1, 1000, &n)))
            c->model.layers = (int)n;
        else if (strcmp(a, "--channels") == 0 && !(bad = cli_long("holmes-node worker", a, v, 1, 100000, &n)))
            c->model.channels = (int)n;
        else if (strcmp(a, "--heads") == 0 && !(bad = cli_long("holmes-node worker", a, v, 1, 1000, &n)))
            c->model.heads = (int)n;
        else if (strcmp(a, "--vocab") == 0 && !(bad = cli_long("holmes-node worker", a, v, 1, 10000000, &n)))
            c->model.vocab = (int)n;
        else if (strcmp(a, "--max-seq") == 0 && !(bad = cli_long("holmes-node worker", a, v, 1, 1000000, &n)))
            c->model.max_seq = (int)n;
        else if (strcmp(a, "--batch") == 0 && !(bad = cli_long("holmes-node worker", a, v, 1, 100000, &n)))
            c->B = (int)n;
        else if (strcmp(a, "--seq") == 0 && !(bad = cli_long("holmes-node worker", a, v, 1, 1000000, &n)))
            c->T = (int)n;
        else if (strcmp(a, "--micro-batches") == 0 && !(bad = cli_long("holmes-node worker", a, v, 1, 100000, &n)))
            c->micro_batches = (int)n;
        else if (strcmp(a, "--token-slices") == 0 && !(bad = cli_long("holmes-node worker", a, v, 1, 131072, &n)))
            c->token_slices = (int)n;
        else if (strcmp(a, "--steps") == 0)
            bad = cli_long("holmes-node worker", a, v, 1, LONG_MAX, &c->steps);
        else if (strcmp(a, "--schedule") == 0) {
            if (schedule_parse(v, &c->schedule) != 0) {
                fprintf(stderr, "holmes-node worker: --schedule: '%s' is not one of 1f1b, gpipe\n",
                        v);
                return 2;
            }
        } else if (strcmp(a, "--engine") == 0) {
            if (parse_engine(v, c) != 0)
                return 2;
        } else if (strcmp(a, "--device") == 0 && !(bad = cli_long("holmes-node worker", a, v, 0, 1024, &n)))
            c->device = (int)n;
        else if (strcmp(a, "--pipeline-dtype") == 0)
            bad = parse_wire(a, v, &c->pipe_wire);
        else if (strcmp(a, "--param-gather-dtype") == 0)
            bad = parse_wire(a, v, &c->param_wire);
        else if (strcmp(a, "--lr") == 0)
            bad = cli_float("holmes-node worker", a, v, 1e-12, 10, &c->lr.max_lr);
        else if (strcmp(a, "--warmup") == 0)
            bad = cli_long("holmes-node worker", a, v, 0, LONG_MAX, &c->lr.warmup_steps);
        else if (strcmp(a, "--min-lr-ratio") == 0)
            bad = cli_float("holmes-node worker", a, v, 0, 1, &c->lr.min_lr_ratio);
        else if (strcmp(a, "--clip") == 0)
            bad = cli_float("holmes-node worker", a, v, 0, 1e9, &c->grad_clip);
        else if (strcmp(a, "--weight-decay") == 0)
            bad = cli_float("holmes-node worker", a, v, 0, 10, &c->adamw.weight_decay);
        else if (strcmp(a, "--seed") == 0 && !(bad = cli_long("holmes-node worker", a, v, 0, LONG_MAX, &n)))
            c->seed = (uint64_t)n;
        else if (strcmp(a, "--bucket") == 0 && !(bad = cli_long("holmes-node worker", a, v, 1, LONG_MAX, &n)))
            c->bucket_floats = (size_t)n;
        else if (strcmp(a, "--checkpoint-dir") == 0)
            c->checkpoint_dir = v;
        else if (strcmp(a, "--init-from") == 0) {
            c->init_from = v;
            c->init_from_name = "--init-from";
        }
        else if (strcmp(a, "--checkpoint-every") == 0 && !(bad = cli_long("holmes-node worker", a, v, 0, INT_MAX, &n)))
            c->checkpoint_every = (int)n;
        else if (strcmp(a, "--keep") == 0 && !(bad = cli_long("holmes-node worker", a, v, 1, 1000, &n)))
            c->checkpoint_keep = (int)n;
        else if (strcmp(a, "--listen") == 0)
            c->listen_host = v;
        else if (strcmp(a, "--log-format") == 0)
            w->fmt = v;
        else if (!bad) {
            fprintf(stderr, "holmes-node worker: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (bad)
            return 2;
    }
    return -1;
}

int cmd_worker(int argc, char **argv)
{
    /* --coordinator URL (or HOLMES_COORDINATOR): the place in the job comes from the
     * coordinator instead of a rank table (cmd_worker_coord.c). */
    if (cmd_worker_coord_wanted(argc, argv))
        return cmd_worker_coord(argc, argv);
    struct trainer_config c;
    trainer_config_defaults(&c);
    c.model = (struct gpt_config){4, 64, 4, 256, 0, 64};
    c.B = 4;
    c.T = 32;
    c.micro_batches = 2;
    c.steps = 20;
    struct worker_args w = {.fmt = "text", .rank = -1};
    int rc = parse_args(argc, argv, &c, &w);
    if (rc >= 0)
        return rc;
    const char *table_path = w.table_path, *data = w.data, *fmt = w.fmt;
    long rank = w.rank;
    int all_ranks = w.all_ranks;
    enum log_format lf;
    if (log_parse_format(fmt, &lf) != 0) {
        fprintf(stderr, "holmes-node worker: --log-format must be text or json, got '%s'\n", fmt);
        return 2;
    }
    log_set_format(lf);
    if (rank < 0 || !data) {
        fprintf(stderr, "holmes-node worker: --rank (or HOLMES_RANK) and --data are required\n");
        usage(stderr);
        return 2;
    }
    char comp[32];
    snprintf(comp, sizeof comp, "worker-%ld", rank);
    log_set_component(comp);
    herr e;
    if (gpt_config_check(&c.model, &e) != 0) {
        log_error("model: %s", e.msg);
        return 2;
    }
    struct plan_doc rt;
    if ((table_path ? rank_table_load(table_path, &rt, &e) : rank_table_from_env(&rt, &e)) != 0) {
        log_error("%s", e.msg);
        return 2;
    }
    if (rank >= rt.world) {
        log_error("--rank %ld is outside the rank table's 0..%d", rank, rt.world - 1);
        plan_doc_free(&rt);
        return 2;
    }
    struct dataloader *dl = NULL;
    struct dataloader_config dc = {data, c.B, c.T, plan_doc_dp_of(&rt, (int)rank), rt.data, c.seed,
                                   c.model.vocab};
    if (dataloader_open(&dl, &dc, &e) != 0) {
        log_error("data: %s", e.msg);
        plan_doc_free(&rt);
        return 2;
    }
    /* the rank table's slices (a planner's), else --token-slices cut evenly */
    int *bounds = NULL;
    if (worker_run_slices(&rt, c.token_slices, &c, &bounds, &e) != 0) {
        log_error("--token-slices: %s", e.msg);
        dataloader_free(dl);
        plan_doc_free(&rt);
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct progress pr = {lf == LOG_JSON, all_ranks || rank == 0};
    struct trainer_data td = {dl, dataloader_batch_at};
    struct trainer_hooks hooks = {&pr, print_step, poll_stop, NULL, NULL};
    log_info("rank %ld: stage %d of %d, replica %d of %d", rank, plan_doc_stage_of(&rt, (int)rank),
             rt.pipeline, plan_doc_dp_of(&rt, (int)rank), rt.data);
    rc = trainer_run(&c, &rt, (int)rank, &td, &hooks, &e);
    if (rc != 0)
        log_error("%s", e.msg);
    else if (stop_requested)
        log_info("stopped on request");
    dataloader_free(dl);
    plan_doc_free(&rt);
    free(bounds);
    return rc != 0 ? 1 : 0;
}
