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
 * At bf16 on a CPU with AVX512-BF16 the products run on attention_gemm.c's kernel, not through
 * st_sgemm: a head's products are small (64 x 128 x 32 at T = 128), where a library call costs
 * about as much as the arithmetic, and the kernel skips by tiles of 8 rows what lies past the
 * diagonal inside the blocks (a third of the blocks' work at T = 128). Each head's operands are
 * packed once into the layouts the kernel reads (k's and v's pairs transposed for q k^T and dout
 * v^T, pairs of rows for the products that reduce over tokens); P and dS are rounded by block
 * after the softmax loops, and read down their columns for dv = P^T dout and dk = dS^T q. q, k, v
 * and the output gradient come from the copies rounded once (st_operand_hold_copy), or are
 * rounded per head to the same bits where there is no copy. The kernel sums in the order oneDNN's
 * AVX512-BF16 products do (vdpbf16ps over k's pairs in order), and its results were the same bits.
 * Elsewhere (fp32, no AVX512-BF16, an odd head size) the products go through st_sgemm, reading
 * those copies (each thread holding them) instead of each block's operands rounded for every
 * product. q, k and v's copy may be the forward's, kept for the backward. The softmax rows, both
 * ways, run on attention_softmax.c's AVX-512 kernel wherever the CPU has AVX-512 (any backend).
 *
 * Storage of P (and of the backward's dP / dS scratch): each row keeps only its block's computed
 * keys, in a band of st_attention_band(T, W) columns: row i's key j at i * band + j - k0, k0 the
 * first key of i's block. Without a window the band is T and k0 0 (the full T x T rows); with one
 * it is about W + 64 wide, so P takes T (W + 64) floats a head instead of T^2. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/thread_value.h"
#include "model/attention_gemm.h"
#include "model/attention_softmax.h"
#include "model/layers.h"
#include "model/parallel_range.h"
#include "model/vecmath.h"
#include "strata/model.h"

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

/* The end of the run of query-row blocks from r0 (up to end) that share r0's block's first stored
 * key: their band columns from that key are one strided block, one product per gradient. */
static int run_end(int r0, int end, int window)
{
    int k0 = block_keys(r0, window), r1 = min_int(r0 + ATT_BLOCK, end);
    while (r1 < end && block_keys(r1, window) == k0)
        r1 = min_int(r1 + ATT_BLOCK, end);
    return r1;
}

/* The end of the queries that attend keys [c0, c1): [c0, c1 - 1 + W), [c0, T) without a window. */
static int queries_end(int c1, int T, int window)
{
    return window > 0 ? min_int(T, c1 - 1 + window) : T;
}

int st_attention_band(int T, int window)
{
    // A block's keys [k0, r1) span at most W + 126 (k0 and r1 multiples of the block).
    int band = window > 0 ? (window + 2 * ATT_BLOCK - 2) / ATT_BLOCK * ATT_BLOCK : T;
    return band < T ? band : T;
}

/* What attention's products run on: attention_gemm.c's kernels (float32 or bf16, as the precision
 * is) where the CPU has them, else st_sgemm. */
typedef enum att_kernel { ON_SGEMM, ON_KERNEL_F32, ON_KERNEL_BF16 } att_kernel_t;

static att_kernel_t att_kernel(int hs)
{
    if (strata_blas_precision() == STRATA_PREC_BF16)
        return hs % 2 == 0 && st_att16_ready() ? ON_KERNEL_BF16 : ON_SGEMM;
    return st_att32_ready() ? ON_KERNEL_F32 : ON_SGEMM;
}

typedef struct att_job {
    float *out, *att, *dqkv, *scratch;
    const float *qkv, *dout, *patt;
    uint16_t *qkv16, *dout16; /* the rounded copies (NULL: none) */
    size_t nqkv, ndout;       /* their floats */
    int T, C, NH, NKV, window, band;
    att_kernel_t kernel; /* what the products run on */
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
                       .band = st_attention_band(T, window),
                       .kernel = att_kernel(C / NH)};
}

/* Row stride of qkv: q's C columns, then k's and v's KV each. */
static inline int qkv_ld(const att_job_t *j)
{
    return j->C + 2 * j->C / j->NH * j->NKV;
}

/* One query head's place in the job's arrays: offsets of its q and its k/v head's k in qkv and
 * dqkv (v = k + KV; row stride ld), of its columns of out and dout (row stride C), and of its
 * probabilities in att (T x band). */
typedef struct head {
    size_t q, k, o, p;
    int hs, KV, ld;
    float scale; /* 1 / sqrt(hs) */
} head_t;

static head_t head_at(const att_job_t *j, int b, int h)
{
    int hs = j->C / j->NH, ld = qkv_ld(j);
    size_t row = (size_t)b * j->T * ld;
    return (head_t){.q = row + (size_t)h * hs,
                    .k = row + (size_t)j->C + (size_t)(h / (j->NH / j->NKV)) * hs,
                    .o = (size_t)b * j->T * j->C + (size_t)h * hs,
                    .p = ((size_t)b * j->NH + h) * j->T * j->band,
                    .hs = hs,
                    .KV = hs * j->NKV,
                    .ld = ld,
                    .scale = 1.f / sqrtf((float)hs)};
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

/* The causal softmax of rows [r0, r1) of a block whose stored keys start at k0 (p: the head's
 * probabilities, row i's key j at i * band + j - k0), in place, zero outside each row's keys. */
ST_VEC_CLONES
static void softmax_rows(float *p, int r0, int r1, int k0, int band, int window)
{
    bool vec = st_att_softmax_ready();
    for (int i = r0; i < r1; i++) {
        float *row = p + (size_t)i * band - k0; // row[j]: key j
        int lo = first_key(i, window), n = i + 1 - lo;
        if (vec) {
            st_att_softmax_row(row + lo, n);
        } else {
            float mx = st_max(row + lo, n);
            for (int j = lo; j <= i; j++)
                row[j] = st_exp(row[j] - mx);
            float inv = 1.f / st_sum(row + lo, n);
            for (int j = lo; j <= i; j++)
                row[j] *= inv;
        }
        memset(row + k0, 0, (size_t)(lo - k0) * sizeof(float));
        memset(row + i + 1, 0, (size_t)(r1 - i - 1) * sizeof(float));
    }
}

/* The softmax's backward on the same rows: ds holds dP and becomes dS, ds_ij = p_ij (dp_ij -
 * sum_k p_ik dp_ik), zero outside each row's keys. */
ST_VEC_CLONES
static void softmax_backward_rows(const float *p, float *ds, int r0, int r1, int k0, int band,
                                  int window)
{
    bool vec = st_att_softmax_ready();
    for (int i = r0; i < r1; i++) {
        const float *pr = p + (size_t)i * band - k0; // pr[j], dr[j]: key j
        float *dr = ds + (size_t)i * band - k0;
        int lo = first_key(i, window);
        if (vec) {
            st_att_softmax_backward_row(pr + lo, dr + lo, i + 1 - lo);
        } else {
            float dot = st_dot(pr + lo, dr + lo, i + 1 - lo);
            for (int j = lo; j <= i; j++)
                dr[j] = pr[j] * (dr[j] - dot);
        }
        memset(dr + k0, 0, (size_t)(lo - k0) * sizeof(float));
        memset(dr + i + 1, 0, (size_t)(r1 - i - 1) * sizeof(float));
    }
}

/* ---- The products on attention_gemm.c's kernel ---- */

/* A thread's space for a head's packed operands, grown as a head needs it, freed with the thread. */
typedef struct pack_space {
    uint16_t *p;
    size_t n;
} pack_space_t;

static void *pack_space_make(void)
{
    return calloc(1, sizeof(pack_space_t));
}

static void pack_space_free(void *s)
{
    pack_space_t *ps = s;
    free(ps->p);
    free(ps);
}

static st_thread_value_t pack_spaces = ST_THREAD_VALUE(pack_space_make, pack_space_free);

/* Elements a carved piece is rounded up to: 64 bytes, a cache line. */
#define PACK_ALIGN 32

static size_t pack_round(size_t n)
{
    return (n + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN;
}

/* What a head's packings take, at most, forward or backward (the pieces carve() cuts). */
static size_t pack_need(const att_job_t *j)
{
    size_t hs = (size_t)(j->C / j->NH), Te = (size_t)(j->T + (j->T & 1));
    size_t lp = (size_t)(j->band + (j->band & 1));
    size_t head = pack_round(Te * hs); // one head's operand, in any of its layouts
    return 8 * head + pack_round(ATT_BLOCK * lp) + 2 * pack_round(Te * ATT_BLOCK);
}

/* This thread's packing space of at least n elements, 64-byte aligned; NULL when out of memory. */
static uint16_t *pack_space(size_t n)
{
    pack_space_t *ps = st_thread_value(&pack_spaces);
    if (!ps)
        return NULL;
    if (ps->n < n) {
        free(ps->p);
        ps->n = 0;
        if (!(ps->p = aligned_alloc(64, pack_round(n) * sizeof(uint16_t))))
            return NULL;
        ps->n = n;
    }
    return ps->p;
}

/* The next n elements of the space at *sp. */
static uint16_t *carve(uint16_t **sp, size_t n)
{
    uint16_t *p = *sp;
    *sp += pack_round(n);
    return p;
}

/* A head's T x hs operand in bf16 rows: inside the copy (its own leading dimension) or rounded from
 * x into the space. */
static const uint16_t *rows16(const uint16_t *copy, const float *x, size_t at, int ld, int T,
                              int hs, uint16_t **sp, int *ld16)
{
    if (copy) {
        *ld16 = ld;
        return copy + at;
    }
    uint16_t *d = carve(sp, (size_t)T * hs);
    st_att16_round(d, hs, x + at, ld, T, hs);
    *ld16 = hs;
    return d;
}

/* One (batch row, head) pair's forward: by query-row blocks, S = scale q k^T, softmax, out = P v. */
static void forward_head_bf16(const att_job_t *job, uint16_t *sp, int b, int h)
{
    int T = job->T, C = job->C, window = job->window, band = job->band;
    head_t e = head_at(job, b, h);
    int hs = e.hs, ld = e.ld, Te = T + (T & 1), lp = band + (band & 1), lq, lk, lv;
    const uint16_t *q = rows16(job->qkv16, job->qkv, e.q, ld, T, hs, &sp, &lq);
    const uint16_t *k = rows16(job->qkv16, job->qkv, e.k, ld, T, hs, &sp, &lk);
    const uint16_t *v = rows16(job->qkv16, job->qkv, e.k + e.KV, ld, T, hs, &sp, &lv);
    uint16_t *kt = carve(&sp, (size_t)T * hs);  // hs / 2 rows of T pairs: k's pairs, transposed
    uint16_t *vp = carve(&sp, (size_t)Te * hs); // Te / 2 rows of hs pairs: v's row pairs
    uint16_t *p16 = carve(&sp, (size_t)ATT_BLOCK * lp); // a block's probabilities, rounded
    st_att_transpose32(kt, T, k, lk / 2, T, hs / 2);
    st_att16_pair_cols(vp, 2 * hs, v, lv, T, hs);
    float *p = job->att + e.p, *o = job->out + e.o;
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int rows = min_int(ATT_BLOCK, T - r0), r1 = r0 + rows;
        int k0 = block_keys(r0, window), keys = r1 - k0;
        float *pb = p + (size_t)r0 * band;
        st_att16_gemm(rows, keys, hs / 2, e.scale, q + (size_t)r0 * lq, lq, 2, kt + 2 * k0, 2 * T, 0.f,
                      pb, band, ST_ATT_COLS, r0 - k0);
        softmax_rows(p, r0, r1, k0, band, window);
        st_att16_round(p16, lp, pb, band, rows, keys); // an odd count's last pair padded with 0
        st_att16_gemm(rows, hs, (keys + 1) / 2, 1.f, p16, lp, 2, vp + (size_t)k0 * hs, 2 * hs, 0.f,
                      o + (size_t)r0 * C, C, ST_ATT_UPTO, r0 - k0);
    }
}

/* One query head's gradients on the kernel, as backward_head_sgemm below. dk = scale dS^T q and dv =
 * P^T dout read dS and P by their pairs of rows (the kernel's A read down its columns), q and the
 * output gradient likewise (B's pair columns). */
static void backward_head_bf16(const att_job_t *job, float *ds, uint16_t *sp, int b, int h,
                            bool first)
{
    int T = job->T, C = job->C, window = job->window, band = job->band;
    head_t e = head_at(job, b, h);
    int hs = e.hs, ld = e.ld, Te = T + (T & 1), lp = band + (band & 1), lq, lk, lv, ldo;
    float scale = e.scale;
    const uint16_t *q = rows16(job->qkv16, job->qkv, e.q, ld, T, hs, &sp, &lq);
    const uint16_t *k = rows16(job->qkv16, job->qkv, e.k, ld, T, hs, &sp, &lk);
    const uint16_t *v = rows16(job->qkv16, job->qkv, e.k + e.KV, ld, T, hs, &sp, &lv);
    const uint16_t *d = rows16(job->dout16, job->dout, e.o, C, T, hs, &sp, &ldo);
    uint16_t *vt = carve(&sp, (size_t)T * hs); // hs / 2 rows of T pairs: v's pairs, transposed
    uint16_t *kp = carve(&sp, (size_t)Te * hs), *qp = carve(&sp, (size_t)Te * hs); // row pairs:
    uint16_t *dp = carve(&sp, (size_t)Te * hs); // Te / 2 rows of hs pairs
    uint16_t *ds16 = carve(&sp, (size_t)ATT_BLOCK * lp);
    uint16_t *pp = carve(&sp, (size_t)Te * ATT_BLOCK), *dsp = carve(&sp, (size_t)Te * ATT_BLOCK);
    st_att_transpose32(vt, T, v, lv / 2, T, hs / 2);
    st_att16_pair_cols(kp, 2 * hs, k, lk, T, hs);
    st_att16_pair_cols(qp, 2 * hs, q, lq, T, hs);
    st_att16_pair_cols(dp, 2 * hs, d, ldo, T, hs);
    float *dq = job->dqkv + e.q, *dk = job->dqkv + e.k, *dv = dk + e.KV;
    const float *p = job->patt + e.p;
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int rows = min_int(ATT_BLOCK, T - r0), r1 = r0 + rows;
        int k0 = block_keys(r0, window), keys = r1 - k0;
        float *db = ds + (size_t)r0 * band;
        st_att16_gemm(rows, keys, hs / 2, 1.f, d + (size_t)r0 * ldo, ldo, 2, vt + 2 * k0, 2 * T,
                      0.f, db, band, ST_ATT_COLS, r0 - k0);
        softmax_backward_rows(p, ds, r0, r1, k0, band, window);
        st_att16_round(ds16, lp, db, band, rows, keys);
        st_att16_gemm(rows, hs, (keys + 1) / 2, scale, ds16, lp, 2, kp + (size_t)k0 * hs, 2 * hs,
                      0.f, dq + (size_t)r0 * ld, ld, ST_ATT_UPTO, r0 - k0);
    }
    for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) { // key-column blocks and runs: backward_head_sgemm
        int cols = min_int(ATT_BLOCK, T - c0), c1 = c0 + cols;
        int end = queries_end(c1, T, window);
        float beta = first ? 0.f : 1.f;
        for (int r0 = c0, r1; r0 < end; r0 = r1) {
            int k0 = block_keys(r0, window);
            r1 = run_end(r0, end, window);
            size_t at = (size_t)r0 * band + (size_t)(c0 - k0);
            int pairs = (r1 - r0 + 1) / 2; // r0 is even: the run's pairs are the head's
            st_att16_pair_cols_f32(pp, 2 * cols, p + at, band, r1 - r0, cols);
            st_att16_pair_cols_f32(dsp, 2 * cols, ds + at, band, r1 - r0, cols);
            // dv[cols, hs] += p[r0:r1, cols]^T d[r0:r1, hs]; dk likewise from dS and q
            st_att16_gemm(cols, hs, pairs, 1.f, pp, 2, 2 * cols, dp + (size_t)r0 * hs, 2 * hs,
                          beta, dv + (size_t)c0 * ld, ld, ST_ATT_FROM, c0 - r0);
            st_att16_gemm(cols, hs, pairs, scale, dsp, 2, 2 * cols, qp + (size_t)r0 * hs, 2 * hs,
                          beta, dk + (size_t)c0 * ld, ld, ST_ATT_FROM, c0 - r0);
            beta = 1.f;
        }
    }
}

/* One (batch row, head) pair's forward on the float32 kernel: q, v and P read as they lie, k
 * transposed once for q k^T. */
static void forward_head_f32(const att_job_t *job, uint16_t *sp, int b, int h)
{
    int T = job->T, C = job->C, window = job->window, band = job->band;
    head_t e = head_at(job, b, h);
    int hs = e.hs, ld = e.ld;
    const float *q = job->qkv + e.q, *k = job->qkv + e.k, *v = k + e.KV;
    float *p = job->att + e.p, *o = job->out + e.o;
    float *kt = (float *)carve(&sp, 2 * (size_t)T * hs); // hs x T
    st_att_transpose32(kt, T, k, ld, T, hs);
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int rows = min_int(ATT_BLOCK, T - r0), r1 = r0 + rows;
        int k0 = block_keys(r0, window), keys = r1 - k0;
        float *pb = p + (size_t)r0 * band;
        st_att32_gemm(rows, keys, hs, e.scale, q + (size_t)r0 * ld, ld, 1, kt + k0, T, 0.f, pb, band,
                      ST_ATT_COLS, r0 - k0);
        softmax_rows(p, r0, r1, k0, band, window);
        st_att32_gemm(rows, hs, keys, 1.f, pb, band, 1, v + (size_t)k0 * ld, ld, 0.f,
                      o + (size_t)r0 * C, C, ST_ATT_UPTO, r0 - k0);
    }
}

/* One query head's gradients on the float32 kernel: v transposed once for dout v^T; P and dS
 * read down their columns for dv = P^T dout and dk = dS^T q. */
static void backward_head_f32(const att_job_t *job, float *ds, uint16_t *sp, int b, int h,
                              bool first)
{
    int T = job->T, C = job->C, window = job->window, band = job->band;
    head_t e = head_at(job, b, h);
    int hs = e.hs, ld = e.ld;
    float scale = e.scale;
    const float *q = job->qkv + e.q, *k = job->qkv + e.k, *v = k + e.KV;
    float *dq = job->dqkv + e.q, *dk = job->dqkv + e.k, *dv = dk + e.KV;
    const float *p = job->patt + e.p, *d = job->dout + e.o;
    float *vt = (float *)carve(&sp, 2 * (size_t)T * hs); // hs x T
    st_att_transpose32(vt, T, v, ld, T, hs);
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int rows = min_int(ATT_BLOCK, T - r0), r1 = r0 + rows;
        int k0 = block_keys(r0, window), keys = r1 - k0;
        float *db = ds + (size_t)r0 * band;
        st_att32_gemm(rows, keys, hs, 1.f, d + (size_t)r0 * C, C, 1, vt + k0, T, 0.f, db, band,
                      ST_ATT_COLS, r0 - k0);
        softmax_backward_rows(p, ds, r0, r1, k0, band, window);
        st_att32_gemm(rows, hs, keys, scale, db, band, 1, k + (size_t)k0 * ld, ld, 0.f,
                      dq + (size_t)r0 * ld, ld, ST_ATT_UPTO, r0 - k0);
    }
    for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) { // key-column blocks and runs: backward_head_sgemm
        int cols = min_int(ATT_BLOCK, T - c0), c1 = c0 + cols;
        int end = queries_end(c1, T, window);
        float beta = first ? 0.f : 1.f;
        for (int r0 = c0, r1; r0 < end; r0 = r1) {
            int k0 = block_keys(r0, window);
            r1 = run_end(r0, end, window);
            size_t at = (size_t)r0 * band + (size_t)(c0 - k0);
            st_att32_gemm(cols, hs, r1 - r0, 1.f, p + at, 1, band, d + (size_t)r0 * C, C, beta,
                          dv + (size_t)c0 * ld, ld, ST_ATT_FROM, c0 - r0);
            st_att32_gemm(cols, hs, r1 - r0, scale, ds + at, 1, band, q + (size_t)r0 * ld, ld,
                          beta, dk + (size_t)c0 * ld, ld, ST_ATT_FROM, c0 - r0);
            beta = 1.f;
        }
    }
}

/* ---- The products through st_sgemm ---- */

/* One (batch row, head) pair's forward, as forward_head_bf16. */
static void forward_head_sgemm(const att_job_t *job, int b, int h)
{
    int T = job->T, C = job->C, window = job->window, band = job->band;
    head_t e = head_at(job, b, h);
    int hs = e.hs, ld = e.ld;
    const float *q = job->qkv + e.q, *k = job->qkv + e.k, *v = k + e.KV;
    float *p = job->att + e.p, *o = job->out + e.o;
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int rows = min_int(ATT_BLOCK, T - r0), r1 = r0 + rows;
        int k0 = block_keys(r0, window), keys = r1 - k0;
        float *pb = p + (size_t)r0 * band; // the block's rows, from key k0
        // p[rows, k0:r1] = scale * q[rows, hs] k[k0:r1, hs]^T
        st_sgemm(0, 1, rows, keys, hs, e.scale, q + (size_t)r0 * ld, ld, k + (size_t)k0 * ld, ld,
                 0.f, pb, band);
        softmax_rows(p, r0, r1, k0, band, window);
        // out[rows, hs] (row stride C) = p[rows, k0:r1] v[k0:r1, hs]
        st_sgemm(0, 0, rows, hs, keys, 1.f, pb, band, v + (size_t)k0 * ld, ld, 0.f,
                 o + (size_t)r0 * C, C);
    }
}

/* Heads [h0, h1) of the B * NH (batch row, head) pairs. */
static void forward_heads(void *ctx, size_t h0, size_t h1)
{
    const att_job_t *job = ctx;
    uint16_t *sp = job->kernel != ON_SGEMM ? pack_space(pack_need(job)) : NULL;
    held_pair_t held = sp ? (held_pair_t){false, false} : hold_copies(job);
    for (size_t bh = h0; bh < h1; bh++) {
        int b = (int)(bh / (size_t)job->NH), h = (int)(bh % (size_t)job->NH);
        if (sp && job->kernel == ON_KERNEL_BF16)
            forward_head_bf16(job, sp, b, h);
        else if (sp)
            forward_head_f32(job, sp, b, h);
        else
            forward_head_sgemm(job, b, h);
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
static void backward_head_sgemm(const att_job_t *job, float *ds, int b, int h, bool first)
{
    int T = job->T, C = job->C, window = job->window, band = job->band;
    head_t e = head_at(job, b, h);
    int hs = e.hs, ld = e.ld;
    float scale = e.scale;
    const float *q = job->qkv + e.q, *k = job->qkv + e.k, *v = k + e.KV;
    float *dq = job->dqkv + e.q, *dk = job->dqkv + e.k, *dv = dk + e.KV;
    const float *p = job->patt + e.p, *d = job->dout + e.o;
    // By query-row blocks: dP, the softmax backward, dq.
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int rows = min_int(ATT_BLOCK, T - r0), r1 = r0 + rows;
        int k0 = block_keys(r0, window), keys = r1 - k0;
        float *db = ds + (size_t)r0 * band; // the block's rows, from key k0
        // dp[rows, k0:r1] = d[rows, hs] v[k0:r1, hs]^T
        st_sgemm(0, 1, rows, keys, hs, 1.f, d + (size_t)r0 * C, C, v + (size_t)k0 * ld, ld, 0.f,
                 db, band);
        softmax_backward_rows(p, ds, r0, r1, k0, band, window);
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
        int end = queries_end(c1, T, window);
        float beta = first ? 0.f : 1.f;
        for (int r0 = c0, r1; r0 < end; r0 = r1) {
            int k0 = block_keys(r0, window);
            r1 = run_end(r0, end, window);
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
    uint16_t *sp = job->kernel != ON_SGEMM ? pack_space(pack_need(job)) : NULL;
    held_pair_t held = sp ? (held_pair_t){false, false} : hold_copies(job);
    for (size_t bg = g0; bg < g1; bg++) {
        int b = (int)(bg / (size_t)job->NKV), g = (int)(bg % (size_t)job->NKV);
        for (int h = g * G; h < (g + 1) * G; h++)
            if (sp && job->kernel == ON_KERNEL_BF16)
                backward_head_bf16(job, ds, sp, b, h, h == g * G);
            else if (sp)
                backward_head_f32(job, ds, sp, b, h, h == g * G);
            else
                backward_head_sgemm(job, ds, b, h, h == g * G);
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
