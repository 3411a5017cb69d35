/* Cross-entropy over the vocabulary, with the softmax fused in: forward keeps only the log-sum-exp
 * of each row, backward rebuilds the softmax from the logits and writes the gradient over them,
 * at bf16 also rounded in the same pass for the head's two products (the fusion with them). */
#include <math.h>

#include "model/gemm.h"
#include "model/layers.h"
#include "model/parallel_range.h"
#include "model/vecmath.h"

typedef struct xent_job {
    float *lse, *dlogits;
    uint16_t *dlogits_h;
    const float *logits;
    const int32_t *targets;
    int v0, V;
    float scale;
} xent_job_t;

ST_VEC_CLONES
static void xent_forward_rows(void *ctx, size_t n0, size_t n1)
{
    const xent_job_t *j = ctx;
    int V = j->V;
    for (size_t n = n0; n < n1; n++) {
        const float *row = j->logits + n * V;
        float mx = st_max(row, V);
        // The exps are summed in lanes as they are made (no scratch row to store them in).
        st_lanes_t acc = {0};
        int i = 0;
        for (; i + ST_LANES <= V; i += ST_LANES)
            for (int k = 0; k < ST_LANES; k++)
                acc[k] += st_exp(row[i + k] - mx);
        for (int k = 0; i < V; i++, k++)
            acc[k] += st_exp(row[i] - mx);
        j->lse[n] = mx + logf(st_lanes_sum(acc));
    }
}

/* Rows on the threads; the loss summed in row order afterwards, so the result is the serial one. */
float st_xent_forward(float *lse, const float *logits, const int32_t *targets, int N, int V)
{
    xent_job_t j = {.lse = lse, .logits = logits, .V = V};
    st_parallel_range((size_t)N, ST_ROW_GRAIN(V), xent_forward_rows, &j);
    double total = 0.0;
    for (int n = 0; n < N; n++)
        total += (double)(lse[n] - logits[(size_t)n * V + targets[n]]);
    return (float)(total / N);
}

ST_VEC_CLONES
static void xent_backward_rows(void *ctx, size_t n0, size_t n1)
{
    const xent_job_t *j = ctx;
    int V = j->V;
    for (size_t n = n0; n < n1; n++) {
        const float *row = j->logits + n * V;
        float *d = j->dlogits + n * V;
        float l = j->lse[n];
        for (int i = 0; i < V; i++)
            d[i] = st_exp(row[i] - l) * j->scale;
        int t = j->targets[n] - j->v0;
        if (t >= 0 && t < V)
            d[t] -= j->scale;
        // The fusion with the head's products: the row is rounded while it is in cache.
        if (j->dlogits_h)
            st_gemm_bf16_round(j->dlogits_h + n * V, d, 1, V, V);
    }
}

void st_xent_backward(float *dlogits, uint16_t *dlogits_h, const float *logits, const float *lse,
                      const int32_t *targets, int v0, int N, int V, float scale)
{
    xent_job_t j = {.dlogits = dlogits, .dlogits_h = dlogits_h, .logits = logits, .lse = (float *)lse,
                    .targets = targets, .v0 = v0, .V = V, .scale = scale};
    st_parallel_range((size_t)N, ST_ROW_GRAIN(V), xent_backward_rows, &j);
}

void st_xent_rowmax(float *mx, const float *logits, int N, int V)
{
    for (int n = 0; n < N; n++)
        mx[n] = st_max(logits + (size_t)n * V, V);
}

ST_VEC_CLONES
void st_xent_slice(float *sumexp, float *tlogit, const float *logits, const float *mx,
                   const int32_t *targets, int v0, int N, int V)
{
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * V;
        st_lanes_t acc = {0};
        float m = mx[n];
        int i = 0;
        for (; i + ST_LANES <= V; i += ST_LANES)
            for (int k = 0; k < ST_LANES; k++)
                acc[k] += st_exp(row[i + k] - m);
        for (int k = 0; i < V; i++, k++)
            acc[k] += st_exp(row[i] - m);
        sumexp[n] = st_lanes_sum(acc);
        int t = targets[n] - v0;
        tlogit[n] = t >= 0 && t < V ? row[t] : 0.f;
    }
}
