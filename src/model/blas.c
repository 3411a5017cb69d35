/* The one place strata's model multiplies matrices: the row-major st_sgemm, its precision and
 * thread count, and the measured GEMM peak. Every matrix product of the model (linear layers, the
 * tied head, attention's q k^T and att v per head) comes through st_sgemm, so swapping the BLAS,
 * the precision or counting FLOPs touches only this file. FP32 runs OpenBLAS's sgemm; BF16 runs
 * gemm_bf16.c, and any call it cannot run (out of memory) is computed in float32 instead. Pieces
 * of work that multiply matrices side by side go through st_parallel_products, which keeps the
 * BLAS's own threads out of their way. */
#include <cblas.h>
#include <omp.h>
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

void st_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc)
{
    if (atomic_load_explicit(&precision, memory_order_relaxed) == STRATA_PREC_BF16 &&
        M > 0 && N > 0 && K > 0 &&
        st_gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0)
        return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

uint16_t *st_operand_hold(const float *x, int rows, int cols, int ld, bool round)
{
    if (atomic_load_explicit(&precision, memory_order_relaxed) != STRATA_PREC_BF16)
        return NULL;
    return st_gemm_bf16_hold(x, rows, cols, ld, round);
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
