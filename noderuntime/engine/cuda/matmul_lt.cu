/* cuBLASLt's products for the engine (matmul.cu's linear layers and the GEMM ceiling call
 * matmul()): descriptors and layouts made once per shape and epilogue and kept in the context
 * (lt_cache); the algorithm chosen once per process for each shape: the candidates cuBLASLt's
 * heuristic offers (up to LT_CANDIDATES, or HOLMES_GPU_GEMM_CANDIDATES from 1 to LT_MAX_CANDIDATES
 * for trying more) are timed on the real operands and the fastest is kept
 * unless it beats the heuristic's first by less than LT_MARGIN (so that noise rarely flips the
 * choice between runs). Different algorithms may round differently, so two processes that choose
 * differently do not repeat each other bit for bit; HOLMES_GPU_GEMM_TUNE=0 keeps the heuristic's
 * first choice (deterministic for a cuBLAS version and a GPU). Within a process every stage uses
 * the same choices, and a process given a choices file (gpu_gemm_choices_file: the trainer keeps
 * one per rank beside its checkpoints) takes the choices an earlier process made from it and
 * adds its own, so a run resumed from a checkpoint repeats the uninterrupted one bit for bit. */
#include <pthread.h>

#include "stage.cuh"

#define LT_CANDIDATES 8
#define LT_MAX_CANDIDATES 32
#define LT_MARGIN 0.95f

namespace GPU_NS {

namespace {


/* ---------------------------------------------------------------- the caches */

/* What a product's descriptors and algorithm depend on */
struct lt_key {
    int32_t ta, tb, m, n, k, lda, ldb, ldd, dtype, epi, ldaux;
    uint32_t aa, ab, ac, ad; /* the operands' alignments (bytes, up to 256) */
};

/* The process's choices of algorithm, shared by every context (and thread) */
struct lt_choice {
    struct lt_key key;
    int dev, have_algo;
    cublasLtMatmulAlgo_t algo;
};
pthread_mutex_t g_choice_mu = PTHREAD_MUTEX_INITIALIZER;
struct lt_choice *g_choice;
int g_nchoice, g_capchoice;

/* The choices file (gpu_gemm_choices_file): "" when none. Its records name the GPU, cuBLASLt's
 * version and the precision; records of another are passed over. */
char g_file[1024];

void gpu_ident(char *buf, size_t n)
{
    cudaDeviceProp prop;
    int dev = 0;
    cudaGetDevice(&dev);
    const char *name = cudaGetDeviceProperties(&prop, dev) == cudaSuccess ? prop.name : "?";
    snprintf(buf, n, "%s-%zu-%s", PREC_NAME, (size_t)cublasLtGetVersion(), name);
    for (char *q = buf; *q; q++) /* one word */
        if (*q == ' ' || *q == '\t' || *q == '\n')
            *q = '_';
}

/* One record: "ident key... algo...", the key's 15 fields and the algorithm's 8 words. */
void choice_append(const struct lt_choice *c)
{
    if (!g_file[0])
        return;
    FILE *f = fopen(g_file, "a");
    if (!f)
        return; /* an optimisation for exact resumes: the run goes on without it */
    char id[300];
    gpu_ident(id, sizeof id);
    const struct lt_key *k = &c->key;
    fprintf(f, "%s %d %d %d %d %d %d %d %d %d %d %d %u %u %u %u %d", id, k->ta, k->tb, k->m, k->n,
            k->k, k->lda, k->ldb, k->ldd, k->dtype, k->epi, k->ldaux, k->aa, k->ab, k->ac, k->ad,
            c->have_algo);
    for (int i = 0; i < 8; i++)
        fprintf(f, " %llx", (unsigned long long)c->algo.data[i]);
    fputc('\n', f);
    fclose(f);
}

/* The file's records for this GPU, cuBLASLt and precision into the process's choices (lock held). */
void choices_load(void)
{
    FILE *f = fopen(g_file, "r");
    if (!f)
        return;
    char id[300], line[1024], word[300];
    gpu_ident(id, sizeof id);
    int dev = 0;
    cudaGetDevice(&dev);
    while (fgets(line, sizeof line, f)) {
        struct lt_choice c;
        memset(&c, 0, sizeof c);
        struct lt_key *k = &c.key;
        unsigned long long a[8];
        int n = sscanf(line, "%299s %d %d %d %d %d %d %d %d %d %d %d %u %u %u %u %d %llx %llx %llx "
                       "%llx %llx %llx %llx %llx", word, &k->ta, &k->tb, &k->m, &k->n, &k->k,
                       &k->lda, &k->ldb, &k->ldd, &k->dtype, &k->epi, &k->ldaux, &k->aa, &k->ab,
                       &k->ac, &k->ad, &c.have_algo, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5],
                       &a[6], &a[7]);
        if (n != 25 || strcmp(word, id) != 0) /* another GPU's, or a line cut short by a crash */
            continue;
        for (int i = 0; i < 8; i++)
            c.algo.data[i] = (uint64_t)a[i];
        c.dev = dev;
        int seen = 0;
        for (int i = 0; i < g_nchoice && !seen; i++)
            seen = g_choice[i].dev == dev && memcmp(&g_choice[i].key, k, sizeof *k) == 0;
        if (seen)
            continue;
        if (g_nchoice == g_capchoice) {
            int cap = g_capchoice ? 2 * g_capchoice : 64;
            struct lt_choice *ng = (struct lt_choice *)realloc(g_choice, (size_t)cap * sizeof *ng);
            if (!ng)
                break;
            g_choice = ng;
            g_capchoice = cap;
        }
        g_choice[g_nchoice++] = c;
    }
    fclose(f);
}

int tune_enabled(void)
{
    const char *e = getenv("HOLMES_GPU_GEMM_TUNE");
    return !(e && strcmp(e, "0") == 0);
}

/* the candidates to time: HOLMES_GPU_GEMM_CANDIDATES (1..LT_MAX_CANDIDATES), else LT_CANDIDATES;
 * -1 (EB) when the variable is set to anything else */
int candidates_wanted(char *EB, size_t EN)
{
    int v = LT_CANDIDATES;
    return env_int("HOLMES_GPU_GEMM_CANDIDATES", 1, LT_MAX_CANDIDATES, &v, EB, EN) < 0 ? -1 : v;
}

} /* namespace */

/* A context's descriptors for one key, and the algorithm (have_algo 0: cuBLASLt has none) */
struct lt_plan {
    struct lt_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    int have_algo;
};
struct lt_cache {
    struct lt_plan *p;
    int n, cap;
};

namespace {

void plan_destroy(struct lt_plan *p)
{
    if (p->lc)
        cublasLtMatrixLayoutDestroy(p->lc);
    if (p->lb)
        cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la)
        cublasLtMatrixLayoutDestroy(p->la);
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
}

/* The descriptors of a key (bias and aux pointers are set per call). 0, or -1 (EB). */
int plan_make(struct lt_plan *p, const struct lt_key *k, char *EB, size_t EN)
{
    cublasStatus_t st;
    cublasOperation_t opa = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_DEFAULT;
    int64_t ldaux64 = k->ldaux;
    memset(p, 0, sizeof *p);
    p->key = *k;
#define LTCK(call) do { st = (call); if (st != CUBLAS_STATUS_SUCCESS) { \
        plan_destroy(p); \
        return fail_msg(EB, EN, "cuBLASLt: %s failed (%s:%d): %s", #call, __FILE__, __LINE__, \
                        cublasGetStatusString(st)); } } while (0)
    LTCK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LTCK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LTCK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (k->epi == EPI_BIAS)
        e = CUBLASLT_EPILOGUE_BIAS;
    else if (k->epi == EPI_GELU_BIAS)
        e = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    else if (k->epi == EPI_DGELU)
        e = CUBLASLT_EPILOGUE_DGELU;
    LTCK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    if (k->epi == EPI_GELU_BIAS || k->epi == EPI_DGELU)
        LTCK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux64,
                                            sizeof ldaux64));
    LTCK(cublasLtMatrixLayoutCreate(&p->la, CUDA_X, k->ta ? k->k : k->m, k->ta ? k->m : k->k, k->lda));
    LTCK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_X, k->tb ? k->n : k->k, k->tb ? k->k : k->n, k->ldb));
    LTCK(cublasLtMatrixLayoutCreate(&p->lc, (cudaDataType)k->dtype, k->m, k->n, k->ldd));
#undef LTCK
    return 0;
}

/* cuBLASLt's candidates for a plan (its heuristic's order); the count, 0 when it has none */
int candidates(struct gpu_ctx *x, struct lt_plan *p, cublasLtMatmulHeuristicResult_t *heur, int max)
{
    cublasLtMatmulPreference_t pref = NULL;
    uint64_t ws = LT_WORKSPACE;
    int nres = 0;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
        return 0;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p->key.aa, sizeof p->key.aa);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p->key.ab, sizeof p->key.ab);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->key.ac, sizeof p->key.ac);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p->key.ad, sizeof p->key.ad);
    if (cublasLtMatmulAlgoGetHeuristic(x->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, max, heur,
                                       &nres) != CUBLAS_STATUS_SUCCESS)
        nres = 0;
    cublasLtMatmulPreferenceDestroy(pref);
    return nres;
}

/* Times the candidates on the call's operands (D written in place when nothing reads it, else
 * into a scratch copy; the epilogue's pointers as the call's) and returns the index chosen (0
 * unless one is LT_MARGIN faster). */
int tune(struct gpu_ctx *x, struct lt_plan *p, cublasLtMatmulHeuristicResult_t *heur, int nres,
         void *D, const void *A, const void *B, float alpha, float beta, const void *C,
         const void *bias, void *aux)
{
    if (nres < 2 || !tune_enabled())
        return 0;
    size_t dsz = p->key.dtype == CUDA_R_32F ? 4 : 2;
    size_t dbytes = (size_t)p->key.ldd * (size_t)p->key.n * dsz;
    const void *Cr = C ? C : D;
    void *Dt = D, *scratch = NULL;
    if (beta != 0.0f && Cr == D) { /* D is read (accumulation): time into a scratch copy */
        if (cudaMalloc(&scratch, dbytes) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        Dt = scratch;
    }
    if (p->key.epi == EPI_BIAS || p->key.epi == EPI_GELU_BIAS)
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (p->key.epi == EPI_GELU_BIAS || p->key.epi == EPI_DGELU)
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    cudaEvent_t e0 = NULL, e1 = NULL;
    float best = 0.0f, first = 0.0f;
    int pick = 0;
    if (cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
        for (int i = 0; i < nres; i++) {
            float t = -1.0f;
            int ok = cublasLtMatmul(x->lt, p->op, &alpha, A, p->la, B, p->lb, &beta, Cr, p->lc, Dt,
                                    p->lc, &heur[i].algo, x->ws, LT_WORKSPACE, x->stream) ==
                     CUBLAS_STATUS_SUCCESS;
            if (ok && cudaEventRecord(e0, x->stream) == cudaSuccess) {
                for (int r = 0; r < 3 && ok; r++)
                    ok = cublasLtMatmul(x->lt, p->op, &alpha, A, p->la, B, p->lb, &beta, Cr, p->lc,
                                        Dt, p->lc, &heur[i].algo, x->ws, LT_WORKSPACE,
                                        x->stream) == CUBLAS_STATUS_SUCCESS;
                if (ok && cudaEventRecord(e1, x->stream) == cudaSuccess &&
                    cudaEventSynchronize(e1) == cudaSuccess)
                    cudaEventElapsedTime(&t, e0, e1);
            }
            if (i == 0) {
                if (t <= 0.0f)
                    break; /* the first does not run: leave it to the call to say why */
                first = best = t;
            } else if (t > 0.0f && t < best && t < LT_MARGIN * first) {
                best = t;
                pick = i;
            }
        }
    }
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (scratch) {
        cudaStreamSynchronize(x->stream);
        cudaFree(scratch);
    }
    (void)cudaGetLastError();
    return pick;
}

/* The plan of a key in the context: its descriptors, and the process's choice of algorithm
 * (made now, timed on these operands, when it is the first use in the process). NULL, with EB
 * set, when cuBLASLt fails. */
struct lt_plan *plan_of(struct gpu_ctx *x, const struct lt_key *k, void *D, const void *A,
                        const void *B, float alpha, float beta, const void *C, const void *bias,
                        void *aux)
{
    char *EB = x->eb;
    size_t EN = x->en;
    struct lt_cache *c = x->cache;
    if (!c) {
        c = x->cache = (struct lt_cache *)calloc(1, sizeof *c);
        if (!c) {
            fail_msg(EB, EN, "out of memory for the cuBLASLt cache");
            return NULL;
        }
    }
    for (int i = 0; i < c->n; i++)
        if (memcmp(&c->p[i].key, k, sizeof *k) == 0)
            return &c->p[i];
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 32;
        struct lt_plan *np = (struct lt_plan *)realloc(c->p, (size_t)cap * sizeof *np);
        if (!np) {
            fail_msg(EB, EN, "out of memory for the cuBLASLt cache");
            return NULL;
        }
        c->p = np;
        c->cap = cap;
    }
    struct lt_plan *p = &c->p[c->n];
    if (plan_make(p, k, EB, EN) < 0)
        return NULL;
    int dev = 0;
    cudaGetDevice(&dev);
    pthread_mutex_lock(&g_choice_mu);
    struct lt_choice *ch = NULL;
    for (int i = 0; i < g_nchoice && !ch; i++)
        if (g_choice[i].dev == dev && memcmp(&g_choice[i].key, k, sizeof *k) == 0)
            ch = &g_choice[i];
    struct lt_choice nc;
    if (!ch) { /* the first use in the process: choose (tuning holds the lock: one at a time) */
        cublasLtMatmulHeuristicResult_t heur[LT_MAX_CANDIDATES];
        int want = candidates_wanted(EB, EN);
        if (want < 0) {
            pthread_mutex_unlock(&g_choice_mu);
            plan_destroy(p);
            return NULL;
        }
        int nres = candidates(x, p, heur, want);
        memset(&nc, 0, sizeof nc);
        nc.key = *k;
        nc.dev = dev;
        nc.have_algo = nres > 0;
        if (nres > 0)
            nc.algo = heur[tune(x, p, heur, nres, D, A, B, alpha, beta, C, bias, aux)].algo;
        if (g_nchoice == g_capchoice) {
            int cap = g_capchoice ? 2 * g_capchoice : 64;
            struct lt_choice *ng = (struct lt_choice *)realloc(g_choice, (size_t)cap * sizeof *ng);
            if (ng) {
                g_choice = ng;
                g_capchoice = cap;
            }
        }
        if (g_nchoice < g_capchoice)
            g_choice[g_nchoice++] = nc;
        choice_append(&nc);
        ch = &nc;
    }
    p->have_algo = ch->have_algo;
    p->algo = ch->algo;
    pthread_mutex_unlock(&g_choice_mu);
    c->n++;
    return p;
}

} /* namespace */

void gpu_ctx_release(struct gpu_ctx *x)
{
    if (!x->cache)
        return;
    for (int i = 0; i < x->cache->n; i++)
        plan_destroy(&x->cache->p[i]);
    free(x->cache->p);
    free(x->cache);
    x->cache = NULL;
}

/* ---------------------------------------------------------------- cuBLASLt matrix products */

static int product(struct gpu_ctx *x, struct lt_plan *p, void *D, cudaDataType dtype,
                   const void *A, const void *B, const void *C, cublasOperation_t opa,
                   cublasOperation_t opb, int m, int n, int k, int lda, int ldb, int ldd,
                   float alpha, float beta, int epi, const void *bias, void *aux);

/* Column-major D(m x n) = alpha * op(A) op(B) + beta * C (+ epilogue), A and B of the activation
 * type, C and D of dtype (C NULL: D itself). Without an epilogue, a product cuBLASLt has no
 * algorithm for goes to cublasGemmEx; with one, 1 is returned (no error set) so that the caller
 * falls back to separate kernels. */
int matmul(struct gpu_ctx *x, void *D, cudaDataType dtype, const void *A, int ta, const void *B,
           int tb, int m, int n, int k, int lda, int ldb, int ldd, float alpha, float beta,
           const void *C, int epi, const void *bias, void *aux, int ldaux)
{
    struct lt_key key;
    memset(&key, 0, sizeof key);
    key.ta = ta;
    key.tb = tb;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldd = ldd;
    key.dtype = (int32_t)dtype;
    key.epi = epi;
    key.ldaux = epi == EPI_GELU_BIAS || epi == EPI_DGELU ? ldaux : 0;
    key.aa = (uint32_t)align_of(A);
    key.ab = (uint32_t)align_of(B);
    key.ac = (uint32_t)align_of(C ? C : D);
    key.ad = (uint32_t)align_of(D);
    struct lt_plan *p = plan_of(x, &key, D, A, B, alpha, beta, C, bias, aux);
    if (!p)
        return -1;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!p->have_algo && epi != EPI_NONE)
        return 1; /* the caller falls back to separate kernels */
    /* profiled: this product alone, by shape (gpu_profile.kernels) */
    struct kernel_rec rec = {{GPU_KERNEL_PRODUCT, m, n, k, ta, tb, epi, dtype == CUDA_R_32F ? 4 : 2,
                              0, 0.0, 0.0, 0.0}, product_flop(m, n, k), 0.0};
    int timed = prof_kernel_start(x->prof, x->stream, &rec);
    int rc = product(x, p, D, dtype, A, B, C, opa, opb, m, n, k, lda, ldb, ldd, alpha, beta, epi,
                     bias, aux);
    prof_kernel_end(x->prof, x->stream, timed);
    return rc;
}

/* The product itself: cuBLASLt with the plan's algorithm, or cublasGemmEx where Lt has none (a
 * product without an epilogue). 0, or -1 (EB). */
static int product(struct gpu_ctx *x, struct lt_plan *p, void *D, cudaDataType dtype,
                   const void *A, const void *B, const void *C, cublasOperation_t opa,
                   cublasOperation_t opb, int m, int n, int k, int lda, int ldb, int ldd,
                   float alpha, float beta, int epi, const void *bias, void *aux)
{
    char *EB = x->eb;
    size_t EN = x->en;
    cublasStatus_t st;
    if (!p->have_algo) {
        /* no cuBLASLt algorithm for these types or alignments: cublasGemmEx (its type table
         * has bf16 x bf16 -> fp32 and -> bf16 with fp32 compute), in place on D */
        size_t dsz = dtype == CUDA_R_32F ? 4 : 2;
        if (C && C != D && beta != 0.0f)
            ENQ(cudaMemcpy2DAsync(D, (size_t)ldd * dsz, C, (size_t)ldd * dsz, (size_t)m * dsz,
                                  (size_t)n, cudaMemcpyDeviceToDevice, x->stream));
        if (!x->blas)
            return fail_msg(EB, EN, "cuBLASLt: no algorithm for a %dx%dx%d product", m, n, k);
        /* on this context's stream (the handle's is the stage's; a side stream's product borrows
         * the handle and gives it back: the host enqueues one call at a time). The borrower
         * brings its own workspace (the side stream's cuBLASLt one, used only on that stream),
         * since a product on the stage's stream may be running in the handle's; setting the
         * stream back returns the handle to its default workspace. */
        cudaStream_t was = NULL;
        CKB(cublasGetStream(x->blas, &was));
        if (was != x->stream) {
            CKB(cublasSetStream(x->blas, x->stream));
            if (cublasSetWorkspace(x->blas, x->ws, LT_WORKSPACE) != CUBLAS_STATUS_SUCCESS) {
                cublasSetStream(x->blas, was);
                return fail_msg(EB, EN, "cuBLAS: cublasSetWorkspace failed for a %dx%dx%d product",
                                m, n, k);
            }
        }
        COUNT_LAUNCH();
        st = cublasGemmEx(x->blas, opa, opb, m, n, k, &alpha, A, CUDA_X, lda, B, CUDA_X, ldb, &beta,
                          D, dtype, ldd, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (was != x->stream)
            CKB(cublasSetStream(x->blas, was));
        CKB(st);
        return 0;
    }
#define LTCK(call) do { st = (call); if (st != CUBLAS_STATUS_SUCCESS) \
        return fail_msg(EB, EN, "cuBLASLt: %s failed (%s:%d): %s", #call, __FILE__, __LINE__, \
                        cublasGetStatusString(st)); } while (0)
    if (epi == EPI_BIAS || epi == EPI_GELU_BIAS)
        LTCK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (epi == EPI_GELU_BIAS || epi == EPI_DGELU)
        LTCK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    COUNT_LAUNCH();
    LTCK(cublasLtMatmul(x->lt, p->op, &alpha, A, p->la, B, p->lb, &beta, C ? C : D, p->lc, D,
                        p->lc, &p->algo, x->ws, LT_WORKSPACE, x->stream));
#undef LTCK
    return 0;
}

} /* namespace GPU_NS */

/* ---------------------------------------------------------------- the choices file */

int gpu_gemm_choices_file(const char *path, herr *e)
{
    using namespace GPU_NS;
    if (path && strlen(path) >= sizeof g_file)
        return herr_set(e, "GEMM choices file %s: path too long", path);
    pthread_mutex_lock(&g_choice_mu);
    snprintf(g_file, sizeof g_file, "%s", path ? path : "");
    if (g_file[0])
        choices_load();
    pthread_mutex_unlock(&g_choice_mu);
    return 0;
}
