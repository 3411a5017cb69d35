/* Causal multi-head self-attention on strided views of the packed qkv activation (no copies):
 * S = q k^T, a causal softmax row by row, out = P v; the probabilities P are kept for backward.
 * With a sliding window W, the query at t attends the keys (t - W, t] only.
 *
 * The products run as sgemm on blocks of ATT_BLOCK query rows: rows [r0, r1) attend to keys
 * [k0, r1) only, k0 being the start of the key block holding the first row's first key (0 without
 * a window), so a block skips the keys that lie wholly above the diagonal or before the window. At
 * T = 128 that is a quarter of the dense work (approaching a half at long T, and all but W/T of it
 * with a window), while every sgemm stays large enough (>= 64 x 32 x 32) to run near the BLAS
 * peak; entries outside a row's keys inside the computed blocks are computed and then overwritten
 * with zeros. Only those blocks of the T x T matrix P are written: the backward's key-column pass
 * reads, for key block [c0, c1), the queries [c0, c1 - 1 + W) (to T without a window), every one of
 * whose rows has that key block inside its own computed blocks.
 *
 * Grouped-query attention: the k/v head g serves the query heads [g G, (g + 1) G), G = NH / NKV.
 * The forward runs each (batch row, query head) pair on its own; the backward runs each (batch row,
 * k/v head) pair, its group's query heads one after the other, so the k/v gradients are summed in
 * head order by one thread, whatever the threads.
 *
 * At bf16 the products read q, k, v and the output gradient from copies rounded once (each thread
 * holding them, st_operand_hold_copy), not from each block's operands rounded for every product:
 * those are read by several products (k and v by every later row block), about 2.4 times the
 * copies' values at T = 256. q, k and v's copy may be the forward's, kept for the backward.
 *
 * Storage of P (and of the backward's dP / dS scratch): each row keeps only its block's computed
 * keys, in a band of st_attention_band(T, W) columns: row i's key j at i * band + j - k0, k0 the
 * first key of i's block. Without a window the band is T and k0 0 (the full T x T rows); with one
 * it is about W + 64 wide, so P takes T (W + 64) floats a head instead of T^2. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "model/layers.h"
#include "model/parallel_range.h"
#include "model/vecmath.h"

#define ATT_BLOCK 64

static inline int min_int(int a, int b)
{
    return a < b ? a : b;
}

/* The first key query i attends. */
static inline int first_key(int i, int window)
{
    return window > 0 && i >= window ? i - window + 1 : 0;
}

/* The first key of the computed blocks of the query-row block starting at r0. */
static inline int block_keys(int r0, int window)
{
    return first_key(r0, window) / ATT_BLOCK * ATT_BLOCK;
}

int st_attention_band(int T, int window)
{
    // A block's keys [k0, r1) span at most W + 126 (k0 and r1 multiples of the block).
    int band = window > 0 ? (window + 2 * ATT_BLOCK - 2) / ATT_BLOCK * ATT_BLOCK : T;
    return band < T ? band : T;
}

typedef struct att_job {
    float *out, *att, *dqkv, *scratch;
    const float *qkv, *dout, *patt;
    uint16_t *qkv16, *dout16; /* the rounded copies (NULL: none) */
    size_t nqkv, ndout;       /* their floats */
    int T, C, NH, NKV, window, band;
} att_job_t;

/* A job's shape: qkv's heads and the band their probabilities keep. */
static att_job_t att_job(const float *qkv, int T, int C, int NH, int NKV, int window)
{
    return (att_job_t){.qkv = qkv,
                       .T = T,
                       .C = C,
                       .NH = NH,
                       .NKV = NKV,
                       .window = window,
                       .band = st_attention_band(T, window)};
}

/* Row stride of qkv: q's C columns, then k's and v's KV each. */
static inline int qkv_ld(const att_job_t *j)
{
    return j->C + 2 * j->C / j->NH * j->NKV;
}

/* Rounds x (n floats) into copy once (unless `rounded`: it holds x rounded already), on the calling
 * thread's products' behalf too; false (copy unused) at fp32, without a copy, or when it could not
 * be held. */
static bool round_copy(const float *x, size_t n, uint16_t *copy, bool rounded)
{
    if (!copy || !st_operand_hold_copy(x, n, copy, !rounded))
        return false;
    st_operand_release(x);
    return true;
}

/* A piece's thread holds the job's rounded copies for its products; where one cannot be held, the
 * products round those operands themselves, to the same bits. Returns what to release. */
typedef struct held_pair {
    bool qkv, dout;
} held_pair_t;

static held_pair_t hold_copies(const att_job_t *j)
{
    return (held_pair_t){j->qkv16 && st_operand_hold_copy(j->qkv, j->nqkv, j->qkv16, false),
                         j->dout16 && st_operand_hold_copy(j->dout, j->ndout, j->dout16, false)};
}

static void release_copies(const att_job_t *j, held_pair_t h)
{
    if (h.qkv)
        st_operand_release(j->qkv);
    if (h.dout)
        st_operand_release(j->dout);
}

/* Heads [h0, h1) of the B * NH (batch row, head) pairs. */
ST_VEC_CLONES
static void forward_heads(void *ctx, size_t h0, size_t h1)
{
    const att_job_t *job = ctx;
    int T = job->T, C = job->C, NH = job->NH, window = job->window, band = job->band;
    int hs = C / NH, KV = hs * job->NKV, G = NH / job->NKV, ld = qkv_ld(job);
    float scale = 1.f / sqrtf((float)hs);
    held_pair_t held = hold_copies(job);
    for (size_t bh = h0; bh < h1; bh++) {
        int b = (int)(bh / (size_t)NH), h = (int)(bh % (size_t)NH);
        const float *x = job->qkv + (size_t)b * T * ld; // batch row b's tokens
        const float *q = x + h * hs;
        const float *k = x + C + h / G * hs;
        const float *v = k + KV;
        float *p = job->att + ((size_t)b * NH + h) * T * band;
        float *o = job->out + (size_t)b * T * C + h * hs;
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int rows = min_int(ATT_BLOCK, T - r0), r1 = r0 + rows;
            int k0 = block_keys(r0, window), keys = r1 - k0;
            float *pb = p + (size_t)r0 * band; // the block's rows, from key k0
            // p[rows, k0:r1] = scale * q[rows, hs] k[k0:r1, hs]^T
            st_sgemm(0, 1, rows, keys, hs, scale, q + (size_t)r0 * ld, ld, k + (size_t)k0 * ld, ld,
                     0.f, pb, band);
            for (int i = r0; i < r1; i++) {
                float *row = p + (size_t)i * band - k0; // row[j]: key j
                int lo = first_key(i, window), n = i + 1 - lo;
                float mx = st_max(row + lo, n);
                for (int j = lo; j <= i; j++)
                    row[j] = st_exp(row[j] - mx);
                float inv = 1.f / st_sum(row + lo, n);
                for (int j = lo; j <= i; j++)
                    row[j] *= inv;
                memset(row + k0, 0, (size_t)(lo - k0) * sizeof(float));
                memset(row + i + 1, 0, (size_t)(r1 - i - 1) * sizeof(float));
            }
            // out[rows, hs] (row stride C) = p[rows, k0:r1] v[k0:r1, hs]
            st_sgemm(0, 0, rows, hs, keys, 1.f, pb, band, v + (size_t)k0 * ld, ld, 0.f,
                     o + (size_t)r0 * C, C);
        }
    }
    release_copies(job, held);
}

/* The (batch row, head) pairs are independent: spread over the threads, each its own products. */
bool st_attention_forward(float *out, float *att, const float *qkv, uint16_t *qkv16, int B, int T,
                          int C, int NH, int NKV, int window)
{
    att_job_t j = att_job(qkv, T, C, NH, NKV, window);
    j.out = out;
    j.att = att;
    j.nqkv = (size_t)B * T * qkv_ld(&j);
    j.qkv16 = round_copy(qkv, j.nqkv, qkv16, false) ? qkv16 : NULL;
    st_parallel_products((size_t)B * NH, 1, forward_heads, &j);
    return j.qkv16 != NULL;
}

/* One query head's gradients: dq (written), and dk, dv (written when `first`, the group's first
 * head, else added). */
ST_VEC_CLONES
static void backward_head(const att_job_t *job, float *ds, int b, int h, bool first)
{
    int T = job->T, C = job->C, NH = job->NH, window = job->window, band = job->band;
    int hs = C / NH, KV = hs * job->NKV, G = NH / job->NKV, ld = qkv_ld(job);
    float scale = 1.f / sqrtf((float)hs);
    size_t row = (size_t)b * T * ld;
    const float *q = job->qkv + row + h * hs;
    const float *k = job->qkv + row + C + h / G * hs;
    const float *v = k + KV;
    float *dq = job->dqkv + row + h * hs;
    float *dk = job->dqkv + row + C + h / G * hs;
    float *dv = dk + KV;
    const float *p = job->patt + ((size_t)b * NH + h) * T * band;
    const float *d = job->dout + (size_t)b * T * C + h * hs;
    // By query-row blocks: dP, the softmax backward, dq.
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int rows = min_int(ATT_BLOCK, T - r0), r1 = r0 + rows;
        int k0 = block_keys(r0, window), keys = r1 - k0;
        float *db = ds + (size_t)r0 * band; // the block's rows, from key k0
        // dp[rows, k0:r1] = d[rows, hs] v[k0:r1, hs]^T
        st_sgemm(0, 1, rows, keys, hs, 1.f, d + (size_t)r0 * C, C, v + (size_t)k0 * ld, ld, 0.f,
                 db, band);
        // ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik), zero outside the row's keys
        for (int i = r0; i < r1; i++) {
            const float *pr = p + (size_t)i * band - k0; // pr[j], dr[j]: key j
            float *dr = ds + (size_t)i * band - k0;
            int lo = first_key(i, window);
            float dot = st_dot(pr + lo, dr + lo, i + 1 - lo);
            for (int j = lo; j <= i; j++)
                dr[j] = pr[j] * (dr[j] - dot);
            memset(dr + k0, 0, (size_t)(lo - k0) * sizeof(float));
            memset(dr + i + 1, 0, (size_t)(r1 - i - 1) * sizeof(float));
        }
        // dq[rows, hs] = scale * ds[rows, k0:r1] k[k0:r1, hs]
        st_sgemm(0, 0, rows, hs, keys, scale, db, band, k + (size_t)k0 * ld, ld, 0.f,
                 dq + (size_t)r0 * ld, ld);
    }
    // By key-column blocks: keys [c0, c1) are attended by queries [c0, c1 - 1 + W) only
    // ([c0, T) without a window). Those rows go by runs of row blocks that share their first
    // stored key (all of them without a window): a run's columns c0..c1 are one strided block
    // of the band, so each run is one product per gradient, the runs added in row order.
    for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
        int cols = min_int(ATT_BLOCK, T - c0), c1 = c0 + cols;
        int end = window > 0 ? min_int(T, c1 - 1 + window) : T;
        float beta = first ? 0.f : 1.f;
        for (int r0 = c0, r1; r0 < end; r0 = r1) {
            int k0 = block_keys(r0, window);
            for (r1 = min_int(r0 + ATT_BLOCK, end); r1 < end && block_keys(r1, window) == k0;)
                r1 = min_int(r1 + ATT_BLOCK, end);
            size_t at = (size_t)r0 * band + (size_t)(c0 - k0);
            // dv[cols, hs] += p[r0:r1, cols]^T d[r0:r1, hs]
            st_sgemm(1, 0, cols, hs, r1 - r0, 1.f, p + at, band, d + (size_t)r0 * C, C, beta,
                     dv + (size_t)c0 * ld, ld);
            // dk[cols, hs] += scale * ds[r0:r1, cols]^T q[r0:r1, hs]
            st_sgemm(1, 0, cols, hs, r1 - r0, scale, ds + at, band, q + (size_t)r0 * ld, ld,
                     beta, dk + (size_t)c0 * ld, ld);
            beta = 1.f;
        }
    }
}

/* The (batch row, k/v head) pairs [g0, g1): each its group's query heads in order. */
static void backward_groups(void *ctx, size_t g0, size_t g1)
{
    const att_job_t *job = ctx;
    int G = job->NH / job->NKV;
    float *ds = job->scratch + (size_t)st_parallel_index() * job->T * job->band; // dP, then dS
    held_pair_t held = hold_copies(job);
    for (size_t bg = g0; bg < g1; bg++) {
        int b = (int)(bg / (size_t)job->NKV), g = (int)(bg % (size_t)job->NKV);
        for (int h = g * G; h < (g + 1) * G; h++)
            backward_head(job, ds, b, h, h == g * G);
    }
    release_copies(job, held);
}

void st_attention_backward(float *dqkv, float *scratch, int nscratch, const float *dout,
                           const float *qkv, const float *att, uint16_t *qkv16, bool qkv16_rounded,
                           uint16_t *dout16, int B, int T, int C, int NH, int NKV, int window)
{
    att_job_t j = att_job(qkv, T, C, NH, NKV, window);
    j.dqkv = dqkv;
    j.scratch = scratch;
    j.dout = dout;
    j.patt = att;
    j.nqkv = (size_t)B * T * qkv_ld(&j);
    j.ndout = (size_t)B * T * C;
    j.qkv16 = round_copy(qkv, j.nqkv, qkv16, qkv16_rounded) ? qkv16 : NULL;
    j.dout16 = round_copy(dout, j.ndout, dout16, false) ? dout16 : NULL;
    size_t pairs = (size_t)B * NKV, per = nscratch > 1 ? (pairs + nscratch - 1) / nscratch : pairs;
    st_parallel_products(pairs, per, backward_groups, &j);
}
