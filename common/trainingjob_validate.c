/* The TrainingJob rules checked on a filled struct: tj_spec_validate (the API's cross-field
 * rules) and tj_spec_runnable (what this version cannot run yet). */
#include "trainingjob_impl.h"

#include <string.h>

/* ---------------------------------------------------------------- validation */

int tj_schedule_check(const struct tj_training *t, const char *sp, struct tj_errors *errs)
{
    int before = errs->count;
    if (t->opt.warmup_steps > t->steps && t->steps >= 1)
        tj_errors_add(errs, "%s.training.optimizer.warmupSteps: %d exceeds training.steps %ld", sp,
                      t->opt.warmup_steps, t->steps);
    if (t->opt.decay_steps >= 0 && t->opt.schedule != TJ_LR_WSD)
        tj_errors_add(errs, "%s.training.optimizer.decaySteps: only with schedule wsd (schedule is "
                      "%s)", sp, tj_lr_schedule_name(t->opt.schedule));
    else if (t->opt.decay_steps >= 0 && t->opt.warmup_steps <= t->steps &&
             (long)t->opt.warmup_steps + t->opt.decay_steps > t->steps)
        tj_errors_add(errs, "%s.training.optimizer.decaySteps: %d and warmupSteps %d exceed "
                      "training.steps %ld", sp, t->opt.decay_steps, t->opt.warmup_steps, t->steps);
    return errs->count > before ? -1 : 0;
}

int tj_spec_validate(const struct tj_spec *s, const char *path, struct tj_errors *errs)
{
    const char *sp = path ? path : "spec";
    int before = errs->count;
    const struct tj_model *m = &s->model;
    const struct tj_parallelism *par = &s->par;
    int ranks_w = tj_ranks_per_worker(s);
    long long world = (long long)s->workers * ranks_w;

    if (s->workers < 1)
        tj_errors_add(errs, "%s.workers: must be at least 1", sp);
    if (m->layers < 1 || m->hidden < 1 || m->heads < 1 || m->vocab < 1 || m->seq_len < 1)
        tj_errors_add(errs, "%s.model: layers, hidden, heads, vocab and seqLen must all be at least 1", sp);
    if (m->heads > 0 && m->hidden % m->heads)
        tj_errors_add(errs, "%s.model.hidden: %d is not divisible by heads %d", sp, m->hidden, m->heads);
    if (par->tensor < 1)
        tj_errors_add(errs, "%s.parallelism.tensor: must be at least 1", sp);
    else {
        if (s->gpus_per_worker == 0 && par->tensor != 1)
            tj_errors_add(errs, "%s.parallelism.tensor: %d needs GPU workers; a CPU worker (gpusPerWorker 0) "
                          "has one rank, so tensor must be 1", sp, par->tensor);
        else if (s->gpus_per_worker > 0 && s->gpus_per_worker % par->tensor)
            tj_errors_add(errs, "%s.parallelism.tensor: %d does not divide gpusPerWorker %d (a tensor group "
                          "stays inside one worker)", sp, par->tensor, s->gpus_per_worker);
        if (m->heads > 0 && m->heads % par->tensor)
            tj_errors_add(errs, "%s.parallelism.tensor: %d does not divide model heads %d", sp, par->tensor,
                          m->heads);
    }
    if (par->pipeline < 0 || par->data < 0)
        tj_errors_add(errs, "%s.parallelism: pipeline and data must be positive or auto", sp);
    if (par->pipeline > 0 && m->layers > 0 && par->pipeline > m->layers)
        tj_errors_add(errs, "%s.parallelism.pipeline: %d exceeds model layers %d", sp, par->pipeline, m->layers);
    if (par->tensor >= 1 && par->pipeline >= 0 && par->data >= 0 && s->workers >= 1) {
        long long known = par->tensor;
        if (par->pipeline > 0) known *= par->pipeline;
        if (par->data > 0) known *= par->data;
        if (par->pipeline > 0 && par->data > 0) {
            if (known != world)
                tj_errors_add(errs, "%s.parallelism: tensor %d x pipeline %d x data %d = %lld ranks, but workers %d "
                              "x %d ranks per worker = %lld", sp, par->tensor, par->pipeline, par->data, known,
                              s->workers, ranks_w, world);
        } else if (world % known) {
            tj_errors_add(errs, "%s.parallelism: %lld ranks (workers %d x %d per worker) cannot be split into "
                          "groups of %lld (tensor %d%s)", sp, world, s->workers, ranks_w, known, par->tensor,
                          par->pipeline > 0 ? " x pipeline" : par->data > 0 ? " x data" : "");
        } else if (par->pipeline == TJ_AUTO && par->data > 0 && m->layers > 0 && world / known > m->layers) {
            tj_errors_add(errs, "%s.parallelism.data: %d leaves %lld pipeline stages, more than model layers %d",
                          sp, par->data, world / known, m->layers);
        }
    }
    if (par->schedule == SCHED_1F1B && par->pipeline > 0 && par->micro_batches < par->pipeline)
        tj_errors_add(errs, "%s.parallelism.microBatches: %d is fewer than pipeline %d stages (1f1b needs at "
                      "least one micro-batch per stage)", sp, par->micro_batches, par->pipeline);

    if (par->token_slices != TJ_AUTO && m->seq_len > 0 && par->token_slices > m->seq_len)
        tj_errors_add(errs, "%s.parallelism.tokenSlices: %d exceeds model.seqLen %d (every slice holds at "
                      "least one token)", sp, par->token_slices, m->seq_len);

    const struct tj_training *t = &s->training;
    if (t->steps < 1)
        tj_errors_add(errs, "%s.training.steps: must be at least 1", sp);
    tj_schedule_check(t, sp, errs);
    if (t->precision == DTYPE_BF16 && s->gpus_per_worker == 0)
        tj_errors_add(errs, "%s.training.precision: bf16 needs GPU workers (gpusPerWorker >= 1); CPU workers "
                      "train in fp32", sp);
    if (!t->data.path[0] && t->data.n_sources == 0)
        tj_errors_add(errs, "%s.training.data.path: required", sp);
    if (t->data.format == TJ_DATA_TEXT && m->vocab > 0 && m->vocab < TJ_TEXT_VOCAB)
        tj_errors_add(errs, "%s.model.vocab: %d is below %d, the byte vocabulary of text data%s", sp, m->vocab,
                      TJ_TEXT_VOCAB, t->data.is_demo ? " (the demo corpus is used when training.data is omitted)" : "");
    if (t->checkpoint.every_steps > 0 && !t->checkpoint.path[0])
        tj_errors_add(errs, "%s.training.checkpoint.path: required when everySteps is set", sp);

    const struct tj_emulation *em = &s->emulation;
    if (em->enabled) {
        long long sum = 0;
        for (int i = 0; i < em->n_groups; i++) {
            sum += em->groups[i].count;
            for (int k = 0; k < i; k++)
                if (!strcmp(em->groups[i].fabric, em->groups[k].fabric) &&
                    strcmp(em->groups[i].cls, em->groups[k].cls))
                    tj_errors_add(errs, "%s.emulation.nics[%d].class: fabric \"%s\" is %s in nics[%d]; one fabric "
                                  "has one class", sp, i, em->groups[i].fabric, em->groups[k].cls, k);
        }
        if (sum != s->workers)
            tj_errors_add(errs, "%s.emulation.nics: counts sum to %lld, but workers is %d", sp, sum, s->workers);
        if (em->gpus && s->gpus_per_worker < 1)
            tj_errors_add(errs, "%s.emulation.gpus: needs gpusPerWorker >= 1 (the GPUs it emulates), got %d",
                          sp, s->gpus_per_worker);
    }
    const struct tj_elastic *el = &s->elastic;
    if (el->enabled && el->min_workers > s->workers && s->workers >= 1)
        tj_errors_add(errs, "%s.elastic.minWorkers: %d exceeds workers %d", sp, el->min_workers,
                      s->workers);
    if (tj_is_elastic(s) && !t->checkpoint.path[0])
        tj_errors_add(errs, "%s.elastic.minWorkers: %d below workers %d re-plans the job from its last "
                      "checkpoint: spec.training.checkpoint.path is required", sp, el->min_workers,
                      s->workers);
    if (s->scheduling.gang != TJ_GANG_DEFAULT)
        tj_scheduling_check(s, s->scheduling.gang, sp, errs);
    return errs->count == before ? 0 : -1;
}

int tj_scheduling_check(const struct tj_spec *s, enum tj_gang gang, const char *path, struct tj_errors *errs)
{
    const char *sp = path ? path : "spec";
    int before = errs->count;
    const struct tj_scheduling *sc = &s->scheduling;
    const char *g = tj_gang_name(gang);
    if (gang == TJ_GANG_KUEUE && !sc->queue[0])
        tj_errors_add(errs, "%s.scheduling.queue: required when gang is kueue (the LocalQueue that admits the "
                      "job)", sp);
    if (sc->queue[0] && gang != TJ_GANG_KUEUE && gang != TJ_GANG_VOLCANO)
        tj_errors_add(errs, "%s.scheduling.queue: applies only to gang kueue or volcano, not %s", sp, g);
    if (sc->scheduler_name[0] && gang != TJ_GANG_VOLCANO && gang != TJ_GANG_COSCHEDULING)
        tj_errors_add(errs, "%s.scheduling.schedulerName: applies only to gang volcano or coscheduling, not %s",
                      sp, g);
    if (sc->schedule_timeout_seconds && gang != TJ_GANG_COSCHEDULING)
        tj_errors_add(errs, "%s.scheduling.scheduleTimeoutSeconds: applies only to gang coscheduling, not %s",
                      sp, g);
    if (tj_is_elastic(s) && gang != TJ_GANG_NONE && gang != TJ_GANG_DEFAULT)
        tj_errors_add(errs, "%s.elastic.minWorkers: %d below workers %d is not supported with gang %s: "
                      "its pod group admits all %d workers or none, so a job re-planned onto fewer "
                      "would not get a lost worker's pod back; use gang none", sp,
                      s->elastic.min_workers, s->workers, g, s->workers);
    const cJSON *tspec = s->pod_template ? cJSON_GetObjectItemCaseSensitive(s->pod_template, "spec") : NULL;
    const cJSON *tsched = tspec ? cJSON_GetObjectItemCaseSensitive(tspec, "schedulerName") : NULL;
    if (tsched && !cJSON_IsNull(tsched) && (gang == TJ_GANG_VOLCANO || gang == TJ_GANG_COSCHEDULING))
        tj_errors_add(errs, "%s.template.spec.schedulerName: gang %s sets the pods' scheduler; use "
                      "spec.scheduling.schedulerName", sp, g);
    return errs->count == before ? 0 : -1;
}

int tj_spec_runnable(const struct tj_spec *s, const char *path, struct tj_errors *errs)
{
    const char *sp = path ? path : "spec";
    int before = errs->count;
    if (s->training.precision == DTYPE_BF16 && s->emulation.gpus)
        tj_errors_add(errs, "%s.training.precision: bf16 needs real GPUs: emulated GPUs "
                      "(emulation.gpus) run the CPU engine, which trains in fp32", sp);
    return errs->count == before ? 0 : -1;
}
