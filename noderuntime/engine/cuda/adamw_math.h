/* AdamW's update of one element, the same formula as optimizer.c's adamw_update (PyTorch's,
 * with 1/(1 - b1^t) and 1/sqrt(1 - b2^t) hoisted out of the loop), for the GPU kernel (adamw.cu)
 * and for the CPU check of that formula (tests/unit/test_cuda_adamw.c). Plain C; __host__
 * __device__ under nvcc. */
#ifndef HOLMES_ADAMW_MATH_H
#define HOLMES_ADAMW_MATH_H

#include <math.h>

#ifdef __CUDACC__
#define ADAMW_HD __host__ __device__ __forceinline__
#else
#define ADAMW_HD static inline
#endif

struct adamw_coef {
    float lr, b1, b2, eps, c1, c2; /* c1 = 1 / (1 - b1^step), c2 = 1 / sqrt(1 - b2^step) */
};

/* The step's coefficients, as optimizer.c computes them (in float). */
ADAMW_HD struct adamw_coef adamw_coef_make(float lr, float b1, float b2, float eps, long step)
{
    struct adamw_coef k;
    float bc1 = 1.0f - powf(b1, (float)step), bc2 = 1.0f - powf(b2, (float)step);
    k.lr = lr;
    k.b1 = b1;
    k.b2 = b2;
    k.eps = eps;
    k.c1 = 1.0f / bc1;
    k.c2 = 1.0f / sqrtf(bc2);
    return k;
}

/* p, m, v updated for gradient g (already times the clip scale gs), weight decay wd */
ADAMW_HD void adamw_elem(const struct adamw_coef *k, float *p, float *m, float *v, float g,
                         float gs, float wd)
{
    float gi = g * gs;
    float mi = k->b1 * *m + (1.0f - k->b1) * gi;
    float vi = k->b2 * *v + (1.0f - k->b2) * gi * gi;
    *m = mi;
    *v = vi;
    *p -= k->lr * ((mi * k->c1) / (sqrtf(vi) * k->c2 + k->eps) + wd * *p);
}

#endif
