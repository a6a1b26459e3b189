#include "trainer_spec.h"

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
                                                                               : (float)o->min_lr_ratio};
    c->grad_clip = (float)o->grad_clip;
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
    trainer_spec_engine(sp, &c->engine, &c->precision);
    return 0;
}
