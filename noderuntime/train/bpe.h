/* GPT-2's byte-level BPE, encoding: UTF-8 text into the tokens of an llm.c tokenizer file
 * (tokenizer.h), as OpenAI's tiktoken encodes with `encode_ordinary` (llm.c's data scripts).
 *
 * The text is first cut into pieces by GPT-2's pattern (contractions, an optional space and
 * letters, an optional space and digits, an optional space and other symbols, whitespace),
 * matched by PCRE2 with Unicode properties. Each piece's bytes are then merged: every byte is
 * a token, and the adjacent pair whose concatenation is the token of the lowest id is merged
 * first (the leftmost among equals), until no adjacent pair is a token. In GPT-2's vocabulary a
 * token's id is its merge rank (the 256 bytes, then the 50,000 merges in order, then
 * end-of-text), so the ids are the ranks and no merges file is needed. The end-of-text token
 * is not a merge result: "<|endoftext|>" in the text is encoded as text. The merging keeps its
 * pairs in a heap, so a long piece (a megabyte of spaces) costs n log n, not n².
 *
 * Text is refused when it is not UTF-8 (the byte offset is named), and a vocabulary when one of
 * the 256 bytes has no token (not byte-level BPE). */
#ifndef HOLMES_BPE_H
#define HOLMES_BPE_H

#include <stddef.h>

#include "error.h"
#include "tokenizer.h"

struct bpe;

/* An encoder over t's vocabulary (t must outlive it). */
int bpe_create(struct bpe **out, const struct tokenizer *t, herr *e);
void bpe_free(struct bpe *b);

/* A growing array of tokens (zero it to start; free v). */
struct bpe_tokens {
    int *v;
    size_t n, cap;
};

/* Appends the tokens of text[0, len) to out. origin: where text begins in its file, for the
 * byte offsets errors name. On an error out holds the tokens of the pieces before it. */
int bpe_encode(struct bpe *b, const char *text, size_t len, size_t origin, struct bpe_tokens *out,
               herr *e);

/* A place to cut text[0, len) so that encoding the two parts apart gives the same tokens as
 * encoding it whole: after the last newline that has a visible ASCII character on each side
 * (no piece of GPT-2's pattern crosses it, and the whitespace lookahead at the first part's end
 * sees the same). 0 when there is none. For reading a large text file in chunks. */
size_t bpe_safe_cut(const char *text, size_t len);

#endif
