/* bfloat16 <-> float, as every bf16 wire of the engine rounds: to nearest even, a NaN stays a
 * NaN (quiet), overflow goes to infinity. The pipeline's activations (parallelism.pipelineDtype)
 * and the distributed optimizer's parameter all-gather (parallelism.paramGatherDtype) use it. */
#ifndef HOLMES_BF16_H
#define HOLMES_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t bf16_from_float(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one (quiet), whatever the payload */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* ties to even; overflow rounds to infinity */
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x rounded to the nearest bfloat16, as a float */
static inline float bf16_round(float x) { return bf16_to_float(bf16_from_float(x)); }

/* n values at a time (the loops the wires run; the compiler vectorises them) */
void bf16_pack(uint16_t *dst, const float *src, size_t n);
void bf16_unpack(float *dst, const uint16_t *src, size_t n);

#endif
