/* The trainer's private parts, shared by trainer.c (setup, the step, the tied embedding) and
 * trainer_ckpt.c (checkpoints: save, resume with fallback, initFrom). */
#ifndef HOLMES_TRAINER_IMPL_H
#define HOLMES_TRAINER_IMPL_H

#include "comm.h"
#include "engine.h"
#include "gpt.h"
#include "pipeline.h"
#include "trainer.h"
#include "zero.h"

/* ---------- one worker's state ---------- */

struct worker {
    const struct trainer_config *cfg;
    const struct plan_doc *rt;
    const struct trainer_data *data;
    int rank, stage, replica, P, D, M;
    int TP, tpr;               /* tensor-parallel group size and this rank's place in it */
    int first, last;           /* stage holds embeddings / head */
    int lo, hi;                /* its layers [lo, hi) */
    struct comm *pp, *dp, *emb, *tp;  /* pp: the pipeline group's collectives (the norm) */
    struct pipe_link prev, next;      /* the links to the neighbour stages (link groups) */
    struct engine *eng;
    struct gpt_stage *gs;      /* the engine's host stage: layout; host buffers for checkpoints */
    struct devmem *mem;        /* the engine's memory: parameters, gradients, optimizer state */
    struct zero *z;
    float *m, *v;              /* AdamW state of the owned shard (engine memory) */
    size_t *norm_lo, *norm_hi; /* the gradient ranges this rank's norm adds up */
    int nnorm;
    int *tokens, *targets;     /* [slots][B*T] (host) */
    int slots;
    long step;                 /* steps done */
    int nonfinite_run;         /* steps skipped in a row for a non-finite loss or norm */
    long last_update;          /* the last step that updated the parameters (0: none yet) */
    const struct trainer_hooks *hooks;
    size_t wte_off, wte_n;
    int has_wte;
    struct lr_schedule lr;     /* total_steps defaults to the run's steps */
    const struct gpt_tensor *tens;
    int ntens;
    int *reported;             /* [ntens]: gradient handed to ZeRO this step */
    int *tens_layer;           /* [ntens]: transformer block, -1 for the others */
    int evaluating;            /* forwards read the held-out data (trainer_data.eval_batch) */
    int hook_failed;
    herr hook_err;
    int params_pending;        /* the last step's parameter all-gather is still in flight */
    double param_wait;         /* this step's forward waited this long for it */
    /* The tied embedding (pipeline > 1): see "the tied embedding". */
    int tied;                  /* first or last stage of a pipeline > 1 */
    int tie_params_due;        /* last stage: its embedding update is still to do */
    float tie_lr, tie_scale;   /* ... with this step's learning rate and gradient scale */
    long tie_step;
    struct tie_shard {
        int bucket;
        size_t lo, hi;         /* this replica's shard of the bucket */
        size_t at;             /* where it sits in tie_out and tie_in */
    } *tie;                    /* [ntie] the embedding's buckets, in buffer order */
    int ntie;
    struct comm_req **tie_sends; /* [ntie] sends in flight (from tie_out) */
    float *tie_out;            /* [wte_n] this stage's gradient shards, as sent (engine memory) */
    float *tie_in;             /* [wte_n] the other stage's, as received (engine memory) */
    float *tie_sum;            /* [wte_n] last stage: their sum, the update's gradient */
};

/* Every parameter gathered (before anything reads them all). */
int tr_params_ready(struct worker *w, herr *e);
/* trainer_ckpt.c */
int tr_ckpt_save(struct worker *w, herr *e);
int tr_ckpt_resume(struct worker *w, const struct trainer_hooks *hooks, int *resumed, herr *e);
int tr_init_from_llmc(struct worker *w, herr *e);

#endif
