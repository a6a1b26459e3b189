/* The text of tokens: llm.c's GPT-2 tokenizer file (`gpt2_tokenizer.bin`, written by llm.c's
 * dev/data scripts beside the token shards): a header of 256 uint32 (magic 20240328, version 1
 * or 2, the vocabulary size, version 2: the end-of-text token), then each token's bytes as a
 * length (uint8, at least 1) and the bytes. Decoding only: a token is its bytes, the text of a
 * sequence their concatenation (GPT-2's byte-level BPE). Models trained on text data without a
 * tokenizer are byte-level: token b < 256 is the byte b.
 * Also read: transformers' vocab.json of a byte-level BPE ({"token": id}, each byte written as
 * GPT-2's bytes_to_unicode character: "\u0120the" is " the"; the end-of-text token is the one
 * named "<|endoftext|>"), told apart by its first character, and a Hugging Face model
 * directory (its vocab.json), so that `huggingface-cli download gpt2` gives all Holmes needs. */
#ifndef HOLMES_TOKENIZER_H
#define HOLMES_TOKENIZER_H

#include <stddef.h>

#include "error.h"

struct tokenizer;

/* Reads the file; errors name it and what is wrong (magic, version, a truncated token). */
int tokenizer_open(struct tokenizer **out, const char *path, herr *e);
void tokenizer_free(struct tokenizer *t);

int tokenizer_vocab(const struct tokenizer *t);
/* The end-of-text token (version 2; 50256 for a version 1 file of GPT-2's 50257 tokens); -1
 * when the file does not say. */
int tokenizer_eot(const struct tokenizer *t);
/* Token tok's bytes (*len of them, not NUL-terminated); NULL for a token outside the file. */
const char *tokenizer_piece(const struct tokenizer *t, int tok, size_t *len);

#endif
