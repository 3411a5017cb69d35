/* The gain of each fused operator of the model, same run: the fused kernel against the unfused
 * sequence it replaces, best of --reps timings each, the two sides interleaved so load on the
 * machine hits both alike, at the precision given:
 *  - bias + GeLU, forward and backward, at one MLP's shape (rows N = B*T, width 4C), the matrix
 *    product in both sides (the fusion changes what it writes: no bias rows to initialise), the
 *    fused forward keeping GeLU's derivative for the fused backward, the unfused backward
 *    computing it again from the pre-activation;
 *  - the residual add + LayerNorm, at the residual stream's shape (N x C);
 *  - the cross-entropy's backward with the tied head's two products (N x V logits, --vocab V):
 *    at bf16 the fused pass rounds dlogits for both products as it writes them, where unfused
 *    each product rounds them again (in fp32 there is no pass to save: the two sides are equal).
 * Usage: strata_fusion [--rows N] [--dim C] [--vocab V] [--reps R] [--precision fp32|bf16] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/layers.h"
#include "strata/model.h"

static uint64_t seed = 1;

/* n uniform values in [-scale/2, scale/2); exits when out of memory. */
static float *rnd(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    if (!x) {
        fprintf(stderr, "strata_fusion: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = scale * ((float)(seed >> 40) / (float)(1 << 24) - 0.5f);
    }
    return x;
}

/* The best time of each side of a fusion over its rounds. */
typedef struct timing {
    const char *name;
    double side[2]; /* unfused, fused */
} timing_t;

static void record(timing_t *t, int side, uint64_t t0, int round)
{
    double s = (double)(st_now_ns() - t0) * 1e-9;
    if (round > 0 && s < t->side[side]) // round 0 warms up (and builds the products)
        t->side[side] = s;
}

static void report(const timing_t *t)
{
    printf("%-42s %8.2fms %8.2fms %6.2fx\n", t->name, t->side[0] * 1e3, t->side[1] * 1e3,
           t->side[0] / t->side[1]);
}

static void bias_gelu(int N, int C, int reps)
{
    int OC = 4 * C;
    size_t n = (size_t)N * OC;
    float *x = rnd((size_t)N * C, 1), *w = rnd((size_t)OC * C, 0.05f), *bias = rnd(OC, 0.1f);
    float *dout = rnd(n, 1), *pre = rnd(n, 1), *act = rnd(n, 1), *din = rnd(n, 1);
    float *dgelu = rnd(n, 1); // the fused side's product, then GeLU's derivative
    float *db = rnd(OC, 1);
    timing_t f = {"bias + GeLU forward (with the GEMM)", {1e30, 1e30}};
    timing_t b = {"GeLU backward + bias gradient", {1e30, 1e30}};
    for (int r = 0; r <= reps; r++) {
        uint64_t t0 = st_now_ns();
        st_matmul_forward(pre, x, w, bias, N, C, OC);
        st_gelu_forward(act, pre, n);
        record(&f, 0, t0, r);
        t0 = st_now_ns();
        st_matmul_forward(dgelu, x, w, NULL, N, C, OC);
        st_bias_gelu_forward(dgelu, act, NULL, bias, N, OC);
        record(&f, 1, t0, r);
        t0 = st_now_ns();
        st_gelu_backward(din, pre, dout, n);
        st_bias_backward(db, din, N, OC);
        record(&b, 0, t0, r);
        t0 = st_now_ns();
        st_gelu_bias_backward(din, db, dgelu, dout, N, OC);
        record(&b, 1, t0, r);
    }
    report(&f);
    report(&b);
    // The forward now does the derivative's work the unfused backward does: judge them together.
    timing_t both = {"bias + GeLU, forward + backward",
                     {f.side[0] + b.side[0], f.side[1] + b.side[1]}};
    report(&both);
    free(x), free(w), free(bias), free(dout), free(pre), free(act), free(din), free(db);
    free(dgelu);
}

static void add_layernorm(int N, int C, int reps)
{
    size_t n = (size_t)N * C;
    float *x = rnd(n, 1), *res = rnd(n, 1), *ln = rnd(n, 1), *w = rnd(C, 1), *b = rnd(C, 1);
    float *mean = rnd(N, 1), *rstd = rnd(N, 1);
    timing_t t = {"residual add + LayerNorm", {1e30, 1e30}};
    for (int r = 0; r <= reps; r++) {
        // x grows by res each round: the values stay finite and both sides see the same work.
        uint64_t t0 = st_now_ns();
        st_add_inplace(x, res, n);
        st_layernorm_forward(ln, mean, rstd, x, w, b, N, C, 1e-5f);
        record(&t, 0, t0, r);
        t0 = st_now_ns();
        st_add_layernorm_forward(ln, mean, rstd, x, res, w, b, N, C, 1e-5f);
        record(&t, 1, t0, r);
    }
    report(&t);
    free(x), free(res), free(ln), free(w), free(b), free(mean), free(rstd);
}

static void xent_head(int N, int C, int V, int reps)
{
    size_t n = (size_t)N * V;
    float *logits = rnd(n, 4), *lnf = rnd((size_t)N * C, 1), *wte = rnd((size_t)V * C, 0.05f);
    float *dl = rnd(n, 1), *dx = rnd((size_t)N * C, 1), *dw = rnd((size_t)V * C, 1);
    float *lse = rnd(N, 1);
    int32_t *tgt = malloc((size_t)N * sizeof *tgt);
    if (!tgt)
        exit(1);
    for (int i = 0; i < N; i++)
        tgt[i] = (int32_t)((i * 7919) % V);
    st_xent_forward(lse, logits, tgt, N, V);
    char name[64];
    snprintf(name, sizeof name, "cross-entropy bwd + head products, V %d", V);
    timing_t t = {name, {1e30, 1e30}};
    for (int r = 0; r <= reps; r++) {
        for (int fused = 0; fused < 2; fused++) {
            uint64_t t0 = st_now_ns();
            uint16_t *h = fused ? st_operand_hold(dl, N, V, V, false) : NULL;
            st_xent_backward(dl, h, logits, lse, tgt, 0, N, V, 1.f / (float)N);
            st_matmul_backward_input(dx, dl, wte, N, C, V);
            st_matmul_backward_weight(dw, NULL, dl, lnf, N, C, V, 1.f);
            if (h)
                st_operand_release(dl);
            record(&t, fused, t0, r);
        }
    }
    report(&t);
    free(logits), free(lnf), free(wte), free(dl), free(dx), free(dw), free(lse), free(tgt);
}

int main(int argc, char **argv)
{
    int N = 1024, C = 768, V = 50304, reps = 10;
    strata_precision_t prec = STRATA_PREC_FP32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows"))
            N = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dim"))
            C = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--vocab"))
            V = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--precision")) {
            if (strata_precision_parse(argv[i + 1], &prec) < 0) {
                fprintf(stderr, "strata_fusion: %s\n", strata_last_error());
                return 2;
            }
        } else {
            fprintf(stderr, "usage: strata_fusion [--rows N] [--dim C] [--vocab V] [--reps R] "
                            "[--precision fp32|bf16]\n");
            return 2;
        }
    }
    if (N < 1 || C < 1 || V < 1 || reps < 1 || strata_blas_set_precision(prec, &prec) < 0) {
        fprintf(stderr, "strata_fusion: bad arguments\n");
        return 2;
    }
    printf("rows %d, width %d, %s products\n", N, C, strata_precision_name(prec));
    printf("%-42s %10s %10s %7s\n", "fusion", "unfused", "fused", "gain");
    bias_gelu(N, C, reps);
    add_layernorm(N, C, reps);
    xent_head(N, C, V, reps);
    return 0;
}
