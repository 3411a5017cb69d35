/* The model's matrix products against a double-precision reference: at STRATA_PREC_BF16 on the
 * bf16-rounded operands, and in float32 on the library this run's STRATA_GEMM picks (oneDNN or
 * OpenBLAS; test_gemm_bf16.cmake runs both), for every transpose, alpha and beta, with a bias row,
 * strided operands and output, and the odd shapes attention's blocks produce; the run-time choice
 * of units (forced down with oneDNN's ONEDNN_MAX_CPU_ISA by a second ctest entry); held operands
 * and weights held packed; the rounding the kernels use; and the precision switch's contract. */
#include "harness/random.h"
#include "harness/st_test.h"
#include "base/bf16.h"
#include "model/gemm.h"
#include "model/layers.h"
#include "strata/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 7; /* the random data's state (harness/random.h) */

/* n floats from st_test_uniform, newly allocated. */
static float *random_floats(size_t n)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = st_test_uniform(&rs);
    return x;
}

/* Whether this run should find bf16 units: not when the ctest entry capped oneDNN below them. */
static bool expect_units(void)
{
    const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
    return !(cap && !strcmp(cap, "AVX512_CORE")) && strata_blas_bf16_units() != NULL;
}

static double round_bf16(float x)
{
    return st_bf16_to_f32(st_f32_to_bf16(x));
}

/* C = alpha op(A) op(B) + beta C0 through st_sgemm at the current precision (with_bias: op(A) op(B)
 * + a bias row through st_sgemm_bias; alpha 1, beta 0), checked against the reference in double on
 * operands rounded as `bf16` says. */
static void check(int ta, int tb, int M, int N, int K, float alpha, float beta, int pad, bool bf16,
                  bool with_bias)
{
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B), *C = malloc(nc * sizeof *C);
    float *C0 = malloc(nc * sizeof *C0), *bias = malloc((size_t)N * sizeof *bias);
    for (int j = 0; j < N; j++)
        bias[j] = with_bias ? st_test_uniform(&rs) : 0.f;
    for (size_t i = 0; i < na; i++)
        A[i] = st_test_uniform(&rs);
    for (size_t i = 0; i < nb; i++)
        B[i] = st_test_uniform(&rs);
    for (size_t i = 0; i < nc; i++)
        C[i] = C0[i] = st_test_uniform(&rs);
    if (with_bias)
        st_sgemm_bias(ta, tb, M, N, K, A, lda, B, ldb, bias, C, ldc);
    else
        st_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                double p = bf16 ? round_bf16(a) * round_bf16(b) : (double)a * b;
                ref += p;
                mag += fabs(p);
            }
            ref = alpha * ref + beta * C0[(size_t)i * ldc + j] + bias[j];
            // float32 accumulation of K terms: a few ulps of the magnitude summed
            double err = fabs(C[(size_t)i * ldc + j] - ref) /
                         (fabs(alpha) * mag + fabs(beta) + fabs(bias[j]) + 1e-30);
            worst = err > worst ? err : worst;
        }
    // The padding of C is not written.
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++)
            assert_true(C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j]);
    if (worst > 1e-5)
        fail_msg("ta %d tb %d M %d N %d K %d alpha %g beta %g: relative error %g", ta, tb, M, N, K,
                 alpha, beta, worst);
    free(A);
    free(B);
    free(C);
    free(C0);
    free(bias);
}

/* The library STRATA_GEMM asks for is the one the float32 products run on. */
static void test_f32_library(void **state)
{
    (void)state;
    const char *want = getenv("STRATA_GEMM"), *lib = strata_blas_f32_library();
    print_message("float32 products on %s\n", lib);
    if (want && !strcmp(want, "openblas"))
        assert_string_equal(lib, "OpenBLAS");
    if (want && !strcmp(want, "onednn"))
        assert_string_equal(lib, "oneDNN");
}

static void test_products(void **state)
{
    (void)state;
    strata_precision_t in_effect;
    assert_int_equal(strata_blas_set_precision(STRATA_PREC_BF16, &in_effect), STRATA_OK);
    bool bf16 = expect_units();
    assert_int_equal(in_effect, bf16 ? STRATA_PREC_BF16 : STRATA_PREC_FP32);
    assert_int_equal(strata_blas_precision(), in_effect);
    // The last three are wide, tall, and both: oneDNN runs them in column panels (B not
    // transposed), row panels (A transposed), or both, each row and column's last panel narrower.
    static const int shapes[][3] = {{1, 1, 1},     {64, 96, 32},  {37, 130, 65},
                                    {128, 17, 300}, {9, 2100, 33}, {2100, 9, 33},
                                    {2100, 2100, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            const int *d = shapes[s];
            check(t & 1, t >> 1, d[0], d[1], d[2], 1.f, 0.f, 0, bf16, false);
            check(t & 1, t >> 1, d[0], d[1], d[2], 0.125f, 1.f, 3, bf16, false); // attention's
            check(t & 1, t >> 1, d[0], d[1], d[2], 1.f, 0.5f, 1, bf16, false);
            check(t & 1, t >> 1, d[0], d[1], d[2], 1.f, 0.f, 2, bf16, true); // a linear layer's
        }
    // The same shapes again come from the cache of built products; still right, with and without
    // the bias (a product of its own).
    check(0, 1, 64, 96, 32, 1.f, 0.f, 0, bf16, false);
    check(0, 1, 64, 96, 32, 1.f, 0.f, 0, bf16, true);
    assert_int_equal(strata_blas_set_precision(STRATA_PREC_FP32, &in_effect), STRATA_OK);
    assert_int_equal(in_effect, STRATA_PREC_FP32);
    check(1, 0, 37, 130, 65, 1.f, 1.f, 2, false, false);
    check(0, 1, 37, 130, 65, 1.f, 0.f, 1, false, true);
}

/* bf16 really is in use: the product of values that bf16 cannot hold differs from float32's by
 * the rounding, and is exactly the product of the rounded values. */
static void test_rounding_visible(void **state)
{
    (void)state;
    strata_precision_t in_effect;
    assert_int_equal(strata_blas_set_precision(STRATA_PREC_BF16, &in_effect), STRATA_OK);
    float a = 1.f + 0x1p-12f, b = 3.f, c = 0;
    st_sgemm(0, 0, 1, 1, 1, 1.f, &a, 1, &b, 1, 0.f, &c, 1);
    if (expect_units())
        assert_true(c == 3.f); // 1 + 2^-12 rounds to 1 in bf16
    else
        assert_true(c == a * b);
    strata_blas_set_precision(STRATA_PREC_FP32, NULL);
}

/* st_gemm_bf16_round, which kernels call to fill a kept copy, with or without the units (the
 * no_units entry: plain C then): every value rounded to nearest even as st_f32_to_bf16 does,
 * halfway cases, NaN and infinities included, across the 32-float conversions and a row's tail,
 * from a strided matrix. */
static void test_round(void **state)
{
    (void)state;
    enum { ROWS = 3, COLS = 45, LD = 50 };
    float x[ROWS * LD];
    for (int i = 0; i < ROWS * LD; i++)
        x[i] = st_test_uniform(&rs) * 100.f;
    x[1] = 1.f + 0x1p-8f; // halfway, even below: 1
    x[2] = 1.f + 0x3p-8f; // halfway, odd below: up
    x[LD + 40] = NAN;     // in a row's tail
    x[2 * LD + 3] = INFINITY;
    x[2 * LD + 44] = -INFINITY;
    uint16_t got[ROWS * COLS];
    st_gemm_bf16_round(got, x, ROWS, COLS, LD);
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) {
            float v = x[r * LD + c];
            uint16_t want = st_f32_to_bf16(v), g = got[r * COLS + c];
            if (isnan(v) ? !isnan(st_bf16_to_f32(g)) : g != want)
                fail_msg("row %d column %d: %g rounded to %#x, want %#x", r, c, (double)v, g,
                         want);
        }
    assert_int_equal(got[1], 0x3f80);
    assert_int_equal(got[2], 0x3f82);
}

static void test_precision_names(void **state)
{
    (void)state;
    strata_precision_t p;
    assert_int_equal(strata_precision_parse("bf16", &p), STRATA_OK);
    assert_int_equal(p, STRATA_PREC_BF16);
    assert_int_equal(strata_precision_parse("fp32", &p), STRATA_OK);
    assert_string_equal(strata_precision_name(p), "fp32");
    assert_int_equal(strata_precision_parse("half", &p), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "fp32"));
    // fp16 and fp8 are the planner's: the CPU engine says so rather than computing something else.
    assert_int_equal(strata_blas_set_precision(STRATA_PREC_FP16, NULL), STRATA_ERR_UNSUPPORTED);
    assert_non_null(strstr(strata_last_error(), "fp16"));
    assert_int_equal(strata_blas_precision(), STRATA_PREC_FP32);
}

/* The measured peak at each precision: positive, and bf16's above fp32's where the units exist. */
static void test_peak(void **state)
{
    (void)state;
    strata_blas_set_precision(STRATA_PREC_FP32, NULL);
    double fp32 = strata_measure_gemm_peak(256);
    strata_precision_t in_effect;
    strata_blas_set_precision(STRATA_PREC_BF16, &in_effect);
    double bf16 = strata_measure_gemm_peak(256);
    strata_blas_set_precision(STRATA_PREC_FP32, NULL);
    assert_true(fp32 > 0 && bf16 > 0);
    print_message("peak at n = 256: fp32 %.0f GFLOP/s, %s %.0f GFLOP/s\n", fp32,
                  strata_precision_name(in_effect), bf16);
}

/* x doubled in place: a change a stale copy would miss (doubling is exact in bf16 too). */
static void doubled(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = 2.f * x[i];
}

/* got is exactly twice ref: the product read its changed operand anew. */
static void expect_doubled(const float *got, const float *ref, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_float_equal(got[i], 2.f * ref[i], 0.f);
}

/* Held operands (st_operand_hold): products reading a held matrix, whole, as a block of its rows,
 * or transposed, give the bits they give without the hold; a copy the caller fills as it writes
 * does too; nested holds count; after the release a changed matrix is read anew, never the stale
 * copy. In fp32 nothing is held. */
static void test_held_operands(void **state)
{
    (void)state;
    int N = 48, OC = 40, C = 24;
    float *dy = random_floats((size_t)N * OC), *w = random_floats((size_t)OC * C);
    float *x = random_floats((size_t)N * C);
    float *ref[3], *got[3];
    for (int k = 0; k < 3; k++) {
        ref[k] = calloc((size_t)N * C + OC * C, sizeof(float));
        got[k] = calloc((size_t)N * C + OC * C, sizeof(float));
    }
    strata_blas_set_precision(STRATA_PREC_FP32, NULL);
    assert_null(st_operand_hold(dy, N, OC, OC, true));
    strata_precision_t in_effect;
    strata_blas_set_precision(STRATA_PREC_BF16, &in_effect);
    // The products: dx = dy w, rows 16..39 of dy times w, dw = dy^T x.
    for (int pass = 0; pass < 4; pass++) {
        float **out = pass ? got : ref;
        uint16_t *h = NULL;
        if (pass == 1)
            h = st_operand_hold(dy, N, OC, OC, true);
        if (pass == 2) { // filled by the caller, a row at a time, as the cross-entropy does
            h = st_operand_hold(dy, N, OC, OC, false);
            for (int r = 0; h && r < N; r++)
                st_gemm_bf16_round(h + (size_t)r * OC, dy + (size_t)r * OC, 1, OC, OC);
        }
        if (pass == 3) { // nested: the inner release leaves the copy held
            h = st_operand_hold(dy, N, OC, OC, true);
            assert_ptr_equal(st_operand_hold(dy, N, OC, OC, true), h);
            st_operand_release(dy);
        }
        if (pass)
            assert_true(!h == (in_effect != STRATA_PREC_BF16));
        st_sgemm(0, 0, N, C, OC, 1.f, dy, OC, w, C, 0.f, out[0], C);
        st_sgemm(0, 0, 24, C, OC, 1.f, dy + 16 * OC, OC, w, C, 0.f, out[1], C);
        st_sgemm(1, 0, OC, C, N, 1.f, dy, OC, x, C, 0.f, out[2], C);
        if (pass)
            for (int k = 0; k < 3; k++)
                assert_memory_equal(ref[k], got[k], (size_t)N * C * sizeof(float));
        if (h)
            st_operand_release(dy);
    }
    // Released: a changed dy is rounded anew.
    doubled(dy, (size_t)N * OC);
    st_sgemm(0, 0, N, C, OC, 1.f, dy, OC, w, C, 0.f, got[0], C);
    expect_doubled(got[0], ref[0], (size_t)N * C);
    strata_blas_set_precision(STRATA_PREC_FP32, NULL);
    for (int k = 0; k < 3; k++)
        free(ref[k]), free(got[k]);
    free(dy), free(w), free(x);
}

/* A flat hold with the caller's copy (st_operand_hold_copy), as the model holds a segment of its
 * parameters: products reading any matrix inside the arena, at its own leading dimension and either
 * way round, give the bits they give without the hold; the copy is the caller's, rounded; a second
 * hold with the same copy counts, one with another copy is refused; released, a changed arena is
 * read anew. */
static void test_held_copy(void **state)
{
    (void)state;
    int N = 32, C = 24, OC = 40;
    size_t n = 7 + (size_t)OC * C + (size_t)C * C; // two weights at odd offsets, like a segment
    float *arena = random_floats(n), *x = random_floats((size_t)N * C);
    float *dy = random_floats((size_t)N * OC);
    float *ref[3], *got[3];
    uint16_t *copy = malloc(sizeof(uint16_t) * n), *other = malloc(sizeof(uint16_t) * n);
    for (int k = 0; k < 3; k++) {
        ref[k] = calloc((size_t)N * OC, sizeof(float));
        got[k] = calloc((size_t)N * OC, sizeof(float));
    }
    const float *w1 = arena + 7, *w2 = w1 + (size_t)OC * C; // OC x C, then C x C
    strata_blas_set_precision(STRATA_PREC_FP32, NULL);
    assert_false(st_operand_hold_copy(arena, n, copy, true));
    strata_precision_t in_effect;
    strata_blas_set_precision(STRATA_PREC_BF16, &in_effect);
    bool units = in_effect == STRATA_PREC_BF16;
    for (int pass = 0; pass < 2; pass++) {
        float **out = pass ? got : ref;
        if (pass) {
            assert_int_equal(st_operand_hold_copy(arena, n, copy, true), units);
            if (units) {
                for (size_t i = 0; i < n; i += 97)
                    assert_int_equal(copy[i], st_f32_to_bf16(arena[i]));
                assert_true(st_operand_hold_copy(arena, n, copy, false)); // counted once more
                assert_false(st_operand_hold_copy(arena, n, other, false));
                st_operand_release(arena);
            }
        }
        st_sgemm(0, 1, N, OC, C, 1.f, x, C, w1, C, 0.f, out[0], OC);      // y = x w1^T
        st_sgemm(0, 0, N, C, OC, 1.f, dy, OC, w1, C, 0.f, out[1], C);     // dx = dy w1
        st_sgemm(0, 0, N, 12, 12, 1.f, x, C, w2 + 12, C, 0.f, out[2], 12); // a block of w2
        if (pass)
            for (int k = 0; k < 3; k++)
                assert_memory_equal(ref[k], got[k], (size_t)N * OC * sizeof(float));
        if (pass && units)
            st_operand_release(arena);
    }
    doubled(arena, n); // released: a changed arena is rounded anew
    st_sgemm(0, 1, N, OC, C, 1.f, x, C, w1, C, 0.f, got[0], OC);
    expect_doubled(got[0], ref[0], (size_t)N * OC);
    strata_blas_set_precision(STRATA_PREC_FP32, NULL);
    for (int k = 0; k < 3; k++)
        free(ref[k]), free(got[k]);
    free(arena), free(x), free(dy), free(copy), free(other);
}

/* A weight held packed (st_operand_hold_weight), as the model holds its layers' weights: the
 * forward's product (y = x w^T, with a bias, and with alpha and beta) and the input gradient's
 * (dx = dy w) read the packed layouts and give the bits of the same products on w as stored, for
 * shapes with and without padding to whole blocks; a second hold with the same copy counts, one
 * with another copy is refused; held again without packing, the copy is read as packed; released,
 * a changed weight is read anew. In fp32 nothing is packed. */
static void test_held_weight(void **state)
{
    (void)state;
    static const int shapes[][3] = {{40, 24, 48}, {100, 70, 300}, {768, 256, 256}, {130, 1000, 33}};
    strata_blas_set_precision(STRATA_PREC_FP32, NULL);
    assert_int_equal(st_operand_weight_size(40, 24), 0);
    strata_precision_t in_effect;
    strata_blas_set_precision(STRATA_PREC_BF16, &in_effect);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int OC = shapes[s][0], C = shapes[s][1], N = shapes[s][2];
        size_t size = st_operand_weight_size(OC, C);
        if (in_effect != STRATA_PREC_BF16) {
            assert_int_equal(size, 0);
            continue;
        }
        // At least both layouts' values (each pads to whole blocks).
        assert_true(size >= 2 * (size_t)OC * C);
        float *w = random_floats((size_t)OC * C), *x = random_floats((size_t)N * C);
        float *dy = random_floats((size_t)N * OC), *bias = random_floats((size_t)OC);
        uint16_t *packed = aligned_alloc(64, size * sizeof *packed);
        uint16_t *other = aligned_alloc(64, size * sizeof *other);
        float *ref[3], *got[3];
        for (int k = 0; k < 3; k++) {
            ref[k] = malloc(sizeof(float) * N * (OC > C ? OC : C));
            got[k] = malloc(sizeof(float) * N * (OC > C ? OC : C));
        }
        for (int pass = 0; pass < 3; pass++) {
            float **out = pass ? got : ref;
            if (pass) { // 1: packed now; 2: the copy packed by pass 1, read as it is
                assert_true(st_operand_hold_weight(w, OC, C, packed, pass == 1));
                assert_true(st_operand_hold_weight(w, OC, C, packed, false)); // counted again
                assert_false(st_operand_hold_weight(w, OC, C, other, false));
                st_operand_release(w);
            }
            for (int k = 0; k < 3; k++) // C's old values, which beta reads
                for (int i = 0; i < N * (OC > C ? OC : C); i++)
                    out[k][i] = (float)(i % 7) * 0.25f;
            st_sgemm_bias(0, 1, N, OC, C, x, C, w, C, bias, out[0], OC);        // y = x w^T + b
            st_sgemm(0, 1, N, OC, C, 0.5f, x, C, w, C, 1.f, out[1], OC);        // scaled, added
            st_sgemm(0, 0, N, C, OC, 1.f, dy, OC, w, C, 0.f, out[2], C);        // dx = dy w
            if (pass) {
                st_operand_release(w);
                for (int k = 0; k < 3; k++)
                    assert_memory_equal(ref[k], got[k], sizeof(float) * N * (k < 2 ? OC : C));
            }
        }
        doubled(w, (size_t)OC * C); // released: a changed weight is read anew
        st_sgemm(0, 0, N, C, OC, 1.f, dy, OC, w, C, 0.f, got[2], C);
        expect_doubled(got[2], ref[2], (size_t)N * C);
        for (int k = 0; k < 3; k++)
            free(ref[k]), free(got[k]);
        free(w), free(x), free(dy), free(bias), free(packed), free(other);
    }
    strata_blas_set_precision(STRATA_PREC_FP32, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_library),
        cmocka_unit_test(test_products),
        cmocka_unit_test(test_rounding_visible),
        cmocka_unit_test(test_round),
        cmocka_unit_test(test_precision_names),
        cmocka_unit_test(test_peak),
        cmocka_unit_test(test_held_operands),
        cmocka_unit_test(test_held_copy),
        cmocka_unit_test(test_held_weight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
