#include "worker_train.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "ckpt_owner.h"
#include "comm_tcp.h"
#include "dataloader.h"
#include "log.h"
#include "rank_procs.h"
#include "rank_table.h"
#include "trainer.h"
#include "trainer_spec.h"
#include "trainingjob.h"

struct worker_train {
    char host[256];               /* advertised to peers */
    struct tcp_listener *listeners[PLAN_MAX_LOCAL_RANKS]; /* one per rank: opened by prepare */
    enum cpu_affinity affinity;
};

int worker_train_create(struct worker_train **out, const char *advertise_host,
                        enum cpu_affinity affinity, herr *e)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return herr_set(e, "out of memory");
    (*out)->affinity = affinity;
    snprintf((*out)->host, sizeof (*out)->host, "%s",
             advertise_host && advertise_host[0] ? advertise_host : "127.0.0.1");
    return 0;
}

static void close_listeners(struct worker_train *wt)
{
    for (int i = 0; i < PLAN_MAX_LOCAL_RANKS; i++) {
        tcp_listener_close(wt->listeners[i]);
        wt->listeners[i] = NULL;
    }
}

void worker_train_free(struct worker_train *wt)
{
    if (!wt)
        return;
    close_listeners(wt);
    free(wt);
}

/* A listener per rank of the assignment (a new attempt: fresh ports), and their endpoints. */
static int train_prepare(void *user, const struct plan_assignment *a, int attempt,
                         cJSON **endpoints, cJSON **ids, herr *e)
{
    struct worker_train *wt = user;
    (void)attempt;
    *ids = NULL;
    close_listeners(wt);
    if (!(*endpoints = cJSON_CreateArray()))
        return herr_set(e, "out of memory");
    for (int i = 0; i < a->nranks; i++) {
        char ep[300];
        if (tcp_listener_open(&wt->listeners[i], NULL, 0, e))
            return herr_wrap(e, "opening the TCP listener for peers of rank %d", a->ranks[i]);
        snprintf(ep, sizeof ep, "%s:%d", wt->host, tcp_listener_port(wt->listeners[i]));
        if (!cJSON_AddItemToArray(*endpoints, cJSON_CreateString(ep)))
            return herr_set(e, "out of memory");
    }
    return 0;
}

struct step_sink {
    const struct rank_sink *out;
    int last_stage;
    long last_step;
    int log_every;  /* spec.training.logEverySteps: a progress line in this worker's log */
    long steps;     /* spec.training.steps (the last step is always logged) */
};

static int on_step(void *ctx, const struct trainer_report *r)
{
    struct step_sink *s = ctx;
    struct proto_step ps = {
        .step = r->step, .has_loss = s->last_stage, .loss = r->loss, .lr = r->lr,
        .tokens_per_s = r->tokens_per_s, .step_ms = r->step_s * 1e3,
        /* compute: the stage's own forward, backward and optimizer; comm: sending activations
         * and gradients, the gradient and parameter exchanges; bubble: waiting for the
         * neighbour stages (their transfers included) */
        .compute_ms = (r->pipeline_s - r->pipe_wait_s - r->pipe_send_s + r->optimizer_s) * 1e3,
        .comm_ms = (r->pipe_send_s + r->grad_sync_s + r->param_sync_s) * 1e3,
        .bubble_ms = r->pipe_wait_s * 1e3,
    };
    if (!(ps.loss >= 0 && ps.loss < 1e6) || r->skipped) /* NaN or absurd: the protocol refuses it */
        ps.has_loss = 0;
    ps.skipped = r->skipped;
    if (ps.has_loss && r->grad_norm >= 0 && r->grad_norm <= 1e30) { /* global: one copy */
        ps.has_norm = 1;
        ps.grad_norm = r->grad_norm;
    }
    if (r->evaluated && s->last_stage && r->eval_loss >= 0 && r->eval_loss < 1e6) {
        ps.has_eval = 1;
        ps.eval_loss = r->eval_loss;
    }
    if (r->evaluated && s->last_stage)
        log_info("eval after step %ld: loss %.4f (%.1f ms, stage %d)", r->step, r->eval_loss,
                 r->eval_s * 1e3, r->stage);
    s->out->step(s->out->ctx, &ps);
    s->last_step = r->step;
    if (r->skipped) /* each one: rank 0's warning says why and the limit */
        log_warn("step %ld/%ld skipped: its loss or gradient norm is not finite (%d in a row, "
                 "stage %d)", r->step, s->steps, r->nonfinite_run, r->stage);
    else if (s->log_every > 0 && (r->step % s->log_every == 0 || r->step == s->steps)) {
        if (ps.has_loss)
            log_info("step %ld/%ld loss %.4f lr %.3g %.0f tokens/s %.1f ms (stage %d)", r->step,
                     s->steps, r->loss, r->lr, r->tokens_per_s, r->step_s * 1e3, r->stage);
        else
            log_info("step %ld/%ld lr %.3g %.1f ms (stage %d)", r->step, s->steps, r->lr,
                     r->step_s * 1e3, r->stage);
    }
    return 0;
}

static void on_notice(void *ctx, const char *reason, const char *message)
{
    const struct step_sink *s = ctx;
    s->out->notice(s->out->ctx, reason, message);
}

/* At the end, the step the run stands at: a run resumed from its last step's checkpoint
 * trains none and reports no step, and its done must still say it is at the end. */
static void on_end(void *ctx, struct gpt_stage *stage, long steps_done)
{
    struct step_sink *s = ctx;
    (void)stage;
    if (steps_done > s->last_step)
        s->last_step = steps_done;
}

static int on_should_stop(void *ctx)
{
    const struct step_sink *s = ctx;
    return s->out->should_stop(s->out->ctx);
}

/* The sink of a rank that runs in the worker's own process: the coordinator link. */
static void link_step(void *ctx, const struct proto_step *s) { worker_report_step(ctx, s); }
static void link_notice(void *ctx, const char *reason, const char *message)
{
    worker_report_notice(ctx, reason, message);
}
static int link_should_stop(void *ctx) { return worker_stop_requested(ctx); }

int worker_check_devices(const struct tj_spec *spec, herr *e)
{
    enum engine_kind kind;
    enum dtype precision;
    char why[256];
    trainer_spec_engine(spec, &kind, &precision);
    if (engine_available(kind, precision, why, sizeof why))
        return 0;
    if (kind == ENGINE_CUDA)
        return herr_set_kind(e, HERR_CONFIG,
                             "spec.gpusPerWorker %d: %s; it will not train GPU ranks on the CPU "
                             "(spec.emulation.gpus: true runs each GPU's rank as a CPU process)",
                             spec->gpus_per_worker, why);
    return herr_set_kind(e, HERR_CONFIG, "spec.training.precision: %s", why);
}

int worker_slice_bounds(int slices, int T, int **bounds, herr *e)
{
    *bounds = NULL;
    if (slices <= 1)
        return 0;
    if (slices > T)
        return herr_set_kind(e, HERR_CONFIG, "%d token slices of a %d-token sequence: every slice "
                             "holds at least one token", slices, T);
    int *b = malloc(((size_t)slices + 1) * sizeof *b);
    if (!b)
        return herr_set(e, "out of memory for %d token slices", slices);
    b[0] = 0;
    for (int k = 0; k < slices; k++)
        b[k + 1] = b[k] + T / slices + (k < T % slices ? 1 : 0);
    *bounds = b;
    return 0;
}

int worker_run_slices(const struct plan_doc *rt, int count, struct trainer_config *c, int **owned,
                      herr *e)
{
    *owned = NULL;
    if (rt->slices > 0) {
        if (rt->slice_bounds[rt->slices] != c->T)
            return herr_set_kind(e, HERR_CONFIG, "the plan's token slices end at %d, the sequence "
                                 "at %d", rt->slice_bounds[rt->slices], c->T);
        c->token_slices = rt->slices;
        c->slice_bounds = rt->slice_bounds;
        return 0;
    }
    if (worker_slice_bounds(count, c->T, owned, e) != 0)
        return -1;
    c->token_slices = count > 1 ? count : 0;
    c->slice_bounds = *owned;
    return 0;
}

int worker_train_rank(const struct plan_assignment *a, int local, struct tcp_listener *l,
                      enum cpu_affinity affinity, const struct rank_sink *out, long *last_step,
                      herr *e)
{
    *last_step = 0;
    if (!a->has_plan || !a->has_spec)
        return herr_set_kind(e, HERR_CONFIG, "assignment: plan and spec are required");
    struct trainer_config c;
    const struct tj_spec *spec = &a->spec;
    const struct plan_doc *rt = &a->plan;
    struct trainer_spec_data data = {0};
    int rc = -1, rank = a->ranks[local], *slices = NULL;
    if (trainer_config_from_spec(spec, &c, e))
        goto out;
    c.device = local;
    if (worker_run_slices(rt, spec->par.token_slices == TJ_AUTO ? 1 : spec->par.token_slices, &c,
                          &slices, e)) {
        herr_wrap(e, "spec.parallelism.tokenSlices");
        goto out;
    }
    if (c.checkpoint_dir &&
        (ckpt_make_dir(c.checkpoint_dir, e) || ckpt_claim_dir(c.checkpoint_dir, a->job, e))) {
        herr_wrap(e, "spec.training.checkpoint.path");
        goto out;
    }
    struct trainer_data td;
    if (trainer_spec_data_open(spec, &c, plan_doc_dp_of(rt, rank), rt->data, &data, &td, e))
        goto out;
    if (!trainer_spec_data_scanned(&data))
        log_info("data: %s holds more than %llu MiB of tokens: each window is checked against the "
                 "vocabulary as it is read, not the whole set at start",
                 spec->training.data.n_sources ? "a source" : spec->training.data.path,
                 (unsigned long long)(DATALOADER_SCAN_MAX_BYTES >> 20));
    c.listener = l;
    /* This thread runs the training and starts the communication threads: pinned before them,
     * they share its cores. An optimisation only: the run goes on unpinned when it fails. */
    if (affinity == CPU_AFFINITY_SPREAD) {
        char cores[64];
        herr pe = {0};
        int n = cpu_spread_rank(rt, c.model.layers, rank, cores, sizeof cores, &pe);
        if (n > 0)
            log_info("cpu affinity: rank %d computes on core %s (the job's %d ranks spread over "
                     "this machine's cores)", rank, cores, rt->world);
        else
            log_warn("cpu affinity spread: %s; the kernel places this rank", pe.msg);
        int threads = omp_get_max_threads();
        if (n > 0 && threads > n)
            log_warn("cpu affinity: %d compute threads (OMP_NUM_THREADS) share this rank's %d "
                     "core(s); set OMP_NUM_THREADS=%d, or HOLMES_CPU_AFFINITY=none", threads, n,
                     n);
    }
    int stage = plan_doc_stage_of(rt, rank);
    struct step_sink sink = {.out = out,
                             .last_stage = stage == rt->pipeline - 1,
                             .log_every = spec->training.log_every_steps,
                             .steps = spec->training.steps};
    struct trainer_hooks hooks = {.ctx = &sink, .on_step = on_step, .should_stop = on_should_stop,
                                  .on_end = on_end, .on_notice = on_notice};
    rc = trainer_run(&c, rt, rank, &td, &hooks, e);
    *last_step = sink.last_step;
out:
    trainer_spec_data_close(&data);
    free(slices);
    return rc;
}

static int train_run(void *user, struct plan_assignment *a, const struct proto_start *start,
                     long resume_step, struct worker_link *link, long *last_step, herr *e)
{
    struct worker_train *wt = user;
    (void)resume_step; /* the trainer resumes from its latest checkpoint itself */
    *last_step = 0;
    if (!a->has_plan || !a->has_spec)
        return herr_set(e, "assignment: plan and spec are required");
    if (worker_check_devices(&a->spec, e) || worker_plan_endpoints(&a->plan, start, e))
        return -1;
    if (a->nranks > 1)
        return rank_procs_run(a, wt->listeners, link, last_step, e);
    struct rank_sink out = {link, link_step, link_notice, link_should_stop};
    return worker_train_rank(a, 0, wt->listeners[0], wt->affinity, &out, last_step, e);
}

struct worker_runner worker_train_runner(struct worker_train *wt)
{
    struct worker_runner r = {.user = wt, .prepare = train_prepare, .run = train_run};
    return r;
}

