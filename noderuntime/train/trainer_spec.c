#include "trainer_spec.h"

#include <stdio.h>

#include "dataloader.h"

void trainer_spec_engine(const struct tj_spec *sp, enum engine_kind *kind, enum dtype *precision)
{
    *kind = tj_real_gpus(sp) ? ENGINE_CUDA : ENGINE_CPU;
    *precision = sp->training.precision;
}

int trainer_config_from_spec(const struct tj_spec *sp, struct trainer_config *c, herr *e)
{
    trainer_config_defaults(c);
    c->model = (struct gpt_config){.layers = sp->model.layers, .channels = sp->model.hidden,
                                   .heads = sp->model.heads, .vocab = sp->model.vocab,
                                   .padded_vocab = 0, .max_seq = sp->model.seq_len};
    if (gpt_config_check(&c->model, e))
        return herr_wrap(e, "spec.model");
    c->B = sp->par.micro_batch_size;
    c->T = sp->model.seq_len;
    c->micro_batches = sp->par.micro_batches;
    c->steps = sp->training.steps;
    c->schedule = sp->par.schedule;
    c->pipe_wire = sp->par.pipeline_dtype;
    c->param_wire = sp->par.param_gather_dtype;
    const struct tj_optimizer *o = &sp->training.opt;
    c->adamw = (struct adamw_config){(float)o->beta1, (float)o->beta2, (float)o->eps,
                                     (float)o->weight_decay};
    c->lr = (struct lr_schedule){.max_lr = (float)o->lr, .warmup_steps = o->warmup_steps,
                                 .total_steps = o->schedule == TJ_LR_CONSTANT ? 0 : sp->training.steps,
                                 .min_lr_ratio = o->schedule == TJ_LR_CONSTANT ? 1.0f
                                                                               : (float)o->min_lr_ratio,
                                 .shape = o->schedule == TJ_LR_LINEAR ? LR_LINEAR
                                          : o->schedule == TJ_LR_WSD  ? LR_WSD
                                                                      : LR_COSINE,
                                 .decay_steps = tj_lr_decay_steps(&sp->training)};
    c->grad_clip = (float)o->grad_clip;
    c->max_nonfinite = sp->training.max_nonfinite_steps;
    c->seed = sp->training.seed;
    if (sp->training.init_from[0]) {
        c->init_from = sp->training.init_from;
        c->init_from_name = "spec.training.initFrom";
    }
    if (sp->training.checkpoint.path[0]) {
        c->checkpoint_dir = sp->training.checkpoint.path;
        c->checkpoint_every = sp->training.checkpoint.every_steps;
        c->checkpoint_keep = sp->training.checkpoint.keep;
    }
    if (tj_eval_on(&sp->training.eval)) {
        c->eval_every = sp->training.eval.every_steps;
        c->eval_batches = sp->training.eval.batches;
    }
    trainer_spec_engine(sp, &c->engine, &c->precision);
    return 0;
}

/* Which windows of a data set a loader reads: all, or one part of a held-out split
 * (spec.training.eval.holdout). The held-out part's files are the training data's, which its
 * loader has just checked whole where it checks them (dataloader.h): not read whole again. */
struct set_part {
    double holdout;
    int held_out;
};

/* One data set of the spec: opened, its kind the format field's (`set`: the field of the set,
 * whose .format it is, unless `field` names another place for the path). */
static int open_set(const char *set, const char *field, const char *path,
                    enum tj_data_format format, struct set_part part,
                    const struct trainer_config *c, int replica, int replicas, int global_epochs,
                    uint64_t seed, struct dataloader **out, herr *e)
{
    struct dataloader_config dc = {.pattern = path, .B = c->B, .T = c->T, .rank = replica,
                                   .world = replicas, .seed = seed, .vocab = c->model.vocab,
                                   .global_epochs = global_epochs, .holdout = part.holdout,
                                   .held_out = part.held_out,
                                   .scan_max_bytes = part.held_out ? 1 : 0};
    if (dataloader_open(out, &dc, e) != 0) {
        if (part.holdout > 0 && !part.held_out)
            return herr_wrap(e, "%s (less spec.training.eval.holdout %g)", field, part.holdout);
        return herr_wrap(e, "%s", field);
    }
    int text = dataloader_is_text(*out);
    if (text == (format == TJ_DATA_TEXT))
        return 0;
    herr_set_kind(e, HERR_CONFIG, "%s.format: %s, but %s is %s (the engine reads *.bin files as "
                  "llm.c token shards and any other file as text); set format: %s", set,
                  tj_data_format_name(format), path, text ? "text" : "llm.c shards",
                  text ? "text" : "llmc");
    dataloader_free(*out);
    *out = NULL;
    return -1;
}

/* training.data.sources as a blend: each source's loader reads the source's own global order
 * (rank 0 of world 1, global epochs), its seed the job's mixed with its index, so that two
 * sources of the same files do not read them in the same order. Under a held-out split, the
 * part of each source that `part` names (the evaluation's blend: each source's held-out windows,
 * in the same shares). */
static int open_blend(const struct tj_data *dt, struct set_part part,
                      const struct trainer_config *c, struct data_blend **out, herr *e)
{
    struct dataloader *src[TJ_MAX_SOURCES] = {0};
    double w[TJ_MAX_SOURCES];
    for (int i = 0; i < dt->n_sources; i++) {
        char field[96];
        snprintf(field, sizeof field, "%s.sources[%d].path",
                 part.held_out ? "spec.training.eval.holdout: spec.training.data" : "spec.training.data",
                 i);
        w[i] = dt->sources[i].weight;
        if (open_set("spec.training.data", field, dt->sources[i].path, dt->format, part, c, 0, 1,
                     1, c->seed + 0x9e3779b97f4a7c15ull * (uint64_t)i, &src[i], e) != 0) {
            for (int k = 0; k < i; k++)
                dataloader_free(src[k]);
            return -1;
        }
    }
    return data_blend_open(out, src, w, dt->n_sources, e);
}

/* training.eval's data: its own files, or training.data's held-out part */
static int open_eval(const struct tj_training *t, const struct trainer_config *c, int replica,
                     int replicas, struct trainer_spec_data *d, struct trainer_data *td, herr *e)
{
    /* global epochs: micro-batch k of replica r is the set's global micro-batch k * replicas + r,
     * so an evaluation's batches are the same whatever the data degree */
    if (t->eval.path[0] || t->eval.holdout <= 0) {
        if (open_set("spec.training.eval", "spec.training.eval", t->eval.path, t->eval.format,
                     (struct set_part){0}, c, replica, replicas, 1, c->seed, &d->eval, e) != 0)
            return -1;
    } else if (t->data.n_sources > 0) {
        if (open_blend(&t->data, (struct set_part){t->eval.holdout, 1}, c, &d->eval_blend, e) != 0)
            return -1;
        td->eval_ctx = d->eval_blend;
        td->eval_batch = data_blend_batch_at;
        return 0;
    } else if (open_set("spec.training.data", "spec.training.eval.holdout: spec.training.data",
                        t->data.path, t->data.format, (struct set_part){t->eval.holdout, 1}, c,
                        replica, replicas, 1, c->seed, &d->eval, e) != 0) {
        return -1;
    }
    td->eval_ctx = d->eval;
    td->eval_batch = dataloader_batch_at;
    return 0;
}

int trainer_spec_data_open(const struct tj_spec *sp, const struct trainer_config *c, int replica,
                           int replicas, struct trainer_spec_data *d, struct trainer_data *td,
                           herr *e)
{
    *d = (struct trainer_spec_data){0};
    const struct tj_training *t = &sp->training;
    /* a held-out split: training reads the rest */
    struct set_part train = {t->eval.path[0] ? 0 : t->eval.holdout, 0};
    if (t->data.n_sources > 0) {
        if (open_blend(&t->data, train, c, &d->blend, e) != 0)
            return -1;
        *td = (struct trainer_data){.ctx = d->blend, .batch = data_blend_batch_at};
    } else {
        if (open_set("spec.training.data", "spec.training.data", t->data.path, t->data.format,
                     train, c, replica, replicas, sp->elastic.enabled, c->seed, &d->train, e) != 0)
            return -1;
        *td = (struct trainer_data){.ctx = d->train, .batch = dataloader_batch_at};
    }
    if (!tj_eval_on(&t->eval))
        return 0;
    if (open_eval(t, c, replica, replicas, d, td, e) != 0) {
        trainer_spec_data_close(d);
        return -1;
    }
    return 0;
}

void trainer_spec_data_close(struct trainer_spec_data *d)
{
    dataloader_free(d->train);
    dataloader_free(d->eval);
    data_blend_free(d->blend);
    data_blend_free(d->eval_blend);
    *d = (struct trainer_spec_data){0};
}

int trainer_spec_data_scanned(const struct trainer_spec_data *d)
{
    if (d->train)
        return dataloader_scanned(d->train);
    for (int i = 0; d->blend && i < data_blend_sources(d->blend); i++)
        if (!dataloader_scanned(data_blend_source(d->blend, i)))
            return 0;
    return 1;
}

int trainer_spec_data_files(const struct trainer_spec_data *d)
{
    int n = d->train ? dataloader_files(d->train) : 0;
    for (int i = 0; d->blend && i < data_blend_sources(d->blend); i++)
        n += dataloader_files(data_blend_source(d->blend, i));
    return n;
}

uint64_t trainer_spec_data_tokens(const struct trainer_spec_data *d)
{
    uint64_t n = d->train ? dataloader_tokens(d->train) : 0;
    for (int i = 0; d->blend && i < data_blend_sources(d->blend); i++)
        n += dataloader_tokens(data_blend_source(d->blend, i));
    return n;
}
