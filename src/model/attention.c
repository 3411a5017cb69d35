/* Causal multi-head self-attention, with both products of every (batch, head) pair as one sgemm on
 * strided views of the packed qkv activation (no copies): S = q k^T (T x T), then a causal softmax
 * row by row, then out = P v. The dense T x T product does twice the causal work but runs at GEMM
 * speed; the softmax only touches the lower triangle and leaves zeros above it. The probabilities
 * are kept for backward. */
#include <math.h>
#include <string.h>

#include "model/layers.h"
#include "model/vecmath.h"

ST_VEC_CLONES
void st_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH;
    float scale = 1.f / sqrtf((float)hs);
    int ld = 3 * C;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * ld + h * hs;
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *p = att + ((size_t)b * NH + h) * T * T;
            // p[T,T] = scale * q[T,hs] k[T,hs]^T
            st_sgemm(0, 1, T, T, hs, scale, q, ld, k, ld, 0.f, p, T);
            for (int i = 0; i < T; i++) {
                float *row = p + (size_t)i * T;
                float mx = st_max(row, i + 1);
                for (int j = 0; j <= i; j++)
                    row[j] = st_exp(row[j] - mx);
                float inv = 1.f / st_sum(row, i + 1);
                for (int j = 0; j <= i; j++)
                    row[j] *= inv;
                memset(row + i + 1, 0, (size_t)(T - i - 1) * sizeof(float));
            }
            // out[T,hs] (row stride C) = p[T,T] v[T,hs]
            st_sgemm(0, 0, T, hs, T, 1.f, p, T, v, ld, 0.f, out + (size_t)b * T * C + h * hs, C);
        }
}

ST_VEC_CLONES
void st_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH)
{
    int hs = C / NH;
    float scale = 1.f / sqrtf((float)hs);
    int ld = 3 * C;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * ld + h * hs;
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *dq = dqkv + (size_t)b * T * ld + h * hs;
            float *dk = dq + C;
            float *dv = dq + 2 * C;
            const float *p = att + ((size_t)b * NH + h) * T * T;
            const float *d = dout + (size_t)b * T * C + h * hs;
            float *dp = scratch;
            // dp[T,T] = d[T,hs] v^T ; dv[T,hs] = p^T d
            st_sgemm(0, 1, T, T, hs, 1.f, d, C, v, ld, 0.f, dp, T);
            st_sgemm(1, 0, T, hs, T, 1.f, p, T, d, C, 0.f, dv, ld);
            // softmax backward: ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik), upper triangle zero
            for (int i = 0; i < T; i++) {
                const float *pr = p + (size_t)i * T;
                float *dr = dp + (size_t)i * T;
                float dot = st_dot(pr, dr, i + 1);
                for (int j = 0; j <= i; j++)
                    dr[j] = pr[j] * (dr[j] - dot);
                memset(dr + i + 1, 0, (size_t)(T - i - 1) * sizeof(float));
            }
            // dq = scale * ds k ; dk = scale * ds^T q
            st_sgemm(0, 0, T, hs, T, scale, dp, T, k, ld, 0.f, dq, ld);
            st_sgemm(1, 0, T, hs, T, scale, dp, T, q, ld, 0.f, dk, ld);
        }
}
