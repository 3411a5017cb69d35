/* The one place strata calls BLAS: a row-major sgemm wrapper and the thread-count setting. Every
 * matrix product of the model (linear layers, the tied head, attention's q k^T and att v per head)
 * comes through st_sgemm, so swapping the BLAS or counting FLOPs touches only this file. */
#include <cblas.h>

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
