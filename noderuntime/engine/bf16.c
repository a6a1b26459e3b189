#include "bf16.h"

void bf16_pack(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_from_float(src[i]);
}

void bf16_unpack(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_to_float(src[i]);
}
