/* Multiple-choice evaluation, as llm.c and its Python reference score HellaSwag ("completion
 * style"): each example is a context and a few completions, one of them right. Every completion
 * is appended to the context and the model's cross-entropy is taken over the completion's tokens
 * alone (the positions from the context's last token on predict them), as the engine computes
 * it (so any engine scores: the CPU's, or a GPU's). The model's choice is the
 * completion of the least summed loss ("acc"), or of the least mean loss over its tokens
 * ("acc_norm", llm.c's figure), the first among equals.
 *
 * Two files are read, told apart by their first bytes:
 *   llm.c's eval file (dev/data/data_common.py write_evalfile, e.g. hellaswag_val.bin): 256 int32
 *     (magic 20240522, version 1, examples, longest example in bytes), then per example uint16:
 *     65535, the example's bytes, its index, the label, the completions, then the context's
 *     length and tokens and each completion's length and tokens;
 *   JSON lines, HellaSwag's own (rowanz/hellaswag's hellaswag_val.jsonl): each line an object
 *     with "ctx" (string), "endings" (2 to CHOICE_MAX strings) and "label" (the right ending's
 *     index, a number or a string of digits); other keys are passed over. The context is
 *     encoded as it is and each ending with a space before it (as llm.c does), with GPT-2's BPE
 *     (bpe.h) or, without an encoder, one token per byte (a model trained on text data).
 * Errors name the file and the example (its line, or its index in an llm.c file) and the rule
 * broken. */
#ifndef HOLMES_CHOICE_EVAL_H
#define HOLMES_CHOICE_EVAL_H

#include <stddef.h>

#include "bpe.h"
#include "error.h"
#include "engine.h"
#include "gpt.h"

#define CHOICE_EVAL_MAGIC 20240522
#define CHOICE_MAX 16 /* completions an example may have */

struct choice_example {
    long where;            /* the JSON line (from 1), or the index in an llm.c file */
    int label;             /* the right completion, in [0, n) */
    int n;                 /* completions, 2 .. CHOICE_MAX */
    int ctx_len;           /* >= 1 */
    int len[CHOICE_MAX];   /* each completion's tokens, >= 1 */
    int *tok;              /* the context's tokens, then each completion's */
};

struct choice_set {
    struct choice_example *ex;
    size_t n;
    int jsonl;             /* read from JSON lines (where is a line), else an llm.c file */
};

/* Reads path (either kind, above) into *out; b encodes JSON lines' text (NULL: one token per
 * byte; unused for llm.c files). At most `limit` examples (0: all). An empty file is refused. */
int choice_set_read(struct choice_set *out, const char *path, struct bpe *b, size_t limit,
                    herr *e);
void choice_set_free(struct choice_set *s);

/* The most completions of an example, and the most positions an example's rows need (the
 * context and its longest completion, less one: the last token is only predicted). */
int choice_set_max_completions(const struct choice_set *s);
int choice_set_max_positions(const struct choice_set *s);

/* Scores x through the engine en: the whole model (layers [0, L), no tensor parallelism) of one
 * sequence and some T positions. Each completion is a forward in two token slices of the context
 * and the completion (engine_forward's slices): the first, of the context's positions but its
 * last, only makes the keys and values the second reads; the second's loss is the completion's
 * tokens' summed cross-entropy (the engine's share of it, times T). Where the context and a
 * completion exceed T, the context's first tokens are dropped (*dropped says how many; 0
 * otherwise); a completion that leaves no context token is refused. sum[i] and mean[i] get
 * completion i's summed and mean cross-entropy (nats). Every token must be below the
 * vocabulary. */
int choice_score(struct engine *en, const struct choice_example *x, double *sum, double *mean,
                 int *dropped, herr *e);

/* The index of the least of v[0, n) (the first among equals). */
int choice_pick(const double *v, int n);

#endif
