/* A shipped side task: a compute-heavy kernel (one n x n sgemm per step through OpenBLAS), the
 * stand-in for FreeRide's model-training and image-processing side jobs. It runs until stopped; its
 * progress is the multiply-adds done. */
#include <cblas.h>
#include <stdlib.h>

#include "base/base.h"
#include "strata/harvest.h"

typedef struct gemm_task {
    int n;
    float *a, *b, *c;
    uint64_t steps;
} gemm_task_t;

static strata_status_t gemm_init(void *p)
{
    gemm_task_t *g = p;
    size_t nn = (size_t)g->n * g->n;
    g->a = malloc(nn * sizeof(float));
    g->b = malloc(nn * sizeof(float));
    g->c = calloc(nn, sizeof(float));
    if (!g->a || !g->b || !g->c)
        return st_error(STRATA_ERR_NO_MEMORY, "harvest: gemm side task: out of memory");
    for (size_t i = 0; i < nn; i++) {
        g->a[i] = (float)(i % 7) * 0.01f;
        g->b[i] = (float)(i % 5) * 0.01f;
    }
    return STRATA_OK;
}

static strata_status_t gemm_step(void *p)
{
    gemm_task_t *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->n, g->n, g->n, 1.f, g->a, g->n, g->b,
                g->n, 0.5f, g->c, g->n);
    g->steps++;
    return STRATA_OK;
}

static void gemm_finalize(void *p)
{
    gemm_task_t *g = p;
    free(g->a);
    free(g->b);
    free(g->c);
    g->a = g->b = g->c = NULL;
}

strata_status_t strata_side_task_gemm(int n, strata_side_task_ops_t *ops, void **self)
{
    if (n < 1 || n > 16384)
        return st_error(STRATA_ERR_INVALID_ARG, "harvest: gemm size %d outside [1, 16384]", n);
    gemm_task_t *g = calloc(1, sizeof *g);
    if (!g)
        return st_error(STRATA_ERR_NO_MEMORY, "harvest: out of memory");
    g->n = n;
    *ops = (strata_side_task_ops_t){.name = "gemm", .mem_bytes = 3 * (size_t)n * n * sizeof(float),
                                    .init = gemm_init, .step = gemm_step,
                                    .finalize = gemm_finalize};
    *self = g;
    return STRATA_OK;
}

uint64_t strata_side_task_gemm_flops(const void *self)
{
    const gemm_task_t *g = self;
    return g->steps * 2ull * (uint64_t)g->n * g->n * g->n;
}

void strata_side_task_free(void *self)
{
    free(self);
}
