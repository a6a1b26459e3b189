/* A GPT-2 style tokenizer for the unit tests: llm.c's tokenizer file (version 2) written into a
 * test's directory and opened. */
#ifndef HOLMES_VOCAB_TESTUTIL_H
#define HOLMES_VOCAB_TESTUTIL_H

#include "tokenizer.h"

/* dir/tok-N.bin: the 256 bytes (ids 0-255; token b is byte b, unless b == skip: then "x", so
 * the vocabulary lacks that byte), then pieces[0, n) (ids 256...), then "<|endoftext|>"; the
 * tokenizer read back, or NULL (the reason printed as a "# " line). */
struct tokenizer *test_vocab(const char *dir, const char *const *pieces, int n, int skip);

#endif
