/* Sizes, in-place layouts, inputs and expected outputs of `strata bench` (bench_data.h says what
 * they mean). Nothing here calls the communicator. */
#include <string.h>

#include "strata/bench_data.h"

bool bench_has_op(strata_coll_t c)
{
    return c == STRATA_COLL_ALLREDUCE || c == STRATA_COLL_REDUCE || c == STRATA_COLL_REDUCE_SCATTER;
}

bool bench_has_root(strata_coll_t c)
{
    return c == STRATA_COLL_REDUCE || c == STRATA_COLL_BCAST || c == STRATA_COLL_GATHER ||
           c == STRATA_COLL_SCATTER;
}

bench_shape_t bench_shape(strata_coll_t c, size_t bytes, size_t esize, int nranks, int rank)
{
    const size_t n = (size_t)nranks, elems = bytes / esize, blk = elems / n, mine = (size_t)rank * blk;
    switch (c) {
    case STRATA_COLL_ALLREDUCE:
    case STRATA_COLL_REDUCE:
    case STRATA_COLL_BCAST:
        return (bench_shape_t){elems, elems, elems, elems, 0, 0};
    case STRATA_COLL_REDUCE_SCATTER:
    case STRATA_COLL_SCATTER:
        return (bench_shape_t){blk, blk * n, blk, blk * n, 0, mine};
    case STRATA_COLL_ALLGATHER:
    case STRATA_COLL_GATHER:
        return (bench_shape_t){blk, blk, blk * n, blk * n, mine, 0};
    case STRATA_COLL_ALLTOALL:
        return (bench_shape_t){blk, blk * n, blk * n, blk * n, 0, 0};
    default:
        return (bench_shape_t){0};
    }
}

double bench_busbw_factor(strata_coll_t c, int nranks)
{
    double n = nranks;
    switch (c) {
    case STRATA_COLL_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case STRATA_COLL_REDUCE_SCATTER:
    case STRATA_COLL_ALLGATHER:
    case STRATA_COLL_ALLTOALL:
    case STRATA_COLL_GATHER:
    case STRATA_COLL_SCATTER:
        return (n - 1) / n;
    default:
        return 1.0;
    }
}

/* ---- reductions: values are (rank + i) % m for sum, min and max, m keeping any partial sum exact */

static double largest_exact(strata_dtype_t dt)
{
    switch (dt) {
    case STRATA_DTYPE_F16:
        return 2048;
    case STRATA_DTYPE_BF16:
        return 256;
    case STRATA_DTYPE_F32:
        return 16777216;
    case STRATA_DTYPE_U8:
        return 255;
    case STRATA_DTYPE_I32:
        return 2147483647.0;
    default:
        return 9007199254740992.0; // f64, i64 (as far as the double holding it is exact)
    }
}

bench_fill_t bench_fill_make(strata_coll_t coll, strata_dtype_t dt, strata_op_t op, int nranks,
                             int root)
{
    bench_fill_t f = {.coll = coll, .dtype = dt, .op = op, .nranks = nranks, .root = root, .m = 7};
    if (op == STRATA_OP_SUM || op == STRATA_OP_AVG) {
        double cap = largest_exact(dt) / nranks; // largest value with nranks of them summing exactly
        f.m = cap >= 6 ? 7 : (unsigned)cap + 1;
    }
    f.kmod = f.m > 3 ? f.m - 2 : 1; // avg values k-1..k+1 stay inside 0..m-1
    return f;
}

/* Whether element i lies in one of the all-zero 8 KiB blocks: block b is zero when b * 37 mod 100
 * (which visits every residue) falls below the percentage, so zero blocks spread evenly. */
static bool in_zero_block(const bench_fill_t *f, size_t i)
{
    size_t block = i * strata_dtype_size(f->dtype) / 8192;
    return f->zero_pct && (int)(block * 37 % 100) < f->zero_pct;
}

static double red_value(const bench_fill_t *f, int rank, size_t i)
{
    if (in_zero_block(f, i))
        return 0;
    switch (f->op) {
    case STRATA_OP_PROD:
        return (((size_t)rank + i) % (size_t)f->nranks == 0) ? 2 : 1;
    case STRATA_OP_AVG: {
        // Offsets +1/-1 in pairs (0 for the last rank of an odd count) sum to zero over ranks.
        int d = (f->nranks % 2 && rank == f->nranks - 1) ? 0 : (rank % 2 ? -1 : 1);
        return (double)(1 + i % f->kmod) + d;
    }
    default:
        return (double)(((size_t)rank + i) % f->m);
    }
}

static double red_expect(const bench_fill_t *f, size_t i)
{
    size_t n = (size_t)f->nranks, m = f->m, start = i % m;
    if (in_zero_block(f, i))
        return 0;
    switch (f->op) {
    case STRATA_OP_PROD:
        return 2;
    case STRATA_OP_AVG:
        return (double)(1 + i % f->kmod);
    case STRATA_OP_MIN:
        return (n >= m || start + n - 1 >= m) ? 0 : (double)start;
    case STRATA_OP_MAX:
        return (n >= m || start + n - 1 >= m) ? (double)(m - 1) : (double)(start + n - 1);
    default: {
        double s = (double)(n / m) * (double)(m * (m - 1) / 2);
        for (size_t t = 0; t < n % m; t++)
            s += (double)((start + t) % m);
        return s;
    }
    }
}

/* Data moved unchanged (bcast, gather, ...): block `dst` of what rank `src` sends, element k. */
static double data_value(int src, int dst, size_t k)
{
    return (double)(((size_t)src * 13 + (size_t)dst * 5 + k) % 113);
}

static bool close_enough(const bench_fill_t *f, double got, double want)
{
    if (got == want)
        return true;
    if (f->op != STRATA_OP_AVG)
        return false;
    double ulp;
    switch (f->dtype) {
    case STRATA_DTYPE_F32:
        ulp = 1.0 / (1 << 23);
        break;
    case STRATA_DTYPE_F64:
        ulp = 1.0 / 4503599627370496.0;
        break;
    case STRATA_DTYPE_F16:
        ulp = 1.0 / (1 << 10);
        break;
    case STRATA_DTYPE_BF16:
        ulp = 1.0 / (1 << 7);
        break;
    default:
        return false;
    }
    double d = got > want ? got - want : want - got;
    return d <= 2 * ulp * want;
}

void bench_fill_inputs(const bench_fill_t *f, const bench_shape_t *sh, int rank, void *send,
                       void *recv)
{
    const strata_dtype_t dt = f->dtype;
    memset(recv, 0xA5, sh->recv_count * strata_dtype_size(dt));
    switch (f->coll) {
    case STRATA_COLL_ALLREDUCE:
    case STRATA_COLL_REDUCE:
    case STRATA_COLL_REDUCE_SCATTER:
        for (size_t i = 0; i < sh->send_count; i++)
            strata_dtype_set(dt, send, i, red_value(f, rank, i));
        break;
    case STRATA_COLL_BCAST:
        if (rank == f->root)
            for (size_t k = 0; k < sh->recv_count; k++)
                strata_dtype_set(dt, recv, k, data_value(rank, 0, k));
        break;
    case STRATA_COLL_ALLGATHER:
    case STRATA_COLL_GATHER:
        for (size_t k = 0; k < sh->send_count; k++)
            strata_dtype_set(dt, send, k, data_value(rank, 0, k));
        break;
    case STRATA_COLL_ALLTOALL:
    case STRATA_COLL_SCATTER:
        if (f->coll == STRATA_COLL_SCATTER && rank != f->root)
            break;
        for (int j = 0; j < f->nranks; j++)
            for (size_t k = 0; k < sh->param; k++)
                strata_dtype_set(dt, send, (size_t)j * sh->param + k, data_value(rank, j, k));
        break;
    default:
        break;
    }
}

size_t bench_count_wrong(const bench_fill_t *f, const bench_shape_t *sh, int rank,
                         const void *recv)
{
    const strata_dtype_t dt = f->dtype;
    size_t wrong = 0;
    switch (f->coll) {
    case STRATA_COLL_ALLREDUCE:
    case STRATA_COLL_REDUCE:
        if (f->coll == STRATA_COLL_REDUCE && rank != f->root)
            break;
        for (size_t i = 0; i < sh->recv_count; i++)
            wrong += !close_enough(f, strata_dtype_get(dt, recv, i), red_expect(f, i));
        break;
    case STRATA_COLL_REDUCE_SCATTER:
        for (size_t k = 0; k < sh->recv_count; k++)
            wrong += !close_enough(f, strata_dtype_get(dt, recv, k),
                                   red_expect(f, (size_t)rank * sh->param + k));
        break;
    case STRATA_COLL_BCAST:
        for (size_t k = 0; k < sh->recv_count; k++)
            wrong += strata_dtype_get(dt, recv, k) != data_value(f->root, 0, k);
        break;
    case STRATA_COLL_ALLGATHER:
    case STRATA_COLL_GATHER:
        if (f->coll == STRATA_COLL_GATHER && rank != f->root)
            break;
        for (int j = 0; j < f->nranks; j++)
            for (size_t k = 0; k < sh->param; k++)
                wrong += strata_dtype_get(dt, recv, (size_t)j * sh->param + k) != data_value(j, 0, k);
        break;
    case STRATA_COLL_ALLTOALL:
        for (int i = 0; i < f->nranks; i++)
            for (size_t k = 0; k < sh->param; k++)
                wrong += strata_dtype_get(dt, recv, (size_t)i * sh->param + k) != data_value(i, rank, k);
        break;
    case STRATA_COLL_SCATTER:
        for (size_t k = 0; k < sh->param; k++)
            wrong += strata_dtype_get(dt, recv, k) != data_value(f->root, rank, k);
        break;
    default:
        break;
    }
    return wrong;
}
