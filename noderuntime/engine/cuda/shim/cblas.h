/* Stand-in for OpenBLAS's <cblas.h> in the self-contained GPU build (mk/cuda.mk): the GPU machines
 * have no OpenBLAS, and the CPU engine there only serves as the tiny-config reference of
 * test_gpu. Only what noderuntime/engine/gpt.c uses; values as in the reference CBLAS. */
#ifndef HOLMES_SHIM_CBLAS_H
#define HOLMES_SHIM_CBLAS_H

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };

/* cpu_shim.c: row-major C = alpha op(A) op(B) + beta C (C is not read when beta == 0) */
void holmes_shim_sgemm(int order, int transA, int transB, int M, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc);
#define cblas_sgemm holmes_shim_sgemm
#define openblas_set_num_threads(n) ((void)(n))

#endif
