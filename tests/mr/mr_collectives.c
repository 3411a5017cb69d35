/* Every collective against the serial reference (tests/harness/ref.c), at 1, 2, 3, 5 and 8 ranks:
 * every dtype and op at counts 0, 1, 7 and 1001, in place and not; uneven v-variants; and large
 * counts (>= 16 MiB per buffer): allreduce for every dtype (sum) and every op (f32, i32), the other
 * collectives in f32. Floats compare within st_ref_tolerance, everything else exactly.
 *
 * `mr_collectives small mem` runs the same matrix on buffers from strata_mem_alloc, where
 * allreduce, reduce_scatter and allgather take the direct algorithms, plus counts whose blocks
 * span several of the direct path's chunks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/ref.h"
#include "harness/st_test.h"

#define LARGE_BYTES ((16u << 20) + 64u)

typedef struct {
    bool large;
} opts_t;

static bool use_mem; /* buffers from strata_mem_alloc (argument "mem") */

/* In "mem" mode every buffer is carved from one strata_mem_alloc region per rank (as a framework
 * would hold one arena), so peers map it once; it rewinds when no buffer is live. */
#define MEM_POOL_BYTES (64u << 20)
static struct {
    char *base;
    size_t used;
    int live;
} pool;

static void *xalloc(size_t bytes)
{
    void *p = NULL;
    size_t take = (bytes + 63) / 64 * 64 + 64;
    if (pool.base) {
        if (pool.used + take > MEM_POOL_BYTES)
            return NULL;
        p = pool.base + pool.used;
        pool.used += take;
        pool.live++;
    } else if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        return NULL;
    }
    memset(p, 0xA5, bytes ? bytes : 64); // garbage: results must overwrite it
    return p;
}

static void xfree(void *p)
{
    if (!pool.base)
        free(p);
    else if (p && --pool.live == 0)
        pool.used = 0;
}

/* Inside a rank: the world communicator, lending itself to xalloc in "mem" mode. */
static strata_comm_t *open_comm(void)
{
    strata_comm_t *c = st_test_comm();
    if (use_mem && strata_mem_alloc(c, MEM_POOL_BYTES, (void **)&pool.base) != STRATA_OK) {
        ST_RANK_FAIL("strata_mem_alloc: %s", strata_last_error());
        pool.base = NULL;
    }
    return c;
}

static void close_comm(strata_comm_t *c)
{
    if (pool.base)
        strata_mem_free(c, pool.base);
    pool.base = NULL;
    strata_comm_destroy(c);
}

static size_t large_count(strata_dtype_t dt)
{
    return LARGE_BYTES / strata_dtype_size(dt) + 3; // odd, and more than 16 MiB
}

/* ---- reductions -------------------------------------------------------------------------------- */

static int check_reduced(strata_dtype_t dt, strata_op_t op, int n, const void *exp, const void *got,
                         size_t count, const char *what, int rank)
{
    char why[256];
    if (!st_ref_compare(dt, op, n, exp, got, count, why, sizeof why))
        return ST_RANK_FAIL("%s %s %s count %zu rank %d/%d: %s", what, strata_dtype_name(dt),
                            strata_op_name(op), count, rank, n, why);
    return 0;
}

static int one_allreduce(strata_comm_t *c, strata_dtype_t dt, strata_op_t op, size_t count,
                         bool in_place, uint64_t seed)
{
    int r = strata_comm_rank(c), n = strata_comm_size(c);
    size_t es = strata_dtype_size(dt), bytes = count * es;
    char *send = xalloc(bytes), *recv = in_place ? send : xalloc(bytes), *exp = xalloc(bytes);
    st_ref_fill(dt, send, count, r, seed);
    st_ref_allreduce(dt, op, n, count, seed, exp);
    ST_RANK_CHECK_OK(strata_allreduce(c, send, recv, count, dt, op));
    int bad = check_reduced(dt, op, n, exp, recv, count, in_place ? "allreduce(in place)" : "allreduce", r);
    xfree(send);
    if (!in_place)
        xfree(recv);
    xfree(exp);
    return bad;
}

static int one_reduce(strata_comm_t *c, strata_dtype_t dt, strata_op_t op, size_t count, bool in_place,
                      uint64_t seed)
{
    int r = strata_comm_rank(c), n = strata_comm_size(c), root = n - 1;
    size_t bytes = count * strata_dtype_size(dt);
    char *send = xalloc(bytes), *recv = in_place && r == root ? send : xalloc(bytes), *exp = xalloc(bytes);
    st_ref_fill(dt, send, count, r, seed);
    ST_RANK_CHECK_OK(strata_reduce(c, send, recv, count, dt, op, root));
    int bad = 0;
    if (r == root) {
        st_ref_allreduce(dt, op, n, count, seed, exp);
        bad = check_reduced(dt, op, n, exp, recv, count, "reduce", r);
    }
    if (recv != send)
        xfree(recv);
    xfree(send);
    xfree(exp);
    return bad;
}

/* reduce_scatterv with blocks counts[i] (uniform when all equal, which goes through the plain call). */
static int one_reduce_scatter(strata_comm_t *c, strata_dtype_t dt, strata_op_t op, const size_t *counts,
                              bool uniform, bool in_place, uint64_t seed)
{
    int r = strata_comm_rank(c), n = strata_comm_size(c);
    size_t es = strata_dtype_size(dt), total = 0, mine_at = 0;
    for (int i = 0; i < n; i++) {
        if (i < r)
            mine_at += counts[i];
        total += counts[i];
    }
    char *send = xalloc(total * es), *exp = xalloc(total * es);
    char *recv = in_place ? send + mine_at * es : xalloc(counts[r] * es);
    st_ref_fill(dt, send, total, r, seed);
    st_ref_allreduce(dt, op, n, total, seed, exp);
    if (uniform)
        ST_RANK_CHECK_OK(strata_reduce_scatter(c, send, recv, counts[0], dt, op));
    else
        ST_RANK_CHECK_OK(strata_reduce_scatterv(c, send, recv, counts, dt, op));
    int bad = check_reduced(dt, op, n, exp + mine_at * es, recv, counts[r], "reduce_scatter", r);
    if (!in_place)
        xfree(recv);
    xfree(send);
    xfree(exp);
    return bad;
}

/* ---- data movement ----------------------------------------------------------------------------- */

static int expect_block(strata_dtype_t dt, const char *got, size_t count, int src_rank, uint64_t seed,
                        const char *what, int rank, int n)
{
    size_t bytes = count * strata_dtype_size(dt);
    char *exp = xalloc(bytes);
    st_ref_fill(dt, exp, count, src_rank, seed);
    int bad = memcmp(exp, got, bytes) != 0;
    xfree(exp);
    if (bad)
        return ST_RANK_FAIL("%s %s count %zu rank %d/%d: block from rank %d differs", what,
                            strata_dtype_name(dt), count, rank, n, src_rank);
    return 0;
}

static int one_bcast(strata_comm_t *c, strata_dtype_t dt, size_t count, uint64_t seed)
{
    int r = strata_comm_rank(c), n = strata_comm_size(c), root = n / 2;
    char *buf = xalloc(count * strata_dtype_size(dt));
    if (r == root)
        st_ref_fill(dt, buf, count, root, seed);
    ST_RANK_CHECK_OK(strata_bcast(c, buf, count, dt, root));
    int bad = expect_block(dt, buf, count, root, seed, "bcast", r, n);
    xfree(buf);
    return bad;
}

/* allgatherv with blocks counts[i] at displs[i] (NULL = packed); uniform uses the plain call. */
static int one_allgather(strata_comm_t *c, strata_dtype_t dt, const size_t *counts,
                         const size_t *displs, bool uniform, bool in_place, uint64_t seed)
{
    int r = strata_comm_rank(c), n = strata_comm_size(c);
    size_t es = strata_dtype_size(dt), end = 0, at = 0;
    size_t *d = malloc((size_t)n * sizeof *d);
    for (int i = 0; i < n; i++) {
        d[i] = displs ? displs[i] : at;
        at += counts[i];
        end = d[i] + counts[i] > end ? d[i] + counts[i] : end;
    }
    char *recv = xalloc(end * es);
    char *send = in_place ? recv + d[r] * es : xalloc(counts[r] * es);
    st_ref_fill(dt, send, counts[r], r, seed);
    if (uniform)
        ST_RANK_CHECK_OK(strata_allgather(c, send, recv, counts[0], dt));
    else
        ST_RANK_CHECK_OK(strata_allgatherv(c, send, recv, counts, displs, dt));
    int bad = 0;
    for (int i = 0; i < n && !bad; i++)
        bad = expect_block(dt, recv + d[i] * es, counts[i], i, seed, "allgather", r, n);
    if (!in_place)
        xfree(send);
    xfree(recv);
    free(d);
    return bad;
}

/* Block for rank `to` from rank `from` is rank from's fill with a seed that names `to`. */
static int one_alltoall(strata_comm_t *c, strata_dtype_t dt, size_t count, bool vary, bool in_place,
                        uint64_t seed)
{
    int r = strata_comm_rank(c), n = strata_comm_size(c);
    size_t es = strata_dtype_size(dt);
    size_t *sc = malloc(4 * (size_t)n * sizeof *sc), *sd = sc + n, *rc = sc + 2 * n, *rd = sc + 3 * n;
    // Uneven: rank a sends (count + (a + b) % 3) elements to rank b; displacements leave gaps.
    size_t sat = 0, rat = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = vary ? count + (size_t)((r + j) % 3) : count;
        rc[j] = vary ? count + (size_t)((j + r) % 3) : count;
        sd[j] = sat;
        rd[j] = rat;
        sat += sc[j] + (vary ? 1 : 0);
        rat += rc[j] + (vary ? 2 : 0);
    }
    char *send = xalloc(sat * es), *recv = in_place ? send : xalloc(rat * es);
    for (int j = 0; j < n; j++)
        st_ref_fill(dt, send + sd[j] * es, sc[j], r, seed + (uint64_t)j);
    if (vary)
        ST_RANK_CHECK_OK(strata_alltoallv(c, send, sc, sd, recv, rc, rd, dt));
    else
        ST_RANK_CHECK_OK(strata_alltoall(c, send, recv, count, dt));
    int bad = 0;
    for (int i = 0; i < n && !bad; i++)
        bad = expect_block(dt, recv + rd[i] * es, rc[i], i, seed + (uint64_t)r, "alltoall", r, n);
    xfree(send);
    if (!in_place)
        xfree(recv);
    free(sc);
    return bad;
}

static int one_gather_scatter(strata_comm_t *c, strata_dtype_t dt, size_t count, bool in_place,
                              uint64_t seed)
{
    int r = strata_comm_rank(c), n = strata_comm_size(c), root = (n - 1) / 2;
    size_t es = strata_dtype_size(dt), blk = count * es;
    // gather: root collects every rank's fill
    char *all = xalloc((size_t)n * blk), *mine = in_place && r == root ? all + (size_t)root * blk : xalloc(blk);
    st_ref_fill(dt, mine, count, r, seed);
    ST_RANK_CHECK_OK(strata_gather(c, mine, all, count, dt, root));
    int bad = 0;
    if (r == root)
        for (int i = 0; i < n && !bad; i++)
            bad = expect_block(dt, all + (size_t)i * blk, count, i, seed, "gather", r, n);
    // scatter: root hands block i (rank i's fill with seed+1) to rank i
    if (r == root)
        for (int i = 0; i < n; i++)
            st_ref_fill(dt, all + (size_t)i * blk, count, i, seed + 1);
    char *out = in_place && r == root ? all + (size_t)root * blk : mine;
    if (!(in_place && r == root))
        memset(out, 0, blk);
    ST_RANK_CHECK_OK(strata_scatter(c, all, out, count, dt, root));
    if (!bad)
        bad = expect_block(dt, out, count, r, seed + 1, "scatter", r, n);
    if (mine != all + (size_t)root * blk)
        xfree(mine);
    xfree(all);
    return bad;
}

/* ---- the matrix -------------------------------------------------------------------------------- */

static const size_t small_counts[] = {0, 1, 7, 1001};
#define NCOUNTS (sizeof small_counts / sizeof small_counts[0])
#define COUNT(k) small_counts[k]
/* In "mem" mode, a count whose per-rank blocks span several chunks of the direct path (128 KiB),
 * for a few dtype/op pairs (the serial reference of every pair would take minutes). */
#define SPAN_COUNT 300007
static const struct {
    strata_dtype_t dt;
    strata_op_t op;
} span_cases[] = {{STRATA_DTYPE_F32, STRATA_OP_SUM},
                  {STRATA_DTYPE_F64, STRATA_OP_AVG},
                  {STRATA_DTYPE_BF16, STRATA_OP_SUM},
                  {STRATA_DTYPE_I32, STRATA_OP_MAX},
                  {STRATA_DTYPE_U8, STRATA_OP_PROD}};

/* In "mem" mode on one host, allreduce/reduce_scatter/allgather must take the direct algorithms. */
static int check_direct(strata_comm_t *c)
{
    if (!use_mem || strata_comm_size(c) == 1)
        return 0;
    const strata_coll_t colls[] = {STRATA_COLL_ALLREDUCE, STRATA_COLL_REDUCE_SCATTER,
                                   STRATA_COLL_ALLGATHER};
    for (int i = 0; i < 3; i++) {
        const char *al = strata_comm_algo_for(c, colls[i], 1u << 20, true);
        if (strcmp(al, "direct"))
            return ST_RANK_FAIL("%s of 1 MiB on strata_mem_alloc memory takes %s, not direct",
                                strata_coll_name(colls[i]), al);
    }
    return 0;
}

static int reductions(int rank, int n, void *arg)
{
    (void)rank;
    const opts_t *o = arg;
    strata_comm_t *c = open_comm();
    uint64_t seed = 1;
    int bad = check_direct(c);
    if (!o->large) {
        for (int dt = 0; dt < STRATA_DTYPE_COUNT; dt++)
            for (int op = 0; op < STRATA_OP_COUNT; op++)
                for (size_t k = 0; k < NCOUNTS; k++)
                    for (int ip = 0; ip < 2; ip++) {
                        size_t cnt = COUNT(k);
                        bad |= one_allreduce(c, dt, op, cnt, ip, seed++);
                        bad |= one_reduce(c, dt, op, cnt, ip, seed++);
                        size_t *counts = malloc((size_t)n * sizeof *counts);
                        for (int i = 0; i < n; i++)
                            counts[i] = cnt;
                        bad |= one_reduce_scatter(c, dt, op, counts, true, ip, seed++);
                        for (int i = 0; i < n; i++)
                            counts[i] = cnt + (size_t)(i % 3); // uneven, some equal to cnt (0 too)
                        bad |= one_reduce_scatter(c, dt, op, counts, false, ip, seed++);
                        free(counts);
                        if (bad)
                            goto out;
                    }
        for (size_t k = 0; use_mem && k < sizeof span_cases / sizeof span_cases[0]; k++) {
            size_t *counts = malloc((size_t)n * sizeof *counts);
            for (int i = 0; i < n; i++)
                counts[i] = SPAN_COUNT / (size_t)n + (size_t)(i % 2);
            for (int ip = 0; ip < 2; ip++) {
                bad |= one_allreduce(c, span_cases[k].dt, span_cases[k].op, SPAN_COUNT, ip, seed++);
                bad |= one_reduce_scatter(c, span_cases[k].dt, span_cases[k].op, counts, false, ip,
                                          seed++);
            }
            free(counts);
            if (bad)
                goto out;
        }
    } else {
        for (int dt = 0; dt < STRATA_DTYPE_COUNT && !bad; dt++)
            bad |= one_allreduce(c, dt, STRATA_OP_SUM, large_count(dt), dt % 2, seed++);
        for (int op = 0; op < STRATA_OP_COUNT && !bad; op++) {
            bad |= one_allreduce(c, STRATA_DTYPE_F32, op, large_count(STRATA_DTYPE_F32), op % 2, seed++);
            bad |= one_allreduce(c, STRATA_DTYPE_I32, op, large_count(STRATA_DTYPE_I32), 1 - op % 2, seed++);
        }
        if (!bad)
            bad |= one_reduce(c, STRATA_DTYPE_F32, STRATA_OP_SUM, large_count(STRATA_DTYPE_F32), 0, seed++);
        size_t *counts = malloc((size_t)n * sizeof *counts);
        for (int i = 0; i < n; i++)
            counts[i] = large_count(STRATA_DTYPE_F32) / (size_t)n;
        if (!bad)
            bad |= one_reduce_scatter(c, STRATA_DTYPE_F32, STRATA_OP_SUM, counts, true, 1, seed++);
        free(counts);
    }
out:
    close_comm(c);
    return bad;
}

static int movement(int rank, int n, void *arg)
{
    (void)rank;
    const opts_t *o = arg;
    strata_comm_t *c = open_comm();
    uint64_t seed = 1000;
    int bad = 0;
    size_t *counts = malloc((size_t)n * sizeof *counts), *displs = malloc((size_t)n * sizeof *displs);
    if (!o->large) {
        for (int dt = 0; dt < STRATA_DTYPE_COUNT && !bad; dt++)
            for (size_t k = 0; k < NCOUNTS && !bad; k++)
                for (int ip = 0; ip < 2 && !bad; ip++) {
                    size_t cnt = COUNT(k);
                    bad |= one_bcast(c, dt, cnt, seed++);
                    for (int i = 0; i < n; i++)
                        counts[i] = cnt;
                    bad |= one_allgather(c, dt, counts, NULL, true, ip, seed++);
                    size_t at = 0;
                    for (int i = 0; i < n; i++) {
                        counts[i] = cnt + (size_t)((i * 2) % 3);
                        displs[n - 1 - i] = at; // reversed placement with gaps
                        at += cnt + 2 + 1;
                    }
                    bad |= one_allgather(c, dt, counts, displs, false, false, seed++);
                    bad |= one_alltoall(c, dt, cnt, false, ip, seed++);
                    bad |= one_alltoall(c, dt, cnt, true, false, seed++);
                    bad |= one_gather_scatter(c, dt, cnt, ip, seed++);
                }
        for (int i = 0; use_mem && i < n; i++)
            counts[i] = SPAN_COUNT / (size_t)n;
        for (int ip = 0; use_mem && ip < 2 && !bad; ip++)
            bad |= one_allgather(c, STRATA_DTYPE_F64, counts, NULL, true, ip, seed++);
    } else {
        size_t big = large_count(STRATA_DTYPE_F32);
        bad |= one_bcast(c, STRATA_DTYPE_F32, big, seed++);
        for (int i = 0; i < n; i++)
            counts[i] = big / (size_t)n;
        if (!bad)
            bad |= one_allgather(c, STRATA_DTYPE_F32, counts, NULL, true, true, seed++);
        if (!bad)
            bad |= one_alltoall(c, STRATA_DTYPE_F32, big / (size_t)n, false, true, seed++);
        if (!bad)
            bad |= one_gather_scatter(c, STRATA_DTYPE_F32, big / (size_t)n, false, seed++);
    }
    free(counts);
    free(displs);
    close_comm(c);
    return bad;
}

static void run(st_rank_fn fn, int n, bool large)
{
    opts_t o = {.large = large};
    // The >= 16 MiB cases at 8 ranks take about a minute alone under ASan, and several times that
    // while ctest runs other multi-rank tests beside them on a 2-core machine: a generous deadline
    // (ctest's own timeout for the entry is 900 s).
    st_ranks_opts_t ro = {.deadline_ms = large ? 600000 : 120000, .expect_fail_rank = -1};
    assert_int_equal(st_test_ranks(n, fn, &o, &ro), 0);
}

#define RANKS(name, fn, n, large)                                                                  \
    static void name(void **state)                                                                 \
    {                                                                                              \
        (void)state;                                                                               \
        run(fn, n, large);                                                                         \
    }
RANKS(reductions_1, reductions, 1, false)
RANKS(reductions_2, reductions, 2, false)
RANKS(reductions_3, reductions, 3, false)
RANKS(reductions_5, reductions, 5, false)
RANKS(reductions_8, reductions, 8, false)
RANKS(reductions_large_2, reductions, 2, true)
RANKS(reductions_large_3, reductions, 3, true)
RANKS(reductions_large_5, reductions, 5, true)
RANKS(reductions_large_8, reductions, 8, true)
RANKS(movement_1, movement, 1, false)
RANKS(movement_2, movement, 2, false)
RANKS(movement_3, movement, 3, false)
RANKS(movement_5, movement, 5, false)
RANKS(movement_8, movement, 8, false)
RANKS(movement_large_3, movement, 3, true)
RANKS(movement_large_8, movement, 8, true)

/* `mr_collectives small` skips the >= 16 MiB cases, `mr_collectives large` runs only them: ctest
 * registers both, so the slow sanitizer builds can leave the large ones to the release and ASan runs.
 * A second argument "mem" allocates every buffer with strata_mem_alloc. */
int main(int argc, char **argv)
{
    use_mem = argc > 2 && !strcmp(argv[2], "mem");
    if (argc > 1 && !strcmp(argv[1], "small"))
        cmocka_set_skip_filter("*large*");
    else if (argc > 1 && !strcmp(argv[1], "large"))
        cmocka_set_test_filter("*large*");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reductions_1),       cmocka_unit_test(reductions_2),
        cmocka_unit_test(reductions_3),       cmocka_unit_test(reductions_5),
        cmocka_unit_test(reductions_8),       cmocka_unit_test(reductions_large_2),
        cmocka_unit_test(reductions_large_3), cmocka_unit_test(reductions_large_5),
        cmocka_unit_test(reductions_large_8), cmocka_unit_test(movement_1),         cmocka_unit_test(movement_2),
        cmocka_unit_test(movement_3),         cmocka_unit_test(movement_5),
        cmocka_unit_test(movement_8),         cmocka_unit_test(movement_large_3),
        cmocka_unit_test(movement_large_8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
