/* The data `strata bench` checks (tools/strata/bench_data.c): for every collective, dtype, op,
 * rank count and both passes (out of place, in place at nccl-tests' offsets), the outputs a
 * correct collective would produce, computed here serially from the inputs the ranks were given,
 * count 0 wrong elements; each corrupted element counts once (the #wrong column). */
#include "harness/st_test.h"
#include "strata/bench_data.h"

#include <stdlib.h>
#include <string.h>

static const strata_coll_t colls[] = {STRATA_COLL_ALLREDUCE,      STRATA_COLL_REDUCE,
                                      STRATA_COLL_BCAST,          STRATA_COLL_REDUCE_SCATTER,
                                      STRATA_COLL_ALLGATHER,      STRATA_COLL_ALLTOALL,
                                      STRATA_COLL_GATHER,         STRATA_COLL_SCATTER};

static double reduce(strata_op_t op, const double *v, int n)
{
    double r = v[0];
    for (int i = 1; i < n; i++)
        r = op == STRATA_OP_PROD ? r * v[i] : op == STRATA_OP_MIN ? (v[i] < r ? v[i] : r)
            : op == STRATA_OP_MAX ? (v[i] > r ? v[i] : r) : r + v[i];
    return op == STRATA_OP_AVG ? r / n : r;
}

/* Whether rank r has an output to check. */
static bool has_output(strata_coll_t c, int r, int root)
{
    return !((c == STRATA_COLL_REDUCE || c == STRATA_COLL_GATHER) && r != root);
}

/* Fills every rank's buffers, writes the correct outputs, checks they count 0 wrong, then
 * corrupts 3 elements of one rank's output and checks they count 3. */
static void one_case(strata_coll_t coll, strata_dtype_t dt, strata_op_t op, int n, bool in_place)
{
    const size_t es = strata_dtype_size(dt), bytes = 1000;
    const int root = n - 1;
    const bench_fill_t f = bench_fill_make(coll, dt, op, n, root);
    bench_shape_t sh[8];
    char *sendb[8], *recvb[8], *sp[8], *rp[8];
    double *in[8]; // each rank's input as numbers, read before any output overwrites it
    for (int r = 0; r < n; r++) {
        sh[r] = bench_shape(coll, bytes, es, n, r);
        const size_t cap = (sh[r].send_count > sh[r].recv_count ? sh[r].send_count : sh[r].recv_count) + 1;
        sendb[r] = calloc(cap, es);
        recvb[r] = calloc(cap, es);
        in[r] = calloc(cap, sizeof(double));
        assert_true(sendb[r] && recvb[r] && in[r]);
        sp[r] = in_place ? recvb[r] + sh[r].send_inplace * es : sendb[r];
        rp[r] = in_place ? recvb[r] + sh[r].recv_inplace * es : recvb[r];
        bench_fill_inputs(&f, &sh[r], r, sp[r], rp[r]);
        const char *src = coll == STRATA_COLL_BCAST ? rp[r] : sp[r];
        const size_t cnt = coll == STRATA_COLL_BCAST ? sh[r].recv_count : sh[r].send_count;
        for (size_t i = 0; i < cnt; i++)
            in[r][i] = strata_dtype_get(dt, src, i);
    }
    const size_t blk = sh[0].param;
    double v[8];
    for (int r = 0; r < n; r++) {
        if (!has_output(coll, r, root))
            continue;
        for (size_t i = 0; i < sh[r].recv_count; i++) {
            double out = 0;
            switch (coll) {
            case STRATA_COLL_ALLREDUCE:
            case STRATA_COLL_REDUCE:
                for (int q = 0; q < n; q++)
                    v[q] = in[q][i];
                out = reduce(op, v, n);
                break;
            case STRATA_COLL_REDUCE_SCATTER:
                for (int q = 0; q < n; q++)
                    v[q] = in[q][(size_t)r * blk + i];
                out = reduce(op, v, n);
                break;
            case STRATA_COLL_BCAST:
                out = in[root][i];
                break;
            case STRATA_COLL_ALLGATHER:
            case STRATA_COLL_GATHER:
                out = in[i / blk][i % blk];
                break;
            case STRATA_COLL_ALLTOALL:
                out = in[i / blk][(size_t)r * blk + i % blk];
                break;
            case STRATA_COLL_SCATTER:
                out = in[root][(size_t)r * blk + i];
                break;
            default:
                fail();
            }
            strata_dtype_set(dt, rp[r], i, out);
        }
        assert_int_equal(bench_count_wrong(&f, &sh[r], r, rp[r]), 0);
    }
    const int victim = has_output(coll, 0, root) ? 0 : root;
    if (sh[victim].recv_count >= 3) {
        for (size_t i = 0; i < 3; i++)
            strata_dtype_set(dt, rp[victim], i, strata_dtype_get(dt, rp[victim], i) + 1);
        assert_int_equal(bench_count_wrong(&f, &sh[victim], victim, rp[victim]), 3);
    }
    for (int r = 0; r < n; r++) {
        free(sendb[r]);
        free(recvb[r]);
        free(in[r]);
    }
}

static void test_every_case(void **state)
{
    (void)state;
    const int counts[] = {1, 3, 4};
    for (size_t c = 0; c < sizeof colls / sizeof colls[0]; c++)
        for (int dt = 0; dt < STRATA_DTYPE_COUNT; dt++)
            for (int op = 0; op < (bench_has_op(colls[c]) ? STRATA_OP_COUNT : 1); op++)
                for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
                    for (int ip = 0; ip < 2; ip++)
                        one_case(colls[c], (strata_dtype_t)dt, (strata_op_t)op, counts[k], ip);
}

/* The in-place layouts are nccl-tests': reduce_scatter's and scatter's output at block `rank` of
 * the input, allgather's and gather's input at block `rank` of the output, others at offset 0;
 * sizes are the largest buffer, per-rank counts rounded down. */
static void test_shapes(void **state)
{
    (void)state;
    bench_shape_t s = bench_shape(STRATA_COLL_REDUCE_SCATTER, 1000, 4, 3, 2);
    assert_int_equal(s.param, 83);
    assert_int_equal(s.send_count, 249);
    assert_int_equal(s.recv_count, 83);
    assert_int_equal(s.total, 249);
    assert_int_equal(s.send_inplace, 0);
    assert_int_equal(s.recv_inplace, 166);
    s = bench_shape(STRATA_COLL_ALLGATHER, 1000, 4, 3, 2);
    assert_int_equal(s.send_inplace, 166);
    assert_int_equal(s.recv_inplace, 0);
    s = bench_shape(STRATA_COLL_SCATTER, 1000, 4, 3, 1);
    assert_int_equal(s.recv_inplace, 83);
    s = bench_shape(STRATA_COLL_ALLREDUCE, 1000, 4, 3, 1);
    assert_int_equal(s.total, 250);
    assert_int_equal(s.send_inplace + s.recv_inplace, 0);
    assert_true(bench_busbw_factor(STRATA_COLL_ALLREDUCE, 4) == 1.5);
    assert_true(bench_busbw_factor(STRATA_COLL_ALLGATHER, 4) == 0.75);
    assert_true(bench_busbw_factor(STRATA_COLL_BCAST, 4) == 1.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_case),
        cmocka_unit_test(test_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
