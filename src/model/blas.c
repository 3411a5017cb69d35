/* The one place strata calls BLAS: a row-major sgemm wrapper, the thread-count setting and the
 * measured GEMM peak. Every
 * matrix product of the model (linear layers, the tied head, attention's q k^T and att v per head)
 * comes through st_sgemm, so swapping the BLAS or counting FLOPs touches only this file. */
#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/base.h"
#include "model/layers.h"
#include "strata/model.h"

void st_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void strata_blas_set_threads(int n)
{
    if (n > 0)
        openblas_set_num_threads(n);
}

double strata_measure_gemm_peak(int n)
{
    if (n < 64)
        n = 64;
    float *a = malloc((size_t)n * n * sizeof(float) * 3);
    if (!a)
        return 0;
    float *b = a + (size_t)n * n, *c = b + (size_t)n * n;
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    st_sgemm(0, 0, n, n, n, 1.f, a, n, b, n, 0.f, c, n); // warm-up
    double best = 1e30, total = 0;
    for (int r = 0; r < 20 && total < 0.5; r++) {
        uint64_t t0 = st_now_ns();
        st_sgemm(0, 0, n, n, n, 1.f, a, n, b, n, 0.f, c, n);
        double s = (double)(st_now_ns() - t0) * 1e-9;
        total += s;
        best = s < best ? s : best;
    }
    free(a);
    return 2.0 * n * n * (double)n / best * 1e-9;
}
