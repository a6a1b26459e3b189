/* The self-contained GPU build (mk/cuda.mk) compiles the CPU reference engine against
 * noderuntime/engine/cuda/cpu_shim.c instead of OpenBLAS and zlib: check both stand-ins against the real
 * libraries here, where both exist (sgemm in every transpose combination, with beta 0 and 1 and
 * padded leading dimensions; crc32 on random data, in pieces, and the zlib conventions). */
#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <zlib.h>

#include "test.h"

#include "../../noderuntime/engine/cuda/cpu_shim.c"

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void check_sgemm(int ta, int tb, float beta)
{
    int M = 13, N = 17, K = 29, pad = 3;
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B);
    float *C1 = malloc(nc * sizeof *C1), *C2 = malloc(nc * sizeof *C2);
    char name[64];
    snprintf(name, sizeof name, "shim.sgemm ta=%d tb=%d beta=%g", ta, tb, beta);
    if (!A || !B || !C1 || !C2) {
        TEST_FAIL(name, "out of memory");
        return;
    }
    uint64_t s = 7 + ta * 2 + tb;
    for (size_t i = 0; i < na; i++) A[i] = frand(&s);
    for (size_t i = 0; i < nb; i++) B[i] = frand(&s);
    for (size_t i = 0; i < nc; i++) C1[i] = C2[i] = frand(&s);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, 0.5f, A, lda, B, ldb, beta, C1, ldc);
    holmes_shim_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                      tb ? CblasTrans : CblasNoTrans, M, N, K, 0.5f, A, lda, B, ldb, beta, C2,
                      ldc);
    double worst = 0.0;
    int pad_kept = 1;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double d = fabs((double)C1[(size_t)i * ldc + j] - C2[(size_t)i * ldc + j]);
            worst = d > worst ? d : worst;
        }
        for (int j = N; j < ldc; j++) /* the padding columns are not written */
            pad_kept &= C1[(size_t)i * ldc + j] == C2[(size_t)i * ldc + j];
    }
    if (worst < 1e-5 && pad_kept)
        TEST_PASS(name);
    else
        TEST_FAIL(name, "max difference %g, padding kept %d", worst, pad_kept);
    free(A);
    free(B);
    free(C1);
    free(C2);
}

int main(void)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_sgemm(ta, tb, 0.0f);
            check_sgemm(ta, tb, 1.0f);
        }

    unsigned char buf[4099];
    uint64_t s = 99;
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(frand(&s) * 127.0f + 128.0f);
    CHECK_INT("shim.crc32 start value", holmes_shim_crc32(0, NULL, 0), crc32(0, Z_NULL, 0));
    CHECK_INT("shim.crc32 \"123456789\"", holmes_shim_crc32(0, (const unsigned char *)"123456789", 9),
              0xcbf43926UL);
    CHECK_INT("shim.crc32 random 4099 bytes", holmes_shim_crc32(0, buf, sizeof buf),
              crc32(0, buf, sizeof buf));
    unsigned long a = holmes_shim_crc32(0, buf, 1000);
    a = holmes_shim_crc32(a, buf + 1000, sizeof buf - 1000);
    CHECK_INT("shim.crc32 in two pieces", a, crc32(0, buf, sizeof buf));
    TEST_MAIN_END();
}
