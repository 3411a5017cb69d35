/* Cross-entropy over the vocabulary, with the softmax fused in: forward keeps only the log-sum-exp
 * of each row, backward rebuilds the softmax from the logits and writes the gradient over them. */
#include <math.h>

#include "model/layers.h"

float st_xent_forward(float *lse, const float *logits, const int32_t *targets, int N, int V)
{
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * V;
        float mx = -INFINITY;
        for (int i = 0; i < V; i++)
            mx = row[i] > mx ? row[i] : mx;
        float sum = 0.f;
        for (int i = 0; i < V; i++)
            sum += expf(row[i] - mx);
        float l = mx + logf(sum);
        lse[n] = l;
        total += (double)(l - row[targets[n]]);
    }
    return (float)(total / N);
}

void st_xent_backward(float *dlogits, const float *logits, const float *lse,
                      const int32_t *targets, int N, int V, float scale)
{
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        float l = lse[n];
        for (int i = 0; i < V; i++)
            d[i] = expf(row[i] - l) * scale;
        d[targets[n]] -= scale;
    }
}
