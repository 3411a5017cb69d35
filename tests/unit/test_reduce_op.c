/* Unit tests of the reduction kernels (src/comm/algo/reduce_op.c): every (dtype, op) against a
 * naive double-precision loop at odd counts and block boundaries, exact in-place aliasing, the AVG
 * finish, and the float16/bfloat16 conversions against slow references written with frexp/nearbyint
 * (halfway cases, overflow to infinity, subnormals, NaN). Also checks the serial reference of
 * tests/harness/ref.c against a fold of the kernels. Exactness argument for the float checks: the
 * naive loop computes a + b or a * b in double and rounds once to the element type; the kernels
 * round to f32 first. Both equal the correctly rounded result, because double rounding through a
 * format with at least 2p + 2 significand bits is innocuous for +, *, / (53 >= 2*24+2 for f32,
 * 24 >= 2*11+2 for f16, 24 >= 2*8+2 for bf16). So results must match bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/st_test.h"
// st_test.h must come first: it includes cmocka with its prerequisites.
#include "comm/algo/reduce_op.h"
#include "harness/ref.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x1234567887654321ull;

static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const strata_dtype_t all_dtypes[] = {STRATA_DTYPE_F32,  STRATA_DTYPE_F64, STRATA_DTYPE_F16,
                                            STRATA_DTYPE_BF16, STRATA_DTYPE_I32, STRATA_DTYPE_I64,
                                            STRATA_DTYPE_U8};
#define NDTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

static const strata_op_t all_ops[] = {STRATA_OP_SUM, STRATA_OP_PROD, STRATA_OP_MIN, STRATA_OP_MAX,
                                      STRATA_OP_AVG};
#define NOPS (sizeof all_ops / sizeof all_ops[0])

static const size_t counts[] = {0, 1, 7, 63, 64, 65, 255, 256, 257, 1000, 1000003};
#define NCOUNTS (sizeof counts / sizeof counts[0])

/* Independent IEEE binary16 decode/encode (round to nearest even) through double. */
static double ref_f16_decode(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static uint16_t ref_f16_encode(double x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    if (isnan(x))
        return sign | 0x7e00;
    x = fabs(x);
    if (x >= 65520.0) // max finite 65504 plus half an ulp (16) rounds to even = infinity
        return sign | 0x7c00;
    if (x == 0)
        return sign;
    int e;
    frexp(x, &e);
    int ex = e - 1 < -14 ? -14 : e - 1;
    double n = nearbyint(x / ldexp(1.0, ex - 10)); // in [0, 2048]
    if (ex == -14 && n < 1024)
        return sign | (uint16_t)n; // subnormal or zero
    if (n == 2048) {
        n = 1024;
        ex++;
    }
    return sign | (uint16_t)(((ex + 15) << 10) | ((int)n - 1024));
}

static double ref_bf16_decode(uint16_t h)
{
    int e = (h >> 7) & 255, m = h & 127;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
    return (h & 0x8000) ? -v : v;
}

static uint16_t ref_bf16_encode(double x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    if (isnan(x))
        return sign | 0x7fc0;
    x = fabs(x);
    if (x >= ldexp(2.0 - 0x1p-8, 127))
        return sign | 0x7f80;
    if (x == 0)
        return sign;
    int e;
    frexp(x, &e);
    int ex = e - 1 < -126 ? -126 : e - 1;
    double n = nearbyint(x / ldexp(1.0, ex - 7)); // in [0, 256]
    if (ex == -126 && n < 128)
        return sign | (uint16_t)n;
    if (n == 256) {
        n = 128;
        ex++;
    }
    return sign | (uint16_t)(((ex + 127) << 7) | ((int)n - 128));
}

static float f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* A float drawn to hit every interesting region: mostly ordinary values of both signs over a
 * moderate exponent range, some fully random bit patterns (subnormals, huge values, NaN, inf), and
 * a few exact specials. */
static double random_float_value(void)
{
    uint64_t r = rng();
    switch (r % 16) {
    case 0:
        return f32_of_bits((uint32_t)(r >> 32));
    case 1: {
        static const double specials[] = {0.0,  -0.0,    INFINITY, -INFINITY, NAN,      1.0,
                                          -1.0, 0x1p-24, 0x1p-14,  65504.0,   0x1p-126, 0x1p-149};
        return specials[(r >> 8) % (sizeof specials / sizeof specials[0])];
    }
    default: {
        double m = 1.0 + (double)((r >> 8) & 0xffffff) / 0x1p24;
        int ex = (int)((r >> 40) % 21) - 10;
        return ((r >> 63) ? -m : m) * ldexp(1.0, ex);
    }
    }
}

static void fill_random(strata_dtype_t dtype, void *buf, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rng();
        switch (dtype) {
        case STRATA_DTYPE_F32:
            ((float *)buf)[i] = (float)random_float_value();
            break;
        case STRATA_DTYPE_F64:
            ((double *)buf)[i] =
                (r % 8 == 0) ? random_float_value() * 0x1p200 : random_float_value();
            break;
        case STRATA_DTYPE_F16:
            // Half the time any bit pattern (covers every subnormal, NaN and inf), else a value
            // in a range where sums and products stay finite more often.
            ((uint16_t *)buf)[i] =
                (r & 1) ? (uint16_t)(r >> 16) : ref_f16_encode(random_float_value() / 64);
            break;
        case STRATA_DTYPE_BF16:
            ((uint16_t *)buf)[i] =
                (r & 1) ? (uint16_t)(r >> 16) : ref_bf16_encode(random_float_value());
            break;
        // Integers: full range (wrapping sums and products) or small values.
        case STRATA_DTYPE_I32:
            ((int32_t *)buf)[i] = (int32_t)(uint32_t)((r & 1) ? r >> 32 : r % 7);
            break;
        case STRATA_DTYPE_I64:
            ((int64_t *)buf)[i] = (int64_t)((r & 1) ? r : (r >> 1) % 9);
            break;
        case STRATA_DTYPE_U8:
            ((uint8_t *)buf)[i] = (uint8_t)(r >> 24);
            break;
        default:
            break;
        }
    }
}

static bool op_is_minmax(strata_op_t op)
{
    return op == STRATA_OP_MIN || op == STRATA_OP_MAX;
}

/* The naive float op in double; min/max propagate NaN. */
static double naive_float(strata_op_t op, double x, double y)
{
    switch (op) {
    case STRATA_OP_PROD:
        return x * y;
    case STRATA_OP_MIN:
        return (isnan(x) || isnan(y)) ? NAN : (x < y ? x : y);
    case STRATA_OP_MAX:
        return (isnan(x) || isnan(y)) ? NAN : (x > y ? x : y);
    default:
        return x + y;
    }
}

static uint64_t naive_uint(strata_op_t op, uint64_t x, uint64_t y)
{
    return op == STRATA_OP_PROD ? x * y : x + y; // wraps mod 2^64; callers truncate
}

/* Checks got[i] against the naive loop over a[i], b[i]; on failure prints and fails the test. */
static void check_against_naive(strata_dtype_t dtype, strata_op_t op, const void *a, const void *b,
                                const void *got, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        bool ok = true;
        double e = 0, g = 0;
        switch (dtype) {
        case STRATA_DTYPE_F32:
        case STRATA_DTYPE_F64:
        case STRATA_DTYPE_F16:
        case STRATA_DTYPE_BF16: {
            double x, y;
            if (dtype == STRATA_DTYPE_F32) {
                x = ((const float *)a)[i], y = ((const float *)b)[i], g = ((const float *)got)[i];
                e = (float)naive_float(op, x, y);
            } else if (dtype == STRATA_DTYPE_F64) {
                x = ((const double *)a)[i], y = ((const double *)b)[i],
                g = ((const double *)got)[i];
                e = naive_float(op, x, y);
            } else if (dtype == STRATA_DTYPE_F16) {
                x = ref_f16_decode(((const uint16_t *)a)[i]);
                y = ref_f16_decode(((const uint16_t *)b)[i]);
                g = ref_f16_decode(((const uint16_t *)got)[i]);
                e = ref_f16_decode(ref_f16_encode(naive_float(op, x, y)));
            } else {
                x = ref_bf16_decode(((const uint16_t *)a)[i]);
                y = ref_bf16_decode(((const uint16_t *)b)[i]);
                g = ref_bf16_decode(((const uint16_t *)got)[i]);
                e = ref_bf16_decode(ref_bf16_encode(naive_float(op, x, y)));
            }
            if (isnan(e) || isnan(g))
                ok = isnan(e) && isnan(g);
            else if (op_is_minmax(op))
                ok = e == g; // min(-0, +0) may be either zero
            else
                ok = e == g && !signbit(e) == !signbit(g);
            break;
        }
        case STRATA_DTYPE_I32: {
            int32_t x = ((const int32_t *)a)[i], y = ((const int32_t *)b)[i];
            int32_t r = op == STRATA_OP_MIN ? (x < y ? x : y)
                        : op == STRATA_OP_MAX
                            ? (x > y ? x : y)
                            : (int32_t)(uint32_t)naive_uint(op, (uint32_t)x, (uint32_t)y);
            e = r, g = ((const int32_t *)got)[i];
            ok = r == ((const int32_t *)got)[i];
            break;
        }
        case STRATA_DTYPE_I64: {
            int64_t x = ((const int64_t *)a)[i], y = ((const int64_t *)b)[i];
            int64_t r = op == STRATA_OP_MIN   ? (x < y ? x : y)
                        : op == STRATA_OP_MAX ? (x > y ? x : y)
                                              : (int64_t)naive_uint(op, (uint64_t)x, (uint64_t)y);
            e = (double)r, g = (double)((const int64_t *)got)[i];
            ok = r == ((const int64_t *)got)[i];
            break;
        }
        case STRATA_DTYPE_U8: {
            uint8_t x = ((const uint8_t *)a)[i], y = ((const uint8_t *)b)[i];
            uint8_t r = op == STRATA_OP_MIN   ? (x < y ? x : y)
                        : op == STRATA_OP_MAX ? (x > y ? x : y)
                                              : (uint8_t)naive_uint(op, x, y);
            e = r, g = ((const uint8_t *)got)[i];
            ok = r == ((const uint8_t *)got)[i];
            break;
        }
        default:
            break;
        }
        if (!ok)
            fail_msg("%s %s count %zu: index %zu: expected %.17g, got %.17g",
                     strata_dtype_name(dtype), strata_op_name(op), count, i, e, g);
    }
}

/* ---- kernels --------------------------------------------------------------------------------- */

static void test_every_dtype_op_count(void **state)
{
    (void)state;
    for (size_t d = 0; d < NDTYPES; d++) {
        strata_dtype_t dt = all_dtypes[d];
        size_t es = strata_dtype_size(dt);
        for (size_t c = 0; c < NCOUNTS; c++) {
            size_t n = counts[c];
            // +1 element so that an offset start (unaligned to the vector width) can be tested.
            char *a = malloc((n + 1) * es), *b = malloc((n + 1) * es), *dst = malloc((n + 1) * es);
            assert_non_null(a);
            assert_non_null(b);
            assert_non_null(dst);
            fill_random(dt, a, n + 1);
            fill_random(dt, b, n + 1);
            for (size_t o = 0; o < NOPS; o++) {
                strata_op_t op = all_ops[o];
                memset(dst, 0xa5, (n + 1) * es);
                st_reduce(dt, op, dst, a, b, n);
                check_against_naive(dt, op, a, b, dst, n);
                // Misaligned start: element 1 onwards.
                if (n > 0) {
                    st_reduce(dt, op, dst + es, a + es, b + es, n);
                    check_against_naive(dt, op, a + es, b + es, dst + es, n);
                }
            }
            free(a);
            free(b);
            free(dst);
        }
    }
}

/* st_reduce_stream equals st_reduce in every output, for every dtype and op, at counts around the
 * 256-byte blocks and 64-byte lines, with outputs that share the first's line offset and outputs
 * that do not (those take plain stores); bytes around each output are untouched. */
static void test_reduce_stream_matches(void **state)
{
    (void)state;
    const size_t lens[] = {0, 1, 7, 63, 64, 65, 255, 256, 257, 1000, 4099};
    const size_t shifts[] = {0, 8, 40}; // bytes of the second and third outputs past a line start
    for (size_t d = 0; d < NDTYPES; d++) {
        strata_dtype_t dt = all_dtypes[d];
        size_t es = strata_dtype_size(dt);
        for (size_t c = 0; c < sizeof lens / sizeof lens[0]; c++) {
            size_t n = lens[c], bytes = n * es, cap = (bytes + 192 + 63) & ~(size_t)63;
            char *a = malloc(bytes + es), *b = malloc(bytes + es), *want = malloc(bytes + es);
            char *outs[3];
            for (int k = 0; k < 3; k++)
                outs[k] = aligned_alloc(64, cap);
            assert_non_null(a);
            assert_non_null(b);
            assert_non_null(want);
            fill_random(dt, a, n + 1);
            fill_random(dt, b, n + 1);
            for (size_t o = 0; o < NOPS; o++)
                for (size_t h = 0; h < sizeof shifts / sizeof shifts[0]; h++) {
                    // The first output starts `es` bytes into a line (a head before the lines).
                    void *dsts[3] = {outs[0] + 64 + es, outs[1] + 64 + es, outs[2] + 64 + shifts[h]};
                    for (int k = 0; k < 3; k++)
                        memset(outs[k], 0x5a, cap);
                    st_reduce(dt, all_ops[o], want, a, b, n);
                    st_reduce_stream(dt, all_ops[o], dsts, 3, a, b, n);
                    for (int k = 0; k < 3; k++) {
                        char *p = dsts[k];
                        if (memcmp(p, want, bytes) != 0)
                            fail_msg("%s %s count %zu shift %zu: output %d differs",
                                     strata_dtype_name(dt), strata_op_name(all_ops[o]), n,
                                     shifts[h], k);
                        for (char *q = outs[k]; q < outs[k] + cap; q++)
                            if ((q < p || q >= p + bytes) && *q != 0x5a)
                                fail_msg("%s count %zu: output %d wrote outside at %td",
                                         strata_dtype_name(dt), n, k, q - p);
                    }
                }
            for (int k = 0; k < 3; k++)
                free(outs[k]);
            free(a);
            free(b);
            free(want);
        }
    }
}

/* st_copy_stream equals memcpy at every head misalignment and a range of lengths. */
static void test_copy_stream_matches(void **state)
{
    (void)state;
    char *src = malloc(9000), *dst = aligned_alloc(64, 9216);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < 9000; i++)
        src[i] = (char)(rng() & 0xff);
    const size_t lens[] = {0, 1, 63, 64, 100, 4096, 8999};
    for (size_t at = 0; at < 64; at += 7)
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            memset(dst, 0x5a, 9216);
            st_copy_stream(dst + at, src, lens[l]);
            assert_memory_equal(dst + at, src, lens[l]);
            for (size_t i = 0; i < 9216; i++)
                if ((i < at || i >= at + lens[l]) && dst[i] != 0x5a)
                    fail_msg("copy of %zu at %zu wrote byte %zu", lens[l], at, i);
        }
    free(src);
    free(dst);
}

static void test_zero_count_touches_nothing(void **state)
{
    (void)state;
    for (size_t d = 0; d < NDTYPES; d++)
        for (size_t o = 0; o < NOPS; o++)
            st_reduce(all_dtypes[d], all_ops[o], NULL, NULL, NULL, 0);
    st_reduce_finish_avg(STRATA_DTYPE_F32, NULL, 0, 4);
    // Out-of-range dtype or op: documented as a no-op, not a crash.
    float x = 1, y = 2, z = 7;
    st_reduce((strata_dtype_t)STRATA_DTYPE_COUNT, STRATA_OP_SUM, &z, &x, &y, 1);
    st_reduce(STRATA_DTYPE_F32, (strata_op_t)STRATA_OP_COUNT, &z, &x, &y, 1);
    assert_true(z == 7);
}

static void test_in_place_aliasing(void **state)
{
    (void)state;
    const size_t n = 1000003;
    for (size_t d = 0; d < NDTYPES; d++) {
        strata_dtype_t dt = all_dtypes[d];
        size_t es = strata_dtype_size(dt);
        char *a = malloc(n * es), *b = malloc(n * es), *want = malloc(n * es),
             *buf = malloc(n * es);
        assert_non_null(a);
        assert_non_null(b);
        assert_non_null(want);
        assert_non_null(buf);
        fill_random(dt, a, n);
        fill_random(dt, b, n);
        for (size_t o = 0; o < NOPS; o++) {
            strata_op_t op = all_ops[o];
            st_reduce(dt, op, want, a, b, n);
            // dst == a
            memcpy(buf, a, n * es);
            st_reduce(dt, op, buf, buf, b, n);
            check_against_naive(dt, op, a, b, buf, n);
            // dst == b
            memcpy(buf, b, n * es);
            st_reduce(dt, op, buf, a, buf, n);
            check_against_naive(dt, op, a, b, buf, n);
            // dst == a == b
            memcpy(buf, a, n * es);
            st_reduce(dt, op, buf, buf, buf, n);
            check_against_naive(dt, op, a, a, buf, n);
        }
        free(a);
        free(b);
        free(want);
        free(buf);
    }
}

static void test_avg_is_sum_then_finish(void **state)
{
    (void)state;
    const size_t n = 4099;
    const int divisors[] = {1, 2, 3, 7, 16};
    for (size_t d = 0; d < NDTYPES; d++) {
        strata_dtype_t dt = all_dtypes[d];
        size_t es = strata_dtype_size(dt);
        char *a = malloc(n * es), *b = malloc(n * es), *s = malloc(n * es), *v = malloc(n * es);
        assert_non_null(a);
        assert_non_null(b);
        assert_non_null(s);
        assert_non_null(v);
        fill_random(dt, a, n);
        fill_random(dt, b, n);
        st_reduce(dt, STRATA_OP_SUM, s, a, b, n);
        st_reduce(dt, STRATA_OP_AVG, v, a, b, n);
        assert_memory_equal(s, v, n * es);
        for (size_t k = 0; k < sizeof divisors / sizeof divisors[0]; k++) {
            int div = divisors[k];
            memcpy(v, s, n * es);
            st_reduce_finish_avg(dt, v, n, div);
            for (size_t i = 0; i < n; i++) {
                bool ok = true;
                double e = 0, g = 0;
                switch (dt) {
                case STRATA_DTYPE_F32:
                    e = (float)((double)((float *)s)[i] / div), g = ((float *)v)[i];
                    break;
                case STRATA_DTYPE_F64:
                    e = ((double *)s)[i] / div, g = ((double *)v)[i];
                    break;
                case STRATA_DTYPE_F16:
                    e = ref_f16_decode(ref_f16_encode(ref_f16_decode(((uint16_t *)s)[i]) / div));
                    g = ref_f16_decode(((uint16_t *)v)[i]);
                    break;
                case STRATA_DTYPE_BF16:
                    e = ref_bf16_decode(ref_bf16_encode(ref_bf16_decode(((uint16_t *)s)[i]) / div));
                    g = ref_bf16_decode(((uint16_t *)v)[i]);
                    break;
                case STRATA_DTYPE_I32:
                    e = ((int32_t *)s)[i] / div, g = ((int32_t *)v)[i];
                    break;
                case STRATA_DTYPE_I64:
                    e = (double)(((int64_t *)s)[i] / div), g = (double)((int64_t *)v)[i];
                    ok = ((int64_t *)s)[i] / div == ((int64_t *)v)[i];
                    break;
                case STRATA_DTYPE_U8:
                    e = ((uint8_t *)s)[i] / div, g = ((uint8_t *)v)[i];
                    break;
                default:
                    break;
                }
                if (isnan(e) || isnan(g))
                    ok = isnan(e) && isnan(g);
                else if (dt != STRATA_DTYPE_I64)
                    ok = e == g;
                if (!ok)
                    fail_msg("%s avg /%d index %zu: expected %.17g got %.17g",
                             strata_dtype_name(dt), div, i, e, g);
            }
        }
        free(a);
        free(b);
        free(s);
        free(v);
    }
}

static void test_integer_wrap_and_float_nan(void **state)
{
    (void)state;
    int32_t a32[2] = {INT32_MAX, INT32_MIN}, b32[2] = {1, -1}, r32[2];
    st_reduce(STRATA_DTYPE_I32, STRATA_OP_SUM, r32, a32, b32, 2);
    assert_int_equal(r32[0], INT32_MIN);
    assert_int_equal(r32[1], INT32_MAX);
    int64_t a64[1] = {INT64_MAX}, b64[1] = {2}, r64[1];
    st_reduce(STRATA_DTYPE_I64, STRATA_OP_PROD, r64, a64, b64, 1);
    assert_true(r64[0] == -2);
    uint8_t a8[2] = {200, 16}, b8[2] = {100, 16}, r8[2];
    st_reduce(STRATA_DTYPE_U8, STRATA_OP_SUM, r8, a8, b8, 2);
    assert_int_equal(r8[0], 44);
    st_reduce(STRATA_DTYPE_U8, STRATA_OP_PROD, r8, a8, b8, 2);
    assert_int_equal(r8[1], 0);

    // NaN propagates through min and max from either side, like torch.minimum/maximum.
    float x[4] = {NAN, 1.0f, NAN, -0.0f}, y[4] = {1.0f, NAN, NAN, 2.0f}, r[4];
    st_reduce(STRATA_DTYPE_F32, STRATA_OP_MIN, r, x, y, 4);
    assert_true(isnan(r[0]) && isnan(r[1]) && isnan(r[2]));
    assert_true(r[3] == 0.0f && signbit(r[3]));
    st_reduce(STRATA_DTYPE_F32, STRATA_OP_MAX, r, x, y, 4);
    assert_true(isnan(r[0]) && isnan(r[1]) && isnan(r[2]));
    assert_true(r[3] == 2.0f);
    uint16_t h[2] = {0x7e00, 0x3c00}, k[2] = {0x3c00, 0xfc00}, hr[2];
    st_reduce(STRATA_DTYPE_F16, STRATA_OP_MAX, hr, h, k, 2);
    assert_true((hr[0] & 0x7c00) == 0x7c00 && (hr[0] & 0x3ff) != 0);
    assert_int_equal(hr[1], 0x3c00);
    st_reduce(STRATA_DTYPE_BF16, STRATA_OP_MIN, hr, k, h, 2);
    assert_int_equal(hr[1], 0xfc00 & 0xffff);
}

/* ---- 16-bit conversions ---------------------------------------------------------------------- */

static void test_f16_every_value_round_trips(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = st_f16_to_f32((uint16_t)h);
        double want = ref_f16_decode((uint16_t)h);
        uint16_t back = st_f32_to_f16(f);
        if (isnan(want)) {
            assert_true(isnan(f));
            // NaN comes back quiet, with sign and payload kept.
            assert_int_equal(back, h | 0x0200);
        } else {
            if ((double)f != want || !signbit(f) != !signbit(want))
                fail_msg("f16 0x%04x: decoded %.9g, want %.9g", h, (double)f, want);
            assert_int_equal(back, h);
        }
    }
}

static void test_f16_rounding_edges(void **state)
{
    (void)state;
    // Every halfway point between neighbouring positive f16 values, and its float neighbours.
    for (uint16_t h = 0; h < 0x7c00; h++) {
        double lo = ref_f16_decode(h), hi = h + 1 == 0x7c00 ? 65536.0 : ref_f16_decode(h + 1);
        float mid = (float)((lo + hi) / 2); // exact: at most 12 significant bits
        float cases[3] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int c = 0; c < 3; c++)
            for (int s = 0; s < 2; s++) {
                float f = s ? -cases[c] : cases[c];
                uint16_t want = ref_f16_encode(f), got = st_f32_to_f16(f);
                if (got != want)
                    fail_msg("f32 %a -> f16: got 0x%04x want 0x%04x", (double)f, got, want);
            }
    }
    // Named edges.
    assert_int_equal(st_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(st_f32_to_f16(65519.99f), 0x7bff);
    assert_int_equal(st_f32_to_f16(65520.0f), 0x7c00); // halfway to 65536 rounds to even: inf
    assert_int_equal(st_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(st_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(st_f32_to_f16(0x1p-24f), 0x0001);   // smallest subnormal
    assert_int_equal(st_f32_to_f16(0x1p-25f), 0x0000);   // halfway to 0: even is 0
    assert_int_equal(st_f32_to_f16(0x1.8p-24f), 0x0002); // 1.5 ulp: even is 2
    assert_int_equal(st_f32_to_f16(0x1.0p-25f * 1.0001f), 0x0001);
    assert_int_equal(st_f32_to_f16(0x1.ff8p-15f), 0x03ff); // largest subnormal, exact
    assert_int_equal(st_f32_to_f16(0x1.ffcp-15f), 0x0400); // tie rounds up into the smallest normal
    assert_int_equal(st_f32_to_f16(0x1p-149f), 0x0000);    // f32 subnormal
    assert_int_equal(st_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(st_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); // tie, even down
    assert_int_equal(st_f32_to_f16(1.0f + 0x3p-11f), 0x3c02); // tie, even up
    uint16_t qnan = st_f32_to_f16(NAN);
    assert_true((qnan & 0x7e00) == 0x7e00);
    uint16_t snan = st_f32_to_f16(f32_of_bits(0xff800001u)); // signalling, payload below f16's
    assert_int_equal(snan, 0xfe00);
    assert_int_equal(st_f32_to_f16(f32_of_bits(0x7fa02000u)), 0x7f01); // payload top bits kept
    assert_true(st_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(st_f16_to_f32(0x03ff) == 0x1.ff8p-15f);
    assert_true(st_f16_to_f32(0x7c00) == INFINITY);
}

static void test_f16_random_floats(void **state)
{
    (void)state;
    for (int i = 0; i < 2000000; i++) {
        uint64_t r = rng();
        float f = (i & 1) ? f32_of_bits((uint32_t)r) : (float)(random_float_value() / 64);
        uint16_t got = st_f32_to_f16(f);
        if (isnan(f)) {
            uint16_t want = (uint16_t)(((bits_of_f32(f) >> 16) & 0x8000) | 0x7e00 |
                                       ((bits_of_f32(f) >> 13) & 0x3ff));
            assert_int_equal(got, want);
            continue;
        }
        uint16_t want = ref_f16_encode(f);
        if (got != want)
            fail_msg("f32 %a (0x%08x) -> f16: got 0x%04x want 0x%04x", (double)f, bits_of_f32(f),
                     got, want);
    }
}

static void test_bf16_conversions(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = st_bf16_to_f32((uint16_t)h);
        double want = ref_bf16_decode((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(f));
            assert_int_equal(st_f32_to_bf16(f), h | 0x40);
            continue;
        }
        assert_true((double)f == want && !signbit(f) == !signbit(want));
        assert_int_equal(st_f32_to_bf16(f), h);
        if ((h & 0x7fff) >= 0x7f80)
            continue;
        // Halfway to the next bf16 (same sign), and one f32 ulp either side.
        uint32_t mid = (h << 16) | 0x8000u;
        for (int d = -1; d <= 1; d++) {
            float m = f32_of_bits(mid + (uint32_t)d);
            uint16_t got = st_f32_to_bf16(m), w = ref_bf16_encode(m);
            if (got != w)
                fail_msg("f32 %a -> bf16: got 0x%04x want 0x%04x", (double)m, got, w);
        }
    }
    for (int i = 0; i < 1000000; i++) {
        float f = f32_of_bits((uint32_t)rng());
        if (isnan(f))
            continue;
        assert_int_equal(st_f32_to_bf16(f), ref_bf16_encode(f));
    }
    assert_int_equal(st_f32_to_bf16(f32_of_bits(0x7f7fffffu)), 0x7f80); // max f32 overflows
    assert_int_equal(st_f32_to_bf16(f32_of_bits(0x7f7f7fffu)), 0x7f7f);
    assert_int_equal(st_f32_to_bf16(f32_of_bits(0x00008000u)), 0x0000); // subnormal tie, even
    assert_int_equal(st_f32_to_bf16(f32_of_bits(0x00018000u)), 0x0002);
    assert_int_equal(st_f32_to_bf16(f32_of_bits(0xff800001u)), 0xffc0); // sNaN quieted
}

/* The block paths (F16C / AVX2 where the CPU has them) must agree with the scalar conversions for
 * every 16-bit input, including NaN payloads and subnormals. */
static void test_block_conversions_match_scalar(void **state)
{
    (void)state;
    enum { N = 0x10000 };
    uint16_t *all = malloc(N * 2), *other = malloc(N * 2), *got = malloc(N * 2);
    assert_non_null(all);
    assert_non_null(other);
    assert_non_null(got);
    for (uint32_t i = 0; i < N; i++)
        all[i] = (uint16_t)i;
    const strata_dtype_t halfs[2] = {STRATA_DTYPE_F16, STRATA_DTYPE_BF16};
    for (int t = 0; t < 2; t++) {
        strata_dtype_t dt = halfs[t];
        float (*widen)(uint16_t) = dt == STRATA_DTYPE_F16 ? st_f16_to_f32 : st_bf16_to_f32;
        uint16_t (*narrow)(float) = dt == STRATA_DTYPE_F16 ? st_f32_to_f16 : st_f32_to_bf16;
        fill_random(dt, other, N);
        for (size_t o = 0; o < NOPS; o++) {
            strata_op_t op = all_ops[o];
            st_reduce(dt, op, got, all, other, N);
            for (uint32_t i = 0; i < N; i++) {
                float x = widen(all[i]), y = widen(other[i]), r;
                switch (op) {
                case STRATA_OP_PROD:
                    r = x * y;
                    break;
                case STRATA_OP_MIN:
                    r = (x < y || x != x) ? x : y;
                    break;
                case STRATA_OP_MAX:
                    r = (x > y || x != x) ? x : y;
                    break;
                default:
                    r = x + y;
                    break;
                }
                uint16_t want = narrow(r);
                // When both inputs are NaN, which payload survives depends on operand order;
                // any NaN is right then.
                bool both_nan = isnan(x) && isnan(y);
                bool got_nan = isnan(widen(got[i]));
                if (both_nan ? !got_nan : got[i] != want)
                    fail_msg("%s %s block vs scalar at 0x%04x op 0x%04x: got 0x%04x want 0x%04x",
                             strata_dtype_name(dt), strata_op_name(op), all[i], other[i], got[i],
                             want);
            }
        }
        // The AVG finish's block path too.
        memcpy(got, all, N * 2);
        st_reduce_finish_avg(dt, got, N, 3);
        for (uint32_t i = 0; i < N; i++)
            if (got[i] != narrow(widen(all[i]) / 3.0f))
                fail_msg("%s avg block vs scalar at 0x%04x", strata_dtype_name(dt), i);
    }
    free(all);
    free(other);
    free(got);
}

/* ---- the serial reference (tests/harness/ref.c) ---------------------------------------------- */

static void test_ref_matches_folded_kernels(void **state)
{
    (void)state;
    const int nranks_list[] = {1, 2, 3, 5, 8, 16};
    const size_t n = 1031;
    char why[256];
    for (size_t d = 0; d < NDTYPES; d++) {
        strata_dtype_t dt = all_dtypes[d];
        size_t es = strata_dtype_size(dt);
        char *acc = malloc(n * es), *in = malloc(n * es), *want = malloc(n * es);
        assert_non_null(acc);
        assert_non_null(in);
        assert_non_null(want);
        for (size_t k = 0; k < sizeof nranks_list / sizeof nranks_list[0]; k++) {
            int nr = nranks_list[k];
            for (size_t o = 0; o < NOPS; o++) {
                strata_op_t op = all_ops[o];
                // Fold in reverse rank order, as an algorithm might, to exercise the tolerance.
                st_ref_fill(dt, acc, n, nr - 1, 42);
                for (int r = nr - 2; r >= 0; r--) {
                    st_ref_fill(dt, in, n, r, 42);
                    st_reduce(dt, op, acc, in, acc, n);
                }
                if (op == STRATA_OP_AVG)
                    st_reduce_finish_avg(dt, acc, n, nr);
                st_ref_allreduce(dt, op, nr, n, 42, want);
                if (!st_ref_compare(dt, op, nr, want, acc, n, why, sizeof why))
                    fail_msg("ref vs kernels: %s", why);
                // Integers stay exact and in range for up to 16 ranks: no wrap happened.
                if (dt == STRATA_DTYPE_I32 || dt == STRATA_DTYPE_I64 || dt == STRATA_DTYPE_U8) {
                    for (size_t i = 0; i < n; i++) {
                        double exact = op == STRATA_OP_PROD ? 1 : 0;
                        for (int r = 0; r < nr; r++) {
                            double v = st_ref_input(dt, r, 42, i);
                            if (op == STRATA_OP_PROD)
                                exact *= v;
                            else if (op == STRATA_OP_SUM || op == STRATA_OP_AVG)
                                exact += v;
                        }
                        if (op == STRATA_OP_PROD || op == STRATA_OP_SUM) {
                            double got = dt == STRATA_DTYPE_I32   ? ((int32_t *)want)[i]
                                         : dt == STRATA_DTYPE_I64 ? (double)((int64_t *)want)[i]
                                                                  : ((uint8_t *)want)[i];
                            if (got != exact)
                                fail_msg(
                                    "%s %s %d ranks: reference wrapped at %zu (%.17g vs %.17g)",
                                    strata_dtype_name(dt), strata_op_name(op), nr, i, got, exact);
                        }
                    }
                }
            }
        }
        free(acc);
        free(in);
        free(want);
    }
}

static void test_ref_inputs(void **state)
{
    (void)state;
    for (size_t d = 0; d < NDTYPES; d++) {
        strata_dtype_t dt = all_dtypes[d];
        char buf[64 * 8];
        st_ref_fill(dt, buf, 64, 3, 7);
        for (size_t i = 0; i < 64; i++) {
            double v = st_ref_input(dt, 3, 7, i);
            double g = 0;
            switch (dt) {
            case STRATA_DTYPE_F32:
                g = ((float *)buf)[i];
                break;
            case STRATA_DTYPE_F64:
                g = ((double *)buf)[i];
                break;
            case STRATA_DTYPE_F16:
                g = st_f16_to_f32(((uint16_t *)buf)[i]);
                break;
            case STRATA_DTYPE_BF16:
                g = st_bf16_to_f32(((uint16_t *)buf)[i]);
                break;
            case STRATA_DTYPE_I32:
                g = ((int32_t *)buf)[i];
                break;
            case STRATA_DTYPE_I64:
                g = (double)((int64_t *)buf)[i];
                break;
            case STRATA_DTYPE_U8:
                g = ((uint8_t *)buf)[i];
                break;
            default:
                break;
            }
            assert_true(v == g);
            if (dt <= STRATA_DTYPE_BF16)
                assert_true(v >= 0.5 && v < 2.0);
            else if (dt != STRATA_DTYPE_U8)
                assert_true(v != 0 && fabs(v) <= 15);
        }
        // Different ranks and seeds give different data.
        char other[64 * 8];
        st_ref_fill(dt, other, 64, 4, 7);
        assert_memory_not_equal(buf, other, 64 * strata_dtype_size(dt));
        st_ref_fill(dt, other, 64, 3, 8);
        assert_memory_not_equal(buf, other, 64 * strata_dtype_size(dt));
    }
}

static void test_ref_compare_reports_mismatch(void **state)
{
    (void)state;
    char why[256];
    float want[3] = {1.0f, 2.0f, 3.0f}, got[3] = {1.0f, 2.0f, 3.0f};
    assert_true(st_ref_compare(STRATA_DTYPE_F32, STRATA_OP_SUM, 4, want, got, 3, why, sizeof why));
    got[1] = 2.0f * (1 + 2e-5f); // within 4 * 1e-5 relative
    assert_true(st_ref_compare(STRATA_DTYPE_F32, STRATA_OP_SUM, 4, want, got, 3, why, sizeof why));
    assert_false(st_ref_compare(STRATA_DTYPE_F32, STRATA_OP_MAX, 4, want, got, 3, why, sizeof why));
    assert_non_null(strstr(why, "index 1"));
    got[1] = 2.1f;
    assert_false(st_ref_compare(STRATA_DTYPE_F32, STRATA_OP_SUM, 4, want, got, 3, why, sizeof why));
    assert_non_null(strstr(why, "index 1"));
    assert_non_null(strstr(why, "expected 2"));
    got[1] = NAN;
    assert_false(st_ref_compare(STRATA_DTYPE_F32, STRATA_OP_SUM, 4, want, got, 3, NULL, 0));

    int32_t wi[2] = {5, -7}, gi[2] = {5, -6};
    assert_false(st_ref_compare(STRATA_DTYPE_I32, STRATA_OP_SUM, 2, wi, gi, 2, why, sizeof why));
    assert_non_null(strstr(why, "index 1: expected -7, got -6"));
    assert_true(st_ref_compare(STRATA_DTYPE_I32, STRATA_OP_SUM, 2, wi, wi, 2, why, sizeof why));

    uint16_t wh[1] = {0x3c00}, gh[1] = {0x3c01}; // 1 and 1 + 2^-10
    assert_true(st_ref_compare(STRATA_DTYPE_F16, STRATA_OP_SUM, 2, wh, gh, 1, why, sizeof why));
    gh[0] = 0x3c10;
    assert_false(st_ref_compare(STRATA_DTYPE_F16, STRATA_OP_SUM, 2, wh, gh, 1, why, sizeof why));
    assert_true(st_ref_tolerance(STRATA_DTYPE_F64, STRATA_OP_PROD, 8, 1.0) < 1e-10);
    assert_true(st_ref_tolerance(STRATA_DTYPE_I64, STRATA_OP_SUM, 8, 1.0) == 0);
    assert_true(st_ref_tolerance(STRATA_DTYPE_BF16, STRATA_OP_MIN, 8, 1.0) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_dtype_op_count),
        cmocka_unit_test(test_reduce_stream_matches),
        cmocka_unit_test(test_copy_stream_matches),
        cmocka_unit_test(test_zero_count_touches_nothing),
        cmocka_unit_test(test_in_place_aliasing),
        cmocka_unit_test(test_avg_is_sum_then_finish),
        cmocka_unit_test(test_integer_wrap_and_float_nan),
        cmocka_unit_test(test_f16_every_value_round_trips),
        cmocka_unit_test(test_f16_rounding_edges),
        cmocka_unit_test(test_f16_random_floats),
        cmocka_unit_test(test_bf16_conversions),
        cmocka_unit_test(test_block_conversions_match_scalar),
        cmocka_unit_test(test_ref_matches_folded_kernels),
        cmocka_unit_test(test_ref_inputs),
        cmocka_unit_test(test_ref_compare_reports_mismatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
