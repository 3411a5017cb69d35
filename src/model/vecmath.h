/* Vectorisable building blocks for the model's elementwise and row-wise loops (GELU, softmax,
 * LayerNorm, cross-entropy, the optimizers), and the attribute that compiles those loops for
 * AVX-512 and AVX2 as well as for the x86-64 baseline. Internal to the model part.
 *
 * Why this exists: the default build targets plain x86-64 (SSE2) because CI may run elsewhere, and
 * without -ffast-math GCC neither calls a vector exp nor splits a float reduction (sum, max) into
 * independent chains, so a softmax row ran one scalar expf and one serial add at a time. Here:
 *  - st_exp is exp in plain arithmetic, which the compiler vectorises;
 *  - st_sum / st_max / st_dot reduce with ST_LANES fixed lanes, combined in a fixed order, so the
 *    result does not depend on the thread count or the vector width (and the loops vectorise
 *    without reassociation);
 *  - ST_VEC_CLONES makes GCC emit AVX-512 and AVX2 clones of a hot function next to the baseline
 *    one and pick at load time (target_clones, an ifunc); the AVX-512 clone runs twice the lanes
 *    of the AVX2 one where the core has the full-width units. The model part builds with
 *    -ffp-contract=fast (CMakeLists.txt says why), so those two clones (x86-64-v4 and v3, both
 *    with FMA) fuse multiply-adds and the baseline does not: one machine always runs the same
 *    clone, and its results are the same at any thread count. */
#ifndef ST_MODEL_VECMATH_H
#define ST_MODEL_VECMATH_H

#include <stdint.h>
#include <string.h>

/* Not under ThreadSanitizer: its runtime is not up yet when the dynamic loader runs the clones'
 * ifunc resolvers, which then crash before main. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) &&      \
    !defined(__SANITIZE_THREAD__)
#define ST_VEC_CLONES                                                                              \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ST_VEC_CLONES
#endif

/* exp(x), clamped to x in [-87, 87]: x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6 polynomial
 * (relative error ~2e-7), 2^n put into the exponent bits. exp(-87) ~ 1.6e-38, so softmax terms far
 * below the row maximum come out as tiny normals instead of 0, which no sum can tell apart.
 * n is rounded by adding 1.5 * 2^23, which leaves it in the low mantissa bits of `t`: the exponent
 * is built from those bits in unsigned arithmetic, so no float-to-int conversion or signed shift
 * can be undefined. NaN (a checkpoint can hold one) gives NaN; +-Inf and huge |x| clamp. */
static inline float st_exp(float x)
{
    x = x < -87.f ? -87.f : x;
    x = x > 87.f ? 87.f : x;
    float t = x * 1.44269504f + 12582912.f;
    float n = t - 12582912.f; // round to nearest
    float r = x - n * 0.693145752f - n * 1.42860677e-6f;
    float p = 1.f / 720;
    p = p * r + 1.f / 120;
    p = p * r + 1.f / 24;
    p = p * r + 1.f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.f;
    p = p * r + 1.f;
    uint32_t tbits;
    memcpy(&tbits, &t, sizeof tbits);
    uint32_t bits = (tbits - 0x4B400000u + 127u) << 23; // (n + 127) << 23, n in [-126, 126]
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* Lanes of the reductions: 8 floats = one AVX2 register (two SSE ones), as a GNU C vector, whose
 * operations are the lanes' own: the compiler keeps each lane's sum in order and, built for AVX2 or
 * AVX-512, runs a step as one instruction. (As loops over an array of 8, GCC's AVX-512 clones
 * assembled each step from shuffles and 8 scalar additions: 442 of them in the norms' forward.) */
#define ST_LANES 8
/* Only static inline functions take and return it, so how the baseline build would pass it between
 * files concerns no one: GCC's and Clang's note of that (-Wpsabi) is off for the file that
 * includes this (a push and pop around these definitions does not hold: the note comes where a
 * call is compiled, as late as the end of the file). */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float st_lanes_t __attribute__((vector_size(ST_LANES * sizeof(float))));

/* x[0, ST_LANES) in the lanes. */
static inline st_lanes_t st_lanes_at(const float *x)
{
    st_lanes_t v;
    memcpy(&v, x, sizeof v);
    return v;
}

/* A row's last n < ST_LANES elements in lanes 0 .. n - 1, zeros after: added into a sum, the
 * zeros change no lane (a sum that starts at +0 never becomes -0), so element i of a row always
 * goes to lane i % ST_LANES. */
static inline st_lanes_t st_lanes_tail(const float *x, int n)
{
    st_lanes_t v = {0};
    memcpy(&v, x, (size_t)n * sizeof(float));
    return v;
}

/* Combines the lanes pairwise in a fixed order. */
static inline float st_lanes_sum(st_lanes_t a)
{
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* sum of x[0..n). */
static inline float st_sum(const float *x, int n)
{
    st_lanes_t acc = {0};
    int i = 0;
    for (; i + ST_LANES <= n; i += ST_LANES)
        acc += st_lanes_at(x + i);
    if (i < n)
        acc += st_lanes_tail(x + i, n - i);
    return st_lanes_sum(acc);
}

/* sum of x[i] * y[i] over [0, n). */
static inline float st_dot(const float *x, const float *y, int n)
{
    st_lanes_t acc = {0};
    int i = 0;
    for (; i + ST_LANES <= n; i += ST_LANES)
        acc += st_lanes_at(x + i) * st_lanes_at(y + i);
    if (i < n)
        acc += st_lanes_tail(x + i, n - i) * st_lanes_tail(y + i, n - i);
    return st_lanes_sum(acc);
}

/* max of x[0..n), n >= 1 (NaN-free input: the model's activations are finite). */
static inline float st_max(const float *x, int n)
{
    typedef int32_t mask_t __attribute__((vector_size(sizeof(st_lanes_t))));
    st_lanes_t acc = {x[0], x[0], x[0], x[0], x[0], x[0], x[0], x[0]};
    int i = 0;
    for (; i + ST_LANES <= n; i += ST_LANES) {
        st_lanes_t v = st_lanes_at(x + i);
        mask_t gt = v > acc;
        acc = (st_lanes_t)(((mask_t)v & gt) | ((mask_t)acc & ~gt));
    }
    float m = acc[0];
    for (int k = 1; k < ST_LANES; k++)
        m = acc[k] > m ? acc[k] : m;
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

#endif
