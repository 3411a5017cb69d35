/* The serial reference for collectives (see ref.h): generates every rank's input from a hash of
 * (seed, rank, index), reduces the inputs of all ranks in one process, and compares a collective's
 * result with the reference. It only needs the 16-bit float conversions from the library; it knows
 * nothing of communicators, which are the multi-rank tests' and tests/harness/ranks.c's business.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comm/algo/reduce_op.h"
#include "harness/ref.h"

static uint64_t mix64(uint64_t x)
{
    // splitmix64's finaliser: a bijection with good avalanche.
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t rank_base(uint64_t seed, int rank)
{
    return mix64(mix64(seed) ^ ((uint64_t)(uint32_t)rank * 0xd6e8feb86659fd93ull));
}

static uint64_t elem_hash(uint64_t base, size_t index)
{
    return mix64(base + (uint64_t)index * 0x9e3779b97f4a7c15ull);
}

static bool is_float(strata_dtype_t dtype)
{
    return dtype == STRATA_DTYPE_F32 || dtype == STRATA_DTYPE_F64 || dtype == STRATA_DTYPE_F16 ||
           dtype == STRATA_DTYPE_BF16;
}

/* Input value of one element; see ref.h for the ranges and why. */
static double float_value(uint64_t h)
{
    return 0.5 + (double)(h % 96) / 64.0;
}

static int64_t int_value(strata_dtype_t dtype, uint64_t h, int rank, size_t index)
{
    switch (dtype) {
    case STRATA_DTYPE_I32: {
        int64_t v = (int64_t)(h % 6) - 3; // -3..2, then 0 -> 3
        return v == 0 ? 3 : v;
    }
    case STRATA_DTYPE_I64: {
        int64_t v = (int64_t)(h % 30) - 15; // -15..14, then 0 -> 15
        return v == 0 ? 15 : v;
    }
    case STRATA_DTYPE_U8:
        return ((size_t)rank + index) % 8 == 0 ? (int64_t)(h % 16) : 1;
    default:
        return 0;
    }
}

static double value_at(strata_dtype_t dtype, uint64_t base, int rank, size_t index)
{
    uint64_t h = elem_hash(base, index);
    return is_float(dtype) ? float_value(h) : (double)int_value(dtype, h, rank, index);
}

/* Element access: floats through st_dtype_load/st_dtype_store, integers exactly through int64. */

/* Reduces v into the integer type's range the way the kernels' unsigned arithmetic does. */
static int64_t wrap_int(strata_dtype_t dtype, uint64_t v)
{
    switch (dtype) {
    case STRATA_DTYPE_I32:
        return (int32_t)(uint32_t)v;
    case STRATA_DTYPE_U8:
        return (uint8_t)v;
    default:
        return (int64_t)v;
    }
}

static void store_int(strata_dtype_t dtype, void *buf, size_t i, int64_t v)
{
    switch (dtype) {
    case STRATA_DTYPE_I32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case STRATA_DTYPE_I64:
        ((int64_t *)buf)[i] = v;
        break;
    case STRATA_DTYPE_U8:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    default:
        break;
    }
}

static int64_t load_int(strata_dtype_t dtype, const void *buf, size_t i)
{
    switch (dtype) {
    case STRATA_DTYPE_I32:
        return ((const int32_t *)buf)[i];
    case STRATA_DTYPE_I64:
        return ((const int64_t *)buf)[i];
    case STRATA_DTYPE_U8:
        return ((const uint8_t *)buf)[i];
    default:
        return 0;
    }
}

void st_ref_fill(strata_dtype_t dtype, void *buf, size_t count, int rank, uint64_t seed)
{
    uint64_t base = rank_base(seed, rank);
    for (size_t i = 0; i < count; i++) {
        double v = value_at(dtype, base, rank, i);
        if (is_float(dtype))
            st_dtype_store(dtype, buf, i, v);
        else
            store_int(dtype, buf, i, (int64_t)v);
    }
}

double st_ref_input(strata_dtype_t dtype, int rank, uint64_t seed, size_t index)
{
    return value_at(dtype, rank_base(seed, rank), rank, index);
}

static double combine_float(strata_op_t op, double acc, double v)
{
    switch (op) {
    case STRATA_OP_PROD:
        return acc * v;
    case STRATA_OP_MIN:
        return v < acc ? v : acc;
    case STRATA_OP_MAX:
        return v > acc ? v : acc;
    default:
        return acc + v; // SUM, AVG
    }
}

static int64_t combine_int(strata_dtype_t dtype, strata_op_t op, int64_t acc, int64_t v)
{
    switch (op) {
    case STRATA_OP_PROD:
        return wrap_int(dtype, (uint64_t)acc * (uint64_t)v);
    case STRATA_OP_MIN:
        return v < acc ? v : acc;
    case STRATA_OP_MAX:
        return v > acc ? v : acc;
    default:
        return wrap_int(dtype, (uint64_t)acc + (uint64_t)v); // SUM, AVG
    }
}

void st_ref_allreduce(strata_dtype_t dtype, strata_op_t op, int nranks, size_t count, uint64_t seed,
                      void *out)
{
    if (nranks < 1)
        return;
    enum { MAX_BASES = 1024 };
    uint64_t bases[MAX_BASES];
    int nb = nranks < MAX_BASES ? nranks : MAX_BASES;
    for (int r = 0; r < nb; r++)
        bases[r] = rank_base(seed, r);
    for (size_t i = 0; i < count; i++) {
        if (is_float(dtype)) {
            double acc = 0;
            for (int r = 0; r < nranks; r++) {
                double v = value_at(dtype, r < nb ? bases[r] : rank_base(seed, r), r, i);
                acc = r == 0 ? v : combine_float(op, acc, v);
            }
            if (op == STRATA_OP_AVG)
                acc /= nranks;
            st_dtype_store(dtype, out, i, acc);
        } else {
            int64_t acc = 0;
            for (int r = 0; r < nranks; r++) {
                int64_t v = (int64_t)value_at(dtype, r < nb ? bases[r] : rank_base(seed, r), r, i);
                acc = r == 0 ? v : combine_int(dtype, op, acc, v);
            }
            if (op == STRATA_OP_AVG)
                acc /= nranks; // acc is already in the type's range: C's truncating division
            store_int(dtype, out, i, acc);
        }
    }
}

double st_ref_tolerance(strata_dtype_t dtype, strata_op_t op, int nranks, double expected)
{
    if (!is_float(dtype) || op == STRATA_OP_MIN || op == STRATA_OP_MAX)
        return 0;
    double rel, abs_term;
    switch (dtype) {
    case STRATA_DTYPE_F64:
        rel = 1e-12, abs_term = 1e-300;
        break;
    case STRATA_DTYPE_F32:
        rel = 1e-5, abs_term = 1e-37;
        break;
    case STRATA_DTYPE_F16:
        rel = 0x1p-10, abs_term = 0x1p-24;
        break;
    default:
        rel = 0x1p-7, abs_term = 1e-37;
        break; // bf16
    }
    int n = nranks > 1 ? nranks : 1;
    return n * (rel * fabs(expected) + abs_term);
}

static void describe(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void describe(char *why, size_t whylen, const char *fmt, ...)
{
    if (!why || whylen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
}

bool st_ref_compare(strata_dtype_t dtype, strata_op_t op, int nranks, const void *expected,
                    const void *got, size_t count, char *why, size_t whylen)
{
    const char *dname = strata_dtype_name(dtype) ? strata_dtype_name(dtype) : "?";
    const char *oname = strata_op_name(op) ? strata_op_name(op) : "?";
    describe(why, whylen, "ok");
    for (size_t i = 0; i < count; i++) {
        if (!is_float(dtype)) {
            int64_t e = load_int(dtype, expected, i), g = load_int(dtype, got, i);
            if (e != g) {
                describe(why, whylen, "%s %s over %d ranks: index %zu: expected %lld, got %lld",
                         dname, oname, nranks, i, (long long)e, (long long)g);
                return false;
            }
            continue;
        }
        double e = st_dtype_load(dtype, expected, i), g = st_dtype_load(dtype, got, i);
        double tol = st_ref_tolerance(dtype, op, nranks, e);
        bool ok;
        if (isnan(e) || isnan(g))
            ok = isnan(e) && isnan(g);
        else if (isinf(e) || tol == 0)
            ok = e == g;
        else
            ok = fabs(e - g) <= tol;
        if (!ok) {
            describe(why, whylen,
                     "%s %s over %d ranks: index %zu: expected %.17g, got %.17g (difference %.3g, "
                     "tolerance %.3g)",
                     dname, oname, nranks, i, e, g, fabs(e - g), tol);
            return false;
        }
    }
    return true;
}
