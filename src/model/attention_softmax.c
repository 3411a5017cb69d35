/* Attention's softmax rows on AVX-512 (attention_softmax.h). Each pass over a row runs in vectors
 * of 16, the last one masked (masked lanes load as zeros and are not stored). The sums keep
 * vecmath.h's 8 lanes: each vector of 16 adds its low half, then its high half, into one 8-lane
 * accumulator, which is the order st_sum and st_dot add in; a masked lane adds +0, which changes
 * no sum (one that starts at +0 is never -0). The dot product fuses each multiply-add. */
#include "model/attention_softmax.h"

#include <stdlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "model/avx512_words.h"

#define SOFTMAX_TARGET __attribute__((target("avx512f,avx512bw,avx512cd,avx512dq,avx512vl,fma")))

bool st_att_softmax_ready(void)
{
    // What x86-64-v4 asks, so that this runs exactly where attention.c's AVX-512 clone would.
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
}

/* vecmath.h's st_exp, operation by operation as GCC fuses it: the clamps (a NaN passes through),
 * n = round(x / ln2) by the 1.5 * 2^23 shift, r = x - n ln2 in two parts, the degree-6 Horner
 * chain, 2^n built in the exponent bits. */
SOFTMAX_TARGET static inline __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(_mm512_set1_ps(-87.f), x);
    x = _mm512_min_ps(_mm512_set1_ps(87.f), x);
    __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504f), _mm512_set1_ps(12582912.f));
    __m512 n = _mm512_sub_ps(t, _mm512_set1_ps(12582912.f));
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.f / 720), r, _mm512_set1_ps(1.f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    __m512i e = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4B400000));
    e = _mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/* st_lanes_sum: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). */
SOFTMAX_TARGET static inline float lanes_sum(__m256 a)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

SOFTMAX_TARGET static inline __m256 low8(__m512 v)
{
    return _mm512_castps512_ps256(v);
}

SOFTMAX_TARGET static inline __m256 high8(__m512 v)
{
    return _mm512_extractf32x8_ps(v, 1);
}

SOFTMAX_TARGET void st_att_softmax_row(float *x, int n)
{
    __m512 mx = _mm512_set1_ps(x[0]);
    for (int i = 0; i < n; i += 16)
        mx = _mm512_max_ps(_mm512_mask_loadu_ps(mx, st_lanes16(n - i), x + i), mx);
    __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = st_lanes16(n - i);
        __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), m)));
        _mm512_mask_storeu_ps(x + i, k, e);
        acc = _mm256_add_ps(acc, low8(e));
        acc = _mm256_add_ps(acc, high8(e));
    }
    __m512 inv = _mm512_set1_ps(1.f / lanes_sum(acc));
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = st_lanes16(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
    }
}

SOFTMAX_TARGET void st_att_softmax_backward_row(const float *p, float *d, int n)
{
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = st_lanes16(n - i);
        __m512 pv = _mm512_maskz_loadu_ps(k, p + i), dv = _mm512_maskz_loadu_ps(k, d + i);
        acc = _mm256_fmadd_ps(low8(pv), low8(dv), acc);
        acc = _mm256_fmadd_ps(high8(pv), high8(dv), acc);
    }
    __m512 dot = _mm512_set1_ps(lanes_sum(acc));
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = st_lanes16(n - i);
        __m512 pv = _mm512_maskz_loadu_ps(k, p + i), dv = _mm512_maskz_loadu_ps(k, d + i);
        _mm512_mask_storeu_ps(d + i, k, _mm512_mul_ps(pv, _mm512_sub_ps(dv, dot)));
    }
}

#else /* no AVX-512 here: attention.c's loops run */

bool st_att_softmax_ready(void)
{
    return false;
}

void st_att_softmax_row(float *x, int n)
{
    abort();
}

void st_att_softmax_backward_row(const float *p, float *d, int n)
{
    abort();
}
#endif
