/* Every layer's backward against central finite differences (LayerNorm, RMSNorm, linear, GELU,
 * SwiGLU, RoPE, attention with and without a sliding window, embedding, cross-entropy, and the
 * whole model in every option set) (in float, on a scalar loss
 * L = sum(out * R) with a fixed random R), and the optimizer contracts: a range updated in pieces
 * equals the range updated at once, bit for bit (AdamW and LAMB); the LR schedule's shape; the
 * clipping factor. And at bf16, the weights and activations the forward rounds and the backward
 * reads again give the bits of products rounding every operand themselves. */
#include "harness/random.h"
#include "harness/st_test.h"
#include "base/bf16.h"
#include "base/sumsq.h"
#include "model/gpt_internal.h"
#include "model/layers.h"
#include "strata/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 42; /* the random data's state (harness/random.h) */
static float *rnd(size_t n, float scale)
{
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = st_test_uniform(&rs) * scale;
    return x;
}
static float *zeros(size_t n)
{
    return calloc(n, sizeof(float));
}

/* A layer under test: forward writes out from the inputs; the check perturbs input x. */
typedef void (*fwd_fn)(void *ctx, float *out);

static double loss_of(fwd_fn f, void *ctx, float *out, const float *R, size_t nout)
{
    f(ctx, out);
    double s = 0;
    for (size_t i = 0; i < nout; i++)
        s += (double)out[i] * R[i];
    return s;
}

/* Checks analytic gradient g of x against finite differences at up to 40 positions. */
static void fd_check(const char *what, fwd_fn f, void *ctx, float *x, size_t nx, const float *g,
                     float *out, const float *R, size_t nout)
{
    size_t stride = nx / 40 + 1;
    for (size_t i = 0; i < nx; i += stride) {
        float keep = x[i], h = 1e-2f * fmaxf(1.f, fabsf(keep));
        x[i] = keep + h;
        double lp = loss_of(f, ctx, out, R, nout);
        x[i] = keep - h;
        double lm = loss_of(f, ctx, out, R, nout);
        x[i] = keep;
        double num = (lp - lm) / (2.0 * h);
        double tol = 2e-2 * fmax(1.0, fabs(num));
        if (fabs(num - g[i]) > tol)
            fail_msg("%s[%zu]: analytic %.6g, finite difference %.6g", what, i, (double)g[i], num);
    }
}

/* ---- layernorm ---- */
typedef struct { float *inp, *w, *b, *mean, *rstd; int N, C; } ln_t;
static void ln_fwd(void *c, float *out)
{
    ln_t *l = c;
    st_layernorm_forward(out, l->mean, l->rstd, l->inp, l->w, l->b, l->N, l->C, 1e-5f);
}
static void test_layernorm(void **state)
{
    (void)state;
    int N = 6, C = 16;
    size_t n = (size_t)N * C;
    ln_t l = {rnd(n, 1), rnd(C, 1), rnd(C, 1), zeros(N), zeros(N), N, C};
    float *out = zeros(n), *R = rnd(n, 1), *dinp = zeros(n), *dw = zeros(C), *db = zeros(C);
    ln_fwd(&l, out);
    st_layernorm_backward(dinp, dw, db, R, l.inp, l.w, l.mean, l.rstd, N, C);
    fd_check("ln.dinp", ln_fwd, &l, l.inp, n, dinp, out, R, n);
    fd_check("ln.dw", ln_fwd, &l, l.w, C, dw, out, R, n);
    fd_check("ln.db", ln_fwd, &l, l.b, C, db, out, R, n);
    free(l.inp), free(l.w), free(l.b), free(l.mean), free(l.rstd);
    free(out), free(R), free(dinp), free(dw), free(db);
}

/* ---- rmsnorm ---- */
typedef struct { float *inp, *w, *rstd; int N, C; } rms_t;
static void rms_fwd(void *c, float *out)
{
    rms_t *l = c;
    st_rmsnorm_forward(out, l->rstd, l->inp, l->w, l->N, l->C, 1e-5f);
}
static void test_rmsnorm(void **state)
{
    (void)state;
    int N = 6, C = 19; // not a multiple of the reduction lanes
    size_t n = (size_t)N * C;
    rms_t l = {rnd(n, 1), rnd(C, 1), zeros(N), N, C};
    float *out = zeros(n), *R = rnd(n, 1), *dinp = zeros(n), *dw = zeros(C);
    rms_fwd(&l, out);
    st_rmsnorm_backward(dinp, dw, R, l.inp, l.w, l.rstd, N, C);
    fd_check("rms.dinp", rms_fwd, &l, l.inp, n, dinp, out, R, n);
    fd_check("rms.dw", rms_fwd, &l, l.w, C, dw, out, R, n);
    free(l.inp), free(l.w), free(l.rstd), free(out), free(R), free(dinp), free(dw);
}

/* ---- swiglu ---- */
typedef struct { float *gu; int N, F; } sw_t;
static void sw_fwd(void *c, float *out)
{
    sw_t *g = c;
    st_swiglu_forward(out, NULL, g->gu, g->N, g->F);
}
static void test_swiglu(void **state)
{
    (void)state;
    int N = 4, F = 9;
    size_t nin = (size_t)N * 2 * F, nout = (size_t)N * F;
    sw_t g = {rnd(nin, 3), N, F};
    float *out = zeros(nout), *R = rnd(nout, 1), *d = rnd(nin, 1); // written, not accumulated
    st_swiglu_backward(d, g.gu, R, N, F);
    fd_check("swiglu", sw_fwd, &g, g.gu, nin, d, out, R, nout);
    free(g.gu), free(out), free(R), free(d);
}

/* ---- rope ---- */
typedef struct { float *x, *work, *cs, *sn; int B, T, ld, NH, hs; } rp_t;
static void rp_fwd(void *c, float *out)
{
    rp_t *r = c;
    size_t n = (size_t)r->B * r->T * r->ld;
    memcpy(out, r->x, n * sizeof(float));
    st_rope_forward(out, r->ld, r->cs, r->sn, r->B, r->T, r->NH, r->hs);
}
static void test_rope(void **state)
{
    (void)state;
    // 2 heads of 6 columns inside rows of 15 (the rest untouched), 5 positions.
    rp_t r = {.B = 2, .T = 5, .ld = 15, .NH = 2, .hs = 6};
    size_t n = (size_t)r.B * r.T * r.ld, half = 3;
    r.x = rnd(n, 1);
    r.cs = zeros((size_t)r.T * half);
    r.sn = zeros((size_t)r.T * half);
    for (int t = 0; t < r.T; t++)
        for (size_t i = 0; i < half; i++) {
            double a = t * pow(10000.0, -2.0 * (double)i / r.hs);
            r.cs[t * half + i] = (float)cos(a);
            r.sn[t * half + i] = (float)sin(a);
        }
    float *out = zeros(n), *R = rnd(n, 1), *d = zeros(n);
    memcpy(d, R, n * sizeof(float));
    st_rope_backward(d, r.ld, r.cs, r.sn, r.B, r.T, r.NH, r.hs);
    fd_check("rope", rp_fwd, &r, r.x, n, d, out, R, n);
    // Position 0 is the identity; the columns past the heads stay as they were.
    rp_fwd(&r, out);
    for (int k = 0; k < r.ld; k++)
        assert_float_equal(out[k], r.x[k], 0);
    for (size_t row = 0; row < (size_t)r.B * r.T; row++)
        for (int k = r.NH * r.hs; k < r.ld; k++)
            assert_float_equal(out[row * r.ld + k], r.x[row * r.ld + k], 0);
    free(r.x), free(r.cs), free(r.sn), free(out), free(R), free(d);
}

/* ---- matmul ---- */
typedef struct { float *inp, *w, *b; int N, C, OC; } mm_t;
static void mm_fwd(void *c, float *out)
{
    mm_t *m = c;
    st_matmul_forward(out, m->inp, m->w, m->b, m->N, m->C, m->OC);
}
static void test_matmul(void **state)
{
    (void)state;
    int N = 5, C = 7, OC = 9;
    mm_t m = {rnd((size_t)N * C, 1), rnd((size_t)OC * C, 1), rnd(OC, 1), N, C, OC};
    size_t nout = (size_t)N * OC;
    float *out = zeros(nout), *R = rnd(nout, 1), *dinp = rnd((size_t)N * C, 1);
    float *dw = zeros((size_t)OC * C), *db = zeros(OC);
    st_matmul_backward(dinp, dw, db, R, m.inp, m.w, N, C, OC, 0.f); // beta 0 overwrites garbage
    fd_check("mm.dinp", mm_fwd, &m, m.inp, (size_t)N * C, dinp, out, R, nout);
    fd_check("mm.dw", mm_fwd, &m, m.w, (size_t)OC * C, dw, out, R, nout);
    fd_check("mm.db", mm_fwd, &m, m.b, OC, db, out, R, nout);
    free(m.inp), free(m.w), free(m.b), free(out), free(R), free(dinp), free(dw), free(db);
}

/* ---- gelu ---- */
typedef struct { float *inp; size_t n; } ge_t;
static void ge_fwd(void *c, float *out)
{
    ge_t *g = c;
    st_gelu_forward(out, g->inp, g->n);
}
static void test_gelu(void **state)
{
    (void)state;
    size_t n = 64;
    ge_t g = {rnd(n, 3), n};
    float *out = zeros(n), *R = rnd(n, 1), *d = zeros(n);
    st_gelu_backward(d, g.inp, R, n);
    fd_check("gelu", ge_fwd, &g, g.inp, n, d, out, R, n);
    free(g.inp), free(out), free(R), free(d);
}

/* GeLU (tanh approximation) and its derivative in double precision, the reference. */
static double gelu_ref(double x, double *grad)
{
    const double k = 0.7978845608028654, a = 0.044715;
    double th = tanh(k * (x + a * x * x * x));
    *grad = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * a * x * x);
    return 0.5 * x * (1 + th);
}

/* The fused bias + GeLU, with and without the bias: the values and the derivative the forward
 * leaves in pre against the double-precision formula, the backward by finite differences in the
 * input and the bias, and everything bit for bit the unfused kernels (GeLU of the biased input,
 * its backward from that input, the bias gradient as column sums), the input gradient also when
 * it overwrites the output gradient (as the model calls it). */
typedef struct { float *pre, *bias, *tmp; int N, OC; } bg_t;
static void bg_fwd(void *c, float *out)
{
    bg_t *g = c;
    memcpy(g->tmp, g->pre, (size_t)g->N * g->OC * sizeof(float));
    st_bias_gelu_forward(g->tmp, out, NULL, g->bias, g->N, g->OC);
}
static void test_bias_gelu(void **state)
{
    (void)state;
    int N = 5, OC = 24;
    size_t n = (size_t)N * OC;
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        bg_t g = {rnd(n, 3), with_bias ? rnd(OC, 1) : NULL, zeros(n), N, OC};
        float *out = zeros(n), *R = rnd(n, 1), *d = zeros(n), *db = zeros(OC);
        float *x = zeros(n), *y = zeros(n), *d2 = zeros(n), *db2 = zeros(OC);
        for (size_t i = 0; i < n; i++) // the biased input
            x[i] = g.pre[i] + (g.bias ? g.bias[i % (size_t)OC] : 0.f);
        bg_fwd(&g, out); // g.tmp: GeLU's derivative
        for (size_t i = 0; i < n; i++) {
            double dy, ref = gelu_ref(x[i], &dy);
            if (fabs(out[i] - ref) > 1e-6 * fmax(1, fabs(ref)) || fabs(g.tmp[i] - dy) > 1e-5)
                fail_msg("gelu(%g) = %g, derivative %g; want %g, %g", (double)x[i],
                         (double)out[i], (double)g.tmp[i], ref, dy);
        }
        st_gelu_bias_backward(d, g.bias ? db : NULL, g.tmp, R, N, OC);
        fd_check("bias_gelu.dpre", bg_fwd, &g, g.pre, n, d, out, R, n);
        if (g.bias)
            fd_check("bias_gelu.dbias", bg_fwd, &g, g.bias, OC, db, out, R, n);
        // The unfused kernels, after the forward again at the unperturbed input.
        bg_fwd(&g, out);
        st_gelu_forward(y, x, n);
        assert_memory_equal(out, y, n * sizeof(float));
        st_gelu_backward(d2, x, R, n);
        assert_memory_equal(d, d2, n * sizeof(float));
        if (g.bias) {
            st_bias_backward(db2, d2, N, OC);
            assert_memory_equal(db, db2, OC * sizeof(float));
        }
        memcpy(d2, R, n * sizeof(float));
        st_gelu_bias_backward(d2, NULL, g.tmp, d2, N, OC);
        assert_memory_equal(d, d2, n * sizeof(float));
        free(g.pre), free(g.bias), free(g.tmp), free(out), free(R), free(d), free(db);
        free(x), free(y), free(d2), free(db2);
    }
}

/* The MLP activations' bf16 output (the kept copy the next product reads): each value the float32
 * output rounded, with the bias, without it and for SwiGLU, across the
 * kernel's column tiles (a partial last one) and over several threads' rows. */
static void test_act_bf16_out(void **state)
{
    (void)state;
    int N = 67, OC = 600;
    size_t n = (size_t)N * OC;
    float *pre = rnd(n, 3), *bias = rnd(OC, 1), *p1 = zeros(n), *p2 = zeros(n), *out = zeros(n);
    float *gu = rnd(2 * n, 3);
    uint16_t *o16 = calloc(n, sizeof *o16);
    strata_blas_set_threads(2);
    for (int k = 0; k < 3; k++) {
        const float *b = k == 0 ? bias : NULL;
        memcpy(p1, pre, n * sizeof(float));
        memcpy(p2, pre, n * sizeof(float));
        if (k < 2) {
            st_bias_gelu_forward(p1, out, NULL, b, N, OC);
            st_bias_gelu_forward(p2, NULL, o16, b, N, OC);
            assert_memory_equal(p1, p2, n * sizeof(float)); // the derivative written alike
        } else {
            st_swiglu_forward(out, NULL, gu, N, OC);
            st_swiglu_forward(NULL, o16, gu, N, OC);
        }
        for (size_t i = 0; i < n; i++) // (no subnormal values here, which the units flush)
            if (o16[i] != st_f32_to_bf16(out[i]))
                fail_msg("kernel %d: value %zu rounded to %#x, float32 %g", k, i, o16[i],
                         (double)out[i]);
    }
    strata_blas_set_threads(1);
    free(pre), free(bias), free(p1), free(p2), free(out), free(gu), free(o16);
}

/* The residual add fused into the norms' pass: bit for bit the add then the norm, and x holds the
 * sum afterwards (the model's blocks read it back as the residual stream). */
static void test_add_norm(void **state)
{
    (void)state;
    int N = 7, C = 40;
    size_t n = (size_t)N * C;
    float *x = rnd(n, 2), *res = rnd(n, 2), *w = rnd(C, 1), *b = rnd(C, 1);
    float *y = zeros(n), *x2 = zeros(n), *o1 = zeros(n), *o2 = zeros(n);
    float *m1 = zeros(N), *s1 = zeros(N), *m2 = zeros(N), *s2 = zeros(N);
    for (int rms = 0; rms < 2; rms++) {
        memcpy(y, x, n * sizeof(float));
        st_add_inplace(y, res, n);
        memcpy(x2, x, n * sizeof(float));
        if (rms) {
            st_rmsnorm_forward(o1, s1, y, w, N, C, 1e-5f);
            st_add_rmsnorm_forward(o2, s2, x2, res, w, N, C, 1e-5f);
        } else {
            st_layernorm_forward(o1, m1, s1, y, w, b, N, C, 1e-5f);
            st_add_layernorm_forward(o2, m2, s2, x2, res, w, b, N, C, 1e-5f);
            assert_memory_equal(m1, m2, N * sizeof(float));
        }
        assert_memory_equal(x2, y, n * sizeof(float));
        assert_memory_equal(o1, o2, n * sizeof(float));
        assert_memory_equal(s1, s2, N * sizeof(float));
    }
    free(x), free(res), free(w), free(b), free(y), free(x2), free(o1), free(o2);
    free(m1), free(s1), free(m2), free(s2);
}

/* ---- attention ---- */
typedef struct { float *qkv, *att; int B, T, C, NH, NKV, W; } at_t;
static void at_fwd(void *c, float *out)
{
    at_t *a = c;
    st_attention_forward(out, a->att, a->qkv, NULL, a->B, a->T, a->C, a->NH, a->NKV, a->W);
}
/* Plain-loop causal attention in double, forward (out) and backward (dqkv, written) for the output
 * gradient d: the reference the blocked kernel must match element by element. Query i attends keys
 * [lo, i], lo = max(0, i - W + 1) with a window W, else 0; query head h reads k/v head h / (NH /
 * NKV), k at column C + (its index) hs of a row of C + 2 KV, v KV further. */
static void attention_ref(float *out, float *dqkv, const float *qkv, const float *d, int B, int T,
                          int C, int NH, int NKV, int W)
{
    int hs = C / NH, KV = hs * NKV, LD = C + 2 * KV;
    double scale = 1.0 / sqrt((double)hs), *p = malloc((size_t)T * sizeof(double));
    double *dp = malloc((size_t)T * sizeof(double));
    memset(dqkv, 0, (size_t)B * T * LD * sizeof(float));
    // Q(t)[e]: query head h's q; K(t)[e], V(t)[e]: its k/v head's k and v (DQ, DK, DV likewise).
#define Q(t) (qkv + ((size_t)b * T + (t)) * LD + h * hs)
#define K(t) (qkv + ((size_t)b * T + (t)) * LD + C + h / (NH / NKV) * hs)
#define V(t) (K(t) + KV)
#define DQ(t) (dqkv + ((size_t)b * T + (t)) * LD + h * hs)
#define DK(t) (dqkv + ((size_t)b * T + (t)) * LD + C + h / (NH / NKV) * hs)
#define DV(t) (DK(t) + KV)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                int lo = W > 0 && i >= W ? i - W + 1 : 0;
                double mx = -INFINITY, sum = 0, dot = 0;
                for (int j = lo; j <= i; j++) {
                    double s = 0;
                    for (int e = 0; e < hs; e++)
                        s += (double)Q(i)[e] * K(j)[e];
                    p[j] = s * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int j = lo; j <= i; j++)
                    sum += (p[j] = exp(p[j] - mx));
                const float *di = d + ((size_t)b * T + i) * C + h * hs;
                for (int j = lo; j <= i; j++) {
                    p[j] /= sum;
                    dp[j] = 0;
                    for (int e = 0; e < hs; e++) {
                        dp[j] += (double)di[e] * V(j)[e];
                        DV(j)[e] += (float)(p[j] * di[e]);
                    }
                    dot += p[j] * dp[j];
                }
                for (int e = 0; e < hs; e++) {
                    double acc = 0;
                    for (int j = lo; j <= i; j++)
                        acc += p[j] * V(j)[e];
                    out[((size_t)b * T + i) * C + h * hs + e] = (float)acc;
                }
                for (int j = lo; j <= i; j++) {
                    double ds = p[j] * (dp[j] - dot) * scale;
                    for (int e = 0; e < hs; e++) {
                        DQ(i)[e] += (float)(ds * K(j)[e]);
                        DK(j)[e] += (float)(ds * Q(i)[e]);
                    }
                }
            }
#undef Q
#undef K
#undef V
#undef DQ
#undef DK
#undef DV
    free(p), free(dp);
}

static void expect_near(const char *what, int T, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > 1e-5f + 1e-4f * fabsf(want[i]))
            fail_msg("%s[%zu] (T=%d): %.7g, reference %.7g", what, i, T, (double)got[i],
                     (double)want[i]);
}

static void check_attention_gqa(int B, int T, int C, int NH, int NKV, int W)
{
    size_t nq = (size_t)B * T * (C + 2 * C / NH * NKV), nout = (size_t)B * T * C;
    size_t band = (size_t)st_attention_band(T, W), natt = (size_t)B * NH * T * band;
    at_t a = {rnd(nq, 1), zeros(natt), B, T, C, NH, NKV, W}; // exactly the band: ASan sees past it
    float *out = zeros(nout), *R = rnd(nout, 1), *dqkv = zeros(nq), *scratch = zeros(T * band);
    float *ref = zeros(nout), *dref = zeros(nq);
    // The kernels read only the blocks they write: poison the rest of att and the scratch.
    for (size_t i = 0; i < natt; i++)
        a.att[i] = NAN;
    for (size_t i = 0; i < T * band; i++)
        scratch[i] = NAN;
    at_fwd(&a, out);
    st_attention_backward(dqkv, scratch, 1, R, a.qkv, a.att, NULL, false, NULL, B, T, C, NH, NKV, W);
    attention_ref(ref, dref, a.qkv, R, B, T, C, NH, NKV, W);
    expect_near("attn.out", T, out, ref, nout);
    expect_near("attn.dqkv", T, dqkv, dref, nq);
    fd_check("attn.dqkv", at_fwd, &a, a.qkv, nq, dqkv, out, R, nout);
    free(a.qkv), free(a.att), free(out), free(R), free(dqkv), free(scratch), free(ref),
        free(dref);
}

static void check_attention(int B, int T, int C, int NH, int W)
{
    check_attention_gqa(B, T, C, NH, NH, W);
}

static void test_attention(void **state)
{
    (void)state;
    check_attention(2, 5, 8, 2, 0);
    // Longer than the kernel's query-row block (64) with a partial last block: the blocked
    // products and the key-column pass of backward cross block boundaries.
    check_attention(1, 133, 8, 2, 0);
    // Sliding windows: shorter than a block (whole key blocks skipped, the window's start inside a
    // block), longer than one, one key (each query itself), and one longer than the sequence.
    check_attention(2, 5, 8, 2, 2);
    check_attention(1, 200, 8, 2, 10);
    check_attention(1, 200, 8, 2, 70);
    check_attention(1, 133, 8, 2, 1);
    check_attention(1, 20, 8, 2, 64);
    // Grouped-query attention: two query heads a k/v head, and one k/v head for all (multi-query),
    // with and without a window, across the blocks.
    check_attention_gqa(2, 5, 16, 4, 2, 0);
    check_attention_gqa(1, 133, 16, 4, 1, 0);
    check_attention_gqa(1, 200, 16, 4, 2, 70);
    // With a window each query row keeps its block's keys only: W + 64 columns at most, rounded
    // to the block (T at most, and without a window).
    assert_int_equal(st_attention_band(4096, 512), 576);
    assert_int_equal(st_attention_band(200, 10), 128);
    assert_int_equal(st_attention_band(133, 1), 64);
    assert_int_equal(st_attention_band(20, 64), 20);
    assert_int_equal(st_attention_band(4096, 0), 4096);
}

/* A model with a sliding window keeps each head's probabilities in the band: its activation slot
 * is smaller than the full-attention model's by T (T - band) floats per head and block. */
static void test_window_memory(void **state)
{
    (void)state;
    strata_gpt_config_t cfg = {0};
    cfg.vocab = 32, cfg.max_seq = 1024, cfg.n_layer = 2, cfg.n_head = 2, cfg.d_model = 16;
    cfg.ln_eps = 1e-5f, cfg.init_std = 0.02f;
    strata_gpt_t *full, *swa;
    assert_int_equal(strata_model_create(&cfg, 1, 7, &full), STRATA_OK);
    cfg.window = 128;
    assert_int_equal(strata_model_create(&cfg, 1, 7, &swa), STRATA_OK);
    size_t T = 1024, band = (size_t)st_attention_band(1024, 128);
    assert_int_equal(band, 192);
    assert_int_equal(strata_model_slot_floats(full) - strata_model_slot_floats(swa),
                     2 * 2 * T * (T - band));
    strata_model_destroy(full);
    strata_model_destroy(swa);
}

/* ---- encoder ---- */
typedef struct { int32_t tok[6]; float *wte, *wpe; int B, T, C; } en_t;
static void en_fwd(void *c, float *out)
{
    en_t *e = c;
    st_encoder_forward(out, e->tok, e->wte, 0, 4, e->wpe, e->B, e->T, e->C);
}
static void test_encoder(void **state)
{
    (void)state;
    en_t e = {{1, 3, 1, 0, 2, 3}, rnd(4 * 4, 1), rnd(3 * 4, 1), 2, 3, 4};
    size_t nout = 2 * 3 * 4;
    float *out = zeros(nout), *R = rnd(nout, 1), *dwte = zeros(16), *dwpe = zeros(12);
    st_encoder_backward(dwte, 0, 4, dwpe, R, e.tok, 2, 3, 4);
    fd_check("enc.dwte", en_fwd, &e, e.wte, 16, dwte, out, R, nout);
    fd_check("enc.dwpe", en_fwd, &e, e.wpe, 12, dwpe, out, R, nout);
    free(e.wte), free(e.wpe), free(out), free(R), free(dwte), free(dwpe);
}

/* ---- cross-entropy ---- */
typedef struct { float *logits, *lse; int32_t tgt[4]; int N, V; } xe_t;
static void xe_fwd(void *c, float *out)
{
    xe_t *x = c;
    out[0] = st_xent_forward(x->lse, x->logits, x->tgt, x->N, x->V);
}
static void test_xent(void **state)
{
    (void)state;
    xe_t x = {rnd(4 * 11, 2), zeros(4), {3, 0, 10, 5}, 4, 11};
    float out[1], R[1] = {1.f}, *d = zeros(44);
    xe_fwd(&x, out);
    st_xent_backward(d, NULL, x.logits, x.lse, x.tgt, 0, 4, 11, 1.f / 4);
    fd_check("xent", xe_fwd, &x, x.logits, 44, d, out, R, 1);
    free(x.logits), free(x.lse), free(d);
}

/* ---- whole model (FD on a few parameters of every tensor) ---- */
static void model_fd(const strata_gpt_config_t *opts)
{
    strata_gpt_config_t cfg = *opts;
    cfg.vocab = 32, cfg.max_seq = 6, cfg.n_layer = 2, cfg.n_head = 2, cfg.d_model = 8;
    cfg.ln_eps = 1e-5f, cfg.init_std = 0.3f;
    strata_gpt_t *m;
    assert_int_equal(strata_model_create(&cfg, 2, 7, &m), STRATA_OK);
    int32_t tok[12], tgt[12];
    for (int i = 0; i < 12; i++) {
        tok[i] = (i * 7 + 3) % 32;
        tgt[i] = (i * 5 + 1) % 32;
    }
    float loss;
    assert_int_equal(strata_model_forward(m, tok, tgt, 2, 6, &loss), STRATA_OK);
    assert_int_equal(strata_model_backward(m), STRATA_OK);
    size_t P = strata_model_nparams(m);
    float *g = malloc(P * sizeof(float)), *p = strata_model_param_arena(m);
    memcpy(g, strata_model_grad_arena(m), P * sizeof(float));
    for (int ti = 0; ti < strata_model_ntensors(m); ti++) {
        const strata_tensor_info_t *t = strata_model_tensor(m, ti);
        for (size_t k = 0; k < t->count; k += t->count / 3 + 1) {
            size_t i = t->offset + k;
            float keep = p[i], h = 1e-2f;
            float lp, lm;
            p[i] = keep + h;
            strata_model_forward(m, tok, tgt, 2, 6, &lp);
            p[i] = keep - h;
            strata_model_forward(m, tok, tgt, 2, 6, &lm);
            p[i] = keep;
            double num = ((double)lp - lm) / (2.0 * h);
            if (fabs(num - g[i]) > 5e-3 + 5e-2 * fabs(num))
                fail_msg("%s[%zu]: analytic %.6g, finite difference %.6g", t->name, k,
                         (double)g[i], num);
        }
    }
    free(g);
    strata_model_destroy(m);
}

static void test_model_fd(void **state)
{
    (void)state;
    strata_gpt_config_t gpt2 = {0}, par = {.parallel = true, .window = 3}, llama = {0};
    strata_gpt_config_llama(&llama); // untied
    // Grouped-query attention (one k/v head for the two query heads) with the biases of q and kv.
    strata_gpt_config_t gqa = {.n_kv_head = 1};
    strata_gpt_config_t all = llama;
    all.parallel = true;
    all.window = 2;
    all.n_kv_head = 1;
    model_fd(&gpt2);
    model_fd(&par);
    model_fd(&llama);
    model_fd(&gqa);
    model_fd(&all);
}

/* ---- bf16: operands rounded once in the forward, kept for the backward ---- */

/* Acquire hooks that hand out a fresh copy of the segment at every acquire, as ZeRO-3's gathers
 * do: the backward reads the forward's rounding from another buffer than the forward's. */
typedef struct copy_hooks {
    strata_gpt_t *m;
    float *held[64];
} copy_hooks_t;

static strata_status_t copy_acquire(void *ctx, int seg, bool bwd, const float **params)
{
    (void)bwd;
    copy_hooks_t *h = ctx;
    size_t off, cnt;
    strata_model_segment(h->m, seg, &off, &cnt);
    h->held[seg] = malloc(cnt * sizeof(float));
    memcpy(h->held[seg], strata_model_param_arena(h->m) + off, cnt * sizeof(float));
    *params = h->held[seg];
    return STRATA_OK;
}

static strata_status_t copy_release(void *ctx, int seg, bool bwd)
{
    (void)bwd;
    copy_hooks_t *h = ctx;
    free(h->held[seg]);
    h->held[seg] = NULL;
    return STRATA_OK;
}

/* The gradients of one forward and backward on m, copied. */
static float *grads_of(strata_gpt_t *m, const int32_t *tok, const int32_t *tgt)
{
    float loss;
    assert_int_equal(strata_model_forward(m, tok, tgt, 2, 6, &loss), STRATA_OK);
    assert_int_equal(strata_model_backward(m), STRATA_OK);
    size_t P = strata_model_nparams(m);
    float *g = malloc(P * sizeof(float));
    memcpy(g, strata_model_grad_arena(m), P * sizeof(float));
    return g;
}

/* At bf16 the backward's products read the weights and activations the forward rounded: the
 * gradients are those of products rounding every operand themselves, bit for bit (every option
 * set). A change of the parameters between steps (the optimizer's), with an evaluation forward in
 * between, is seen: the next step's gradients are those of a fresh model holding the new
 * parameters, bit for bit, and so are a model's whose hooks hand out a new buffer at every
 * acquire. */
static void bf16_copies(const strata_gpt_config_t *opts)
{
    strata_gpt_config_t cfg = *opts;
    cfg.vocab = 32, cfg.max_seq = 6, cfg.n_layer = 2, cfg.n_head = 2, cfg.d_model = 8;
    cfg.ln_eps = 1e-5f, cfg.init_std = 0.3f;
    strata_gpt_t *a, *b, *c;
    assert_int_equal(strata_model_create(&cfg, 2, 7, &a), STRATA_OK);
    assert_int_equal(strata_model_create(&cfg, 2, 7, &b), STRATA_OK);
    assert_int_equal(strata_model_create(&cfg, 2, 7, &c), STRATA_OK);
    int32_t tok[12], tgt[12], other[12];
    for (int i = 0; i < 12; i++) {
        tok[i] = (i * 7 + 3) % 32;
        tgt[i] = (i * 5 + 1) % 32;
        other[i] = (i * 3 + 2) % 32;
    }
    size_t P = strata_model_nparams(a);
    free(grads_of(a, tok, tgt));
    float *pa = strata_model_param_arena(a);
    for (size_t i = 0; i < P; i++) // the step's update
        pa[i] = pa[i] * 1.25f + 0.01f;
    float l;
    assert_int_equal(strata_model_forward(a, other, tgt, 2, 6, &l), STRATA_OK); // evaluation
    float *ga = grads_of(a, tok, tgt);
    memcpy(strata_model_param_arena(b), pa, P * sizeof(float));
    float *gb = grads_of(b, tok, tgt);
    assert_memory_equal(ga, gb, P * sizeof(float));
    memcpy(strata_model_param_arena(c), pa, P * sizeof(float));
    c->no_copies = true;
    float *gr = grads_of(c, tok, tgt);
    assert_memory_equal(gb, gr, P * sizeof(float));
    c->no_copies = false;
    copy_hooks_t h = {.m = c};
    assert_true(strata_model_nsegments(c) <= 64);
    strata_param_hooks_t hooks = {&h, copy_acquire, copy_release, NULL};
    strata_model_set_hooks(c, &hooks);
    float *gc = grads_of(c, tok, tgt);
    assert_memory_equal(gb, gc, P * sizeof(float));
    // A backward whose holds all fail (every slot of this thread taken after the forward): its
    // products round the float32 operands themselves, the MLP activation's widened from the copy
    // its kernel wrote instead of float32 values.
    assert_int_equal(strata_model_forward(b, tok, tgt, 2, 6, &l), STRATA_OK);
    enum { SLOTS = 64 };
    float dummy[SLOTS][4] = {{0}};
    uint16_t d16[SLOTS][4];
    int taken = 0;
    while (taken < SLOTS && st_operand_hold_copy(dummy[taken], 4, d16[taken], false))
        taken++;
    assert_true(taken > 0 && taken < SLOTS);
    assert_int_equal(strata_model_backward(b), STRATA_OK);
    for (int k = 0; k < taken; k++)
        st_operand_release(dummy[k]);
    assert_memory_equal(strata_model_grad_arena(b), gr, P * sizeof(float));
    free(ga), free(gb), free(gc), free(gr);
    strata_model_destroy(a);
    strata_model_destroy(b);
    strata_model_destroy(c);
}

static void test_bf16_copies(void **state)
{
    (void)state;
    strata_blas_set_precision(STRATA_PREC_BF16, NULL);
    strata_gpt_config_t gpt2 = {0}, par = {.parallel = true, .window = 3}, llama = {0};
    strata_gpt_config_llama(&llama);
    bf16_copies(&gpt2);
    bf16_copies(&par);
    bf16_copies(&llama);
    llama.n_kv_head = 1;
    bf16_copies(&llama);
    strata_blas_set_precision(STRATA_PREC_FP32, NULL);
}

/* ---- optimizers ---- */
static void test_optim_pieces(void **state)
{
    (void)state;
    strata_gpt_config_t cfg = strata_gpt_config_default();
    strata_gpt_t *m;
    assert_int_equal(strata_model_create(&cfg, 1, 3, &m), STRATA_OK);
    size_t P = strata_model_nparams(m);
    float *g = rnd(P, 0.1f);
    for (int kind = 0; kind < 2; kind++) {
        strata_optim_config_t oc = strata_optim_config_default();
        oc.kind = kind;
        float *pa = malloc(P * 4), *pb = malloc(P * 4);
        memcpy(pa, strata_model_param_arena(m), P * 4);
        memcpy(pb, pa, P * 4);
        float *ma = zeros(P), *va = zeros(P), *mb = zeros(P), *vb = zeros(P);
        int nt = strata_model_ntensors(m);
        double *wa = calloc((size_t)nt, 8), *ua = calloc((size_t)nt, 8);
        double *wb = calloc((size_t)nt, 8), *ub = calloc((size_t)nt, 8);
        // Uneven pieces that cut through tensors, each with its own m/v arrays (ZeRO shards).
        size_t cuts[] = {0, 1, 777, 4099, P / 2 + 3, P - 5, P};
        int ncut = (int)(sizeof cuts / sizeof cuts[0]);
        for (int step = 1; step <= 3; step++) {
            if (kind == 0) {
                assert_int_equal(strata_adamw_update(m, &oc, pa, g, ma, va, 0, P, 1e-2f, step, 0.5f),
                                 STRATA_OK);
                for (int c = 0; c + 1 < ncut; c++) {
                    size_t o = cuts[c], n = cuts[c + 1] - o;
                    assert_int_equal(strata_adamw_update(m, &oc, pb + o, g + o, mb + o, vb + o, o, n,
                                                         1e-2f, step, 0.5f), STRATA_OK);
                }
            } else {
                memset(wa, 0, (size_t)nt * 8), memset(ua, 0, (size_t)nt * 8);
                memset(wb, 0, (size_t)nt * 8), memset(ub, 0, (size_t)nt * 8);
                strata_lamb_partial(m, &oc, pa, g, ma, va, 0, P, step, 0.5f, wa, ua);
                strata_lamb_apply(m, &oc, pa, ma, va, 0, P, 1e-2f, step, wa, ua);
                // Sharded: partial sums per piece into per-shard arrays, then "allreduce" them.
                double *ws = calloc((size_t)nt * ncut, 8), *us = calloc((size_t)nt * ncut, 8);
                for (int c = 0; c + 1 < ncut; c++) {
                    size_t o = cuts[c], n = cuts[c + 1] - o;
                    strata_lamb_partial(m, &oc, pb + o, g + o, mb + o, vb + o, o, n, step, 0.5f,
                                        ws + (size_t)c * nt, us + (size_t)c * nt);
                }
                for (int c = 0; c + 1 < ncut; c++)
                    for (int i = 0; i < nt; i++) {
                        wb[i] += ws[(size_t)c * nt + i];
                        ub[i] += us[(size_t)c * nt + i];
                    }
                for (int c = 0; c + 1 < ncut; c++) {
                    size_t o = cuts[c], n = cuts[c + 1] - o;
                    strata_lamb_apply(m, &oc, pb + o, mb + o, vb + o, o, n, 1e-2f, step, wb, ub);
                }
                free(ws), free(us);
                // Norm sums in another order may differ in the last bit; parameters follow the
                // trust ratio, so compare those with a tight tolerance instead of bits.
                for (size_t i = 0; i < P; i++)
                    assert_true(fabsf(pa[i] - pb[i]) <= 1e-6f * fmaxf(1.f, fabsf(pa[i])));
                memcpy(pb, pa, P * 4);
            }
        }
        if (kind == 0)
            assert_memory_equal(pa, pb, P * 4);
        assert_memory_equal(ma, mb, P * 4);
        assert_memory_equal(va, vb, P * 4);
        free(pa), free(pb), free(ma), free(va), free(mb), free(vb), free(wa), free(ua), free(wb),
            free(ub);
    }
    // Out-of-range is refused.
    strata_optim_config_t oc = strata_optim_config_default();
    float x = 0;
    assert_int_equal(strata_adamw_update(m, &oc, &x, &x, &x, &x, P, 1, 1e-3f, 1, 1.f),
                     STRATA_ERR_INVALID_ARG);
    free(g);
    strata_model_destroy(m);
}

/* The kernels that sum over rows (the norms', the bias's and GeLU's with the bias gradient) and
 * the gradient norm give the same bits on one thread and on three: the threads take whole blocks
 * of rows (600 rows: 9 blocks of 64 and a shorter one), never a sum's order. The norm also
 * equals st_sumsq_f32, the order a pool node's SUMSQ runs. */
static void test_threads_bitwise(void **state)
{
    (void)state;
    int N = 600, C = 192;
    size_t n = (size_t)N * C;
    float *x = rnd(n, 2), *d = rnd(n, 1), *w = rnd(C, 1), *b = rnd(C, 1);
    float *mean = zeros(N), *rstd = zeros(N), *out = zeros(n);
    st_layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-5f);
    enum { OUTS = 7 }; // [0, 2) and 5 have n floats, the rest C
    float *got[2][OUTS];
    double ss[2];
    size_t big = ((size_t)7 << 16) / 2 + 3; // 3.5 of st_sumsq_f32's blocks and a tail
    float *g = rnd(big, 1);
    for (int k = 0; k < 2; k++) {
        strata_blas_set_threads(k ? 3 : 1);
        for (int t = 0; t < OUTS; t++)
            got[k][t] = zeros(t < 2 || t == 5 ? n : (size_t)C);
        st_layernorm_backward(got[k][0], got[k][2], got[k][3], d, x, w, mean, rstd, N, C);
        st_rmsnorm_backward(got[k][1], got[k][4], d, x, w, rstd, N, C);
        st_bias_backward(got[k][3], d, N, C);
        st_gelu_bias_backward(got[k][5], got[k][6], x, d, N, C);
        ss[k] = strata_sumsq(g, big);
    }
    strata_blas_set_threads(1);
    for (int t = 0; t < OUTS; t++)
        assert_memory_equal(got[0][t], got[1][t],
                            (t < 2 || t == 5 ? n : (size_t)C) * sizeof(float));
    assert_memory_equal(&ss[0], &ss[1], sizeof(double));
    double ref = st_sumsq_f32(g, big);
    assert_memory_equal(&ss[1], &ref, sizeof(double));
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < OUTS; t++)
            free(got[k][t]);
    free(x), free(d), free(w), free(b), free(mean), free(rstd), free(out), free(g);
}

static void test_schedule_clip(void **state)
{
    (void)state;
    strata_lr_schedule_t s = {1.0f, 0.1f, 10, 110};
    assert_float_equal(strata_lr_at(&s, 1), 0.1, 1e-6);
    assert_float_equal(strata_lr_at(&s, 10), 1.0, 1e-6);
    assert_float_equal(strata_lr_at(&s, 60), 0.55, 1e-5);
    assert_float_equal(strata_lr_at(&s, 110), 0.1, 1e-6);
    assert_float_equal(strata_lr_at(&s, 500), 0.1, 1e-6);
    for (int64_t i = 11; i < 110; i++)
        assert_true(strata_lr_at(&s, i + 1) <= strata_lr_at(&s, i));
    float x[5] = {3, 4, 0, 0, 0};
    assert_float_equal(strata_sumsq(x, 5), 25.0, 0);
    assert_float_equal(strata_sumsq(x, 2) + strata_sumsq(x + 2, 3), 25.0, 0);
    assert_float_equal(strata_clip_scale(25.0, 1.0f), 0.2, 1e-6);
    assert_float_equal(strata_clip_scale(25.0, 10.0f), 1.0, 0);
    assert_float_equal(strata_clip_scale(25.0, 0.0f), 1.0, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm), cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_add_norm),
        cmocka_unit_test(test_swiglu),    cmocka_unit_test(test_rope),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_gelu),      cmocka_unit_test(test_bias_gelu),
        cmocka_unit_test(test_attention), cmocka_unit_test(test_window_memory),
        cmocka_unit_test(test_encoder),   cmocka_unit_test(test_xent),
        cmocka_unit_test(test_model_fd),  cmocka_unit_test(test_bf16_copies),
        cmocka_unit_test(test_optim_pieces),
        cmocka_unit_test(test_schedule_clip), cmocka_unit_test(test_threads_bitwise),
        cmocka_unit_test(test_act_bf16_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
