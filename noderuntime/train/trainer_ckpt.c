/* The trainer's checkpoints (see trainer_impl.h): save, resume with fallback, initFrom. */
#include "trainer_impl.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "model_import.h"
#include "ckpt_layout.h"
#include "log.h"

/* ---------- checkpoints ----------
 * The engine's per-stage format (checkpoint.h) with full AdamW moments: the replicas all-gather
 * their moment shards and replica 0 of each stage writes the file, so a run can resume with
 * another data-parallel degree, or in `holmes-node train`. After every stage has written, rank 0
 * records the step in <dir>/latest-step; resume reads that step's files. */

static int world_barrier(struct worker *w, herr *e)
{
    if (w->tp && comm_barrier(w->tp, e) != 0)
        return -1;
    if (w->dp && comm_barrier(w->dp, e) != 0)
        return -1;
    if (w->pp && comm_barrier(w->pp, e) != 0)
        return -1;
    return 0;
}

/* Copies the owned shard between the compact (m, v: engine memory) and a full-layout host
 * buffer. */
static int shard_copy(struct worker *w, float *full, float *compact, int to_full, herr *e)
{
    for (int b = 0; b < zero_num_buckets(w->z); b++) {
        size_t lo, hi, off = zero_shard_offset(w->z, b);
        zero_shard(w->z, b, &lo, &hi);
        size_t bytes = (hi - lo) * sizeof *full;
        if (to_full ? devmem_to_host(w->mem, full + lo, compact + off, bytes, e)
                    : devmem_from_host(w->mem, compact + off, full + lo, bytes, e))
            return herr_wrap(e, "the optimizer's moments");
    }
    return 0;
}

static int mark_latest(const char *dir, long step, herr *e)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/latest-step", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return herr_set_kind(e, herr_kind_of_errno(errno), "cannot write %s: %s", tmp,
                             strerror(errno));
    int bad = fprintf(f, "%ld\n", step) < 0;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0)
        return herr_set_kind(e, herr_kind_of_errno(errno), "cannot write %s: %s", path,
                             strerror(errno));
    return 0;
}

/* Tensor parallelism: every tensor rank's `local` (its layout) into `full` (the whole stage's, as
 * checkpoints hold it) on all of them: each rank puts its parts in place (the replicated tensors
 * from tensor rank 0 only) into zeros, and the group sums. */
static int tp_assemble(struct worker *w, const float *local, float *full, herr *e)
{
    size_t N = gpt_stage_full_params(w->gs);
    memset(full, 0, N * sizeof *full);
    gpt_stage_to_full(w->gs, w->tpr, local, full);
    for (int t = 0; w->tpr != 0 && t < w->ntens; t++)
        if (w->tens[t].split == GPT_REPLICATED)
            memset(full + w->tens[t].full_offset, 0, w->tens[t].rows * w->tens[t].cols * sizeof *full);
    return comm_all_reduce(w->tp, full, N, e);
}

/* The checkpoint's three buffers in the whole layout: with tensor parallelism assembled from the
 * group into pF, mF, vF (allocated here); without, the local ones themselves. */
static int tp_whole(struct worker *w, float **p, float **m, float **v, float *bufs[3], herr *e)
{
    bufs[0] = bufs[1] = bufs[2] = NULL;
    if (w->TP == 1)
        return 0;
    size_t N = gpt_stage_full_params(w->gs);
    float **io[3] = {p, m, v};
    for (int i = 0; i < 3; i++) {
        if (!(bufs[i] = calloc(N, sizeof(float))))
            return herr_set(e, "out of memory for the whole stage (%zu floats)", N);
        if (tp_assemble(w, *io[i], bufs[i], e) != 0)
            return -1;
        *io[i] = bufs[i];
    }
    return 0;
}

static int world_min(struct worker *w, long mine, long *out, herr *e);

/* The first value of a (the stage's local layout) that is not finite, as "tensor[i] = v" in
 * out; 0 when every one is finite. */
static int first_nonfinite(const struct worker *w, const float *a, size_t n, char *out, size_t cap)
{
    size_t i = 0;
    while (i < n && isfinite(a[i]))
        i++;
    if (i == n)
        return 0;
    const struct gpt_tensor *t;
    int nt = gpt_stage_tensors(w->gs, &t);
    int k = 0;
    while (k < nt && !(i >= t[k].offset && i < t[k].offset + t[k].size))
        k++;
    if (k < nt)
        snprintf(out, cap, "%s[%zu] = %g", t[k].name, i - t[k].offset, (double)a[i]);
    else
        snprintf(out, cap, "[%zu] = %g", i, (double)a[i]);
    return 1;
}

/* Which of a stage's parameters and moments (local layout) holds a value that is not finite
 * ("parameter", "first moment", "second moment"; NULL: none), and where (first_nonfinite). */
static const char *state_nonfinite(const struct worker *w, const float *p, const float *m,
                                   const float *v, size_t n, char *where, size_t cap)
{
    return first_nonfinite(w, p, n, where, cap)   ? "parameter"
           : first_nonfinite(w, m, n, where, cap) ? "first moment"
           : first_nonfinite(w, v, n, where, cap) ? "second moment"
                                                  : NULL;
}

/* Every rank's share of the checkpoint finite (the parameters, or their fp32 masters, and both
 * moments), agreed by all before anyone writes: a diverged stage never replaces (or prunes) a
 * good checkpoint. The error names the lowest rank whose values are not, and on that rank the
 * tensor. */
static int ckpt_finite(struct worker *w, const float *p, const float *m, const float *v, size_t n,
                       herr *e)
{
    char where[96] = "";
    const char *what = state_nonfinite(w, p, m, v, n, where, sizeof where);
    long bad = LONG_MAX;
    if (world_min(w, what ? w->rank : LONG_MAX, &bad, e) != 0)
        return -1;
    if (bad == LONG_MAX)
        return 0;
    if (what)
        return herr_set_kind(e, HERR_CONFIG, "training diverged: stage %d's %s %s is not "
                             "finite: no checkpoint written, the previous ones kept", w->stage,
                             what, where);
    return herr_set_kind(e, HERR_CONFIG, "training diverged: rank %ld's parameters are not "
                         "finite: no checkpoint written, the previous ones kept", bad);
}

int tr_ckpt_save(struct worker *w, herr *e)
{
    if (tr_params_ready(w, e) != 0)
        return herr_wrap(e, "checkpoint at step %ld", w->step);
    size_t n = gpt_stage_num_params(w->gs);
    float *whole[3] = {NULL, NULL, NULL};
    float *mf = calloc(n ? n : 1, sizeof *mf), *vf = calloc(n ? n : 1, sizeof *vf);
    /* bf16 parameters: the file holds the fp32 masters, gathered from every replica */
    float *pf = zero_master(w->z) ? calloc(n ? n : 1, sizeof *pf) : NULL;
    int rc = -1;
    if (!mf || !vf || (zero_master(w->z) && !pf)) {
        herr_set(e, "out of memory for the checkpoint moments (%zu floats)", n);
        goto out;
    }
    /* the state comes to the host here, and only here */
    if (shard_copy(w, mf, w->m, 1, e) != 0 || shard_copy(w, vf, w->v, 1, e) != 0 ||
        zero_all_gather_host(w->z, mf, e) != 0 || zero_all_gather_host(w->z, vf, e) != 0 ||
        (pf ? zero_master_gather_host(w->z, pf, e) : engine_params_download(w->eng, e)) != 0)
        goto out;
    /* One checkpoint more than `keep` survives the write: until latest-step names the new one,
     * the one it names must stay (a crash in between resumes from it). Pruned after the mark. */
    int keep = w->cfg->checkpoint_keep >= 1 ? w->cfg->checkpoint_keep : 2;
    float *wp = pf ? pf : gpt_stage_params(w->gs), *wm = mf, *wv = vf;
    if (ckpt_finite(w, wp, wm, wv, n, e) != 0 || tp_whole(w, &wp, &wm, &wv, whole, e) != 0)
        goto out;
    if (w->replica == 0 && w->tpr == 0) {
        struct ckpt_meta meta = {.c = w->cfg->model, .first = w->lo, .last = w->hi,
                                 .step = w->step, .data_pos = (uint64_t)w->step * (uint64_t)w->M,
                                 .nparams = gpt_stage_full_params(w->gs), .has_moments = 1};
        if (ckpt_write(w->cfg->checkpoint_dir, &meta, wp, wm, wv, keep + 1, NULL, 0, e) != 0)
            goto out;
    }
    if (world_barrier(w, e) != 0)
        goto out;
    if (w->rank == 0 && mark_latest(w->cfg->checkpoint_dir, w->step, e) != 0)
        goto out;
    if (world_barrier(w, e) != 0)
        goto out;
    if (w->replica == 0 && w->tpr == 0)
        ckpt_prune(w->cfg->checkpoint_dir, w->lo, w->hi, keep);
    rc = 0;
out:
    for (int i = 0; i < 3; i++)
        free(whole[i]);
    free(mf);
    free(vf);
    free(pf);
    return rc != 0 ? herr_wrap(e, "checkpoint at step %ld", w->step) : 0;
}

/* The newest checkpoint step the job recorded (latest-step, written by rank 0 once every
 * stage has written its file); one process without that marker: its own newest. 1 when there
 * is none. */
static int resume_newest(struct worker *w, const int64_t *steps, int nsteps, long *step, herr *e)
{
    const char *dir = w->cfg->checkpoint_dir;
    long long v;
    int r = ckpt_read_latest_step(dir, &v, e);
    if (r < 0)
        return -1;
    if (r == 0) {
        *step = (long)v;
        return 0;
    }
    if (w->P == 1 && w->D == 1 && nsteps > 0) {
        *step = (long)steps[nsteps - 1];
        return 0;
    }
    return 1;
}

/* Every rank's `mine`, combined: the minimum (all-gathers: the tensor ranks of each place, the
 * replicas of each stage, then the stages of each replica). */
static int world_min(struct worker *w, long mine, long *out, herr *e)
{
    struct comm *groups[3] = {w->tp, w->dp, w->pp};
    int sizes[3] = {w->TP, w->D, w->P};
    int64_t v = mine;
    for (int g = 0; g < 3; g++) {
        if (!groups[g] || sizes[g] < 2)
            continue;
        int64_t *all = calloc((size_t)sizes[g], sizeof *all);
        if (!all)
            return herr_set(e, "out of memory");
        size_t off, len;
        comm_chunk(groups[g], (size_t)sizes[g], comm_rank(groups[g]), &off, &len);
        for (size_t i = off; i < off + len; i++)
            all[i] = v;
        if (comm_all_gather(groups[g], all, (size_t)sizes[g], sizeof *all, e) != 0) {
            free(all);
            return -1;
        }
        for (int i = 0; i < sizes[g]; i++)
            v = all[i] < v ? all[i] : v;
        free(all);
    }
    *out = (long)v;
    return 0;
}

/* Reads this stage's checkpoint at `step` into the parameters and mf, vf (the stage's layout;
 * the set holds whole stages, of whatever plan wrote it (ckpt_layout.h): with tensor parallelism
 * each rank keeps its part, so a checkpoint written under one plan resumes under another). */
static int read_step(struct worker *w, long step, float *mf, float *vf, size_t n, herr *e)
{
    struct ckpt_meta meta;
    size_t N = gpt_stage_full_params(w->gs);
    float *whole = w->TP > 1 ? calloc(3 * N, sizeof *whole) : NULL;
    if (w->TP > 1 && !whole)
        return herr_set(e, "out of memory for the whole stage (%zu floats)", 3 * N);
    int rc = whole ? ckpt_layout_read(w->cfg->checkpoint_dir, step, &w->cfg->model, w->lo, w->hi,
                                      whole, whole + N, whole + 2 * N, N, &meta, e)
                   : ckpt_layout_read(w->cfg->checkpoint_dir, step, &w->cfg->model, w->lo, w->hi,
                                      gpt_stage_params(w->gs), mf, vf, n, &meta, e);
    if (rc == 0 && whole) {
        gpt_stage_from_full(w->gs, whole, gpt_stage_params(w->gs));
        gpt_stage_from_full(w->gs, whole + N, mf);
        gpt_stage_from_full(w->gs, whole + 2 * N, vf);
    }
    free(whole);
    /* a set written before the save-time check (ckpt_finite), or by another program */
    char where[96];
    const char *what = rc != 0 ? NULL
                               : state_nonfinite(w, gpt_stage_params(w->gs), mf, vf, n, where,
                                                 sizeof where);
    if (what)
        return herr_set_kind(e, HERR_CONFIG, "stage %d's %s %s is not finite", w->stage, what,
                             where);
    return rc;
}

/* Resumes from the newest checkpoint set that verifies on every stage: a set whose file fails
 * its checks on any rank (CRC, truncation, a missing file) is passed over for the next older
 * one that every rank has, and the fallback is logged. No set verifying at all is an error:
 * training never restarts from scratch over checkpoints it could not read. */
int tr_ckpt_resume(struct worker *w, const struct trainer_hooks *hooks, int *resumed,
                       herr *e)
{
    const char *dir = w->cfg->checkpoint_dir;
    *resumed = 0;
    int64_t *steps = NULL;
    int nsteps = 0;
    long newest;
    if (ckpt_set_steps(dir, &steps, &nsteps, e) != 0)
        return herr_wrap(e, "resuming");
    int r = resume_newest(w, steps, nsteps, &newest, e);
    if (r != 0) {
        free(steps);
        return r < 0 ? herr_wrap(e, "resuming") : 0;
    }
    size_t n = gpt_stage_num_params(w->gs);
    float *mf = calloc(n ? n : 1, sizeof *mf), *vf = calloc(n ? n : 1, sizeof *vf);
    int rc = -1;
    char first_err[sizeof e->msg] = "";
    if (!mf || !vf) {
        herr_set(e, "out of memory for the checkpoint moments (%zu floats)", n);
        goto out;
    }
    for (long cand = newest;;) {
        herr me = {0};
        int ok = cand >= 0 && read_step(w, cand, mf, vf, n, &me) == 0;
        if (!ok && cand >= 0) {
            log_warn("rank %d: the checkpoint of step %ld does not verify: %s", w->rank, cand,
                     me.msg);
            if (!first_err[0])
                snprintf(first_err, sizeof first_err, "%s", me.msg);
        }
        long all_ok;
        if (world_min(w, ok, &all_ok, e) != 0)
            goto out;
        if (all_ok) { /* back to the engine: parameters, moments, masters */
            if (engine_params_upload(w->eng, e) != 0 || shard_copy(w, mf, w->m, 0, e) != 0 ||
                shard_copy(w, vf, w->v, 0, e) != 0 || zero_master_from_params(w->z, e) != 0)
                goto out;
            engine_params_changed(w->eng, 0, gpt_stage_num_params(w->gs));
            w->step = cand;
            *resumed = 1;
            if (w->rank == 0)
                log_info("resumed from the checkpoint of step %ld in %s", cand, dir);
            if (cand != newest && w->rank == 0) {
                char msg[300];
                snprintf(msg, sizeof msg, "resuming from the checkpoint of step %ld: the newer "
                         "set of step %ld does not verify on every stage (see the workers' logs)",
                         cand, newest);
                log_warn("%s", msg);
                if (hooks && hooks->on_notice)
                    hooks->on_notice(hooks->ctx, "CheckpointFallback", msg);
            }
            rc = 0;
            break;
        }
        if (cand < 0) {
            int named = 0; /* whether latest-step's step has files here at all */
            char others[160] = "";
            for (int i = 0, at = 0; i < nsteps; i++) {
                named |= steps[i] == newest;
                if (at < (int)sizeof others - 24)
                    at += snprintf(others + at, sizeof others - (size_t)at, "%s%lld",
                                   at ? ", " : "", (long long)steps[i]);
            }
            if (!named)
                herr_config(e, "%s/latest-step: names step %ld, but %s holds no file of that "
                            "step (its sets: %s; a set newer than latest-step was never marked "
                            "whole and is not resumed from)", dir, newest, dir,
                            nsteps ? others : "none");
            else
                herr_config(e, "no checkpoint set in %s verifies on every stage%s%s", dir,
                            first_err[0] ? "; this rank's first error: " : "", first_err);
            goto out;
        }
        long next = -1; /* this rank's newest older step, agreed as the oldest of them */
        for (int i = 0; i < nsteps; i++)
            if (steps[i] < cand && steps[i] > next)
                next = (long)steps[i];
        if (world_min(w, next, &cand, e) != 0)
            goto out;
    }
out:
    free(steps);
    free(mf);
    free(vf);
    return rc != 0 ? herr_wrap(e, "resuming") : 0;
}

/* This stage's parameters from a GPT-2 model file (c->init_from: llm.c's checkpoint or
 * safetensors, model_import.h): its layers, plus the embeddings, final LayerNorm and tied head
 * where it holds them; the optimizer's masters follow. */
int tr_init_from_llmc(struct worker *w, herr *e)
{
    const struct trainer_config *c = w->cfg;
    const char *what = c->init_from_name ? c->init_from_name : "init_from";
    if (w->TP == 1) {
        if (model_import_stage(c->init_from, w->gs, e) != 0)
            return herr_wrap(e, "%s", what);
    } else { /* the whole stage (one token of activations), then this rank's part */
        struct gpt_stage *whole = NULL;
        int rc = gpt_stage_create(&whole, &c->model, w->lo, w->hi, 1, 1, 1, e) ||
                 model_import_stage(c->init_from, whole, e);
        if (rc == 0)
            gpt_stage_from_full(w->gs, gpt_stage_params(whole), gpt_stage_params(w->gs));
        gpt_stage_free(whole);
        if (rc != 0)
            return herr_wrap(e, "%s", what);
    }
    char where[96];
    if (first_nonfinite(w, gpt_stage_params(w->gs), gpt_stage_num_params(w->gs), where,
                        sizeof where))
        return herr_set_kind(e, HERR_CONFIG, "%s: model file %s: %s is not finite", what,
                             c->init_from, where);
    if (engine_params_upload(w->eng, e) != 0 || zero_master_from_params(w->z, e) != 0)
        return herr_wrap(e, "%s", what);
    engine_params_changed(w->eng, 0, gpt_stage_num_params(w->gs));
    return 0;
}
