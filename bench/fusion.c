/* The gain of each fused operator of the model, same run: the fused kernel against the unfused
 * sequence it replaces, at one MLP's shape (rows N = B*T, width OC = 4C), best of --reps timings
 * each, interleaved so load on the machine hits both alike. The matrix product is in both sides
 * (the fusion changes what it writes: no bias rows to initialise and read back), at the precision
 * given. The residual add + LayerNorm pair runs at the residual stream's shape (N x C).
 * Usage: strata_fusion [--rows N] [--dim C] [--reps R] [--precision fp32|bf16] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/layers.h"
#include "strata/model.h"

static float *rnd(size_t n, float scale, uint64_t *s)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; x && i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = scale * ((float)(*s >> 40) / (float)(1 << 24) - 0.5f);
    }
    return x;
}

static double best_of(double best, uint64_t t0)
{
    double s = (double)(st_now_ns() - t0) * 1e-9;
    return s < best ? s : best;
}

int main(int argc, char **argv)
{
    int N = 1024, C = 768, reps = 10;
    strata_precision_t prec = STRATA_PREC_FP32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows"))
            N = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dim"))
            C = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--precision")) {
            if (strata_precision_parse(argv[i + 1], &prec) < 0) {
                fprintf(stderr, "strata_fusion: %s\n", strata_last_error());
                return 2;
            }
        } else {
            fprintf(stderr, "usage: strata_fusion [--rows N] [--dim C] [--reps R] "
                            "[--precision fp32|bf16]\n");
            return 2;
        }
    }
    if (N < 1 || C < 1 || reps < 1 || strata_blas_set_precision(prec, &prec) < 0) {
        fprintf(stderr, "strata_fusion: bad arguments\n");
        return 2;
    }
    int OC = 4 * C;
    size_t n = (size_t)N * OC;
    uint64_t s = 1;
    float *x = rnd((size_t)N * C, 1, &s), *w = rnd((size_t)OC * C, 0.05f, &s);
    float *bias = rnd(OC, 0.1f, &s), *dout = rnd(n, 1, &s);
    float *pre = malloc(n * sizeof *pre), *act = malloc(n * sizeof *act);
    float *din = malloc(n * sizeof *din), *db = calloc(OC, sizeof *db);
    if (!x || !w || !bias || !dout || !pre || !act || !din || !db) {
        fprintf(stderr, "strata_fusion: out of memory\n");
        return 1;
    }
    float *res = rnd((size_t)N * C, 1, &s), *ln = malloc((size_t)N * C * sizeof *ln);
    float *lnw = rnd(C, 1, &s), *lnb = rnd(C, 1, &s), *mean = malloc(N * sizeof *mean);
    float *rstd = malloc(N * sizeof *rstd);
    if (!res || !ln || !lnw || !lnb || !mean || !rstd) {
        fprintf(stderr, "strata_fusion: out of memory\n");
        return 1;
    }
    double fwd[2] = {1e30, 1e30}, bwd[2] = {1e30, 1e30}, add[2] = {1e30, 1e30};
    for (int r = 0; r < reps + 1; r++) { // the first round warms up (and builds the products)
        uint64_t t0 = st_now_ns();
        st_matmul_forward(pre, x, w, bias, N, C, OC);
        st_gelu_forward(act, pre, n);
        double u = best_of(1e30, t0);
        t0 = st_now_ns();
        st_matmul_forward(pre, x, w, NULL, N, C, OC);
        st_bias_gelu_forward(pre, act, bias, N, OC);
        double f = best_of(1e30, t0);
        t0 = st_now_ns();
        st_gelu_backward(din, pre, dout, n);
        st_bias_backward(db, din, N, OC);
        double ub = best_of(1e30, t0);
        t0 = st_now_ns();
        st_gelu_bias_backward(din, db, pre, dout, N, OC);
        double fb = best_of(1e30, t0);
        // x grows by res each round: the values stay finite and both sides see the same work.
        t0 = st_now_ns();
        st_add_inplace(x, res, (size_t)N * C);
        st_layernorm_forward(ln, mean, rstd, x, lnw, lnb, N, C, 1e-5f);
        double ua = best_of(1e30, t0);
        t0 = st_now_ns();
        st_add_layernorm_forward(ln, mean, rstd, x, res, lnw, lnb, N, C, 1e-5f);
        double fa = best_of(1e30, t0);
        if (r == 0)
            continue;
        fwd[0] = u < fwd[0] ? u : fwd[0];
        fwd[1] = f < fwd[1] ? f : fwd[1];
        bwd[0] = ub < bwd[0] ? ub : bwd[0];
        bwd[1] = fb < bwd[1] ? fb : bwd[1];
        add[0] = ua < add[0] ? ua : add[0];
        add[1] = fa < add[1] ? fa : add[1];
    }
    printf("rows %d, MLP width %d, %s products\n", N, OC, strata_precision_name(prec));
    printf("%-34s %9s %9s %7s\n", "fusion", "unfused", "fused", "gain");
    printf("%-34s %7.2fms %7.2fms %6.2fx\n", "bias + GeLU forward (with the GEMM)", fwd[0] * 1e3,
           fwd[1] * 1e3, fwd[0] / fwd[1]);
    printf("%-34s %7.2fms %7.2fms %6.2fx\n", "GeLU backward + bias gradient", bwd[0] * 1e3,
           bwd[1] * 1e3, bwd[0] / bwd[1]);
    printf("%-34s %7.2fms %7.2fms %6.2fx\n", "residual add + LayerNorm", add[0] * 1e3,
           add[1] * 1e3, add[0] / add[1]);
    free(res), free(ln), free(lnw), free(lnb), free(mean), free(rstd);
    free(x), free(w), free(bias), free(dout), free(pre), free(act), free(din), free(db);
    return 0;
}
