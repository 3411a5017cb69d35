/* Causal multi-head self-attention on strided views of the packed qkv activation (no copies):
 * S = q k^T, a causal softmax row by row, out = P v; the probabilities P are kept for backward.
 *
 * The products run as sgemm on blocks of ATT_BLOCK query rows: rows [r0, r0 + rows) attend to keys
 * [0, r0 + rows) only, so a block skips the keys that lie wholly above the diagonal. At T = 128
 * that is a quarter of the dense work (approaching a half at long T), while every sgemm stays large
 * enough (>= 64 x 32 x 32) to run near the BLAS peak; entries above the diagonal inside the
 * diagonal block are computed and then overwritten with zeros. Rows of P are stored whole (zeros
 * to T), so att is the full T x T matrix whatever the blocking. */
#include <math.h>
#include <string.h>

#include "model/layers.h"
#include "model/vecmath.h"

#define ATT_BLOCK 64

static inline int min_int(int a, int b)
{
    return a < b ? a : b;
}

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
            float *o = out + (size_t)b * T * C + h * hs;
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int rows = min_int(ATT_BLOCK, T - r0), keys = r0 + rows;
                float *pb = p + (size_t)r0 * T;
                // p[rows, keys] = scale * q[rows, hs] k[keys, hs]^T
                st_sgemm(0, 1, rows, keys, hs, scale, q + (size_t)r0 * ld, ld, k, ld, 0.f, pb, T);
                for (int i = r0; i < keys; i++) {
                    float *row = p + (size_t)i * T;
                    float mx = st_max(row, i + 1);
                    for (int j = 0; j <= i; j++)
                        row[j] = st_exp(row[j] - mx);
                    float inv = 1.f / st_sum(row, i + 1);
                    for (int j = 0; j <= i; j++)
                        row[j] *= inv;
                    memset(row + i + 1, 0, (size_t)(T - i - 1) * sizeof(float));
                }
                // out[rows, hs] (row stride C) = p[rows, keys] v[keys, hs]
                st_sgemm(0, 0, rows, hs, keys, 1.f, pb, T, v, ld, 0.f, o + (size_t)r0 * C, C);
            }
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
            float *ds = scratch; // dP, then dS in place; only [row block, keys] is ever written
            // By query-row blocks: dP, the softmax backward, dq.
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int rows = min_int(ATT_BLOCK, T - r0), keys = r0 + rows;
                float *db = ds + (size_t)r0 * T;
                // dp[rows, keys] = d[rows, hs] v[keys, hs]^T
                st_sgemm(0, 1, rows, keys, hs, 1.f, d + (size_t)r0 * C, C, v, ld, 0.f, db, T);
                // ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik), zero above the diagonal
                for (int i = r0; i < keys; i++) {
                    const float *pr = p + (size_t)i * T;
                    float *dr = ds + (size_t)i * T;
                    float dot = st_dot(pr, dr, i + 1);
                    for (int j = 0; j <= i; j++)
                        dr[j] = pr[j] * (dr[j] - dot);
                    memset(dr + i + 1, 0, (size_t)(keys - i - 1) * sizeof(float));
                }
                // dq[rows, hs] = scale * ds[rows, keys] k[keys, hs]
                st_sgemm(0, 0, rows, hs, keys, scale, db, T, k, ld, 0.f, dq + (size_t)r0 * ld, ld);
            }
            // By key-column blocks: keys [c0, c0 + cols) are attended by queries [c0, T) only.
            for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
                int cols = min_int(ATT_BLOCK, T - c0), n = T - c0;
                size_t at = (size_t)c0 * T + c0;
                // dv[cols, hs] = p[n, cols]^T d[n, hs]
                st_sgemm(1, 0, cols, hs, n, 1.f, p + at, T, d + (size_t)c0 * C, C, 0.f,
                         dv + (size_t)c0 * ld, ld);
                // dk[cols, hs] = scale * ds[n, cols]^T q[n, hs]
                st_sgemm(1, 0, cols, hs, n, scale, ds + at, T, q + (size_t)c0 * ld, ld, 0.f,
                         dk + (size_t)c0 * ld, ld);
            }
        }
}
