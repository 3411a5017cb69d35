/* The device mesh without ranks: the traffic of a GPT step against hand-computed numbers, the order
 * the cost model chooses on a synthetic fabric (2 racks x 2 hosts x 2 ranks, slow rack uplink),
 * forced orders priced as the pricing module prices their groups, ties, and the refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/st_test.h"
#include "strata/mesh.h"
#include "strata/price.h"

#define TP STRATA_DIM_TP
#define CP STRATA_DIM_CP
#define PP STRATA_DIM_PP
#define DP STRATA_DIM_DP

/* 8 ranks, 2 per host, 2 hosts per rack, 2 racks; the racks meet over a slow, oversubscribed
 * spine. With `one_host`, all 8 on one host. */
static void fabric(bool one_host, strata_fabric_t *f)
{
    strata_topo_t t;
    strata_fabric_default_levels(3, &t);
    strcpy(t.level[1].name, "rack");
    strcpy(t.level[2].name, "spine");
    t.level[2].bw_Bps = 1e8;
    t.level[2].oversub = 4;
    const char *paths[8] = {"r0/h0", "r0/h0", "r0/h1", "r0/h1", "r1/h2", "r1/h2", "r1/h3", "r1/h3"};
    const char *same[8] = {"r0/h0", "r0/h0", "r0/h0", "r0/h0", "r0/h0", "r0/h0", "r0/h0", "r0/h0"};
    assert_int_equal(strata_fabric_from_paths(&t, 8, one_host ? same : paths, f), STRATA_OK);
}

/* vocab 256, T 64, L 2, 4 heads, C 64, d_ff 256: P = V C + T C + L (12 C^2 + 13 C) + 2 C. */
static strata_gpt_config_t small_gpt(void)
{
    strata_gpt_config_t m = strata_gpt_config_default();
    m.vocab = 256;
    m.max_seq = 64;
    m.n_layer = 2;
    m.n_head = 4;
    m.d_model = 64;
    m.d_ff = 256;
    return m;
}

static char *describe(const strata_fabric_t *f, const int size[4], const strata_mesh_traffic_t *tr,
                      const strata_dim_t order[4])
{
    static char buf[512];
    FILE *mf = fmemopen(buf, sizeof buf, "w");
    assert_non_null(mf);
    assert_int_equal(strata_mesh_describe_order(f, size, tr, order, mf), STRATA_OK);
    fclose(mf);
    return buf;
}

static void expect_call(const strata_mesh_traffic_t *t, int d, strata_coll_t coll, double bytes,
                        double calls)
{
    assert_int_equal(t->coll[d], coll);
    assert_true(t->bytes[d] == bytes);
    assert_true(t->calls[d] == calls);
}

static void expect_more(const strata_mesh_traffic_t *t, int d, int i, strata_coll_t coll,
                        double bytes, double calls)
{
    assert_int_equal(t->more[d][i].coll, coll);
    assert_true(t->more[d][i].bytes == bytes);
    assert_true(t->more[d][i].calls == calls);
}

static void test_traffic_gpt(void **state)
{
    (void)state;
    strata_gpt_config_t m = small_gpt();
    // P = 256*64 + 64*64 + 2*(12*4096 + 13*64) + 128 = 16384 + 4096 + 99968 + 128 = 120576.
    assert_int_equal(strata_gpt_config_nparams(&m), 120576);
    strata_mesh_traffic_t t;
    // 2 rows of 32 tokens: T = 64, X = 64 * 64 * 4 = 16384 bytes; G = 120576 / (2*2) * 4.
    strata_mesh_traffic_gpt(&m, 2, 32, (int[]){2, 1, 2, 2}, false, 0, &t);
    expect_call(&t, TP, STRATA_COLL_ALLREDUCE, 16384, 10); // 4 L + 2
    expect_more(&t, TP, 0, STRATA_COLL_ALLREDUCE, 256, 3); // the cross-entropy's T floats
    expect_more(&t, TP, 1, STRATA_COLL_ALLREDUCE, 0, 0);
    assert_true(t.calls[CP] == 0 && t.bytes[CP] == 0);
    assert_true(t.p2p[PP]);
    assert_false(t.p2p[TP] || t.p2p[DP]);
    assert_true(t.bytes[PP] == 16384 && t.calls[PP] == 2);
    expect_call(&t, DP, STRATA_COLL_ALLREDUCE, 120576, 1);
    assert_true(t.more[DP][0].calls == 0);

    // Sequence parallel, ZeRO-3, cp 2, dp left over: TP all-gathers and reduce-scatters X; CP
    // gathers K and V of the whole sequence for this rank's heads: 64 * 2 * 64 / 2 * 4 = 16384.
    strata_mesh_traffic_gpt(&m, 2, 32, (int[]){2, 2, 1, 0}, true, 3, &t);
    expect_call(&t, TP, STRATA_COLL_ALLGATHER, 16384, 10);
    expect_more(&t, TP, 0, STRATA_COLL_REDUCE_SCATTER, 16384, 10);
    expect_more(&t, TP, 1, STRATA_COLL_ALLREDUCE, 256, 3);
    expect_call(&t, CP, STRATA_COLL_ALLGATHER, 16384, 2);
    expect_more(&t, CP, 0, STRATA_COLL_REDUCE_SCATTER, 16384, 2);
    assert_true(t.calls[PP] == 0 && !t.p2p[PP]);
    expect_call(&t, DP, STRATA_COLL_REDUCE_SCATTER, 241152, 1); // 120576 / 2 * 4
    expect_more(&t, DP, 0, STRATA_COLL_ALLGATHER, 241152, 2);

    strata_mesh_traffic_gpt(&m, 2, 32, (int[]){1, 1, 1, 8}, false, 1, &t);
    assert_true(t.calls[TP] == 0 && t.more[TP][0].calls == 0);
    expect_call(&t, DP, STRATA_COLL_ALLREDUCE, 482304, 1);
    expect_more(&t, DP, 0, STRATA_COLL_ALLGATHER, 482304, 1);
    strata_mesh_traffic_gpt(&m, 2, 32, (int[]){1, 1, 1, 8}, false, 2, &t);
    expect_call(&t, DP, STRATA_COLL_REDUCE_SCATTER, 482304, 1);
    expect_more(&t, DP, 0, STRATA_COLL_ALLGATHER, 482304, 1);
    // Data parallelism of one rank carries nothing.
    strata_mesh_traffic_gpt(&m, 2, 32, (int[]){2, 1, 1, 1}, false, 0, &t);
    assert_true(t.calls[DP] == 0);
}

static double total(const double s[4])
{
    return s[0] + s[1] + s[2] + s[3];
}

/* TP-heavy traffic (many tokens, small model) keeps TP inside a host; DP-heavy traffic (one token,
 * the same model) brings DP inside a rack and sends TP across the slow spine. */
static void test_choose(void **state)
{
    (void)state;
    strata_fabric_t f;
    fabric(false, &f);
    strata_gpt_config_t m = small_gpt();
    const int size[4] = {2, 1, 1, 4};
    strata_mesh_traffic_t heavy_tp, heavy_dp;
    strata_mesh_traffic_gpt(&m, 8, 64, size, false, 0, &heavy_tp);
    strata_mesh_traffic_gpt(&m, 1, 1, size, false, 0, &heavy_dp);

    strata_dim_t o[4];
    double sec[4];
    assert_int_equal(strata_mesh_choose_order(&f, size, &heavy_tp, o, sec), STRATA_OK);
    assert_int_equal(o[0], TP);
    assert_int_equal(o[3], DP);
    char *line = describe(&f, size, &heavy_tp, o);
    if (!strstr(line, "tp=2 inside host (") || !strstr(line, "dp=4 across rack ("))
        fail_msg("TP-heavy: %s", line);
    assert_true(sec[TP] > 0 && sec[DP] > 0 && sec[CP] == 0 && sec[PP] == 0);

    assert_int_equal(strata_mesh_choose_order(&f, size, &heavy_dp, o, sec), STRATA_OK);
    // Only tp and dp move: dp takes tp's slot, the size-1 dimensions keep theirs.
    assert_int_equal(o[0], DP);
    assert_int_equal(o[1], CP);
    assert_int_equal(o[2], PP);
    assert_int_equal(o[3], TP);
    line = describe(&f, size, &heavy_dp, o);
    if (!strstr(line, "dp=4 across host (") || !strstr(line, "tp=2 across rack ("))
        fail_msg("DP-heavy: %s", line);
    // dp 0 = the ranks left over: the same answer.
    strata_dim_t o2[4];
    assert_int_equal(strata_mesh_choose_order(&f, (int[]){2, 1, 1, 0}, &heavy_dp, o2, NULL),
                     STRATA_OK);
    assert_memory_equal(o, o2, sizeof o);
    strata_fabric_free(&f);
}

/* Every forced order is priced; the chosen one is the cheapest and its seconds are its price. */
static void test_forced_orders(void **state)
{
    (void)state;
    strata_fabric_t f;
    fabric(false, &f);
    strata_gpt_config_t m = small_gpt();
    const int size[4] = {2, 1, 2, 2};
    strata_mesh_traffic_t tr;
    strata_mesh_traffic_gpt(&m, 4, 64, size, false, 2, &tr);
    strata_dim_t best[4];
    double best_s[4];
    assert_int_equal(strata_mesh_choose_order(&f, size, &tr, best, best_s), STRATA_OK);
    double again[4];
    assert_int_equal(strata_mesh_price_order(&f, size, &tr, best, again, NULL), STRATA_OK);
    assert_memory_equal(best_s, again, sizeof again);
    int n = 0, cheaper = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++) {
                int d = 6 - a - b - c;
                if (a == b || a == c || b == c || d == a || d == b || d == c)
                    continue;
                strata_dim_t o[4] = {(strata_dim_t)a, (strata_dim_t)b, (strata_dim_t)c,
                                     (strata_dim_t)d};
                double s[4];
                int span[4];
                assert_int_equal(strata_mesh_price_order(&f, size, &tr, o, s, span), STRATA_OK);
                assert_true(total(s) >= total(best_s) * (1 - 1e-9));
                cheaper += total(s) > total(best_s) * 1.01;
                assert_int_equal(span[CP], -1); // size 1: no group to speak of
                n++;
            }
    assert_int_equal(n, 24);
    assert_true(cheaper > 0); // the choice mattered

    // A forced order's seconds are the pricing module's for its groups. tp outermost (order
    // dp,cp,pp,tp): tp's groups are {r, r + 4}, one rank in each rack: price the first directly on
    // a fabric of two ranks built from their paths, not cut from the big one.
    strata_dim_t o[4] = {DP, CP, PP, TP};
    double s[4];
    int span[4];
    assert_int_equal(strata_mesh_price_order(&f, size, &tr, o, s, span), STRATA_OK);
    assert_int_equal(span[TP], 2); // crosses the spine: "across rack"
    strata_topo_t t = f.topo;
    strata_fabric_t pair;
    assert_int_equal(strata_fabric_from_paths(&t, 2, (const char *[]){"r0/h0", "r1/h2"}, &pair),
                     STRATA_OK);
    const strata_net_eff_t eff = {{1, 1}, strata_link_default_shm().gamma_s_per_b};
    strata_price_shape_t shape;
    assert_int_equal(strata_price_shape_fabric(&pair, &eff, &shape), STRATA_OK);
    strata_price_t ar, small;
    assert_int_equal(strata_price_coll(&shape, STRATA_COLL_ALLREDUCE, tr.bytes[TP],
                                       STRATA_PRICE_OFFER_PLAIN, &ar),
                     STRATA_OK);
    assert_int_equal(strata_price_coll(&shape, STRATA_COLL_ALLREDUCE, tr.more[TP][0].bytes,
                                       STRATA_PRICE_OFFER_PLAIN, &small),
                     STRATA_OK);
    double want = tr.calls[TP] * ar.seconds + tr.more[TP][0].calls * small.seconds;
    if (fabs(s[TP] - want) > 1e-12 * want)
        fail_msg("tp across racks priced %.9g s, the pricing module says %.9g s", s[TP], want);
    strata_fabric_free(&pair);

    // No traffic: nothing to price, the default order is kept.
    strata_mesh_traffic_t none;
    memset(&none, 0, sizeof none);
    assert_int_equal(strata_mesh_choose_order(&f, size, &none, best, best_s), STRATA_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(best[i], i);
    assert_true(total(best_s) == 0);
    assert_int_equal(strata_mesh_choose_order(&f, size, NULL, best, NULL), STRATA_OK);
    assert_int_equal(best[0], TP);
    strata_fabric_free(&f);
}

/* On one host every order costs the same: the tie keeps tp,cp,pp,dp even for DP-heavy traffic. */
static void test_tie_keeps_default(void **state)
{
    (void)state;
    strata_fabric_t f;
    fabric(true, &f);
    strata_gpt_config_t m = small_gpt();
    const int size[4] = {2, 1, 1, 4};
    strata_mesh_traffic_t tr;
    strata_mesh_traffic_gpt(&m, 1, 1, size, false, 0, &tr);
    strata_dim_t o[4];
    assert_int_equal(strata_mesh_choose_order(&f, size, &tr, o, NULL), STRATA_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(o[i], i);
    char *line = describe(&f, size, &tr, o);
    if (!strstr(line, "tp=2 inside host") || !strstr(line, "dp=4 inside host"))
        fail_msg("one host: %s", line);
    strata_fabric_free(&f);
}

static void expect_refused(strata_status_t rc, const char *a, const char *b)
{
    assert_int_equal(rc, STRATA_ERR_INVALID_ARG);
    if (!strstr(strata_last_error(), a) || (b && !strstr(strata_last_error(), b)))
        fail_msg("expected '%s' and '%s' in: %s", a, b ? b : "", strata_last_error());
}

static void test_refusals(void **state)
{
    (void)state;
    strata_fabric_t f;
    fabric(false, &f);
    strata_dim_t o[4] = {TP, CP, PP, DP};
    double s[4];
    expect_refused(strata_mesh_choose_order(&f, (int[]){3, 1, 1, 0}, NULL, o, s),
                   "mesh: tp 3 x cp 1 x pp 1 does not divide 8 ranks", NULL);
    expect_refused(strata_mesh_price_order(&f, (int[]){2, 1, 2, 4}, NULL, o, s, NULL), "dp 4",
                   "does not make the job's 8 ranks");
    expect_refused(strata_mesh_price_order(&f, (int[]){2, 0, 1, 0}, NULL, o, s, NULL), "cp 0",
                   "at least 1");
    expect_refused(strata_mesh_price_order(&f, (int[]){2, 1, 1, -1}, NULL, o, s, NULL), "dp -1",
                   NULL);
    strata_dim_t twice[4] = {TP, PP, PP, DP};
    expect_refused(strata_mesh_price_order(&f, (int[]){2, 1, 1, 0}, NULL, twice, s, NULL),
                   "names pp twice", NULL);
    strata_dim_t bogus[4] = {TP, CP, PP, (strata_dim_t)9};
    expect_refused(strata_mesh_price_order(&f, (int[]){2, 1, 1, 0}, NULL, bogus, s, NULL),
                   "order[3] = 9", NULL);
    strata_mesh_traffic_t tr;
    memset(&tr, 0, sizeof tr);
    tr.bytes[PP] = -1;
    expect_refused(strata_mesh_price_order(&f, (int[]){2, 1, 2, 0}, &tr, o, s, NULL), "pp traffic",
                   NULL);
    memset(&tr, 0, sizeof tr);
    tr.more[DP][1].coll = STRATA_COLL_COUNT;
    expect_refused(strata_mesh_choose_order(&f, (int[]){2, 1, 2, 0}, &tr, o, s),
                   "dp traffic's further call 1", NULL);
    strata_fabric_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traffic_gpt),   cmocka_unit_test(test_choose),
        cmocka_unit_test(test_forced_orders), cmocka_unit_test(test_tie_keeps_default),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
