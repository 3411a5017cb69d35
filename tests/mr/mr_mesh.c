/* The device mesh on 8 ranks: for several layouts and orders, every dimension's communicator, the
 * dp x cp group and the embedding group hold exactly the ranks the rank layout says, in the order
 * it says (checked by all-gathering world ranks over each, against members computed here from the
 * layout formula); the order chosen on the world's fabric (a cluster file and STRATA_TOPO_PATH:
 * 2 racks x 2 hosts x 2 ranks, slow spine) follows the traffic; bad layouts are refused on every
 * rank alike (no hang), and a failed split names the group. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/st_test.h"
#include "strata/mesh.h"

#define TP STRATA_DIM_TP
#define CP STRATA_DIM_CP
#define PP STRATA_DIM_PP
#define DP STRATA_DIM_DP
#define N  8

typedef struct layout {
    int size[4];       /* as given (dp 0: left over) */
    int dp;            /* dp resolved */
    const char *order; /* NULL: not given */
} layout_t;

static const layout_t layouts[] = {
    {{1, 1, 1, 0}, 8, NULL},          {{2, 1, 1, 0}, 4, NULL},
    {{2, 1, 2, 2}, 2, "dp,pp,tp,cp"}, {{2, 2, 2, 1}, 1, "pp,tp,dp,cp"},
    {{1, 2, 1, 4}, 4, "dp,cp,tp,pp"}, {{1, 1, 4, 0}, 2, "pp,tp,cp,dp"},
    {{1, 1, 4, 2}, 2, "dp,tp,cp,pp"}, {{8, 1, 1, 0}, 1, NULL},
    {{1, 1, 8, 0}, 1, "tp,pp,cp,dp"}, {{2, 2, 1, 0}, 2, "cp,dp,pp,tp"},
};

/* The layout formula, written out: innermost first, each dimension a digit of the world rank. */
static void coords_of(int r, const int size[4], const strata_dim_t order[4], int c[4])
{
    for (int i = 0; i < 4; i++) {
        c[order[i]] = r % size[order[i]];
        r /= size[order[i]];
    }
}

/* World ranks differing from `rank` only in the dimensions of `dims` (a bit per dimension), in
 * ascending world rank. */
static int members(int rank, const int size[4], const strata_dim_t order[4], unsigned dims,
                   int *out)
{
    int me[4], c[4], m = 0;
    coords_of(rank, size, order, me);
    for (int r = 0; r < N; r++) {
        coords_of(r, size, order, c);
        bool same = true;
        for (int d = 0; d < 4; d++)
            same &= (dims & (1u << d)) || c[d] == me[d];
        if (same)
            out[m++] = r;
    }
    return m;
}

/* Allgathers world ranks over `c` and compares with want[0..n). */
static int check_group(strata_comm_t *c, int rank, const char *what, const int *want, int n,
                       int want_rank)
{
    if (!c)
        return ST_RANK_FAIL("%s: no communicator", what);
    if (strata_comm_size(c) != n || strata_comm_rank(c) != want_rank)
        return ST_RANK_FAIL("%s: size %d rank %d, want size %d rank %d", what, strata_comm_size(c),
                            strata_comm_rank(c), n, want_rank);
    int32_t me = rank, got[N];
    ST_RANK_CHECK_OK(strata_allgather(c, &me, got, 1, STRATA_DTYPE_I32));
    for (int i = 0; i < n; i++)
        if (got[i] != want[i])
            return ST_RANK_FAIL("%s: member %d is world rank %d, want %d", what, i, (int)got[i],
                                want[i]);
    return 0;
}

static int index_of(const int *v, int n, int x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return i;
    return -1;
}

static int check_layout(strata_comm_t *world, int rank, const layout_t *lay)
{
    strata_mesh_config_t cfg = strata_mesh_config_default();
    memcpy(cfg.size, lay->size, sizeof cfg.size);
    if (lay->order) {
        ST_RANK_CHECK_OK(strata_order_parse(lay->order, cfg.order));
        cfg.order_given = true;
    }
    strata_mesh_t *m;
    ST_RANK_CHECK_OK(strata_mesh_create(world, &cfg, &m));
    int size[4];
    memcpy(size, lay->size, sizeof size);
    size[DP] = lay->dp;
    strata_dim_t order[4];
    if (lay->order)
        memcpy(order, cfg.order, sizeof order);
    else
        strata_mesh_default_order(order);
    if (memcmp(strata_mesh_order(m), order, sizeof order) != 0)
        return ST_RANK_FAIL("order differs from the one given");
    int c[4], want[N], bad = 0;
    coords_of(rank, size, order, c);
    if (strata_mesh_rank_of(m, c) != rank)
        return ST_RANK_FAIL("rank_of(own coordinates) = %d", strata_mesh_rank_of(m, c));
    char what[64];
    for (int d = 0; d < 4 && !bad; d++) {
        snprintf(what, sizeof what, "%s group (layout %s)", strata_dim_name((strata_dim_t)d),
                 lay->order ? lay->order : "default");
        if (strata_mesh_size(m, (strata_dim_t)d) != size[d] ||
            strata_mesh_coord(m, (strata_dim_t)d) != c[d])
            return ST_RANK_FAIL("%s: size %d coord %d, want %d %d", what,
                                strata_mesh_size(m, (strata_dim_t)d),
                                strata_mesh_coord(m, (strata_dim_t)d), size[d], c[d]);
        // Members ascending in world rank are ascending in the coordinate along one dimension.
        int n = members(rank, size, order, 1u << d, want);
        bad = check_group(strata_mesh_comm(m, (strata_dim_t)d), rank, what, want, n, c[d]);
    }
    if (!bad) {
        int n = members(rank, size, order, (1u << DP) | (1u << CP), want);
        bad = check_group(strata_mesh_dp_cp_comm(m), rank, "dp x cp group", want, n,
                          index_of(want, n, rank));
    }
    strata_comm_t *e = strata_mesh_embed_comm(m);
    if (!bad && (size[PP] == 1 || (c[PP] != 0 && c[PP] != size[PP] - 1))) {
        if (e)
            bad = ST_RANK_FAIL("stage %d of %d got an embedding group", c[PP], size[PP]);
    } else if (!bad) {
        int ends[2], cc[4];
        memcpy(cc, c, sizeof cc);
        cc[PP] = 0;
        ends[0] = strata_mesh_rank_of(m, cc);
        cc[PP] = size[PP] - 1;
        ends[1] = strata_mesh_rank_of(m, cc);
        int pp_all[N];
        members(rank, size, order, 1u << PP, pp_all); // the stages, first to last
        if (ends[0] != pp_all[0] || ends[1] != pp_all[size[PP] - 1])
            bad = ST_RANK_FAIL("rank_of gives stages %d, %d; the layout %d, %d", ends[0], ends[1],
                               pp_all[0], pp_all[size[PP] - 1]);
        else
            bad = check_group(e, rank, "embedding group", ends, 2, c[PP] == 0 ? 0 : 1);
    }
    strata_mesh_destroy(m);
    return bad;
}

static int layouts_fn(int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    strata_comm_t *world = st_test_comm();
    if (!world)
        return ST_RANK_FAIL("no communicator: %s", strata_last_error());
    int bad = 0;
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0] && !bad; i++)
        bad = check_layout(world, rank, &layouts[i]);
    strata_comm_destroy(world);
    return bad;
}

static void test_layouts(void **state)
{
    (void)state;
    assert_int_equal(st_test_ranks(N, layouts_fn, NULL, NULL), 0);
}

/* ---- the order chosen on the world's fabric -------------------------------------------------- */

static const char *const paths[N] = {"r0/h0", "r0/h0", "r0/h1", "r0/h1",
                                     "r1/h2", "r1/h2", "r1/h3", "r1/h3"};

static int chosen_fn(int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    if (setenv("STRATA_TOPO_PATH", paths[rank], 1))
        return ST_RANK_FAIL("setenv");
    strata_comm_t *world = st_test_comm();
    if (!world)
        return ST_RANK_FAIL("no communicator: %s", strata_last_error());
    strata_gpt_config_t g = strata_gpt_config_default(); // C 64, L 2: P ~ 0.1 M
    strata_mesh_config_t cfg = strata_mesh_config_default();
    cfg.size[TP] = 2;
    int bad = 0;
    // Many tokens: TP's activations dominate and stay inside a host. One token: DP's gradients
    // dominate and move inside a rack; TP crosses the spine.
    for (int heavy_dp = 0; heavy_dp < 2 && !bad; heavy_dp++) {
        strata_mesh_traffic_gpt(&g, heavy_dp ? 1 : 8, heavy_dp ? 1 : 64, cfg.size, false, 0,
                                &cfg.traffic);
        strata_mesh_t *m;
        ST_RANK_CHECK_OK(strata_mesh_create(world, &cfg, &m));
        const strata_dim_t inner = heavy_dp ? DP : TP;
        int32_t me = rank, got[4];
        ST_RANK_CHECK_OK(
            strata_allgather(strata_mesh_comm(m, inner), &me, got, 1, STRATA_DTYPE_I32));
        int n_in = strata_mesh_size(m, inner), base = rank - rank % n_in;
        if (strata_mesh_order(m)[0] != inner)
            bad = ST_RANK_FAIL("innermost %s, want %s", strata_dim_name(strata_mesh_order(m)[0]),
                               strata_dim_name(inner));
        for (int i = 0; i < n_in && !bad; i++)
            if (got[i] != base + i)
                bad = ST_RANK_FAIL("%s group member %d is %d, want %d", strata_dim_name(inner), i,
                                   (int)got[i], base + i);
        char line[512] = "";
        FILE *mf = fmemopen(line, sizeof line, "w");
        strata_mesh_describe(m, mf);
        fclose(mf);
        const char *want_tp = heavy_dp ? "tp=2 across rack" : "tp=2 inside host";
        const char *want_dp = heavy_dp ? "dp=4 across host" : "dp=4 across rack";
        if (!bad && (!strstr(line, want_tp) || !strstr(line, want_dp) ||
                     !strstr(line, "chosen by the cost model") || !strstr(line, " ms/step)")))
            bad = ST_RANK_FAIL("describe: %s", line);
        if (!bad && !(strata_mesh_seconds(m, TP) > 0 && strata_mesh_seconds(m, DP) > 0))
            bad = ST_RANK_FAIL("no predicted seconds: tp %g dp %g", strata_mesh_seconds(m, TP),
                               strata_mesh_seconds(m, DP));
        strata_mesh_destroy(m);
    }
    // --order wins over the cost model: TP across the spine although its traffic is heavy.
    if (!bad) {
        strata_mesh_traffic_gpt(&g, 8, 64, cfg.size, false, 0, &cfg.traffic);
        cfg.order_given = true;
        ST_RANK_CHECK_OK(strata_order_parse("dp,cp,pp,tp", cfg.order));
        strata_mesh_t *m;
        ST_RANK_CHECK_OK(strata_mesh_create(world, &cfg, &m));
        char line[512] = "";
        FILE *mf = fmemopen(line, sizeof line, "w");
        strata_mesh_describe(m, mf);
        fclose(mf);
        if (!strstr(line, "tp=2 across rack") || !strstr(line, "order dp,cp,pp,tp (given)"))
            bad = ST_RANK_FAIL("forced order: %s", line);
        strata_mesh_destroy(m);
    }
    strata_comm_destroy(world);
    return bad;
}

static void test_chosen_on_fabric(void **state)
{
    (void)state;
    char file[] = "/tmp/strata_mesh_topo_XXXXXX";
    int fd = mkstemp(file);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"name\": \"two-racks\", \"levels\": [\n"
          " {\"name\": \"host\", \"fanout\": 2, \"bandwidth_GBps\": 8, \"latency_us\": 2},\n"
          " {\"name\": \"rack\", \"fanout\": 2, \"bandwidth_GBps\": 2.5, \"latency_us\": 25},\n"
          " {\"name\": \"spine\", \"fanout\": 2, \"bandwidth_GBps\": 0.1, \"latency_us\": 25,"
          "  \"oversubscription\": 4}]}\n",
          f);
    fclose(f);
    char env[128];
    snprintf(env, sizeof env, "STRATA_TOPO_FILE=%s", file);
    st_ranks_opts_t o = {.deadline_ms = 120000, .extra_env = env, .expect_fail_rank = -1};
    int rc = st_test_ranks(N, chosen_fn, NULL, &o);
    unlink(file);
    assert_int_equal(rc, 0);
}

/* ---- refusals -------------------------------------------------------------------------------- */

static int refused(strata_comm_t *world, const int size[4], const char *order, const char *a,
                   const char *b)
{
    strata_mesh_config_t cfg = strata_mesh_config_default();
    memcpy(cfg.size, size, sizeof cfg.size);
    if (order) {
        cfg.order_given = true;
        // Written directly: strata_order_parse would refuse a repeated name itself.
        for (int i = 0; i < 4; i++)
            cfg.order[i] = (strata_dim_t)(order[i] - '0');
    }
    strata_mesh_t *m = (strata_mesh_t *)world; // must come back NULL
    strata_status_t rc = strata_mesh_create(world, &cfg, &m);
    if (rc != STRATA_ERR_INVALID_ARG || m || !strstr(strata_last_error(), a) ||
        (b && !strstr(strata_last_error(), b)))
        return ST_RANK_FAIL("expected a refusal with '%s', got %s (%s)", a, strata_status_name(rc),
                            strata_last_error());
    return 0;
}

static int refusals_fn(int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    (void)rank;
    strata_comm_t *world = st_test_comm();
    if (!world)
        return ST_RANK_FAIL("no communicator: %s", strata_last_error());
    int bad = refused(world, (int[]){3, 1, 1, 0}, NULL,
                      "mesh: tp 3 x cp 1 x pp 1 does not divide 8 ranks", NULL);
    bad |= refused(world, (int[]){1, 1, 16, 0}, NULL, "pp 16 does not divide 8 ranks", NULL);
    bad |= refused(world, (int[]){2, 1, 1, 2}, NULL, "dp 2", "does not make the job's 8 ranks");
    bad |= refused(world, (int[]){0, 1, 1, 0}, NULL, "tp 0", "at least 1");
    bad |= refused(world, (int[]){2, 1, 1, 0}, "0103", "names tp twice", NULL);
    // After the refusals, all on every rank alike, the world still works and a mesh forms.
    strata_mesh_config_t cfg = strata_mesh_config_default();
    strata_mesh_t *m;
    ST_RANK_CHECK_OK(strata_mesh_create(world, &cfg, &m));
    if (strata_mesh_size(m, DP) != 8 || strata_mesh_embed_comm(m))
        bad |= ST_RANK_FAIL("default mesh: dp %d", strata_mesh_size(m, DP));
    strata_mesh_destroy(m);
    // A split that fails names the group it was forming: abort the job, then ask for a mesh. The
    // barrier keeps the first abort from reaching a rank still forming the mesh above; it may
    // itself fail on a rank that a faster rank's abort reaches before its barrier completes.
    (void)strata_barrier(world);
    strata_comm_abort(world, "mr_mesh: testing a failed split");
    strata_status_t rc = strata_mesh_create(world, &cfg, &m);
    if (rc >= 0 || m || !strstr(strata_last_error(), "mesh: forming the tp groups"))
        bad |= ST_RANK_FAIL("failed split: %s (%s)", strata_status_name(rc), strata_last_error());
    strata_comm_destroy(world);
    return bad;
}

static void test_refusals(void **state)
{
    (void)state;
    assert_int_equal(st_test_ranks(N, refusals_fn, NULL, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_chosen_on_fabric),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
