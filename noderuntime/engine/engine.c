#include "engine.h"

#include <errno.h>
#include <omp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"

extern const struct engine_ops engine_cpu_ops;
/* Defined by cuda/engine_cuda.c, which only the CUDA build of holmes-node links. */
extern const struct engine_ops engine_cuda_fp32_ops __attribute__((weak));
extern const struct engine_ops engine_cuda_bf16_ops __attribute__((weak));
/* cuda/devmem_cuda.cu, in the CUDA build only */
extern int devmem_cuda_total_memory(int n, double *bytes, herr *e) __attribute__((weak));
extern int devmem_cuda_memory_gbps(int n, double *gbps, herr *e) __attribute__((weak));

static const struct engine_ops *ops_for(enum engine_kind kind, enum dtype precision)
{
    if (kind == ENGINE_CPU)
        return precision == DTYPE_FP32 ? &engine_cpu_ops : NULL;
    if (kind == ENGINE_CUDA && precision == DTYPE_FP32)
        return &engine_cuda_fp32_ops;
    if (kind == ENGINE_CUDA && precision == DTYPE_BF16)
        return &engine_cuda_bf16_ops;
    return NULL;
}

int engine_available(enum engine_kind kind, enum dtype precision, char *why, size_t why_len)
{
    if (ops_for(kind, precision))
        return 1;
    if (kind == ENGINE_CPU)
        snprintf(why, why_len, "the CPU engine trains in fp32 only, not %s", dtype_name(precision));
    else if (precision != DTYPE_FP32 && precision != DTYPE_BF16)
        snprintf(why, why_len, "the CUDA engine trains in fp32 or bf16, not %s", dtype_name(precision));
    else
        snprintf(why, why_len, "this holmes-node was built without the CUDA engine (build it with "
                 "`make cuda`, or use the CUDA node image)");
    return 0;
}

int engine_gpu_memory(int n, double *bytes, herr *e)
{
    *bytes = 0;
    if (!devmem_cuda_total_memory)
        return herr_set(e, "GPU memory: this holmes-node was built without the CUDA engine");
    return devmem_cuda_total_memory(n, bytes, e);
}

int engine_gpu_memory_gbps(int n, double *gbps, herr *e)
{
    *gbps = 0;
    if (!devmem_cuda_memory_gbps)
        return herr_set(e, "GPU memory bandwidth: this holmes-node was built without the CUDA "
                        "engine");
    return devmem_cuda_memory_gbps(n, gbps, e);
}

/* what the probing child sends back */
struct probe_answer {
    int rc, grc;
    double tflops, gbps;
    char msg[sizeof(((herr *)0)->msg)], gmsg[sizeof(((herr *)0)->msg)];
};

/* The child's side: probe, answer, end (its CUDA context ends with it). */
static void probe_child(const struct engine_ops *ops, int n, int fd)
{
    struct probe_answer a;
    memset(&a, 0, sizeof a);
    herr ce = {0}, ge = {0};
    /* OpenMP's threads do not cross the fork: a parallel region here would wait for the
     * parent's for ever (libgomp, once the parent has run one), so the child's run on its own */
    omp_set_num_threads(1);
    a.rc = ops->probe_tflops(n, &a.tflops, &ce);
    snprintf(a.msg, sizeof a.msg, "%s", ce.msg);
    if (ops->probe_optimizer_gbps)
        a.grc = ops->probe_optimizer_gbps(n, &a.gbps, &ge);
    else
        a.grc = herr_set(&ge, "optimizer probe: this engine has none");
    snprintf(a.gmsg, sizeof a.gmsg, "%s", ge.msg);
    ssize_t w = write(fd, &a, sizeof a);
    _exit(w == (ssize_t)sizeof a ? 0 : 1);
}

/* The parent's side: the answer, read within timeout_s; 0, or -1 with the reason. */
static int probe_read(int fd, double timeout_s, struct probe_answer *a, herr *e)
{
    size_t got = 0;
    double end = clock_mono_s() + timeout_s;
    while (got < sizeof *a) {
        int left_ms = (int)((end - clock_mono_s()) * 1000.0);
        if (left_ms <= 0)
            return herr_set(e, "compute probe: no answer within %g s", timeout_s);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int k = poll(&p, 1, left_ms);
        if (k < 0 && errno != EINTR)
            return herr_set(e, "compute probe: poll: %s", strerror(errno));
        if (k <= 0)
            continue;
        ssize_t m = read(fd, (char *)a + got, sizeof *a - got);
        if (m < 0 && errno == EINTR)
            continue;
        if (m <= 0)
            return herr_set(e, "compute probe: the probing process ended without an answer");
        got += (size_t)m;
    }
    return 0;
}

int engine_gpu_probe(int n, double timeout_s, struct engine_gpu_rates *r, herr *e)
{
    memset(r, 0, sizeof *r);
    const struct engine_ops *ops = &engine_cuda_bf16_ops;
    if (!ops || !ops->probe_tflops)
        return herr_set(e, "compute probe: this holmes-node was built without the CUDA engine");
    int fd[2];
    if (pipe(fd) != 0)
        return herr_set(e, "compute probe: pipe: %s", strerror(errno));
    fflush(NULL); /* nothing buffered here is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(fd[0]);
        close(fd[1]);
        return herr_set(e, "compute probe: fork: %s", strerror(err));
    }
    if (pid == 0) {
        close(fd[0]);
        probe_child(ops, n, fd[1]);
    }
    close(fd[1]);
    struct probe_answer a;
    memset(&a, 0, sizeof a);
    int rc = probe_read(fd[0], timeout_s, &a, e);
    if (rc != 0)
        kill(pid, SIGKILL);
    close(fd[0]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    if (rc != 0)
        return -1;
    a.msg[sizeof a.msg - 1] = 0;
    a.gmsg[sizeof a.gmsg - 1] = 0;
    if (a.rc != 0 || !(a.tflops > 0))
        return herr_set(e, "%s", a.msg[0] ? a.msg : "compute probe: no rate measured");
    r->tflops = a.tflops;
    if (a.grc == 0 && a.gbps > 0)
        r->gbps = a.gbps;
    else
        snprintf(r->gbps_why, sizeof r->gbps_why, "%s",
                 a.gmsg[0] ? a.gmsg : "optimizer probe: no rate measured");
    return 0;
}

int engine_create(struct engine **out, const struct engine_spec *s, herr *e)
{
    *out = NULL;
    char why[256];
    if (!engine_available(s->kind, s->precision, why, sizeof why))
        return herr_set(e, "%s", why);
    struct engine *en = calloc(1, sizeof *en);
    if (!en)
        return herr_set(e, "out of memory for the engine");
    en->ops = ops_for(s->kind, s->precision);
    if (en->ops->create(en, s, e) != 0) {
        free(en);
        return -1;
    }
    *out = en;
    return 0;
}

void engine_free(struct engine *en)
{
    if (!en)
        return;
    en->ops->destroy(en);
    free(en);
}

const char *engine_name(const struct engine *en) { return en->ops->name; }

int engine_by_name(const char *name, enum engine_kind *kind, enum dtype *precision)
{
    if (!strcmp(name, "cpu")) {
        *kind = ENGINE_CPU;
        *precision = DTYPE_FP32;
    } else if (!strcmp(name, "cuda-fp32") || !strcmp(name, "cuda-bf16")) {
        *kind = ENGINE_CUDA;
        *precision = strcmp(name, "cuda-bf16") ? DTYPE_FP32 : DTYPE_BF16;
    } else {
        return -1;
    }
    return 0;
}
struct gpt_stage *engine_host(struct engine *en) { return en->host; }
struct devmem *engine_mem(struct engine *en) { return en->mem; }
float *engine_params(struct engine *en) { return en->params; }
float *engine_grads(struct engine *en) { return en->grads; }
size_t engine_num_params(const struct engine *en) { return gpt_stage_num_params(en->host); }
size_t engine_act_bytes(const struct engine *en) { return en->act_dtype == DTYPE_BF16 ? 2 : 4; }
enum dtype engine_act_dtype(const struct engine *en) { return en->act_dtype; }

/* one call of `part` asked of the engine, counted while a step is profiled */
static void count_call(struct engine *en, enum engine_part part)
{
    if (en->profiling)
        en->calls[part]++;
}

int engine_init_params(struct engine *en, uint64_t seed, herr *e)
{
    return en->ops->init_params(en, seed, e);
}

int engine_forward(struct engine *en, int slot, int t0, int t1, const int *tokens,
                   const void *in_act, const int *targets, void *out_act)
{
    count_call(en, ENGINE_PART_COMPUTE);
    return en->ops->forward(en, slot, t0, t1, tokens, in_act, targets, out_act);
}

int engine_backward(struct engine *en, int slot, int t0, int t1, const void *dout, void *din,
                    float loss_scale)
{
    count_call(en, ENGINE_PART_COMPUTE);
    return en->ops->backward(en, slot, t0, t1, dout, din, loss_scale);
}

int engine_zero_grads(struct engine *en, herr *e)
{
    count_call(en, ENGINE_PART_ZEROING);
    return en->ops->zero_grads(en, e);
}
int engine_loss_take(struct engine *en, float *sum, herr *e) { return en->ops->loss_take(en, sum, e); }

int engine_sq_norm(struct engine *en, const float *base, const size_t *lo, const size_t *hi,
                   int n, double *out, herr *e)
{
    for (int i = 0; i < n; i++)
        if (lo[i] > hi[i])
            return herr_set(e, "gradient norm: range %d [%zu, %zu) is reversed", i, lo[i], hi[i]);
    count_call(en, ENGINE_PART_NORM);
    return en->ops->sq_norm(en, base, lo, hi, n, out, e);
}

int engine_adamw(struct engine *en, const struct adamw_config *o, const struct adamw_span *sp,
                 int n, float lr, long step, float grad_scale, herr *e)
{
    if (n < 0 || n > ENGINE_ADAMW_SPANS)
        return herr_set(e, "AdamW: %d spans (at most %d a call)", n, ENGINE_ADAMW_SPANS);
    int work = 0;
    for (int i = 0; i < n; i++) {
        if (sp[i].lo > sp[i].hi || sp[i].hi > engine_num_params(en))
            return herr_set(e, "AdamW: span %d's parameter range [%zu, %zu) is outside the "
                            "stage's %zu", i, sp[i].lo, sp[i].hi, engine_num_params(en));
        work |= sp[i].hi > sp[i].lo;
    }
    if (step < 1)
        return herr_set(e, "AdamW: steps count from 1 (got %ld)", step);
    if (!work)
        return 0;
    count_call(en, ENGINE_PART_ADAMW);
    return en->ops->adamw(en, o, sp, n, lr, step, grad_scale, e);
}

void engine_params_changed(struct engine *en, size_t lo, size_t hi)
{
    count_call(en, ENGINE_PART_BF16_COPY);
    en->ops->params_changed(en, lo, hi);
}

int engine_params_upload(struct engine *en, herr *e) { return en->ops->params_upload(en, e); }
int engine_params_download(struct engine *en, herr *e) { return en->ops->params_download(en, e); }
const char *engine_error(const struct engine *en) { return en->ops->error(en); }

void engine_set_forward_hook(struct engine *en, int (*fn)(void *ctx, size_t lo, size_t hi),
                             void *ctx)
{
    en->fwd_hook = fn;
    en->fwd_ctx = ctx;
    en->ops->hooks_changed(en);
}

void engine_set_backward_hook(struct engine *en, void (*fn)(void *ctx, int layer), void *ctx)
{
    en->bwd_hook = fn;
    en->bwd_ctx = ctx;
    en->ops->hooks_changed(en);
}

void engine_set_tp_sum(struct engine *en, int (*fn)(void *ctx, float *buf, size_t n), void *ctx)
{
    en->tp_sum = fn;
    en->tp_ctx = ctx;
    en->ops->hooks_changed(en);
}

int engine_profile_begin(struct engine *en, herr *e)
{
    if (en->ops->profile_begin(en, e) != 0)
        return -1;
    memset(en->calls, 0, sizeof en->calls);
    en->profiling = 1;
    en->marked = 0;
    return 0;
}

int engine_profile_end(struct engine *en, struct engine_profile *out, herr *e)
{
    memset(out, 0, sizeof *out);
    int was = en->profiling;
    en->profiling = 0;
    if (en->ops->profile_end(en, out, e) != 0)
        return -1;
    if (was)
        memcpy(out->calls, en->calls, sizeof out->calls);
    return 0;
}

void engine_profile_enter(struct engine *en, enum engine_part part)
{
    if (part < 0 || part >= ENGINE_PARTS)
        return;
    if (en->profiling && en->marked++ == 0)
        en->calls[part]++;
    en->ops->profile_enter(en, part);
}

void engine_profile_leave(struct engine *en)
{
    if (en->profiling && en->marked > 0)
        en->marked--;
    en->ops->profile_leave(en);
}

const char *engine_part_name(int part)
{
    static const char *names[ENGINE_PARTS] = {"compute", "bf16 copy", "zeroing", "norm", "adamw",
                                              "masters", "other"};
    return part >= 0 && part < ENGINE_PARTS ? names[part] : "?";
}

int engine_fail(struct engine *en, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(en->err, sizeof en->err, fmt, ap);
    va_end(ap);
    return -1;
}
