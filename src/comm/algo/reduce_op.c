/* Element-wise reduction kernels: dst[i] = a[i] op b[i] for every (dtype, op) pair, the AVG finish
 * and the float16/bfloat16 conversions. This is the inner loop of every reducing collective, so
 * each (dtype, op) pair is its own small kernel made by one macro and picked from a table once per
 * call; no kernel switches per element. Kernels walk the buffers in fixed-size blocks whose inner
 * loop has a constant trip count and an "ivdep" pragma, which is what lets gcc -O2 (its "very
 * cheap" vector cost model refuses loops that need a runtime alias check or an epilogue) and clang
 * vectorise them. The pragma is truthful, not a restrict-style promise: dst may equal a or b
 * exactly, which creates only same-iteration dependences, never loop-carried ones. Partial overlap
 * is not allowed.
 *
 * Semantics
 * - Integers wrap on overflow (sum and prod are computed in the unsigned type of the same width, so
 *   signed overflow is never UB). AVG divides the wrapped sum with C's truncating division.
 * - Float min/max propagate NaN, as torch.minimum/maximum do: if either input is NaN the result is
 *   NaN (a's NaN when both are). min(-0, +0) may return either zero.
 * - f16 and bf16 are widened to f32, combined in f32 and rounded back to nearest-even, in blocks of
 *   HALF_BLOCK elements. Conversions get NaN (payload kept, made quiet), infinities, overflow to
 *   infinity and subnormals right, and are branch-free so the block loops vectorise. On x86-64,
 *   when the CPU has F16C (f16) or AVX2 (bf16), probed once, 8 elements at a time are converted
 *   and combined in AVX registers instead: same results, about 10x (f16) and 2.5x (bf16) faster.
 *
 * Left to others: choosing what to reduce with whom (algorithms), moving bytes (transports), and
 * validating dtype and op at the public API (an out-of-range dtype or op here does nothing). */
#include <string.h>

#include "base/bf16.h"
#include "comm/algo/reduce_op.h"

/* "No loop-carried dependences in the next loop": true for dst == a or dst == b exactly. Clang
 * warns when it cannot honour the pragma, which is expected in sanitizer and -O0 builds. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#define ST_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define ST_IVDEP _Pragma("GCC ivdep")
#else
#define ST_IVDEP
#endif

/* Bytes per vector-friendly block of the plain kernels, and elements per block of the 16-bit float
 * kernels (two f32 scratch blocks of this size live on the stack). */
#define BLOCK_BYTES 256
#define HALF_BLOCK  256

typedef void (*reduce_fn)(void *dst, const void *a, const void *b, size_t count);

/* ---- float16 / bfloat16 conversions ---------------------------------------------------------- */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* c ? x : y through a mask. A plain ?: over values computed with float arithmetic can end up as a
 * branch (gcc will not speculate possibly-trapping float ops), which stops the block loops from
 * vectorising; masks keep the conversions straight-line code. */
static inline uint32_t select_u32(int c, uint32_t x, uint32_t y)
{
    uint32_t m = 0u - (uint32_t)(c != 0);
    return (x & m) | (y & ~m);
}

/* IEEE binary16 -> binary32, exact for every input. */
static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu; // exponent and mantissa
    uint32_t exp = em & 0x7c00u;
    uint32_t normal = (em << 13) + ((127u - 15u) << 23); // rebias the exponent
    uint32_t infnan = (em << 13) + ((255u - 31u) << 23); // exponent 31 -> 255, payload kept
    // A subnormal (or zero) is mantissa * 2^-24; the int->float conversion and scaling are exact.
    uint32_t sub = f32_bits((float)(int32_t)em * 0x1p-24f);
    uint32_t r = select_u32(exp == 0x7c00u, infnan, select_u32(exp == 0, sub, normal));
    return f32_from_bits(r | sign);
}

/* binary32 -> binary16, round to nearest even; overflow goes to infinity, NaN stays NaN (quiet,
 * top payload bits kept). After F. Giesen's float_to_half_fast3_rtne, made branch-free. */
static inline uint16_t f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
    // Normal range: rebias, then add 0xfff plus the lowest kept bit so that ties round to even. A
    // carry out of the mantissa bumps the exponent, and out of exponent 30 it lands on 0x7c00
    // (inf).
    uint32_t norm = (a - ((127u - 15u) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
    // Below 2^-14 the result is subnormal: adding 0.5f leaves the value rounded (by the FPU, to
    // nearest even) to a multiple of 2^-24, i.e. to the f16 subnormal grid, in the low mantissa
    // bits.
    uint32_t sub = f32_bits(f32_from_bits(a) + 0.5f) - f32_bits(0.5f);
    uint32_t r = select_u32(a < (113u << 23), sub, norm);
    r = select_u32(a >= (143u << 23), 0x7c00u, r); // >= 65536, and infinity
    r = select_u32(a > 0x7f800000u, nan, r);
    return (uint16_t)(r | sign);
}

float st_f16_to_f32(uint16_t h)
{
    return f16_to_f32(h);
}

uint16_t st_f32_to_f16(float f)
{
    return f32_to_f16(f);
}

/* ---- element operations ---------------------------------------------------------------------- */

#define OP_ADD(x, y) ((x) + (y))
#define OP_MUL(x, y) ((x) * (y))
#define OP_MIN(x, y) ((x) < (y) ? (x) : (y))
#define OP_MAX(x, y) ((x) > (y) ? (x) : (y))
// NaN-propagating: x is taken when it is NaN (x != x) or smaller; otherwise y (NaN or not).
#define OP_FMIN(x, y) (((x) < (y) || (x) != (x)) ? (x) : (y))
#define OP_FMAX(x, y) (((x) > (y) || (x) != (x)) ? (x) : (y))
// Wrapping arithmetic for signed T through its unsigned twin U; the conversion back is modular on
// every compiler strata supports (implementation-defined, not undefined).
#define OP_WADD(T, U, x, y) ((T)((U)(x) + (U)(y)))
#define OP_WMUL(T, U, x, y) ((T)((U)(x) * (U)(y)))

/* One kernel: full blocks with a constant-trip-count inner loop, then a scalar tail. */
#define DEFINE_KERNEL(name, T, EXPR)                                             \
    static inline T name##_1(T x, T y)                                           \
    {                                                                            \
        return EXPR;                                                             \
    }                                                                            \
    static void name(void *dst_, const void *a_, const void *b_, size_t count)   \
    {                                                                            \
        enum { B = BLOCK_BYTES / sizeof(T) };                                    \
        T *dst = dst_;                                                           \
        const T *a = a_, *b = b_;                                                \
        size_t i = 0;                                                            \
        for (; i + B <= count; i += B) {                                         \
            T *d = dst + i;                                                      \
            const T *x = a + i, *y = b + i;                                      \
            ST_IVDEP for (size_t j = 0; j < B; j++) d[j] = name##_1(x[j], y[j]); \
        }                                                                        \
        for (; i < count; i++)                                                   \
            dst[i] = name##_1(a[i], b[i]);                                       \
    }

DEFINE_KERNEL(f32_sum, float, OP_ADD(x, y))
DEFINE_KERNEL(f32_prod, float, OP_MUL(x, y))
DEFINE_KERNEL(f32_min, float, OP_FMIN(x, y))
DEFINE_KERNEL(f32_max, float, OP_FMAX(x, y))

DEFINE_KERNEL(f64_sum, double, OP_ADD(x, y))
DEFINE_KERNEL(f64_prod, double, OP_MUL(x, y))
DEFINE_KERNEL(f64_min, double, OP_FMIN(x, y))
DEFINE_KERNEL(f64_max, double, OP_FMAX(x, y))

DEFINE_KERNEL(i32_sum, int32_t, OP_WADD(int32_t, uint32_t, x, y))
DEFINE_KERNEL(i32_prod, int32_t, OP_WMUL(int32_t, uint32_t, x, y))
DEFINE_KERNEL(i32_min, int32_t, OP_MIN(x, y))
DEFINE_KERNEL(i32_max, int32_t, OP_MAX(x, y))

DEFINE_KERNEL(i64_sum, int64_t, OP_WADD(int64_t, uint64_t, x, y))
DEFINE_KERNEL(i64_prod, int64_t, OP_WMUL(int64_t, uint64_t, x, y))
DEFINE_KERNEL(i64_min, int64_t, OP_MIN(x, y))
DEFINE_KERNEL(i64_max, int64_t, OP_MAX(x, y))

// u8: x + y and x * y promote to int and cannot overflow it; the cast back wraps mod 256.
DEFINE_KERNEL(u8_sum, uint8_t, (uint8_t)OP_ADD(x, y))
DEFINE_KERNEL(u8_prod, uint8_t, (uint8_t)OP_MUL(x, y))
DEFINE_KERNEL(u8_min, uint8_t, OP_MIN(x, y))
DEFINE_KERNEL(u8_max, uint8_t, OP_MAX(x, y))

/* ---- 16-bit float kernels -------------------------------------------------------------------- */

/* Portable path: widen a block of each input into f32 scratch, combine there, narrow into dst.
 * Each step is a constant-count loop over the scalar conversions above, which the compiler
 * vectorises with the baseline ISA (about 1 GB/s for f16 on a current x86 core, 3 GB/s for bf16).
 * Both inputs are fully read before dst is written, so exact aliasing is harmless. */
#define DEFINE_HALF_PORTABLE(name, widen1, narrow1, f32op)                              \
    static void name(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t count) \
    {                                                                                   \
        float fa[HALF_BLOCK], fb[HALF_BLOCK];                                           \
        size_t i = 0;                                                                   \
        for (; i + HALF_BLOCK <= count; i += HALF_BLOCK) {                              \
            const uint16_t *x = a + i, *y = b + i;                                      \
            uint16_t *d = dst + i;                                                      \
            for (size_t j = 0; j < HALF_BLOCK; j++)                                     \
                fa[j] = widen1(x[j]);                                                   \
            for (size_t j = 0; j < HALF_BLOCK; j++)                                     \
                fb[j] = widen1(y[j]);                                                   \
            for (size_t j = 0; j < HALF_BLOCK; j++)                                     \
                fa[j] = f32op##_1(fa[j], fb[j]);                                        \
            for (size_t j = 0; j < HALF_BLOCK; j++)                                     \
                d[j] = narrow1(fa[j]);                                                  \
        }                                                                               \
        for (; i < count; i++)                                                          \
            dst[i] = narrow1(f32op##_1(widen1(a[i]), widen1(b[i])));                    \
    }

DEFINE_HALF_PORTABLE(f16_sum_portable, f16_to_f32, f32_to_f16, f32_sum)
DEFINE_HALF_PORTABLE(f16_prod_portable, f16_to_f32, f32_to_f16, f32_prod)
DEFINE_HALF_PORTABLE(f16_min_portable, f16_to_f32, f32_to_f16, f32_min)
DEFINE_HALF_PORTABLE(f16_max_portable, f16_to_f32, f32_to_f16, f32_max)
DEFINE_HALF_PORTABLE(bf16_sum_portable, st_bf16_to_f32, st_f32_to_bf16, f32_sum)
DEFINE_HALF_PORTABLE(bf16_prod_portable, st_bf16_to_f32, st_f32_to_bf16, f32_prod)
DEFINE_HALF_PORTABLE(bf16_min_portable, st_bf16_to_f32, st_f32_to_bf16, f32_min)
DEFINE_HALF_PORTABLE(bf16_max_portable, st_bf16_to_f32, st_f32_to_bf16, f32_max)

/* x86-64 path: 8 elements at a time in AVX registers, converted with F16C (f16) or AVX2 integer
 * ops (bf16); about 10x (f16) and 2.5x (bf16) the portable path. Results are bit-identical to the
 * portable code: the same f32 operation, the same round-to-nearest-even narrowing, NaN quieted with
 * its payload's top bits kept. (F16C's widening also quiets a signalling NaN, which no result can
 * show because narrowing quiets it anyway. When both inputs of a sum or product are NaN, which
 * payload survives depends on operand order in either path.) Build with -DST_REDUCE_PORTABLE to
 * test the portable path on an x86 machine. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(ST_REDUCE_PORTABLE)
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#define ST_X86_DISPATCH 1

enum { HAVE_AVX2 = 1, HAVE_F16C = 2, HAVE_AVX = 4, HAVE_AVX512F = 8 };

/* CPU features, probed once. __builtin_cpu_supports checks that the OS saves the YMM registers too;
 * F16C comes from CPUID directly because clang's builtin does not know it. A relaxed atomic keeps
 * the one-time probe race-free (two threads may both probe; they store the same value). */
static int x86_features(void)
{
    static atomic_int cached = -1;
    int f = atomic_load_explicit(&cached, memory_order_relaxed);
    if (f >= 0)
        return f;
    f = 0;
    if (__builtin_cpu_supports("avx2"))
        f |= HAVE_AVX2;
    if (__builtin_cpu_supports("avx"))
        f |= HAVE_AVX;
    if (__builtin_cpu_supports("avx512f"))
        f |= HAVE_AVX512F;
    unsigned eax, ebx, ecx, edx;
    if (__builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C))
        f |= HAVE_F16C;
    atomic_store_explicit(&cached, f, memory_order_relaxed);
    return f;
}

#define X86_AVX  __attribute__((target("avx")))
#define X86_F16C __attribute__((target("avx,f16c")))
#define X86_AVX2 __attribute__((target("avx2")))

/* The f32 operations on 8 lanes, with the scalar kernels' semantics (NaN-propagating min/max). */
X86_AVX static inline __m256 sum8(__m256 x, __m256 y)
{
    return _mm256_add_ps(x, y);
}
X86_AVX static inline __m256 prod8(__m256 x, __m256 y)
{
    return _mm256_mul_ps(x, y);
}
X86_AVX static inline __m256 min8(__m256 x, __m256 y)
{
    __m256 take_x =
        _mm256_or_ps(_mm256_cmp_ps(x, y, _CMP_LT_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_ps(y, x, take_x);
}
X86_AVX static inline __m256 max8(__m256 x, __m256 y)
{
    __m256 take_x =
        _mm256_or_ps(_mm256_cmp_ps(x, y, _CMP_GT_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_ps(y, x, take_x);
}

X86_F16C static inline __m256 f16_load8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}
X86_F16C static inline void f16_store8(uint16_t *p, __m256 v)
{
    _mm_storeu_si128((__m128i *)(void *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

X86_AVX2 static inline __m256 bf16_load8(const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
/* st_f32_to_bf16() on 8 lanes. */
X86_AVX2 static inline void bf16_store8(uint16_t *p, __m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                        _mm256_set1_epi32(0x7f800000));
    __m256i r = _mm256_blendv_epi8(rounded, nan, is_nan);
    // Every lane is <= 0xffff, so unsigned saturation packs exactly.
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128((__m128i *)(void *)p, packed);
}

/* Whole groups of 8 only; the caller finishes the tail with the scalar code. */
#define DEFINE_HALF_X86(name, attr, load8, store8, op8)                                      \
    attr static void name(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t count) \
    {                                                                                        \
        for (size_t i = 0; i + 8 <= count; i += 8)                                           \
            store8(dst + i, op8(load8(a + i), load8(b + i)));                                \
    }

DEFINE_HALF_X86(f16_sum_x86, X86_F16C, f16_load8, f16_store8, sum8)
DEFINE_HALF_X86(f16_prod_x86, X86_F16C, f16_load8, f16_store8, prod8)
DEFINE_HALF_X86(f16_min_x86, X86_F16C, f16_load8, f16_store8, min8)
DEFINE_HALF_X86(f16_max_x86, X86_F16C, f16_load8, f16_store8, max8)
DEFINE_HALF_X86(bf16_sum_x86, X86_AVX2, bf16_load8, bf16_store8, sum8)
DEFINE_HALF_X86(bf16_prod_x86, X86_AVX2, bf16_load8, bf16_store8, prod8)
DEFINE_HALF_X86(bf16_min_x86, X86_AVX2, bf16_load8, bf16_store8, min8)
DEFINE_HALF_X86(bf16_max_x86, X86_AVX2, bf16_load8, bf16_store8, max8)

X86_F16C static void f16_div_x86(uint16_t *buf, size_t count, float div)
{
    __m256 d = _mm256_set1_ps(div);
    for (size_t i = 0; i + 8 <= count; i += 8)
        f16_store8(buf + i, _mm256_div_ps(f16_load8(buf + i), d));
}

X86_AVX2 static void bf16_div_x86(uint16_t *buf, size_t count, float div)
{
    __m256 d = _mm256_set1_ps(div);
    for (size_t i = 0; i + 8 <= count; i += 8)
        bf16_store8(buf + i, _mm256_div_ps(bf16_load8(buf + i), d));
}

#define F16_X86_OK()  (x86_features() & HAVE_F16C)
#define BF16_X86_OK() (x86_features() & HAVE_AVX2)
#endif

/* The kernel: the x86 path for whole groups of 8 when the CPU allows, the portable code for the
 * rest (which is everything elsewhere). */
#ifdef ST_X86_DISPATCH
#define DEFINE_HALF_KERNEL(name, ok)                                           \
    static void name(void *dst_, const void *a_, const void *b_, size_t count) \
    {                                                                          \
        uint16_t *dst = dst_;                                                  \
        const uint16_t *a = a_, *b = b_;                                       \
        size_t done = 0;                                                       \
        if (ok()) {                                                            \
            done = count & ~(size_t)7;                                         \
            name##_x86(dst, a, b, done);                                       \
        }                                                                      \
        name##_portable(dst + done, a + done, b + done, count - done);         \
    }
#else
#define DEFINE_HALF_KERNEL(name, ok)                                        \
    static void name(void *dst, const void *a, const void *b, size_t count) \
    {                                                                       \
        name##_portable(dst, a, b, count);                                  \
    }
#endif

DEFINE_HALF_KERNEL(f16_sum, F16_X86_OK)
DEFINE_HALF_KERNEL(f16_prod, F16_X86_OK)
DEFINE_HALF_KERNEL(f16_min, F16_X86_OK)
DEFINE_HALF_KERNEL(f16_max, F16_X86_OK)
DEFINE_HALF_KERNEL(bf16_sum, BF16_X86_OK)
DEFINE_HALF_KERNEL(bf16_prod, BF16_X86_OK)
DEFINE_HALF_KERNEL(bf16_min, BF16_X86_OK)
DEFINE_HALF_KERNEL(bf16_max, BF16_X86_OK)

/* Indexed [dtype][op]; AVG reduces as SUM. */
static const reduce_fn kernels[STRATA_DTYPE_COUNT][STRATA_OP_COUNT] = {
    [STRATA_DTYPE_F32] = {f32_sum, f32_prod, f32_min, f32_max, f32_sum},
    [STRATA_DTYPE_F64] = {f64_sum, f64_prod, f64_min, f64_max, f64_sum},
    [STRATA_DTYPE_F16] = {f16_sum, f16_prod, f16_min, f16_max, f16_sum},
    [STRATA_DTYPE_BF16] = {bf16_sum, bf16_prod, bf16_min, bf16_max, bf16_sum},
    [STRATA_DTYPE_I32] = {i32_sum, i32_prod, i32_min, i32_max, i32_sum},
    [STRATA_DTYPE_I64] = {i64_sum, i64_prod, i64_min, i64_max, i64_sum},
    [STRATA_DTYPE_U8] = {u8_sum, u8_prod, u8_min, u8_max, u8_sum},
};

void st_reduce(strata_dtype_t dtype, strata_op_t op, void *dst, const void *a, const void *b,
               size_t count)
{
    if ((unsigned)dtype >= STRATA_DTYPE_COUNT || (unsigned)op >= STRATA_OP_COUNT || count == 0)
        return;
    kernels[dtype][op](dst, a, b, count);
}

/* ---- streaming stores ------------------------------------------------------------------------ */

/* Bytes reduced into an L1 block before they are streamed out: small enough that the block never
 * leaves L1 (so forming the result there costs next to nothing), large enough to pay for the call
 * to the kernel. Measured on a 2-rank 64 MiB allreduce: a 4 KiB block was 15-20% slower than
 * reducing straight from registers, 256 B as fast. */
#define STREAM_BLOCK 256

#ifdef ST_X86_DISPATCH
/* Whole 64-byte lines, dst aligned to 64, with the widest non-temporal store the CPU has: one
 * AVX-512 store writes a whole line, which the memory system takes as a full-line write; 16-byte
 * stores (SSE2) must be combined into lines first, and measured about 15% slower. */
__attribute__((target("avx512f"))) static void stream_lines_avx512(char *d, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i += 64)
        _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512((const void *)(s + i)));
}
X86_AVX static void stream_lines_avx(char *d, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i += 64) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(s + i));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(s + i + 32));
        _mm256_stream_si256((__m256i *)(void *)(d + i), x0);
        _mm256_stream_si256((__m256i *)(void *)(d + i + 32), x1);
    }
}
static void stream_lines_sse2(char *d, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i += 64)
        for (size_t j = 0; j < 64; j += 16)
            _mm_stream_si128((__m128i *)(void *)(d + i + j),
                             _mm_loadu_si128((const __m128i *)(const void *)(s + i + j)));
}
static void stream_lines(char *d, const char *s, size_t n)
{
    int f = x86_features();
    if (f & HAVE_AVX512F)
        stream_lines_avx512(d, s, n);
    else if (f & HAVE_AVX)
        stream_lines_avx(d, s, n);
    else
        stream_lines_sse2(d, s, n);
}
#define STREAM_FENCE() _mm_sfence()
#define STREAMS        1
#else
#define STREAM_FENCE() ((void)0)
#define STREAMS        0
#endif

/* Bytes before dst's next 64-byte boundary, at most n. */
static size_t to_line(const void *dst, size_t n)
{
    size_t head = (size_t)(-(uintptr_t)dst & 63);
    return head < n ? head : n;
}

/* dst <- src: the whole lines streamed when dst is line-aligned, plain stores otherwise. */
static void store_out(char *dst, const char *src, size_t n)
{
    size_t lines = STREAMS && ((uintptr_t)dst & 63) == 0 ? n & ~(size_t)63 : 0;
#ifdef ST_X86_DISPATCH
    if (lines)
        stream_lines(dst, src, lines);
#endif
    memcpy(dst + lines, src + lines, n - lines);
}

void st_copy_stream(void *dst, const void *src, size_t bytes)
{
    size_t head = to_line(dst, bytes);
    memcpy(dst, src, head);
    store_out((char *)dst + head, (const char *)src + head, bytes - head);
    STREAM_FENCE();
}

void st_reduce_stream(strata_dtype_t dtype, strata_op_t op, void *const *dsts, int ndst,
                      const void *a, const void *b, size_t count)
{
    if ((unsigned)dtype >= STRATA_DTYPE_COUNT || (unsigned)op >= STRATA_OP_COUNT || count == 0 ||
        ndst < 1)
        return;
    const reduce_fn fn = kernels[dtype][op];
    const size_t es = strata_dtype_size(dtype), bytes = count * es;
    const char *pa = a, *pb = b;
    char *first = dsts[0];
    // Up to the first destination's line boundary, in place there (a whole number of elements: a
    // buffer that is not even element-aligned is reduced whole that way), then copied.
    size_t head = to_line(first, bytes);
    if (head % es)
        head = bytes;
    fn(first, pa, pb, head / es);
    for (int d = 1; d < ndst; d++)
        memcpy(dsts[d], first, head);
    _Alignas(64) char block[STREAM_BLOCK];
    for (size_t o = head; o < bytes; o += STREAM_BLOCK) {
        size_t n = bytes - o < STREAM_BLOCK ? bytes - o : STREAM_BLOCK;
        fn(block, pa + o, pb + o, n / es);
        for (int d = 0; d < ndst; d++)
            store_out((char *)dsts[d] + o, block, n);
    }
    STREAM_FENCE();
}

/* ---- AVG finish ------------------------------------------------------------------------------ */

#define DEFINE_DIV(name, T, DT)                       \
    static void name(void *buf_, size_t count, int n) \
    {                                                 \
        enum { B = BLOCK_BYTES / sizeof(T) };         \
        T *buf = buf_;                                \
        DT div = (DT)n;                               \
        size_t i = 0;                                 \
        for (; i + B <= count; i += B) {              \
            T *p = buf + i;                           \
            for (size_t j = 0; j < B; j++)            \
                p[j] = (T)(p[j] / div);               \
        }                                             \
        for (; i < count; i++)                        \
            buf[i] = (T)(buf[i] / div);               \
    }

// Floats divide rather than multiply by 1/n: the result is then the correctly rounded sum / n.
DEFINE_DIV(div_f32, float, float)
DEFINE_DIV(div_f64, double, double)
DEFINE_DIV(div_i32, int32_t, int32_t)
DEFINE_DIV(div_i64, int64_t, int64_t)
DEFINE_DIV(div_u8, uint8_t, unsigned)

#ifdef ST_X86_DISPATCH
#define HALF_DIV_X86(x86fn, ok)    \
    if (ok()) {                    \
        done = count & ~(size_t)7; \
        x86fn(buf, done, div);     \
    }
#else
#define HALF_DIV_X86(x86fn, ok)
#endif

#define DEFINE_HALF_DIV(name, widen1, narrow1, x86fn, ok) \
    static void name(void *buf_, size_t count, int n)     \
    {                                                     \
        uint16_t *buf = buf_;                             \
        float div = (float)n;                             \
        size_t done = 0;                                  \
        HALF_DIV_X86(x86fn, ok)                           \
        for (size_t i = done; i < count; i++)             \
            buf[i] = narrow1(widen1(buf[i]) / div);       \
    }

DEFINE_HALF_DIV(div_f16, f16_to_f32, f32_to_f16, f16_div_x86, F16_X86_OK)
DEFINE_HALF_DIV(div_bf16, st_bf16_to_f32, st_f32_to_bf16, bf16_div_x86, BF16_X86_OK)

void st_reduce_finish_avg(strata_dtype_t dtype, void *buf, size_t count, int n)
{
    static void (*const divs[STRATA_DTYPE_COUNT])(void *, size_t, int) = {
        [STRATA_DTYPE_F32] = div_f32,   [STRATA_DTYPE_F64] = div_f64, [STRATA_DTYPE_F16] = div_f16,
        [STRATA_DTYPE_BF16] = div_bf16, [STRATA_DTYPE_I32] = div_i32, [STRATA_DTYPE_I64] = div_i64,
        [STRATA_DTYPE_U8] = div_u8,
    };
    // n == 1 is the identity; n < 1 cannot come from a communicator and is ignored.
    if ((unsigned)dtype >= STRATA_DTYPE_COUNT || n <= 1 || count == 0)
        return;
    divs[dtype](buf, count, n);
}

double st_dtype_load(strata_dtype_t dtype, const void *buf, size_t i)
{
    switch (dtype) {
    case STRATA_DTYPE_F32:
        return ((const float *)buf)[i];
    case STRATA_DTYPE_F64:
        return ((const double *)buf)[i];
    case STRATA_DTYPE_F16:
        return st_f16_to_f32(((const uint16_t *)buf)[i]);
    case STRATA_DTYPE_BF16:
        return st_bf16_to_f32(((const uint16_t *)buf)[i]);
    case STRATA_DTYPE_I32:
        return ((const int32_t *)buf)[i];
    case STRATA_DTYPE_I64:
        return (double)((const int64_t *)buf)[i];
    case STRATA_DTYPE_U8:
        return ((const uint8_t *)buf)[i];
    default:
        return 0;
    }
}

void st_dtype_store(strata_dtype_t dtype, void *buf, size_t i, double v)
{
    switch (dtype) {
    case STRATA_DTYPE_F32:
        ((float *)buf)[i] = (float)v;
        break;
    case STRATA_DTYPE_F64:
        ((double *)buf)[i] = v;
        break;
    case STRATA_DTYPE_F16:
        ((uint16_t *)buf)[i] = st_f32_to_f16((float)v);
        break;
    case STRATA_DTYPE_BF16:
        ((uint16_t *)buf)[i] = st_f32_to_bf16((float)v);
        break;
    case STRATA_DTYPE_I32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case STRATA_DTYPE_I64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case STRATA_DTYPE_U8:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    default:
        break;
    }
}
