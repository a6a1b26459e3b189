/* The resolved TrainingJob spec as JSON in the API's field names (tj_spec_to_json), one
 * function per section of the spec; spec.template is the pods' and stays out. */
#include "trainingjob_impl.h"

/* ---------------------------------------------------------------- JSON out */

static cJSON *num(cJSON *o, const char *k, double v) { return cJSON_AddNumberToObject(o, k, v); }
static cJSON *str(cJSON *o, const char *k, const char *v) { return cJSON_AddStringToObject(o, k, v); }

/* Each section adds its object to `o` and returns 1, or 0 when out of memory. */

static int model_to_json(cJSON *o, const struct tj_spec *s)
{
    int ok = 1;
    cJSON *m = cJSON_AddObjectToObject(o, "model");
    ok &= !!m;
    if (m) {
        if (s->model.preset[0])
            ok &= !!str(m, "preset", s->model.preset);
        ok &= !!num(m, "layers", s->model.layers);
        ok &= !!num(m, "hidden", s->model.hidden);
        ok &= !!num(m, "heads", s->model.heads);
        ok &= !!num(m, "vocab", s->model.vocab);
        ok &= !!num(m, "seqLen", s->model.seq_len);
    }
    return ok;
}

static int parallelism_to_json(cJSON *o, const struct tj_spec *s)
{
    int ok = 1;
    cJSON *p = cJSON_AddObjectToObject(o, "parallelism");
    ok &= !!p;
    if (p) {
        ok &= !!num(p, "tensor", s->par.tensor);
        ok &= s->par.pipeline == TJ_AUTO ? !!str(p, "pipeline", "auto") : !!num(p, "pipeline", s->par.pipeline);
        ok &= s->par.data == TJ_AUTO ? !!str(p, "data", "auto") : !!num(p, "data", s->par.data);
        ok &= !!num(p, "microBatches", s->par.micro_batches);
        ok &= !!num(p, "microBatchSize", s->par.micro_batch_size);
        ok &= s->par.token_slices == TJ_AUTO ? !!str(p, "tokenSlices", "auto")
                                             : !!num(p, "tokenSlices", s->par.token_slices);
        ok &= !!str(p, "schedule", schedule_name(s->par.schedule));
        ok &= !!str(p, "pipelineDtype", dtype_name(s->par.pipeline_dtype));
        ok &= !!str(p, "paramGatherDtype", dtype_name(s->par.param_gather_dtype));
    }
    return ok;
}

static int placement_to_json(cJSON *o, const struct tj_spec *s)
{
    int ok = 1;
    cJSON *pl = cJSON_AddObjectToObject(o, "placement");
    ok &= !!pl;
    if (pl) {
        ok &= !!str(pl, "policy", policy_name(s->placement.policy));
        if (s->placement.cross_fabric_gbps > 0)
            ok &= !!num(pl, "crossFabricGbps", s->placement.cross_fabric_gbps);
        if (s->placement.n_fabrics > 0) {
            cJSON *fa = cJSON_AddArrayToObject(pl, "fabrics");
            ok &= !!fa;
            for (int i = 0; fa && i < s->placement.n_fabrics; i++) {
                cJSON *f = cJSON_CreateObject();
                ok &= !!f;
                if (!f)
                    break;
                cJSON_AddItemToArray(fa, f);
                ok &= !!str(f, "fabric", s->placement.fabrics[i].fabric);
                ok &= !!num(f, "gbps", s->placement.fabrics[i].gbps);
            }
        }
    }
    return ok;
}

static int training_to_json(cJSON *o, const struct tj_spec *s)
{
    int ok = 1;
    const struct tj_training *t = &s->training;
    cJSON *tr = cJSON_AddObjectToObject(o, "training");
    ok &= !!tr;
    if (tr) {
        ok &= !!num(tr, "steps", (double)t->steps);
        cJSON *op = cJSON_AddObjectToObject(tr, "optimizer");
        ok &= !!op;
        if (op) {
            ok &= !!num(op, "lr", t->opt.lr);
            ok &= !!num(op, "warmupSteps", t->opt.warmup_steps);
            ok &= !!str(op, "schedule", tj_lr_schedule_name(t->opt.schedule));
            if (t->opt.decay_steps >= 0)
                ok &= !!num(op, "decaySteps", t->opt.decay_steps);
            ok &= !!num(op, "minLrRatio", t->opt.min_lr_ratio);
            ok &= !!num(op, "beta1", t->opt.beta1);
            ok &= !!num(op, "beta2", t->opt.beta2);
            ok &= !!num(op, "eps", t->opt.eps);
            ok &= !!num(op, "weightDecay", t->opt.weight_decay);
            ok &= !!num(op, "gradClip", t->opt.grad_clip);
        }
        ok &= !!str(tr, "precision", dtype_name(t->precision));
        ok &= !!num(tr, "seed", (double)t->seed);
        if (!t->data.is_demo) {
            cJSON *d = cJSON_AddObjectToObject(tr, "data");
            ok &= d && (t->data.n_sources > 0 || str(d, "path", t->data.path)) &&
                  str(d, "format", tj_data_format_name(t->data.format));
            cJSON *l = d && t->data.n_sources > 0 ? cJSON_AddArrayToObject(d, "sources") : NULL;
            ok &= t->data.n_sources == 0 || l;
            for (int i = 0; l && i < t->data.n_sources; i++) {
                cJSON *it = cJSON_CreateObject();
                ok &= it && cJSON_AddItemToArray(l, it) &&
                      str(it, "path", t->data.sources[i].path) &&
                      num(it, "weight", t->data.sources[i].weight);
            }
        }
        cJSON *c = cJSON_AddObjectToObject(tr, "checkpoint");
        ok &= !!c;
        if (c) {
            if (t->checkpoint.path[0])
                ok &= !!str(c, "path", t->checkpoint.path);
            ok &= !!num(c, "everySteps", t->checkpoint.every_steps);
            ok &= !!num(c, "keep", t->checkpoint.keep);
        }
        if (tj_eval_on(&t->eval)) {
            cJSON *ev = cJSON_AddObjectToObject(tr, "eval");
            ok &= ev && (t->eval.path[0] ? !!str(ev, "path", t->eval.path)
                                         : !!num(ev, "holdout", t->eval.holdout)) &&
                  str(ev, "format", tj_data_format_name(t->eval.format)) &&
                  num(ev, "everySteps", t->eval.every_steps) && num(ev, "batches", t->eval.batches);
        }
        if (t->init_from[0])
            ok &= !!str(tr, "initFrom", t->init_from);
        ok &= !!num(tr, "logEverySteps", t->log_every_steps);
        ok &= !!num(tr, "maxNonFiniteSteps", t->max_nonfinite_steps);
    }
    return ok;
}

static int emulation_to_json(cJSON *o, const struct tj_spec *s)
{
    int ok = 1;
    const struct tj_emulation *em = &s->emulation;
    cJSON *e = cJSON_AddObjectToObject(o, "emulation");
    ok &= !!e;
    if (e) {
        cJSON *na = cJSON_AddArrayToObject(e, "nics");
        ok &= !!na;
        for (int i = 0; na && i < em->n_groups; i++) {
            cJSON *g = cJSON_CreateObject();
            ok &= !!g;
            if (!g)
                break;
            cJSON_AddItemToArray(na, g);
            ok &= str(g, "class", em->groups[i].cls) && str(g, "fabric", em->groups[i].fabric) &&
                  num(g, "gbps", em->groups[i].gbps) && num(g, "count", em->groups[i].count);
        }
        ok &= num(e, "crossFabricGbps", em->cross_fabric_gbps) && num(e, "bandwidthScale", em->bandwidth_scale) &&
              cJSON_AddBoolToObject(e, "gpus", em->gpus) != NULL;
    }
    return ok;
}

static int scheduling_to_json(cJSON *o, const struct tj_scheduling *sc)
{
    cJSON *g = cJSON_AddObjectToObject(o, "scheduling");
    if (!g)
        return 0;
    int ok = 1;
    if (sc->gang != TJ_GANG_DEFAULT)
        ok &= !!str(g, "gang", tj_gang_name(sc->gang));
    if (sc->queue[0])
        ok &= !!str(g, "queue", sc->queue);
    if (sc->scheduler_name[0])
        ok &= !!str(g, "schedulerName", sc->scheduler_name);
    if (sc->schedule_timeout_seconds)
        ok &= !!num(g, "scheduleTimeoutSeconds", sc->schedule_timeout_seconds);
    return ok;
}

cJSON *tj_spec_to_json(const struct tj_spec *s)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = 1;
    ok &= !!num(o, "workers", s->workers);
    ok &= !!num(o, "gpusPerWorker", s->gpus_per_worker);
    if (s->image[0])
        ok &= !!str(o, "image", s->image);
    ok &= model_to_json(o, s);
    ok &= parallelism_to_json(o, s);
    ok &= placement_to_json(o, s);
    ok &= training_to_json(o, s);
    ok &= !!num(o, "gangTimeoutSeconds", s->gang_timeout_seconds);
    if (s->ttl_after_finished_s >= 0)
        ok &= !!num(o, "ttlSecondsAfterFinished", s->ttl_after_finished_s);
    if (s->active_deadline_s > 0)
        ok &= !!num(o, "activeDeadlineSeconds", s->active_deadline_s);
    cJSON *rp = cJSON_AddObjectToObject(o, "restartPolicy");
    ok &= rp && num(rp, "maxRestarts", s->restart.max_restarts) && num(rp, "backoffSeconds", s->restart.backoff_seconds);
    ok &= !!cJSON_AddBoolToObject(o, "suspend", s->suspend);
    if (s->elastic.enabled) {
        cJSON *el = cJSON_AddObjectToObject(o, "elastic");
        ok &= el && num(el, "minWorkers", s->elastic.min_workers) &&
              num(el, "replaceTimeoutSeconds", s->elastic.replace_timeout_seconds) &&
              cJSON_AddBoolToObject(el, "scaleUp", s->elastic.scale_up);
    }
    if (s->emulation.enabled)
        ok &= emulation_to_json(o, s);
    if (s->scheduling.gang != TJ_GANG_DEFAULT || s->scheduling.queue[0] || s->scheduling.scheduler_name[0] ||
        s->scheduling.schedule_timeout_seconds)
        ok &= scheduling_to_json(o, &s->scheduling);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
