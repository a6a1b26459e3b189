/* bfloat16 <-> float, as every bf16 wire of the engine rounds: to nearest even, a NaN stays a
 * NaN (quiet), overflow goes to infinity. The pipeline's activations (parallelism.pipelineDtype)
 * and the distributed optimizer's parameter all-gather (parallelism.paramGatherDtype) use it. */
#ifndef HOLMES_BF16_H
#define HOLMES_BF16_H

#include <stdint.h>

uint16_t bf16_from_float(float x);
float bf16_to_float(uint16_t b);
/* x rounded to the nearest bfloat16, as a float */
static inline float bf16_round(float x) { return bf16_to_float(bf16_from_float(x)); }

#endif
