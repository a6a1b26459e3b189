/* holmes-node train: training on this machine as one rank: the distributed trainer
 * (noderuntime/train/trainer.h) on a plan of one stage holding every layer, through the engine
 * seam, so every feature of the trainer is here (checkpoints that resume with fallback, bf16
 * parameters, SIGTERM, the CUDA engine with --engine). The run is a TrainingJob spec: --job FILE
 * and the training flags (cmd_spec.h), configured as a TrainingJob's workers are. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_spec.h"
#include "commands.h"
#include "comm_tcp.h"
#include "dataloader.h"
#include "json.h"
#include "log.h"
#include "plan_doc.h"
#include "trainer.h"
#include "trainer_spec.h"
#include "worker_train.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: holmes-node train --data FILE|GLOB --steps N [model] [options]\n"
        "       holmes-node train --job JOB.yaml [options]\n"
        "Trains a GPT-2 model in this process, as one rank of the distributed trainer (on the CPU\n"
        "with OpenBLAS + OpenMP, OMP_NUM_THREADS; on a GPU with --engine cuda-fp32|cuda-bf16 in a\n"
        "CUDA build). Data: llm.c token shards (*.bin) or UTF-8 text (byte tokens, vocab 256).\n");
    cmd_spec_usage(f);
    fprintf(f,
        "Output:\n"
        "  --metrics-out FILE    one JSON object per step (step, loss, lr, grad_norm, ms, tokens_s)\n"
        "  --resume              accepted for compatibility: a run always resumes from\n"
        "                        --checkpoint-dir's newest checkpoint that verifies\n"
        "  -h, --help            this help\n"
        "Exit status: 0 trained (or stopped by SIGTERM/SIGINT after a checkpoint), 1 failed,\n"
        "2 usage.\n");
}

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { (void)sig; stop_requested = 1; }
static int poll_stop(void *ctx) { (void)ctx; return stop_requested != 0; }

struct progress {
    long steps;
    int log_every;
    FILE *metrics;
};

static int on_step(void *ctx, const struct trainer_report *r)
{
    struct progress *p = ctx;
    double ms = r->step_s * 1e3;
    if (r->skipped) { /* the trainer's warning said why; every skip is shown */
        printf("step %ld/%ld skipped: loss %.6f norm %.4f (%d in a row)\n", r->step, p->steps,
               fabs(r->loss), fabs(r->grad_norm), r->nonfinite_run);
        fflush(stdout);
    } else if (r->step % p->log_every == 0 || r->step == p->steps) {
        printf("step %ld/%ld loss %.6f lr %.3e norm %.4f %.1f ms %.0f tok/s\n", r->step, p->steps,
               r->loss, r->lr, r->grad_norm, ms, r->tokens_per_s);
        fflush(stdout);
    }
    if (r->evaluated) {
        printf("eval after step %ld: loss %.6f (%.1f ms)\n", r->step, r->eval_loss,
               r->eval_s * 1e3);
        fflush(stdout);
    }
    if (p->metrics) {
        char ev[64] = "", lb[32], nb[32], eb[32];
        if (r->evaluated)
            snprintf(ev, sizeof ev, ",\"eval_loss\":%s",
                     json_fmt_num(eb, sizeof eb, "%.6f", r->eval_loss));
        fprintf(p->metrics, "{\"step\":%ld,\"loss\":%s,\"lr\":%.6e,\"grad_norm\":%s%s,%s"
                "\"ms\":%.3f,\"tokens_s\":%.1f}\n", r->step,
                json_fmt_num(lb, sizeof lb, "%.6f", r->loss), r->lr,
                json_fmt_num(nb, sizeof nb, "%.6f", r->grad_norm), ev,
                r->skipped ? "\"skipped\":true," : "", ms, r->tokens_per_s);
        fflush(p->metrics);
    }
    return 0;
}

static void on_notice(void *ctx, const char *reason, const char *message)
{
    (void)ctx;
    printf("%s: %s\n", reason, message);
}

/* -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct cmd_spec *cs, const char **metrics_out)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--resume"))
            continue;
        if (!v) {
            fprintf(stderr, "holmes-node train: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "--metrics-out")) {
            *metrics_out = v;
            continue;
        }
        int rc = cmd_spec_flag(cs, a, v);
        if (rc < 0)
            return 2;
        if (rc == 0) {
            fprintf(stderr, "holmes-node train: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    return -1;
}

/* A plan of one rank holding every layer, listening on l. */
static int one_rank_plan(struct plan_doc *rt, struct tcp_listener *l, herr *e)
{
    if (plan_doc_init(rt, 1, 1, 1, e) != 0)
        return -1;
    snprintf(rt->ranks[0].host, sizeof rt->ranks[0].host, "127.0.0.1");
    rt->ranks[0].port = tcp_listener_port(l);
    return plan_doc_complete(rt, e);
}

int cmd_train(int argc, char **argv)
{
    struct cmd_spec cs;
    cmd_spec_init(&cs, "holmes-node train");
    const char *metrics_out = NULL;
    int rc = parse_args(argc, argv, &cs, &metrics_out);
    if (rc >= 0)
        return rc;
    herr e = {0};
    struct trainer_config c;
    struct plan_doc rt = {0};
    struct tcp_listener *l = NULL;
    struct trainer_spec_data data = {0};
    struct trainer_data td;
    int *bounds = NULL;
    struct progress pr = {0};
    rc = 1;
    if (cmd_spec_config(&cs, &c, &e) != 0)
        goto out;
    /* the API's demo corpus stands in for a job's omitted training.data, not for a forgotten
     * --data */
    if (!cs.job && cs.spec.training.data.is_demo) {
        fprintf(stderr, "holmes-node train: --data is required: the training data (a file or a "
                "glob of llm.c token shards or text; --data-source for a blend), or --job FILE\n");
        cmd_spec_free(&cs);
        return 2;
    }
    if (tcp_listener_open(&l, "127.0.0.1", 0, &e) != 0 || one_rank_plan(&rt, l, &e) != 0)
        goto out;
    const struct tj_spec *sp = &cs.spec;
    if (trainer_spec_data_open(sp, &c, 0, 1, &data, &td, &e) != 0 ||
        worker_run_slices(&rt, sp->par.token_slices, &c, &bounds, &e) != 0)
        goto out;
    if (metrics_out && !(pr.metrics = fopen(metrics_out, "a"))) {
        herr_set_kind(&e, herr_kind_of_errno(errno), "--metrics-out %s: cannot open it: %s",
                      metrics_out, strerror(errno));
        goto out;
    }
    c.listener = l;
    pr.steps = c.steps;
    pr.log_every = sp->training.log_every_steps;
    printf("model L%d C%d NH%d V%d seq %d; B=%d x %d micro-batches per step; %s engine, %d "
           "threads; data %s: %d file(s), %" PRIu64 " tokens\n", c.model.layers,
           c.model.channels, c.model.heads, c.model.vocab, c.T, c.B, c.micro_batches,
           c.engine == ENGINE_CUDA ? (c.precision == DTYPE_BF16 ? "cuda-bf16" : "cuda-fp32")
                                   : "cpu",
           omp_get_max_threads(),
           sp->training.data.n_sources ? "(a blend of sources)" : sp->training.data.path,
           trainer_spec_data_files(&data), trainer_spec_data_tokens(&data));
    fflush(stdout);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct trainer_hooks hooks = {.ctx = &pr, .on_step = on_step, .should_stop = poll_stop,
                                  .on_notice = on_notice};
    rc = trainer_run(&c, &rt, 0, &td, &hooks, &e) != 0;
    if (rc == 0 && stop_requested)
        printf("stopped on request\n");
out:
    if (rc != 0)
        fprintf(stderr, "holmes-node train: %s\n", e.msg);
    if (pr.metrics)
        fclose(pr.metrics);
    trainer_spec_data_close(&data);
    free(bounds);
    plan_doc_free(&rt);
    tcp_listener_close(l);
    cmd_spec_free(&cs);
    return rc;
}
