/* The planner's input checks: worker names, NIC reports and the job's numbers, before any
 * evaluation (plan_check_input, plan_devices). */
#include "planner_impl.h"
#include "pipe_order.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- input checks ---- */

long plan_devices(const struct plan_worker *workers, int n_workers)
{
    long d = 0;
    for (int i = 0; i < n_workers; i++)
        d += worker_devices(&workers[i]);
    return d;
}

int plan_worker_nics(const struct plan_worker *w)
{
    if (w->nics > 0)
        return w->nics;
    if (w->nic.cls == NIC_ETHERNET || !w->nic.ib_hca[0])
        return 1;
    int n = 1;
    for (const char *c = w->nic.ib_hca; *c; c++)
        n += *c == ',';
    return n;
}

int plan_worker_nic_of(const struct plan_worker *w, int dev)
{
    int g = worker_devices(w), n = plan_worker_nics(w);
    return dev < 0 || dev >= g ? 0 : (int)((long)dev * n / g);
}

static int cmp_str_idx(const void *a, const void *b, void *ctx)
{
    const struct plan_worker *w = ctx;
    return strcmp(w[*(const int *)a].name, w[*(const int *)b].name);
}

int plan_check_input(const struct plan_worker *workers, int n_workers, const struct plan_job *job,
                     herr *e)
{
    if (n_workers < 1)
        return herr_set(e, "workers: at least one worker is required");
    if (n_workers > (1 << 20))
        return herr_set(e, "workers: at most %d workers are supported", 1 << 20);
    for (int i = 0; i < n_workers; i++) {
        const struct plan_worker *w = &workers[i];
        if (!w->name[0])
            return herr_set(e, "workers[%d].name: must be a non-empty string", i);
        if (w->gpus < 0 || w->gpus > 1024)
            return herr_set(e, "workers[%d] (%s).gpus: must be an integer in [0, 1024]", i, w->name);
        if (!isfinite(w->tflops) || w->tflops <= 0 || w->tflops > 1e6)
            return herr_set(e, "workers[%d] (%s).gpu_tflops: must be a number in (0, 1000000]", i,
                            w->name);
        if (!isfinite(w->memory_gbps) || w->memory_gbps < 0 || w->memory_gbps > 1e6)
            return herr_set(e, "workers[%d] (%s).memory_gbps: must be a number in (0, 1000000], "
                            "or 0 for the links' memory_gbps", i, w->name);
        if (!w->nic.fabric[0])
            return herr_set(e, "workers[%d] (%s).nic: a NIC report with a fabric is required", i,
                            w->name);
        if (!isfinite(w->nic.gbps) || w->nic.gbps <= 0)
            return herr_set(e, "workers[%d] (%s).nic.gbps: bandwidth must be > 0", i, w->name);
        if (w->nics < 0 || w->nics > 1024)
            return herr_set(e, "workers[%d] (%s).nics: must be an integer in [0, 1024] (0: the "
                            "HCAs of its NIC report)", i, w->name);
    }
    int *idx = malloc(sizeof(int) * (size_t)n_workers);
    if (!idx)
        return herr_set(e, "planner: out of memory");
    for (int i = 0; i < n_workers; i++)
        idx[i] = i;
    qsort_r(idx, (size_t)n_workers, sizeof(int), cmp_str_idx, (void *)workers);
    for (int i = 1; i < n_workers; i++) {
        if (!strcmp(workers[idx[i]].name, workers[idx[i - 1]].name)) {
            int a = idx[i - 1] < idx[i] ? idx[i - 1] : idx[i], b = idx[i - 1] ^ idx[i] ^ a;
            herr_set(e, "workers[%d].name: duplicate name \"%s\" (also workers[%d]); names must "
                     "be unique", b, workers[b].name, a);
            free(idx);
            return -1;
        }
    }
    free(idx);

    const struct tj_model *m = &job->model;
    if (m->layers < 1 || m->layers > 100000)
        return herr_set(e, "model.layers: must be an integer in [1, 100000]");
    if (m->hidden < 1 || m->heads < 1 || m->vocab < 1 || m->seq_len < 1)
        return herr_set(e, "model: layers, hidden, heads, vocab and seq must all be >= 1");
    if (m->hidden % m->heads)
        return herr_set(e, "model.hidden: %d is not divisible by model.heads %d", m->hidden,
                        m->heads);
    if (job->tensor < 1)
        return herr_set(e, "parallelism.tensor: must be >= 1");
    if (m->heads % job->tensor)
        return herr_set(e, "parallelism.tensor: %d does not divide model heads %d", job->tensor,
                        m->heads);
    if (job->pipeline < 0 || job->data < 0)
        return herr_set(e, "parallelism: pipeline and data must be >= 1 or auto");
    if (job->pipeline > m->layers)
        return herr_set(e, "parallelism.pipeline: %d stages exceed model layers %d (every stage "
                        "needs at least one layer)", job->pipeline, m->layers);
    if (job->micro_batches < 1 || job->micro_batch_size < 1)
        return herr_set(e, "parallelism: microBatches and microBatchSize must be >= 1");
    if (job->schedule == SCHED_1F1B && job->pipeline && job->micro_batches < job->pipeline)
        return herr_set(e, "parallelism.microBatches: %d is fewer than pipeline %d stages (1f1b "
                        "needs at least one micro-batch per stage)", job->micro_batches,
                        job->pipeline);
    if (job->warmup_pinned && (job->warmup < 0 || job->warmup > PIPE_WARMUP_EXTRA_MAX))
        return herr_set(e, "warm-up depth %d: must be an integer in [0, %d]", job->warmup,
                        PIPE_WARMUP_EXTRA_MAX);
    if (job->warmup_pinned && job->warmup > 0 && job->schedule != SCHED_1F1B)
        return herr_set(e, "warm-up depth %d: the schedule is %s, which has no warm-up (1f1b has)",
                        job->warmup, schedule_name(job->schedule));
    if (job->micro_batches > 65536 || job->micro_batch_size > 65536)
        return herr_set(e, "parallelism: microBatches and microBatchSize must be <= 65536");
    for (int i = 0; i < n_workers; i++)
        if (worker_devices(&workers[i]) % job->tensor)
            return herr_set(e, "parallelism.tensor: %d does not divide the %d device(s) of worker "
                            "%s (tensor groups stay inside one worker)", job->tensor,
                            worker_devices(&workers[i]), workers[i].name);
    long dev = plan_devices(workers, n_workers);
    if (dev > (1L << 24))
        return herr_set(e, "workers: %ld devices; the planner handles at most %ld", dev, 1L << 24);
    long units = dev / job->tensor;
    if (job->pipeline && job->data && (long)job->tensor * job->pipeline * job->data != dev)
        return herr_set(e, "parallelism: tensor %d x pipeline %d x data %d = %ld must equal the "
                        "cluster's %ld devices", job->tensor, job->pipeline, job->data,
                        (long)job->tensor * job->pipeline * job->data, dev);
    if (job->pipeline && units % job->pipeline)
        return herr_set(e, "parallelism.pipeline: %d does not divide the %ld tensor groups (%ld "
                        "devices / tensor %d)", job->pipeline, units, dev, job->tensor);
    if (job->data && units % job->data)
        return herr_set(e, "parallelism.data: %d does not divide the %ld tensor groups (%ld "
                        "devices / tensor %d)", job->data, units, dev, job->tensor);
    if (job->data && !job->pipeline && units / job->data > m->layers)
        return herr_set(e, "parallelism.data: %d leaves %ld stages, more than model layers %d",
                        job->data, units / job->data, m->layers);
    if (job->pinned) {
        long sum = 0;
        if (job->pipeline && job->n_pinned != job->pipeline)
            return herr_set(e, "placement.partition: %d stages pinned but pipeline is %d",
                            job->n_pinned, job->pipeline);
        if (!job->pipeline && (job->n_pinned < 1 || units % job->n_pinned))
            return herr_set(e, "placement.partition: %d stages pinned do not divide the %ld "
                            "tensor groups", job->n_pinned, units);
        for (int s = 0; s < job->n_pinned; s++) {
            if (job->pinned[s] < 1)
                return herr_set(e, "placement.partition[%d]: every stage needs at least one "
                                "layer", s);
            sum += job->pinned[s];
        }
        if (sum != m->layers)
            return herr_set(e, "placement.partition: pinned layers sum to %ld, model has %d",
                            sum, m->layers);
    }
    return 0;
}
