/* The two library functions the CPU engine needs beyond libc, for the self-contained GPU build
 * (see shim/cblas.h, shim/zlib.h). Self-contained on purpose: tests/unit/test_cuda_shim.c
 * includes this file beside the real OpenBLAS and zlib and compares them. */
#include <stddef.h>

#define SHIM_ROW_MAJOR 101
#define SHIM_TRANS 112

void holmes_shim_sgemm(int order, int transA, int transB, int M, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc);
unsigned long holmes_shim_crc32(unsigned long crc, const unsigned char *buf, unsigned len);

void holmes_shim_sgemm(int order, int transA, int transB, int M, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc)
{
    if (order != SHIM_ROW_MAJOR) /* gpt.c calls row-major only */
        return;
    size_t sa_row = transA == SHIM_TRANS ? 1 : (size_t)lda; /* A(i, p) = A[i*sa_row + p*sa_col] */
    size_t sa_col = transA == SHIM_TRANS ? (size_t)lda : 1;
    size_t sb_row = transB == SHIM_TRANS ? 1 : (size_t)ldb; /* B(p, j) = B[p*sb_row + j*sb_col] */
    size_t sb_col = transB == SHIM_TRANS ? (size_t)ldb : 1;
#pragma omp parallel for
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int p = 0; p < K; p++)
                acc += A[i * sa_row + p * sa_col] * B[p * sb_row + j * sb_col];
            float *c = C + (size_t)i * ldc + j;
            *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
        }
}

unsigned long holmes_shim_crc32(unsigned long crc, const unsigned char *buf, unsigned len)
{
    if (!buf)
        return 0;
    unsigned long table[256];
    for (unsigned n = 0; n < 256; n++) {
        unsigned long c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320UL ^ (c >> 1) : c >> 1;
        table[n] = c;
    }
    crc = ~crc & 0xffffffffUL;
    for (unsigned i = 0; i < len; i++)
        crc = table[(crc ^ buf[i]) & 0xff] ^ (crc >> 8);
    return ~crc & 0xffffffffUL;
}
