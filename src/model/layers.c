/* Elementwise and row-wise layers of the GPT: embeddings, LayerNorm and RMSNorm, linear layers
 * (through sgemm), GELU (tanh approximation, as GPT-2 and PyTorch's gelu(approximate="tanh")),
 * SwiGLU, rotary position embedding (RoPE, the rotate-half pairing of GPT-NeoX and HuggingFace's
 * Llama) and the residual add.
 * Attention is in attention.c, the loss in loss.c. Shapes are stated at each function in layers.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/gemm.h"
#include "model/layers.h"
#include "model/parallel_range.h"
#include "model/vecmath.h"

void st_encoder_forward(float *out, const int32_t *tok, const float *wte, int v0, int v1,
                        const float *wpe, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            int v = tok[b * T + t];
            const float *e = v >= v0 && v < v1 ? wte + (size_t)(v - v0) * C : NULL;
            const float *p = wpe ? wpe + (size_t)t * C : NULL;
            for (int i = 0; i < C; i++)
                o[i] = (e ? e[i] : 0.f) + (p ? p[i] : 0.f);
        }
}

void st_encoder_backward(float *dwte, int v0, int v1, float *dwpe, const float *dout,
                         const int32_t *tok, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            int v = tok[b * T + t];
            if (v >= v0 && v < v1) {
                float *de = dwte + (size_t)(v - v0) * C;
                for (int i = 0; i < C; i++)
                    de[i] += d[i];
            }
            if (dwpe) {
                float *dp = dwpe + (size_t)t * C;
                for (int i = 0; i < C; i++)
                    dp[i] += d[i];
            }
        }
}

/* The norms' forward, LayerNorm (mean not NULL) or RMSNorm, with the residual add fused in: with
 * res not NULL each row becomes inp + res (written to sum) before it is normalised, while it is in
 * cache, so the pair costs one pass over the rows instead of two. */
typedef struct norm_job {
    float *out, *mean, *rstd, *sum;
    const float *inp, *res, *w, *b;
    int C;
    float eps;
} norm_job_t;

ST_VEC_CLONES
static void norm_rows(void *ctx, size_t n0, size_t n1)
{
    const norm_job_t *j = ctx;
    int C = j->C;
    for (size_t n = n0; n < n1; n++) {
        const float *x = j->inp + n * C;
        float *o = j->out + n * C;
        if (j->res) {
            const float *r = j->res + n * C;
            float *y = j->sum + n * C;
            for (int i = 0; i < C; i++)
                y[i] = x[i] + r[i];
            x = y;
        }
        if (!j->mean) { // RMSNorm
            float s = 1.f / sqrtf(st_dot(x, x, C) / (float)C + j->eps);
            for (int i = 0; i < C; i++)
                o[i] = x[i] * s * j->w[i];
            j->rstd[n] = s;
            continue;
        }
        float m = st_sum(x, C) / (float)C;
        // The centred row goes through the output buffer, so the variance is a plain dot product.
        for (int i = 0; i < C; i++)
            o[i] = x[i] - m;
        float v = st_dot(o, o, C) / (float)C;
        float s = 1.f / sqrtf(v + j->eps);
        for (int i = 0; i < C; i++)
            o[i] = o[i] * s * j->w[i] + j->b[i];
        j->mean[n] = m;
        j->rstd[n] = s;
    }
}

static void norm_forward(const norm_job_t *j, int N)
{
    st_parallel_range((size_t)N, ST_ROW_GRAIN(j->C), norm_rows, (void *)j);
}

void st_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C, float eps)
{
    norm_forward(&(norm_job_t){out, mean, rstd, NULL, inp, NULL, w, b, C, eps}, N);
}

void st_add_layernorm_forward(float *out, float *mean, float *rstd, float *x, const float *res,
                              const float *w, const float *b, int N, int C, float eps)
{
    norm_forward(&(norm_job_t){out, mean, rstd, x, x, res, w, b, C, eps}, N);
}

void st_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps)
{
    norm_forward(&(norm_job_t){out, NULL, rstd, NULL, inp, NULL, w, NULL, C, eps}, N);
}

void st_add_rmsnorm_forward(float *out, float *rstd, float *x, const float *res, const float *w,
                            int N, int C, float eps)
{
    norm_forward(&(norm_job_t){out, NULL, rstd, x, x, res, w, NULL, C, eps}, N);
}

/* Sums over the rows (the gradients of a bias, of a norm's weight and bias) go by fixed blocks of
 * SUM_ROWS rows: each block's sums in row order on one thread, then the blocks' sums added in block
 * order. The result does not depend on the thread count (the serial run's, bit for bit), each
 * thread streams whole rows, and a kernel adds its row's terms in the same pass that computes the
 * row's other outputs. Column stripes (each thread the same columns of every row, in a pass of
 * their own) ran no faster at 2 threads than at 1 in the 85M model. */
#define SUM_ROWS 64

/* Rows [r0, r1)'s work, their terms added into acc[k] (the sums' `width` floats each). */
typedef void (*row_sums_fn)(const void *ctx, size_t r0, size_t r1, float *const *acc);

typedef struct sum_job {
    row_sums_fn fn;
    const void *ctx;
    float *part; /* each block's sums: nout rows of width */
    size_t N, width;
    int nout;
} sum_job_t;

static void sum_blocks(void *c, size_t b0, size_t b1)
{
    const sum_job_t *s = c;
    for (size_t b = b0; b < b1; b++) {
        float *acc[2];
        for (int k = 0; k < s->nout; k++) {
            acc[k] = s->part + (b * (size_t)s->nout + (size_t)k) * s->width;
            memset(acc[k], 0, s->width * sizeof(float));
        }
        size_t r1 = (b + 1) * SUM_ROWS < s->N ? (b + 1) * SUM_ROWS : s->N;
        s->fn(s->ctx, b * SUM_ROWS, r1, acc);
    }
}

/* Runs fn over rows [0, N) by blocks on the threads and adds the sums into out[0, nout) (at most
 * 2, width floats each). Without memory for the blocks' sums, fn runs over every row on this
 * thread, adding straight into out: each column then sums in row order, which may differ from the
 * blocks' order in the last bits. */
static void sum_rows(size_t N, size_t width, float *const *out, int nout, row_sums_fn fn,
                     const void *ctx)
{
    size_t blocks = (N + SUM_ROWS - 1) / SUM_ROWS;
    // glibc serves this size from its heap once one like it was freed (its mmap threshold rises).
    float *part = malloc(blocks * (size_t)nout * width * sizeof *part);
    if (!part) {
        fn(ctx, 0, N, out);
        return;
    }
    sum_job_t s = {fn, ctx, part, N, width, nout};
    st_parallel_range(blocks, 1, sum_blocks, &s);
    for (size_t b = 0; b < blocks; b++)
        for (int k = 0; k < nout; k++)
            st_add_inplace(out[k], part + (b * (size_t)nout + (size_t)k) * width, width);
    free(part);
}

/* The norms' backward: the input gradient (each row its own reductions) and, in the same pass,
 * the weight and bias gradients' sums. mean NULL: RMSNorm (no db). */
typedef struct norm_bwd_job {
    float *dinp, *dw, *db;
    const float *dout, *inp, *w, *mean, *rstd;
    int N, C;
} norm_bwd_job_t;

ST_VEC_CLONES
static void norm_backward_rows(const void *ctx, size_t n0, size_t n1, float *const *acc)
{
    const norm_bwd_job_t *j = ctx;
    int C = j->C;
    const float *w = j->w;
    float *dw = acc[0], *db = j->db ? acc[1] : NULL;
    for (size_t n = n0; n < n1; n++) {
        const float *d = j->dout + n * C, *x = j->inp + n * C;
        float *dx = j->dinp + n * C;
        float m = j->mean ? j->mean[n] : 0.f, s = j->rstd[n];
        // LayerNorm: two reductions, mean of dnorm and mean of dnorm * norm; RMSNorm only the
        // second (norm = x s). In lanes (vecmath.h).
        st_lanes_t a1 = {0}, a2 = {0};
        int i = 0;
        for (; i + ST_LANES <= C; i += ST_LANES) {
            st_lanes_t norm = (st_lanes_at(x + i) - m) * s;
            st_lanes_t dn = st_lanes_at(w + i) * st_lanes_at(d + i);
            a1 += dn;
            a2 += dn * norm;
        }
        for (int k = 0; i < C; i++, k++) {
            float norm = (x[i] - m) * s;
            float dn = w[i] * d[i];
            a1[k] += dn;
            a2[k] += dn * norm;
        }
        float dn_mean = j->mean ? st_lanes_sum(a1) / (float)C : 0.f;
        float dn_norm_mean = st_lanes_sum(a2) / (float)C;
        for (i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            dx[i] += (w[i] * d[i] - dn_mean - norm * dn_norm_mean) * s;
            dw[i] += norm * d[i];
        }
        if (db)
            for (i = 0; i < C; i++)
                db[i] += d[i];
    }
}

static void norm_backward(const norm_bwd_job_t *j)
{
    float *out[2] = {j->dw, j->db};
    sum_rows((size_t)j->N, (size_t)j->C, out, j->db ? 2 : 1, norm_backward_rows, j);
}

void st_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C)
{
    norm_backward(&(norm_bwd_job_t){dinp, dw, db, dout, inp, w, mean, rstd, N, C});
}

void st_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int N, int C)
{
    norm_backward(&(norm_bwd_job_t){dinp, dw, NULL, dout, inp, w, NULL, rstd, N, C});
}

void st_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                       int C, int OC)
{
    st_sgemm_bias(0, 1, N, OC, C, inp, C, w, C, bias, out, OC);
}

void st_matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int C, int OC)
{
    st_sgemm(0, 0, N, C, OC, 1.f, dout, OC, w, C, 0.f, dinp, C);
}

/* The bias gradient: a sum over the rows (sum_rows). */
typedef struct bias_bwd_job {
    const float *dout;
    size_t OC;
} bias_bwd_job_t;

ST_VEC_CLONES
static void bias_backward_rows(const void *ctx, size_t n0, size_t n1, float *const *acc)
{
    const bias_bwd_job_t *j = ctx;
    for (size_t n = n0; n < n1; n++) {
        const float *d = j->dout + n * j->OC;
        for (size_t o = 0; o < j->OC; o++)
            acc[0][o] += d[o];
    }
}

void st_bias_backward(float *dbias, const float *dout, int N, int OC)
{
    bias_bwd_job_t j = {dout, (size_t)OC};
    sum_rows((size_t)N, (size_t)OC, &dbias, 1, bias_backward_rows, &j);
}

void st_matmul_backward_weight(float *dw, float *dbias, const float *dout, const float *inp, int N,
                               int C, int OC, float dw_beta)
{
    st_sgemm(1, 0, OC, C, N, 1.f, dout, OC, inp, C, dw_beta, dw, C);
    if (dbias)
        st_bias_backward(dbias, dout, N, OC);
}

void st_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, float dinp_beta)
{
    st_sgemm(0, 0, N, C, OC, 1.f, dout, OC, w, C, dinp_beta, dinp, C);
    st_matmul_backward_weight(dw, dbias, dout, inp, N, C, OC, 1.f);
}

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */

/* tanh(u) = 1 - 2 / (exp(2u) + 1) in arithmetic that vectorises (libm's tanhf does not). No clamp
 * of u of its own: st_exp's keeps the quotient finite, and from |u| > 9 on it rounds to +-1 either
 * way. A second clamp here made GCC mask the whole AVX-512 loop by which bound each lane took,
 * 1.5 times the pass's time (1.24 against 0.83 ns an element, same bits). */
static inline float tanh_vec(float u)
{
    return 1.f - 2.f / (st_exp(2.f * u) + 1.f);
}

/* gelu_tanh(x), and its derivative there in *grad, from one tanh. */
static inline float gelu(float x, float *grad)
{
    float x2 = x * x;
    float th = tanh_vec(GELU_K * (x + 0.044715f * x2 * x));
    float half = 0.5f * (1.f + th);
    *grad = half + 0.5f * x * (1.f - th * th) * GELU_K * (1.f + 3.f * 0.044715f * x2);
    return x * half;
}

/* The unfused forms, for the fusions' benchmark and tests. */
ST_VEC_CLONES
void st_gelu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float grad;
        out[i] = gelu(inp[i], &grad);
    }
}

ST_VEC_CLONES
void st_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float grad;
        (void)gelu(inp[i], &grad);
        dinp[i] = grad * dout[i];
    }
}

/* The fused forms: the bias add rides the GeLU's pass instead of a pass of its own (forward: the
 * bias rows copied into the product's output before the GEMM, which then reads them back;
 * backward: the column sums read dinp again), and the forward keeps GeLU's derivative, which
 * shares its tanh, so the backward is a product (no second tanh, exp and division a value). */
typedef struct gelu_job {
    float *pre, *out;
    uint16_t *out16;
    const float *bias, *inp, *dout;
    int N, OC;
    bool swiglu; /* act_rows: SwiGLU of inp (gate | up), not GeLU of pre */
} gelu_job_t;

/* Columns a row's activation is computed in before it is stored (at bf16 rounded from there). */
#define ACT_TILE 256

/* GeLU of row n's columns [c0, c0 + w) (with the bias when there is one) into y, its derivative
 * into pre. */
static inline void gelu_tile(const gelu_job_t *g, size_t n, int c0, int w, float *y)
{
    float *p = g->pre + n * (size_t)g->OC + c0;
    if (g->bias)
        for (int j = 0; j < w; j++)
            y[j] = gelu(p[j] + g->bias[c0 + j], &p[j]);
    else
        for (int j = 0; j < w; j++)
            y[j] = gelu(p[j], &p[j]);
}

/* SwiGLU of row n's columns [c0, c0 + w) into y (inp: gate | up, 2 OC columns a row). */
static inline void swiglu_tile(const gelu_job_t *j, size_t n, int c0, int w, float *y)
{
    const float *g = j->inp + n * 2 * (size_t)j->OC + c0, *u = g + j->OC;
    for (int i = 0; i < w; i++)
        y[i] = g[i] / (1.f + st_exp(-g[i])) * u[i];
}

/* The MLP activation of rows [n0, n1), tile by tile: computed in place in out, or in a scratch
 * tile then rounded into out16 (the conversion every other bf16 operand gets, on the CPU's units). */
ST_VEC_CLONES
static void act_rows(void *ctx, size_t n0, size_t n1)
{
    const gelu_job_t *j = ctx;
    int OC = j->OC;
    float tile[ACT_TILE];
    for (size_t n = n0; n < n1; n++)
        for (int c0 = 0; c0 < OC; c0 += ACT_TILE) {
            int w = OC - c0 < ACT_TILE ? OC - c0 : ACT_TILE;
            size_t at = n * OC + (size_t)c0;
            float *y = j->out16 ? tile : j->out + at;
            if (j->swiglu)
                swiglu_tile(j, n, c0, w, y);
            else
                gelu_tile(j, n, c0, w, y);
            if (j->out16)
                st_gemm_bf16_round(j->out16 + at, y, 1, w, w);
        }
}

void st_bias_gelu_forward(float *pre, float *out, uint16_t *out16, const float *bias, int N,
                          int OC)
{
    gelu_job_t g = {.pre = pre, .out = out, .out16 = out16, .bias = bias, .N = N, .OC = OC};
    st_parallel_range((size_t)N, ST_ROW_GRAIN(OC), act_rows, &g);
}

/* GeLU's backward with the bias gradient's sums in the same pass (sum_rows). */
ST_VEC_CLONES
static void gelu_bias_backward_rows(const void *ctx, size_t n0, size_t n1, float *const *acc)
{
    const gelu_job_t *g = ctx;
    size_t OC = (size_t)g->OC;
    for (size_t n = n0; n < n1; n++) {
        const float *gr = g->inp + n * OC, *d = g->dout + n * OC;
        float *di = g->out + n * OC;
        for (size_t j = 0; j < OC; j++) {
            di[j] = gr[j] * d[j];
            acc[0][j] += di[j];
        }
    }
}

/* Without a bias: rows [n0, n1), no sums. */
ST_VEC_CLONES
static void gelu_backward_rows(void *ctx, size_t n0, size_t n1)
{
    const gelu_job_t *g = ctx;
    size_t at = n0 * (size_t)g->OC, end = n1 * (size_t)g->OC;
    for (size_t i = at; i < end; i++)
        g->out[i] = g->inp[i] * g->dout[i];
}

void st_gelu_bias_backward(float *dinp, float *dbias, const float *dgelu, const float *dout, int N,
                           int OC)
{
    gelu_job_t g = {.out = dinp, .inp = dgelu, .dout = dout, .N = N, .OC = OC};
    if (dbias)
        sum_rows((size_t)N, (size_t)OC, &dbias, 1, gelu_bias_backward_rows, &g);
    else
        st_parallel_range((size_t)N, ST_ROW_GRAIN(OC), gelu_backward_rows, &g);
}

ST_VEC_CLONES
void st_add_inplace(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] += inp[i];
}

void st_swiglu_forward(float *out, uint16_t *out16, const float *gu, int N, int F)
{
    gelu_job_t j = {.out = out, .out16 = out16, .inp = gu, .N = N, .OC = F, .swiglu = true};
    st_parallel_range((size_t)N, ST_ROW_GRAIN(F), act_rows, &j);
}

ST_VEC_CLONES
void st_swiglu_backward(float *dgu, const float *gu, const float *dout, int N, int F)
{
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F, *u = g + F, *d = dout + (size_t)n * F;
        float *dg = dgu + (size_t)n * 2 * F, *du = dg + F;
        for (int i = 0; i < F; i++) {
            float sig = 1.f / (1.f + st_exp(-g[i]));
            du[i] = d[i] * g[i] * sig;
            dg[i] = d[i] * u[i] * sig * (1.f + g[i] * (1.f - sig));
        }
    }
}

/* Turns every head's pairs of x by the angle of its position; sign -1 turns back. */
static void rope_turn(float *x, int ld, const float *cs, const float *sn, int B, int T, int NH,
                      int hs, float sign)
{
    int half = hs / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *c = cs + (size_t)t * half, *s = sn + (size_t)t * half;
            float *row = x + ((size_t)b * T + t) * ld;
            for (int h = 0; h < NH; h++) {
                float *x1 = row + (size_t)h * hs, *x2 = x1 + half;
                for (int i = 0; i < half; i++) {
                    float a = x1[i], b2 = x2[i], si = sign * s[i];
                    x1[i] = a * c[i] - b2 * si;
                    x2[i] = b2 * c[i] + a * si;
                }
            }
        }
}

void st_rope_forward(float *x, int ld, const float *cs, const float *sn, int B, int T, int NH,
                     int hs)
{
    rope_turn(x, ld, cs, sn, B, T, NH, hs, 1.f);
}

void st_rope_backward(float *dx, int ld, const float *cs, const float *sn, int B, int T, int NH,
                      int hs)
{
    // A rotation's Jacobian is the rotation itself; its transpose turns by the opposite angle.
    rope_turn(dx, ld, cs, sn, B, T, NH, hs, -1.f);
}
