/* Cross-entropy over the vocabulary, with the softmax fused in: forward keeps only the log-sum-exp
 * of each row, backward rebuilds the softmax from the logits and writes the gradient over them. */
#include <math.h>

#include "model/layers.h"
#include "model/vecmath.h"

ST_VEC_CLONES
float st_xent_forward(float *lse, const float *logits, const int32_t *targets, int N, int V)
{
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * V;
        float mx = st_max(row, V);
        // The exps are summed in lanes as they are made (no scratch row to store them in).
        float acc[ST_LANES] = {0};
        int i = 0;
        for (; i + ST_LANES <= V; i += ST_LANES)
            for (int k = 0; k < ST_LANES; k++)
                acc[k] += st_exp(row[i + k] - mx);
        for (int k = 0; i < V; i++, k++)
            acc[k] += st_exp(row[i] - mx);
        float l = mx + logf(st_lanes_sum(acc));
        lse[n] = l;
        total += (double)(l - row[targets[n]]);
    }
    return (float)(total / N);
}

ST_VEC_CLONES
void st_xent_backward(float *dlogits, const float *logits, const float *lse,
                      const int32_t *targets, int v0, int N, int V, float scale)
{
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        float l = lse[n];
        for (int i = 0; i < V; i++)
            d[i] = st_exp(row[i] - l) * scale;
        int t = targets[n] - v0;
        if (t >= 0 && t < V)
            d[t] -= scale;
    }
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
        float acc[ST_LANES] = {0}, m = mx[n];
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
