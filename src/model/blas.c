/* The one place strata's model multiplies matrices: the row-major st_sgemm, its precision and
 * thread count, and the measured GEMM peak. Every matrix product of the model (linear layers, the
 * tied head, attention's q k^T and att v per head) comes through st_sgemm, so swapping the BLAS,
 * the precision or counting FLOPs touches only this file. BF16 products run on oneDNN
 * (gemm_onednn.c), rounded to bf16 on its bf16 units; float32 ones on oneDNN's kernels for this
 * CPU or on OpenBLAS's sgemm, as choose_gemm decides, and on OpenBLAS whatever oneDNN cannot run
 * (no engine, out of memory). Pieces of work that multiply matrices side by side go through
 * st_parallel_products, which keeps OpenBLAS's own threads out of their way. */
#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/bf16.h"
#include "model/gemm.h"
#include "model/layers.h"
#include "model/parallel_range.h"
#include "strata/model.h"

static _Atomic int precision = STRATA_PREC_FP32;

static pthread_once_t gemm_once = PTHREAD_ONCE_INIT;
/* STRATA_GEMM's choice (choose_gemm): float32 products on oneDNN or on OpenBLAS. */
static bool f32_on_onednn;

/* STRATA_GEMM: auto takes oneDNN for float32 wherever its engine runs. Its kernels are built for
 * the CPU they run on, where Debian's OpenBLAS 0.3.21 runs Haswell's AVX2 kernels on AVX-512 CPUs
 * it does not know (half a Zen 4's float32 speed); they run on the model's own OpenMP threads,
 * where OpenBLAS keeps a pool of its own that waits for the cores those threads spin on (3.3M
 * model, 2 threads: 7700 against 5500 tokens/s); and with wide products cut into panels
 * (gemm_onednn.c) they are ahead at one thread too (85M, Zen 4: 176-179 against 171-174 tokens/s
 * on OpenBLAS's own AVX-512 kernels). */
static void choose_gemm(void)
{
    const char *v = st_knob_str("STRATA_GEMM");
    bool openblas = v && !strcmp(v, "openblas");
    if (v && strcmp(v, "auto") && strcmp(v, "onednn") && !openblas)
        ST_LOG_WARN(ST_SUB_TRAIN, "STRATA_GEMM=%s: expected auto, onednn or openblas; using auto", v);
    f32_on_onednn = !openblas && st_gemm_onednn_ready();
}

/* Whether float32 products run on oneDNN. */
static bool f32_onednn(void)
{
    pthread_once(&gemm_once, choose_gemm);
    return f32_on_onednn;
}

const char *strata_blas_f32_library(void)
{
    return f32_onednn() ? "oneDNN" : "OpenBLAS";
}

/* st_sgemm plus a bias row added to every row of C (NULL: none; with one, alpha 1 and beta 0). */
static void sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, const float *bias, float *C,
                  int ldc)
{
    if (M > 0 && N > 0 && K > 0) {
        bool bf16 = atomic_load_explicit(&precision, memory_order_relaxed) == STRATA_PREC_BF16;
        if (bf16 && st_gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, bias, C,
                                 ldc) == 0)
            return;
        if (f32_onednn() && st_gemm_f32(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta,
                                        bias, C, ldc) == 0)
            return;
    }
    if (bias) { // OpenBLAS: C starts as the bias rows, the product adds onto them
        for (int r = 0; r < M; r++)
            memcpy(C + (size_t)r * ldc, bias, (size_t)N * sizeof(float));
        beta = 1.f;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void st_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc)
{
    sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, NULL, C, ldc);
}

void st_sgemm_bias(int trans_a, int trans_b, int M, int N, int K, const float *A, int lda,
                   const float *B, int ldb, const float *bias, float *C, int ldc)
{
    sgemm(trans_a, trans_b, M, N, K, 1.f, A, lda, B, ldb, 0.f, bias, C, ldc);
}

uint16_t *st_operand_hold(const float *x, int rows, int cols, int ld, bool round)
{
    if (atomic_load_explicit(&precision, memory_order_relaxed) != STRATA_PREC_BF16)
        return NULL;
    return st_gemm_bf16_hold(x, rows, cols, ld, round);
}

bool st_operand_hold_copy(const float *x, size_t n, uint16_t *copy, bool round)
{
    if (atomic_load_explicit(&precision, memory_order_relaxed) != STRATA_PREC_BF16)
        return false;
    return st_gemm_bf16_hold_copy(x, n, copy, round);
}

size_t st_operand_weight_size(int rows, int cols)
{
    if (atomic_load_explicit(&precision, memory_order_relaxed) != STRATA_PREC_BF16)
        return 0;
    return st_gemm_bf16_weight_size(rows, cols);
}

bool st_operand_hold_weight(const float *w, int rows, int cols, uint16_t *packed, bool pack)
{
    if (atomic_load_explicit(&precision, memory_order_relaxed) != STRATA_PREC_BF16)
        return false;
    return st_gemm_bf16_hold_weight(w, rows, cols, packed, pack);
}

void st_operand_release(const float *x)
{
    st_gemm_bf16_release(x);
}

const char *strata_blas_bf16_units(void)
{
    return st_gemm_bf16_units();
}

strata_status_t strata_blas_set_precision(strata_precision_t want, strata_precision_t *in_effect)
{
    if (want != STRATA_PREC_FP32 && want != STRATA_PREC_BF16)
        return st_error(STRATA_ERR_UNSUPPORTED, "precision %s: the CPU engine computes in fp32 or "
                        "bf16", strata_precision_name(want));
    if (want == STRATA_PREC_BF16 && !st_gemm_bf16_units())
        want = STRATA_PREC_FP32;
    atomic_store(&precision, (int)want);
    if (in_effect)
        *in_effect = want;
    return STRATA_OK;
}

strata_precision_t strata_blas_precision(void)
{
    return (strata_precision_t)atomic_load(&precision);
}

void st_parallel_products(size_t n, size_t grain, void (*fn)(void *ctx, size_t b, size_t e),
                          void *ctx)
{
    // Two pieces calling OpenBLAS at once, each asking its thread pool for every thread, queued
    // on its server and spun in exec_blas_async (85M, 2 threads: 0.56x torch). So while pieces
    // run side by side, each product runs on its piece's own thread. oneDNN does this itself
    // inside a parallel region.
    int blas_threads = openblas_get_num_threads();
    bool hold = blas_threads > 1 && st_parallel_threads() > 1;
    if (hold)
        openblas_set_num_threads(1);
    st_parallel_range(n, grain, fn, ctx);
    if (hold)
        openblas_set_num_threads(blas_threads);
}

void strata_blas_set_threads(int n)
{
    if (n > 0) {
        openblas_set_num_threads(n);
        if (st_omp_guard())
            omp_set_num_threads(n);
    }
}

/* Best of a few timed n x n x n products (after a warm-up), in GFLOP/s. At BF16 the operands are
 * converted once beforehand: the peak is the units' own, not the conversion's. */
double strata_measure_gemm_peak(int n)
{
    if (n < 64)
        n = 64;
    size_t nn = (size_t)n * n;
    float *a = malloc(nn * sizeof(float) * 3);
    uint16_t *h = malloc(nn * sizeof(uint16_t) * 2);
    if (!a || !h) {
        free(a);
        free(h);
        return 0;
    }
    float *b = a + nn, *c = b + nn;
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
        h[i] = st_f32_to_bf16(a[i]);
        h[nn + i] = st_f32_to_bf16(b[i]);
    }
    bool bf16 = strata_blas_precision() == STRATA_PREC_BF16;
    double best = 1e30, total = 0;
    for (int r = -1; r < 20 && total < 0.5; r++) { // r = -1: the warm-up
        uint64_t t0 = st_now_ns();
        if (!bf16 || st_gemm_bf16_packed(0, 0, n, n, n, 1.f, h, h + nn, 0.f, c, n) != 0)
            st_sgemm(0, 0, n, n, n, 1.f, a, n, b, n, 0.f, c, n);
        double s = (double)(st_now_ns() - t0) * 1e-9;
        if (r < 0)
            continue;
        total += s;
        best = s < best ? s : best;
    }
    free(a);
    free(h);
    return 2.0 * n * n * (double)n / best * 1e-9;
}
