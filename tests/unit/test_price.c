/* The pricing module (strata/price.h) against hand-computed cases and against the flow-level
 * simulation of the transfer plans:
 *   - on one link every algorithm's line is its textbook alpha-beta-gamma cost, and the choice
 *     moves from latency algorithms to bandwidth ones with the size;
 *   - shapes of strided groups on the fabric tree: levels crossed, occupancy, link rates, the
 *     butterfly and hop levels, the 1:7 tier; malformed groups are refused;
 *   - rings in rank order pay for a rack-blind numbering, rings in tree order do not;
 *   - the hierarchical algorithm's lines, unpipelined and pipelined, by hand;
 *   - ring, ring_tree, hier, halving/recursive doubling and binomial stay within stated distances
 *     of strata_netmodel_fabric_cost, which simulates their transfer plans flow by flow;
 *   - a group given as a fabric, a host list or a strided group has the same shape;
 *   - the per-thread memo of strata_price_group_table answers as a fresh computation would;
 *   - the breakdown by level sums to the price and sits where the time goes;
 *   - on a torus, the multi-dimensional ring's lines by hand (both ways round on dimensions of 3,
 *     one way on 2 and inside a host), chosen for large messages there, declined on a tree and on
 *     part of a torus. */
#include "harness/st_test.h"
#include "strata/price.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool close_rel(double a, double b, double tol)
{
    return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)) + 1e-300;
}

#define ASSERT_CLOSE(a, b)                                                                         \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!close_rel(a_, b_, 1e-12))                                                             \
            fail_msg("%s = %.17g, expected %.17g", #a, a_, b_);                                    \
    } while (0)

static double price_of(const strata_price_shape_t *s, strata_coll_t c, strata_algo_t a, double B)
{
    strata_price_t p;
    strata_status_t rc = strata_price_algo(s, c, a, B, &p);
    if (rc != STRATA_OK)
        fail_msg("%s/%s: %s", strata_coll_name(c), strata_algo_name(a), strata_last_error());
    return p.seconds;
}

/* ---- one link ---------------------------------------------------------------------------------- */

static void test_flat_formulas(void **state)
{
    (void)state;
    const strata_link_t k = {.alpha_s = 2e-6, .beta_s_per_b = 1e-9, .gamma_s_per_b = 3e-10};
    const double a = k.alpha_s, b = k.beta_s_per_b, g = k.gamma_s_per_b, B = 1e6;
    for (int n = 6; n <= 8; n += 2) {
        strata_price_shape_t s;
        strata_price_shape_flat(n, &k, &s);
        const double f = (n - 1.0) / n, lg = 3; /* ceil(log2 n) for 6 and 8 */
        const double p2 = n == 8 ? 8 : 4, m = log2(p2), fold = n == 8 ? 0 : 1, f2 = (p2 - 1) / p2;
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLREDUCE, STRATA_ALGO_RING, B),
                     2 * (n - 1) * a + 2 * f * B * b + f * B * g);
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLREDUCE, STRATA_ALGO_RECURSIVE_DOUBLING, B),
                     (m + 2 * fold) * (a + B * b) + (m + fold) * B * g);
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLREDUCE, STRATA_ALGO_HALVING_DOUBLING, B),
                     (2 * m + 2 * fold) * a + (2 * f2 + 2 * fold) * B * b + (f2 + fold) * B * g);
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLREDUCE, STRATA_ALGO_DIRECT, B),
                     (n - 1 + lg) * a + f * B * (b + g));
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_BCAST, STRATA_ALGO_BINOMIAL, B), lg * (a + B * b));
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_BCAST, STRATA_ALGO_SCATTER_ALLGATHER, B),
                     (lg + n - 1) * a + 2 * f * B * b);
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_REDUCE, STRATA_ALGO_BINOMIAL, B),
                     lg * (a + B * b + B * g));
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_REDUCE, STRATA_ALGO_REDUCE_SCATTER_GATHER, B),
                     2 * (n - 1) * a + 2 * f * B * b + f * B * g);
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_REDUCE_SCATTER, STRATA_ALGO_RING, B),
                     (n - 1) * a + f * B * (b + g));
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_REDUCE_SCATTER, STRATA_ALGO_DIRECT, B),
                     (n - 1 + lg) * a + f * B * (b / 2 + g));
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLGATHER, STRATA_ALGO_RING, B),
                     (n - 1) * a + f * B * b);
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLGATHER, STRATA_ALGO_RECURSIVE_DOUBLING, B),
                     lg * a + f * B * b + B * g);
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLGATHER, STRATA_ALGO_DIRECT, B),
                     (n - 1 + lg) * a + f * B * b / 2);
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLTOALL, STRATA_ALGO_PAIRWISE, B),
                     (n - 1) * (a + B / n * b));
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLTOALL, STRATA_ALGO_LINEAR, B),
                     a + (n - 1) * (B / n) * b + (n - 1) * 0.2 * a);
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_GATHER, STRATA_ALGO_LINEAR, B),
                     (n - 1) * a + f * B * b);
        ASSERT_CLOSE(price_of(&s, STRATA_COLL_BARRIER, STRATA_ALGO_DISSEMINATION, B), lg * a);
        // Topology-aware algorithms are a ring on one link: the price does not offer them.
        strata_price_t p;
        assert_int_equal(
            strata_price_algo(&s, STRATA_COLL_ALLREDUCE, STRATA_ALGO_HIER, B, &p),
            STRATA_ERR_UNSUPPORTED);
        assert_int_equal(
            strata_price_algo(&s, STRATA_COLL_ALLGATHER, STRATA_ALGO_RING_TREE, B, &p),
            STRATA_ERR_UNSUPPORTED);
        assert_int_equal(strata_price_algo(&s, STRATA_COLL_BCAST, STRATA_ALGO_RING, B, &p),
                         STRATA_ERR_UNSUPPORTED);
    }
    // The choice: 8 bytes go by recursive doubling (log2 n latencies), 64 MiB by halving-doubling
    // (the ring's bandwidth in 2 log2 n steps); without either, the ring; nothing offered, an error.
    strata_price_shape_t s;
    strata_price_shape_flat(8, &k, &s);
    strata_price_t p;
    assert_int_equal(strata_price_coll(&s, STRATA_COLL_ALLREDUCE, 8, STRATA_PRICE_OFFER_PLAIN, &p),
                     STRATA_OK);
    assert_int_equal(p.algo, STRATA_ALGO_RECURSIVE_DOUBLING);
    assert_int_equal(
        strata_price_coll(&s, STRATA_COLL_ALLREDUCE, 64 << 20, STRATA_PRICE_OFFER_PLAIN, &p),
        STRATA_OK);
    assert_int_equal(p.algo, STRATA_ALGO_HALVING_DOUBLING);
    unsigned no_butterfly = STRATA_PRICE_OFFER_PLAIN &
                            ~(STRATA_PRICE_OFFER(STRATA_ALGO_HALVING_DOUBLING) |
                              STRATA_PRICE_OFFER(STRATA_ALGO_RECURSIVE_DOUBLING));
    assert_int_equal(strata_price_coll(&s, STRATA_COLL_ALLREDUCE, 64 << 20, no_butterfly, &p),
                     STRATA_OK);
    assert_int_equal(p.algo, STRATA_ALGO_RING);
    assert_int_equal(strata_price_coll(&s, STRATA_COLL_ALLREDUCE, 8,
                                       STRATA_PRICE_OFFER(STRATA_ALGO_PAIRWISE), &p),
                     STRATA_ERR_INVALID_ARG);
    // One member: nothing moves.
    strata_price_shape_flat(1, &k, &s);
    assert_int_equal(strata_price_coll(&s, STRATA_COLL_ALLREDUCE, 1e9, STRATA_PRICE_OFFER_ALL, &p),
                     STRATA_OK);
    assert_int_equal(p.algo, STRATA_ALGO_COUNT);
    assert_true(p.seconds == 0 && p.top_level == -1);
    assert_true(strata_price_p2p(&s, 1e9) == 0);
}

/* ---- strided groups ----------------------------------------------------------------------------- */

static strata_topo_t preset(const char *name)
{
    strata_topo_t t;
    assert_int_equal(strata_topo_preset(name, &t), STRATA_OK);
    return t;
}

static strata_price_shape_t group_shape(const strata_topo_t *t, strata_group_t g)
{
    strata_price_shape_t s;
    if (strata_price_shape_group(t, &g, NULL, &s) != STRATA_OK)
        fail_msg("group shape: %s", strata_last_error());
    return s;
}

static void test_group_shapes(void **state)
{
    (void)state;
    // h100-roce-24k: hosts of 8 (450 GB/s), racks of 2 hosts, zones of 192 racks, 8 zones over
    // a 1:7 tier, every scale-out level 50 GB/s per GPU.
    strata_topo_t t = preset("h100-roce-24k");
    // 8 ranks in one host: NVLink, level 0 only.
    strata_price_shape_t s = group_shape(&t, (strata_group_t){1, {{8, 1}}});
    assert_int_equal(s.top, 0);
    assert_int_equal(s.ncrossed, 1);
    assert_int_equal(s.level[0].units_max, 8);
    assert_true(s.ring.rate_Bps == 450e9 && s.ring.latency_s == 3e-6 && s.ring.level == 0);
    // One rank per host (stride 8), 2 hosts in a rack: one NIC each.
    s = group_shape(&t, (strata_group_t){1, {{2, 8}}});
    assert_int_equal(s.top, 1);
    assert_int_equal(s.level[0].units_max, 1);
    assert_int_equal(s.level[1].units_max, 2);
    assert_int_equal(s.level[1].members_min, 1);
    assert_true(s.ring.rate_Bps == 50e9 && s.hop_level == 1);
    // 16 contiguous ranks over 2 hosts: the ring's one crossing flow per host has one NIC (the
    // host's uplink, 8 x 50 GB/s, is not the limit); the hierarchical phase drives all 8 at once.
    s = group_shape(&t, (strata_group_t){1, {{16, 1}}});
    assert_int_equal(s.top, 1);
    assert_int_equal(s.ncrossed, 2);
    assert_int_equal(s.level[1].members_min, 8);
    assert_true(s.ring.rate_Bps == 50e9 && s.ring.latency_s == 4e-6 && s.ring.level == 1);
    assert_true(s.level[1].all_Bps == 50e9);
    assert_int_equal(s.xor_level[0], 0); /* partners r ^ 1, r ^ 2, r ^ 4 share a host */
    assert_int_equal(s.xor_level[2], 0);
    assert_int_equal(s.xor_level[3], 1); /* r ^ 8 is on the other host */
    // One rank per zone (stride 3072) across the 8 zones: every pattern meets at the 1:7 tier.
    s = group_shape(&t, (strata_group_t){1, {{8, 3072}}});
    assert_int_equal(s.top, 3);
    assert_true(close_rel(s.level[3].all_Bps, 50e9 / 7, 1e-15));
    assert_true(s.level[3].latency_s == 9e-6);
    for (int k = 0; k < s.nxor; k++)
        assert_int_equal(s.xor_level[k], 3);
    assert_int_equal(s.hop_level, 3);
    assert_int_equal(s.fold_level, -1);
    // Two dimensions: 2 members inside a host (stride 4) x 4 hosts (stride 8).
    strata_group_t g2 = {2, {{2, 4}, {4, 8}}};
    s = group_shape(&t, g2);
    assert_int_equal(strata_group_size(&g2), 8);
    assert_int_equal(s.level[0].units_max, 2);
    assert_int_equal(s.level[1].units_max, 2);
    assert_int_equal(s.level[1].members_min, 2);
    assert_int_equal(s.level[2].members_min, 4);
    assert_int_equal(s.top, 2);
    // Six ranks with stride 1 in hosts of 8 meet in one host; on a 3-per-host tree they do not.
    strata_topo_t small;
    assert_int_equal(strata_topo_parse("{\"name\":\"t\",\"levels\":[{\"name\":\"host\",\"fanout\":3,"
                                       "\"bandwidth_GBps\":100},{\"name\":\"rack\",\"fanout\":4,"
                                       "\"bandwidth_GBps\":10}]}",
                                       "t", &small),
                     STRATA_OK);
    s = group_shape(&small, (strata_group_t){1, {{7, 1}}}); /* hosts of 3, 3 and 1 */
    assert_int_equal(s.level[1].units_max, 3);
    assert_int_equal(s.level[1].members_min, 1);
    assert_int_equal(s.fold_level, 1); /* 4 + i and i: 4, 5, 6 and 0, 1, 2 on other hosts */
    // Refused: larger than the cluster, members twice (dimensions overlap), a bad dimension.
    strata_price_shape_t bad;
    strata_group_t g = {1, {{2, 24576}}};
    assert_int_equal(strata_price_shape_group(&t, &g, NULL, &bad), STRATA_ERR_INVALID_ARG);
    g = (strata_group_t){2, {{4, 1}, {2, 2}}};
    assert_int_equal(strata_price_shape_group(&t, &g, NULL, &bad), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "twice"));
    g = (strata_group_t){1, {{0, 1}}};
    assert_int_equal(strata_price_shape_group(&t, &g, NULL, &bad), STRATA_ERR_INVALID_ARG);
    // Efficiencies: the caller's per class where a level has none; gamma from the caller.
    strata_net_eff_t e = {.eff = {0.5, 0.25}, .gamma_s_per_b = 7e-12};
    g = (strata_group_t){1, {{16, 1}}};
    assert_int_equal(strata_price_shape_group(&t, &g, &e, &s), STRATA_OK);
    assert_true(s.level[0].link_Bps == 225e9 && s.level[1].link_Bps == 12.5e9);
    assert_true(s.gamma_s_per_b == 7e-12);
}

/* ---- fabrics the communicator knows ------------------------------------------------------------- */

/* Hosts over shared memory (8 GB/s, 2 us), racks of 4 hosts at 100 MB/s and 200 us, a spine at
 * 100 MB/s with 8:1 uplinks: the emulated cluster of docs/topology.md. */
static const char *const EMU =
    "{\"name\":\"emu\",\"levels\":[{\"name\":\"host\",\"fanout\":1,\"bandwidth_GBps\":8,"
    "\"latency_us\":2,\"class\":\"scale-up\"},{\"name\":\"rack\",\"fanout\":4,\"bandwidth_GBps\":0.1,"
    "\"latency_us\":200},{\"name\":\"spine\",\"fanout\":2,\"bandwidth_GBps\":0.1,\"latency_us\":200,"
    "\"oversubscription\":8}]}";
static const char *const RR[8] = {"a/h0", "b/h4", "a/h1", "b/h5", "a/h2", "b/h6", "a/h3", "b/h7"};
static const char *const TREE[8] = {"a/h0", "a/h1", "a/h2", "a/h3",
                                    "b/h4", "b/h5", "b/h6", "b/h7"};
/* Three levels with 2:1 and 4:1 uplinks, 2 ranks per host. */
static const char *const L3 =
    "{\"name\":\"l3\",\"levels\":[{\"name\":\"host\",\"fanout\":2,\"bandwidth_GBps\":8,"
    "\"latency_us\":2,\"class\":\"scale-up\"},{\"name\":\"rack\",\"fanout\":2,\"bandwidth_GBps\":0.1,"
    "\"latency_us\":200},{\"name\":\"zone\",\"fanout\":2,\"bandwidth_GBps\":0.1,\"latency_us\":200,"
    "\"oversubscription\":2},{\"name\":\"spine\",\"fanout\":2,\"bandwidth_GBps\":0.1,"
    "\"latency_us\":300,\"oversubscription\":4}]}";
static const char *const P3[16] = {
    "z0/r0/h0", "z0/r0/h0", "z0/r0/h1", "z0/r0/h1", "z0/r1/h2", "z0/r1/h2", "z0/r1/h3", "z0/r1/h3",
    "z1/r2/h4", "z1/r2/h4", "z1/r2/h5", "z1/r2/h5", "z1/r3/h6", "z1/r3/h6", "z1/r3/h7", "z1/r3/h7"};
/* Racks of 3, 2 and 1 host, the last host with two ranks. */
static const char *const IRR[7] = {"r0/h0", "r0/h1", "r0/h2", "r1/h3", "r1/h4", "r2/h5", "r2/h5"};

static strata_fabric_t fabric(const char *json, int n, const char *const *paths)
{
    strata_topo_t t;
    assert_int_equal(strata_topo_parse(json, "test", &t), STRATA_OK);
    strata_fabric_t f;
    assert_int_equal(strata_fabric_from_paths(&t, n, paths, &f), STRATA_OK);
    return f;
}

static strata_price_shape_t fabric_shape(const strata_fabric_t *f)
{
    strata_price_shape_t s;
    assert_int_equal(strata_price_shape_fabric(f, NULL, &s), STRATA_OK);
    return s;
}

static void test_ring_orders(void **state)
{
    (void)state;
    // Rack-blind numbering: every ring edge crosses the spine, the 4 flows leaving a rack share
    // its 4 x 100 / 8 = 50 MB/s uplink: 12.5 MB/s each. In tree order one flow leaves each rack
    // and gets all 50 MB/s (its own 100 MB/s NIC is not the limit).
    strata_fabric_t f = fabric(EMU, 8, RR);
    strata_price_shape_t s = fabric_shape(&f);
    assert_true(close_rel(s.ring.rate_Bps, 12.5e6, 1e-15) && s.ring.level == 2);
    assert_true(close_rel(s.tree.rate_Bps, 50e6, 1e-15) && s.tree.level == 2);
    assert_true(close_rel(s.ring.latency_s, 200e-6, 1e-12) && s.tree.latency_s == s.ring.latency_s);
    assert_int_equal(s.hop_level, 2);
    strata_fabric_free(&f);
    f = fabric(EMU, 8, TREE);
    s = fabric_shape(&f);
    assert_true(s.ring.rate_Bps == s.tree.rate_Bps && s.ring.level == s.tree.level);
    assert_int_equal(s.xor_level[0], 1);
    assert_int_equal(s.xor_level[2], 2);
    strata_fabric_free(&f);
}

static void test_hier_lines(void **state)
{
    (void)state;
    strata_fabric_t f = fabric(EMU, 8, TREE);
    strata_price_shape_t s = fabric_shape(&f);
    strata_price_table_t t;
    strata_price_table(&s, STRATA_COLL_ALLREDUCE, &t);
    assert_int_equal(t.nlines[STRATA_ALGO_HIER], 5);
    const strata_price_line_t *one = &t.line[t.first[STRATA_ALGO_HIER]],
                              *sixteen = &t.line[t.first[STRATA_ALGO_HIER] + 4];
    // Unpipelined: a ring of 4 in each rack (3 steps each way, a quarter of the vector each, at
    // 100 MB/s), then a ring of 2 across the spine on the quarter (1 step each way, an eighth, at
    // the 12.5 MB/s a member gets of the 8:1 uplink).
    const double lat = 200e-6;
    ASSERT_CLOSE(one->alpha_s, 2 * 3 * lat + 2 * 1 * lat);
    ASSERT_CLOSE(one->beta_s_per_b, 2 * 3 * 0.25 / 100e6 + 2 * 0.125 / 12.5e6);
    assert_int_equal(one->pipe.segments, 1);
    // 16 segments: the spine uplink (2e-8 s/B) is the busiest resource, ahead of the NIC
    // (1.75e-8); after the first segment it sets the pace for the other 15.
    assert_int_equal(sixteen->pipe.segments, 16);
    ASSERT_CLOSE(sixteen->alpha_s, one->alpha_s + 15 * 2 * lat);
    ASSERT_CLOSE(sixteen->beta_s_per_b, one->beta_s_per_b / 16 + 15.0 / 16 * 2e-8);
    // The choice: a latency algorithm for 8 bytes, hier for 64 MiB.
    strata_price_t p;
    strata_price_table_choose(&t, 8, STRATA_PRICE_OFFER_PLAIN, &p);
    assert_int_equal(p.algo, STRATA_ALGO_RECURSIVE_DOUBLING);
    strata_price_table_choose(&t, 64 << 20, STRATA_PRICE_OFFER_PLAIN, &p);
    assert_int_equal(p.algo, STRATA_ALGO_HIER);
    assert_int_equal(p.pipe.segments, 16);
    strata_fabric_free(&f);
}

/* The price against the flow-level simulation of the same plan (strata_netmodel_fabric_cost): ring
 * and ring_tree are the simulation's steps exactly; butterflies of a power of two too; the
 * pipelined hier is a closed form of a fluid simulation; binomial and the fold steps of a
 * non-power of two are priced as if every member sent at once, which only a few do. */
static void test_against_simulation(void **state)
{
    (void)state;
    struct {
        const char *json;
        int n;
        const char *const *paths;
        bool pow2;
    } fabrics[] = {{EMU, 8, RR, true}, {EMU, 8, TREE, true}, {L3, 16, P3, true},
                   {EMU, 7, IRR, false}};
    struct {
        strata_coll_t coll;
        strata_algo_t algo;
        strata_plan_kind_t kind;
        double lo, hi, lo_fold, hi_fold;
    } cases[] = {
        {STRATA_COLL_ALLREDUCE, STRATA_ALGO_RING, STRATA_PLAN_RING, 0.98, 1.02, 0.98, 1.02},
        {STRATA_COLL_ALLREDUCE, STRATA_ALGO_RING_TREE, STRATA_PLAN_RING_TREE, 0.98, 1.02, 0.98,
         1.02},
        {STRATA_COLL_ALLGATHER, STRATA_ALGO_RING_TREE, STRATA_PLAN_RING_TREE, 0.98, 1.02, 0.98,
         1.02},
        {STRATA_COLL_ALLREDUCE, STRATA_ALGO_HALVING_DOUBLING, STRATA_PLAN_HALVING_DOUBLING, 0.98,
         1.02, 1.0, 1.4},
        {STRATA_COLL_ALLREDUCE, STRATA_ALGO_RECURSIVE_DOUBLING, STRATA_PLAN_RECURSIVE_DOUBLING,
         0.98, 1.02, 1.0, 1.4},
        {STRATA_COLL_ALLREDUCE, STRATA_ALGO_HIER, STRATA_PLAN_HIER, 0.85, 1.3, 0.85, 1.3},
        {STRATA_COLL_REDUCE_SCATTER, STRATA_ALGO_HIER, STRATA_PLAN_HIER, 0.85, 1.3, 0.85, 1.3},
        {STRATA_COLL_BCAST, STRATA_ALGO_BINOMIAL, STRATA_PLAN_BINOMIAL, 1.0, 2.1, 1.0, 2.1},
    };
    for (size_t i = 0; i < sizeof fabrics / sizeof fabrics[0]; i++) {
        strata_fabric_t f = fabric(fabrics[i].json, fabrics[i].n, fabrics[i].paths);
        strata_price_shape_t s = fabric_shape(&f);
        for (double B = 65536; B <= 64.0 * 1048576; B *= 32)
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
                double price = price_of(&s, cases[c].coll, cases[c].algo, B);
                double sim = strata_netmodel_fabric_cost(&f, cases[c].coll, cases[c].kind, B, 4,
                                                         NULL);
                double r = price / sim, lo = fabrics[i].pow2 ? cases[c].lo : cases[c].lo_fold,
                       hi = fabrics[i].pow2 ? cases[c].hi : cases[c].hi_fold;
                if (!(sim > 0) || r < lo || r > hi)
                    fail_msg("fabric %zu, %s %s of %.0f B: price %.6g s, simulation %.6g s (%.2fx, "
                             "expected %.2f..%.2f)",
                             i, strata_algo_name(cases[c].algo), strata_coll_name(cases[c].coll), B,
                             price, sim, r, lo, hi);
            }
        strata_fabric_free(&f);
    }
}

/* ---- one shape whatever form the group arrives in ---------------------------------------------- */

static void assert_same_shape(const strata_price_shape_t *a, const strata_price_shape_t *b)
{
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->nlevels, b->nlevels);
    assert_int_equal(a->top, b->top);
    assert_int_equal(a->ncrossed, b->ncrossed);
    assert_true(a->gamma_s_per_b == b->gamma_s_per_b);
    for (int l = 0; l < a->nlevels; l++) {
        const strata_price_level_t *x = &a->level[l], *y = &b->level[l];
        assert_true(x->latency_s == y->latency_s && x->link_Bps == y->link_Bps &&
                    x->uplink_Bps == y->uplink_Bps && x->all_Bps == y->all_Bps);
        assert_int_equal(x->units_max, y->units_max);
        assert_int_equal(x->members_min, y->members_min);
        assert_int_equal(x->link_class, y->link_class);
    }
    assert_true(a->ring.latency_s == b->ring.latency_s && a->ring.rate_Bps == b->ring.rate_Bps);
    assert_int_equal(a->ring.level, b->ring.level);
    assert_true(a->tree.latency_s == b->tree.latency_s && a->tree.rate_Bps == b->tree.rate_Bps);
    assert_int_equal(a->tree.level, b->tree.level);
    assert_int_equal(a->hop_level, b->hop_level);
    assert_int_equal(a->nxor, b->nxor);
    for (int k = 0; k < a->nxor; k++)
        assert_int_equal(a->xor_level[k], b->xor_level[k]);
    assert_int_equal(a->fold_level, b->fold_level);
}

static void test_forms_agree(void **state)
{
    (void)state;
    // Hosts of 4, racks of 3 hosts, 2 racks under a 2:1 spine; groups regular and not.
    strata_topo_t t;
    assert_int_equal(strata_topo_parse("{\"name\":\"t\",\"levels\":[{\"name\":\"host\",\"fanout\":4,"
                                       "\"bandwidth_GBps\":100},{\"name\":\"rack\",\"fanout\":3,"
                                       "\"bandwidth_GBps\":10,\"latency_us\":5},{\"name\":\"spine\","
                                       "\"fanout\":2,\"bandwidth_GBps\":10,\"latency_us\":9,"
                                       "\"oversubscription\":2}]}",
                                       "t", &t),
                     STRATA_OK);
    const strata_group_t groups[] = {
        {1, {{24, 1}}}, {1, {{6, 4}}}, {1, {{5, 3}}}, {2, {{2, 1}, {3, 8}}}, {1, {{7, 3}}}};
    const strata_net_eff_t e = {.eff = {0.9, 0.8}, .gamma_s_per_b = 1e-11};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        strata_price_shape_t sg, su, sf;
        assert_int_equal(strata_price_shape_group(&t, &groups[i], &e, &sg), STRATA_OK);
        // The same members as a host list (unit ids per level) and as paths on a fabric.
        int n = (int)strata_group_size(&groups[i]), units[64 * 3];
        char pathbuf[64][64];
        const char *paths[64];
        for (int m = 0; m < n; m++) {
            long long rest = m, acc = 0;
            for (int d = 0; d < groups[i].ndims; d++) {
                acc += rest % groups[i].dim[d].size * groups[i].dim[d].stride;
                rest /= groups[i].dim[d].size;
            }
            units[m * 3 + 0] = (int)(acc / 4);
            units[m * 3 + 1] = (int)(acc / 12) + 100; /* ids need not be dense */
            units[m * 3 + 2] = 7;
            snprintf(pathbuf[m], sizeof pathbuf[m], "rack%lld/host%lld", acc / 12, acc / 4);
            paths[m] = pathbuf[m];
        }
        assert_int_equal(strata_price_shape_units(&t, n, units, &e, &su), STRATA_OK);
        strata_fabric_t f;
        assert_int_equal(strata_fabric_from_paths(&t, n, paths, &f), STRATA_OK);
        assert_int_equal(strata_price_shape_fabric(&f, &e, &sf), STRATA_OK);
        strata_fabric_free(&f);
        assert_same_shape(&sg, &su);
        assert_same_shape(&sg, &sf);
    }
    int neg[3] = {0, -1, 0};
    strata_price_shape_t s;
    assert_int_equal(strata_price_shape_units(&t, 1, neg, NULL, &s), STRATA_ERR_INVALID_ARG);
}

static void test_memo(void **state)
{
    (void)state;
    strata_topo_t t = preset("h100-roce-24k");
    const strata_net_eff_t e = {.eff = {0.8, 0.85}, .gamma_s_per_b = 1e-12};
    strata_group_t g = {2, {{4, 32}, {16, 1024}}};
    strata_price_shape_t s;
    assert_int_equal(strata_price_shape_group(&t, &g, &e, &s), STRATA_OK);
    strata_price_table_t fresh, memo;
    strata_price_table(&s, STRATA_COLL_REDUCE_SCATTER, &fresh);
    assert_int_equal(strata_price_group_table(&t, &g, &e, STRATA_COLL_REDUCE_SCATTER, &memo),
                     STRATA_OK);
    assert_memory_equal(&fresh, &memo, sizeof fresh);
    // Many other groups later (evicting it), and another efficiency: still the same answer.
    for (int i = 1; i <= 700; i++) {
        strata_group_t o = {1, {{2 + i % 7, 1 + i}}};
        assert_int_equal(strata_price_group_table(&t, &o, &e, STRATA_COLL_ALLGATHER, &memo),
                         STRATA_OK);
    }
    assert_int_equal(strata_price_group_table(&t, &g, &e, STRATA_COLL_REDUCE_SCATTER, &memo),
                     STRATA_OK);
    assert_memory_equal(&fresh, &memo, sizeof fresh);
    strata_net_eff_t slower = e;
    slower.eff[STRATA_LINK_SCALE_OUT] = 0.5;
    assert_int_equal(strata_price_group_table(&t, &g, &slower, STRATA_COLL_REDUCE_SCATTER, &memo),
                     STRATA_OK);
    assert_true(memo.line[memo.first[STRATA_ALGO_RING]].beta_s_per_b >
                fresh.line[fresh.first[STRATA_ALGO_RING]].beta_s_per_b);
    // Errors are not memoised as shapes.
    strata_group_t big = {1, {{2, 24576}}};
    assert_int_equal(strata_price_group_table(&t, &big, &e, STRATA_COLL_ALLREDUCE, &memo),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_price_group_table(&t, &big, &e, STRATA_COLL_ALLREDUCE, &memo),
                     STRATA_ERR_INVALID_ARG);
}

static void test_breakdown_and_hops(void **state)
{
    (void)state;
    strata_fabric_t f = fabric(EMU, 8, TREE);
    strata_price_shape_t s = fabric_shape(&f);
    const double B = 64 << 20;
    strata_price_t p;
    assert_int_equal(strata_price_coll(&s, STRATA_COLL_ALLREDUCE, B, STRATA_PRICE_OFFER_PLAIN, &p),
                     STRATA_OK);
    double sum = 0;
    for (int l = 0; l < s.nlevels; l++)
        sum += p.level_s[l];
    assert_true(close_rel(sum, p.seconds, 1e-12));
    assert_true(p.level_s[2] > p.level_s[1] && p.level_s[0] == 0); /* the spine sets the pace */
    assert_int_equal(p.top_level, 2);
    strata_fabric_free(&f);
    // Pipeline hops: consecutive members one host apart in a rack of h100-roce-24k.
    strata_topo_t t = preset("h100-roce-24k");
    s = group_shape(&t, (strata_group_t){1, {{2, 8}}});
    ASSERT_CLOSE(strata_price_p2p(&s, 1e6), 4e-6 + 1e6 / 50e9);
    assert_true(strata_price_p2p(&s, 0) == 0);
    strata_price_table_t tab;
    strata_price_table(&s, STRATA_COLL_ALLREDUCE, &tab);
    ASSERT_CLOSE(strata_price_table_p2p(&tab, 1e6), strata_price_p2p(&s, 1e6));
}

/* ---- tori -------------------------------------------------------------------------------------- */

static void torus_tree(strata_topo_t *t, const char *torus)
{
    char text[512];
    snprintf(text, sizeof text,
             "{\"name\":\"t\",\"levels\":[{\"name\":\"host\",\"fanout\":2,\"bandwidth_GBps\":8,"
             "\"latency_us\":1},{\"name\":\"top\",\"fanout\":9,%s\"bandwidth_GBps\":0.05,"
             "\"latency_us\":30}]}",
             torus);
    assert_int_equal(strata_topo_parse(text, "t", t), STRATA_OK);
}

static void test_torus(void **state)
{
    (void)state;
    strata_topo_t t, tree;
    torus_tree(&t, "\"torus\":\"3x3\",");
    torus_tree(&tree, "");
    const double a1 = 30e-6, b1 = 1 / 0.05e9, a0 = 1e-6, b0 = 1 / 8e9, g = 1e-11, B = 64e6;
    const strata_net_eff_t e = {.eff = {1, 1}, .gamma_s_per_b = g};

    // One rank per host (stride 2): a 3x3 grid, both ways round in both dimensions.
    const strata_group_t hosts = {1, {{9, 2}}};
    strata_price_shape_t s;
    assert_int_equal(strata_price_shape_group(&t, &hosts, &e, &s), STRATA_OK);
    assert_int_equal(s.torus_ndims, 2);
    assert_true(s.torus_dim[0].both_ways && s.torus_dim[1].both_ways);
    // dim 0: 4 steps of 1/3 / 2; dim 1 on the 1/3 shard: 4 steps of 1/9 / 2; reduce 8/9 of B.
    const double torus9 = 8 * a1 + B * b1 * (4.0 / 6 + 4.0 / 18) + B * g * 8 / 9;
    ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLREDUCE, STRATA_ALGO_TORUS, B), torus9);
    ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLREDUCE, STRATA_ALGO_RING, B),
                 16 * a1 + 2 * B * b1 * 8 / 9 + B * g * 8 / 9);
    strata_price_t p;
    assert_int_equal(strata_price_coll(&s, STRATA_COLL_ALLREDUCE, B, STRATA_PRICE_OFFER_PLAIN, &p),
                     STRATA_OK);
    assert_int_equal(p.algo, STRATA_ALGO_TORUS);
    assert_int_equal(strata_price_coll(&s, STRATA_COLL_ALLREDUCE, 8, STRATA_PRICE_OFFER_PLAIN, &p),
                     STRATA_OK);
    assert_int_not_equal(p.algo, STRATA_ALGO_TORUS);
    // Allreduce only.
    assert_int_equal(strata_price_algo(&s, STRATA_COLL_REDUCE_SCATTER, STRATA_ALGO_TORUS, B, &p),
                     STRATA_ERR_UNSUPPORTED);

    // Two ranks per host (all 18): the host's pair first (one way, at the host's link), then the
    // torus on the half, then on the sixth.
    const strata_group_t all = {1, {{18, 1}}};
    assert_int_equal(strata_price_shape_group(&t, &all, &e, &s), STRATA_OK);
    assert_int_equal(s.torus_ndims, 3);
    assert_int_equal(s.torus_dim[0].level, 0);
    assert_false(s.torus_dim[0].both_ways);
    ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLREDUCE, STRATA_ALGO_TORUS, B),
                 2 * a0 + B * b0 * 2 * 0.5 + 8 * a1 + B * b1 * (4.0 / 12 + 4.0 / 36) +
                     B * g * 17 / 18);
    assert_int_equal(strata_price_coll(&s, STRATA_COLL_ALLREDUCE, B, STRATA_PRICE_OFFER_PLAIN, &p),
                     STRATA_OK);
    assert_int_equal(p.algo, STRATA_ALGO_TORUS);

    // A 2x2 torus: dimensions of 2 have one link, so one way round: same bytes as a ring, fewer
    // steps.
    strata_topo_t t4;
    assert_int_equal(strata_topo_parse("{\"levels\":[{\"name\":\"host\",\"fanout\":1,"
                                       "\"bandwidth_GBps\":8},{\"name\":\"top\",\"torus\":\"2x2\","
                                       "\"bandwidth_GBps\":0.05,\"latency_us\":30}]}",
                                       "t4", &t4),
                     STRATA_OK);
    const strata_group_t four = {1, {{4, 1}}};
    assert_int_equal(strata_price_shape_group(&t4, &four, NULL, &s), STRATA_OK);
    ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLREDUCE, STRATA_ALGO_TORUS, B),
                 4 * a1 + B * b1 * (2 * 0.5 + 2 * 0.25));

    // The same hosts behind a switch, and three hosts of the torus: no torus to fill.
    assert_int_equal(strata_price_shape_group(&tree, &hosts, &e, &s), STRATA_OK);
    assert_int_equal(s.torus_ndims, 0);
    assert_int_equal(strata_price_algo(&s, STRATA_COLL_ALLREDUCE, STRATA_ALGO_TORUS, B, &p),
                     STRATA_ERR_UNSUPPORTED);
    assert_int_equal(strata_price_coll(&s, STRATA_COLL_ALLREDUCE, B, STRATA_PRICE_OFFER_ALL, &p),
                     STRATA_OK);
    assert_int_not_equal(p.algo, STRATA_ALGO_TORUS);
    const strata_group_t row = {1, {{3, 2}}};
    assert_int_equal(strata_price_shape_group(&t, &row, &e, &s), STRATA_OK);
    assert_int_equal(s.torus_ndims, 0);
    // The planner's memo tells a torus from the same tree without one.
    strata_price_table_t tt, ttree;
    assert_int_equal(strata_price_group_table(&t, &hosts, &e, STRATA_COLL_ALLREDUCE, &tt),
                     STRATA_OK);
    assert_int_equal(strata_price_group_table(&tree, &hosts, &e, STRATA_COLL_ALLREDUCE, &ttree),
                     STRATA_OK);
    assert_int_equal(tt.nlines[STRATA_ALGO_TORUS], 1);
    assert_int_equal(ttree.nlines[STRATA_ALGO_TORUS], 0);
}

/* The pool allreduce by hand on one link: no line without a pool; with N nodes of link rate P, the
 * pushes (a node takes ceil((n-1)/N) of them), the chain and the unicast fan-out (n copies from the
 * last node), each at the slower of a member's link and the node's; chosen where it is cheapest. */
static void test_pool(void **state)
{
    (void)state;
    const strata_link_t k = {.alpha_s = 2e-6, .beta_s_per_b = 1e-9, .gamma_s_per_b = 3e-10};
    const double a = k.alpha_s, b = k.beta_s_per_b, g = k.gamma_s_per_b, B = 1e6;
    strata_price_shape_t s;
    strata_price_shape_flat(8, &k, &s);
    strata_price_table_t t;
    strata_price_table(&s, STRATA_COLL_ALLREDUCE, &t);
    assert_int_equal(t.nlines[STRATA_ALGO_POOL], 0);
    const double P = 1e10, lat = 1e-6; // ten times a member's link
    strata_price_shape_pool(&s, 2, P, lat, false);
    const double per_node = 4, n = 8; // ceil(7 / 2)
    ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLREDUCE, STRATA_ALGO_POOL, B),
                 2 * lat + a + B * fmax(b, per_node / P) + 8 * lat + B * fmax(b, n / P) +
                     per_node * B * g);
    assert_false(strata_price_serves(STRATA_COLL_REDUCE_SCATTER, STRATA_ALGO_POOL));
    // A member sends B and receives B, where a ring moves 2(n-1)/n B: on one link the pool loses
    // at every size, even on nodes ten times faster; offered alone, it is the choice.
    strata_price_t p;
    strata_price_table(&s, STRATA_COLL_ALLREDUCE, &t);
    assert_int_equal(t.nlines[STRATA_ALGO_POOL], 1);
    for (double bytes = 1; bytes <= 1e9; bytes *= 10) {
        assert_true(strata_price_table_choose(&t, bytes, STRATA_PRICE_OFFER_ALL, &p) > 0);
        assert_int_not_equal(p.algo, STRATA_ALGO_POOL);
    }
    assert_true(strata_price_table_choose(&t, B, STRATA_PRICE_OFFER(STRATA_ALGO_POOL), &p) > 0);
    assert_int_equal(p.algo, STRATA_ALGO_POOL);
    // By multicast the last node sends one copy: on nodes as fast as a member, the fan-out costs
    // B at a member's rate instead of n B at the node's.
    strata_price_shape_pool(&s, 2, 1 / b, lat, true);
    ASSERT_CLOSE(price_of(&s, STRATA_COLL_ALLREDUCE, STRATA_ALGO_POOL, B),
                 2 * lat + a + B * per_node * b + 8 * lat + B * b + per_node * B * g);
    // Two racks of 4 hosts behind 8:1 uplinks (the emulated cluster's bench shape): a rack's
    // uplink carries 4 x 0.1 / 8 GB/s; a node per rack with the rack's 4 NICs together. Unicast:
    // the 4 copies for the other rack cross its uplink; multicast: one.
    strata_topo_t two;
    assert_int_equal(strata_topo_parse("{\"name\":\"t\",\"levels\":[{\"name\":\"rack\",\"fanout\":4,"
                                       "\"bandwidth_GBps\":0.1,\"latency_us\":20},"
                                       "{\"name\":\"spine\",\"fanout\":2,\"bandwidth_GBps\":0.1,"
                                       "\"latency_us\":40,\"oversubscription\":8}]}", "t", &two),
                     STRATA_OK);
    strata_price_shape_t r = group_shape(&two, (strata_group_t){1, {{8, 1}}});
    assert_int_equal(r.top, 1);
    assert_int_equal(r.level[1].members_min, 4);
    const double up = 4 * 0.1e9 / 8, nic = 0.1e9, node = 0.4e9, l1 = 40e-6;
    strata_price_shape_pool(&r, 2, node, l1, false);
    ASSERT_CLOSE(price_of(&r, STRATA_COLL_ALLREDUCE, STRATA_ALGO_POOL, B),
                 3 * l1 + 8 * l1 + B * fmax(1 / nic, 4 / node) + B * 4 / up);
    strata_price_shape_pool(&r, 2, node, l1, true);
    ASSERT_CLOSE(price_of(&r, STRATA_COLL_ALLREDUCE, STRATA_ALGO_POOL, B),
                 3 * l1 + 8 * l1 + B * fmax(1 / nic, 4 / node) + B / up);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat_formulas),     cmocka_unit_test(test_group_shapes),
        cmocka_unit_test(test_ring_orders),       cmocka_unit_test(test_hier_lines),
        cmocka_unit_test(test_against_simulation), cmocka_unit_test(test_forms_agree),
        cmocka_unit_test(test_memo),              cmocka_unit_test(test_breakdown_and_hops),
        cmocka_unit_test(test_torus),             cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
