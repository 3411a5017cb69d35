/* Fabrics and transfer plans: placement from paths (irregular trees), tree order, and every plan
 * (ring, ring in tree order, hierarchical, pipelined) executed by a serial simulator that checks
 * the result against the plain sum and that no slot reads what it writes. Also the cost model's
 * ordering of the plans on an oversubscribed two-rack fabric. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/st_test.h"
#include "strata/netmodel.h"
#include "strata/topo.h"

static void levels3(strata_topo_t *t, double oversub)
{
    strata_fabric_default_levels(3, t);
    strcpy(t->level[1].name, "rack");
    strcpy(t->level[2].name, "spine");
    t->level[1].bw_Bps = 1e8;
    t->level[2].bw_Bps = 1e8;
    t->level[2].oversub = oversub;
}

static void make(const char *const *paths, int n, int nlevels, strata_fabric_t *f)
{
    strata_topo_t t;
    strata_fabric_default_levels(nlevels, &t);
    assert_int_equal(strata_fabric_from_paths(&t, n, paths, f), STRATA_OK);
}

static void test_paths_and_order(void **state)
{
    (void)state;
    // Round-robin numbering across racks, as a rack-blind launcher does; rack b has 3 hosts.
    const char *paths[] = {"ra/h1", "rb/h1", "ra/h2", "rb/h2", "ra/h3", "rb/h3", "rb/h4"};
    strata_fabric_t f;
    make(paths, 7, 3, &f);
    assert_int_equal(f.nunits[0], 7); // "h1" in ra and in rb are different hosts
    assert_int_equal(f.nunits[1], 2);
    assert_int_equal(f.nunits[2], 1);
    assert_int_equal(strata_fabric_common_level(&f, 0, 2), 1);
    assert_int_equal(strata_fabric_common_level(&f, 0, 1), 2);
    assert_int_equal(strata_fabric_common_level(&f, 3, 3), -1);
    assert_int_equal(strata_fabric_unit_size(&f, 1, 1), 4);
    int order[7];
    strata_fabric_tree_order(&f, order);
    int want[7] = {0, 2, 4, 1, 3, 5, 6};
    assert_memory_equal(order, want, sizeof want);
    strata_fabric_free(&f);

    for (int i = 0; i < 4; i++) {
        const char *bad[] = {"ra//h1", "ra/h1/", "", "a/b/c/d/e/f/g/h/i"};
        strata_topo_t lv;
        strata_fabric_default_levels(3, &lv);
        assert_int_equal(strata_fabric_from_paths(&lv, 1, &bad[i], &f), STRATA_ERR_INVALID_ARG);
        assert_non_null(strstr(strata_last_error(), bad[i]));
    }
    strata_topo_t t;
    strata_fabric_default_levels(2, &t);
    assert_int_equal(strata_fabric_from_paths(&t, 2, (const char *[]){"a/b/c", "a/b/d"}, &f),
                     STRATA_ERR_INVALID_ARG);
    // The outermost unit may be named, with a leading '/' as strata place writes paths.
    strata_fabric_default_levels(3, &t);
    assert_int_equal(strata_fabric_from_paths(
                         &t, 3, (const char *[]){"/dc/r0/n1", "/dc/r1/n1", "/dc/r0/n2"}, &f),
                     STRATA_OK);
    assert_int_equal(f.nunits[0], 3);
    assert_int_equal(f.nunits[1], 2);
    assert_int_equal(strata_fabric_common_level(&f, 0, 2), 1);
    strata_fabric_free(&f);
}

/* Runs a plan serially: vec[r][i] per rank. Fails on a slot that both reads and writes one
 * element of a rank, or on a transfer outside the vector. */
static void simulate(const strata_xfer_plan_t *p, int n, size_t count, double **vec, bool strict)
{
    int maxslot = 0;
    for (int i = 0; i < p->n; i++)
        maxslot = p->x[i].slot > maxslot ? p->x[i].slot : maxslot;
    unsigned char *touch = malloc((size_t)n * count + 1); // 1 read, 2 written
    double **snap = malloc((size_t)p->n * sizeof *snap);
    for (int s = 0; s <= maxslot; s++) {
        memset(touch, 0, (size_t)n * count + 1);
        for (int i = 0; i < p->n; i++) {
            const strata_xfer_t *x = &p->x[i];
            snap[i] = NULL;
            if (x->slot != s)
                continue;
            assert_true(x->off + x->len <= count);
            assert_true(x->src != x->dst);
            snap[i] = malloc(x->len * sizeof(double) + 1);
            memcpy(snap[i], vec[x->src] + x->off, x->len * sizeof(double));
            for (size_t e = 0; e < x->len; e++)
                touch[(size_t)x->src * count + x->off + e] |= 1;
        }
        for (int i = 0; i < p->n; i++) {
            const strata_xfer_t *x = &p->x[i];
            if (!snap[i])
                continue;
            for (size_t e = 0; e < x->len; e++) {
                unsigned char *t = &touch[(size_t)x->dst * count + x->off + e];
                if (*t && strict) // read by a send of this slot, or written twice
                    fail_msg("slot %d: rank %d element %zu both sent and received", s, x->dst,
                             x->off + e);
                *t = 2;
                double v = snap[i][e];
                vec[x->dst][x->off + e] = x->reduce ? vec[x->dst][x->off + e] + v : v;
            }
            free(snap[i]);
        }
    }
    free(touch);
    free(snap);
}

static void check_plan(const strata_fabric_t *f, strata_plan_kind_t kind, strata_plan_phase_t ph,
                       size_t per_block_max, int segments, bool regular)
{
    const int n = f->nranks;
    strata_xfer_pipe_t pipe = {segments, segments > 1 ? 2 : 1};
    const int K = kind == STRATA_PLAN_HIER ? segments : 1;
    size_t blen[64], off[64 * 4], len[64 * 4], count = 0;
    for (int b = 0; b < n; b++) // uneven blocks: 0, 1, odd sizes
        blen[b] = per_block_max ? (size_t)(b * 7 + 3) % (per_block_max + 1) : 0;
    assert_int_equal(strata_xfer_plan_layout(f, kind, blen, &pipe, off, len), STRATA_OK);
    for (int i = 0; i < n * K; i++)
        count += len[i];
    int *owner = malloc((count + 1) * sizeof *owner); // which block each element belongs to
    for (int i = 0; i < n * K; i++)
        for (size_t e = off[i]; e < off[i] + len[i]; e++)
            owner[e] = i % n;
    double **vec = malloc((size_t)n * sizeof *vec), *sum = calloc(count + 1, sizeof *sum);
    for (int r = 0; r < n; r++) {
        vec[r] = malloc((count + 1) * sizeof(double));
        for (size_t i = 0; i < count; i++) {
            bool have = ph != STRATA_PHASE_ALLGATHER || owner[i] == r;
            vec[r][i] = have ? (double)((r + 1) * 1000 + (int)i % 997) : -1;
            sum[i] += vec[r][i];
        }
    }
    strata_xfer_plan_t all;
    assert_int_equal(strata_xfer_plan_build(f, kind, ph, off, len, &pipe, -1, &all), STRATA_OK);
    // The per-rank plans are exactly the whole plan's transfers of that rank.
    int mine_total = 0;
    for (int r = 0; r < n; r++) {
        strata_xfer_plan_t mine;
        assert_int_equal(strata_xfer_plan_build(f, kind, ph, off, len, &pipe, r, &mine), STRATA_OK);
        int k = 0;
        for (int i = 0; i < all.n; i++)
            if (all.x[i].src == r || all.x[i].dst == r) {
                assert_true(k < mine.n);
                const strata_xfer_t *x = &all.x[i], *y = &mine.x[k];
                assert_true(x->slot == y->slot && x->src == y->src && x->dst == y->dst &&
                            x->off == y->off && x->len == y->len && x->reduce == y->reduce);
                k++;
            }
        assert_int_equal(k, mine.n);
        mine_total += mine.n;
        strata_xfer_plan_free(&mine);
    }
    assert_int_equal(mine_total, 2 * all.n);
    // On a regular tree the layout makes every ring step one message per neighbour and piece
    // in flight: no more transfers than ranks x slots x segments.
    if (regular && kind != STRATA_PLAN_RING && all.n > n * all.nslots * K)
        fail_msg("%s: %d transfers in %d slots on %d ranks", strata_plan_kind_name(kind), all.n,
                 all.nslots, n);
    simulate(&all, n, count, vec, true);
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++) {
            int b = owner[i];
            double want =
                ph == STRATA_PHASE_ALLGATHER ? (double)((b + 1) * 1000 + (int)i % 997) : sum[i];
            if (ph == STRATA_PHASE_REDUCE_SCATTER && b != r)
                continue;
            if (vec[r][i] != want)
                fail_msg("%s phase %d segs %d: rank %d element %zu is %g, want %g",
                         strata_plan_kind_name(kind), ph, segments, r, i, vec[r][i], want);
        }
    strata_xfer_plan_free(&all);
    for (int r = 0; r < n; r++)
        free(vec[r]);
    free(vec);
    free(sum);
    free(owner);
}

/* The flat algorithms' patterns, priced on fabrics (the communicator runs its own schedules for
 * them): executed with start-of-slot snapshots they give the right answer. */
static void test_flat_patterns(void **state)
{
    (void)state;
    const strata_plan_phase_t phases[] = {STRATA_PHASE_ALLREDUCE, STRATA_PHASE_ALLREDUCE,
                                          STRATA_PHASE_BCAST, STRATA_PHASE_REDUCE};
    const strata_plan_kind_t kinds[] = {STRATA_PLAN_HALVING_DOUBLING,
                                        STRATA_PLAN_RECURSIVE_DOUBLING, STRATA_PLAN_BINOMIAL,
                                        STRATA_PLAN_BINOMIAL};
    for (int n = 1; n <= 11; n++) {
        const char *paths[11];
        char names[11][32];
        for (int r = 0; r < n; r++) {
            snprintf(names[r], sizeof names[r], "r%d/h%d", r % 2, r);
            paths[r] = names[r];
        }
        strata_fabric_t f;
        make(paths, n, 3, &f);
        for (int t = 0; t < 4; t++) {
            assert_true(strata_plan_kind_serves(kinds[t], phases[t]));
            assert_false(strata_plan_kind_serves(kinds[t], STRATA_PHASE_ALLGATHER));
            size_t len[11], off[11], count = 0;
            for (int b = 0; b < n; b++) {
                len[b] = (size_t)(b % 3 + 1);
                off[b] = count;
                count += len[b];
            }
            double **vec = malloc((size_t)n * sizeof *vec), *sum = calloc(count, sizeof *sum);
            for (int r = 0; r < n; r++) {
                vec[r] = malloc(count * sizeof(double));
                for (size_t i = 0; i < count; i++) {
                    vec[r][i] = (double)((r + 1) * 100 + (int)i);
                    sum[i] += vec[r][i];
                }
            }
            strata_xfer_plan_t p;
            assert_int_equal(
                strata_xfer_plan_build(&f, kinds[t], phases[t], off, len, NULL, -1, &p), STRATA_OK);
            simulate(&p, n, count, vec, false);
            for (int r = 0; r < n; r++)
                for (size_t i = 0; i < count; i++) {
                    double want = phases[t] == STRATA_PHASE_BCAST ? (double)(100 + (int)i) : sum[i];
                    if (phases[t] == STRATA_PHASE_REDUCE && r != 0)
                        continue;
                    if (vec[r][i] != want)
                        fail_msg("%s phase %d on %d ranks: rank %d element %zu is %g, want %g",
                                 strata_plan_kind_name(kinds[t]), phases[t], n, r, i, vec[r][i],
                                 want);
                }
            assert_true(strata_netmodel_fabric_cost(
                            &f,
                            phases[t] == STRATA_PHASE_BCAST    ? STRATA_COLL_BCAST
                            : phases[t] == STRATA_PHASE_REDUCE ? STRATA_COLL_REDUCE
                                                               : STRATA_COLL_ALLREDUCE,
                            kinds[t], 4096, 4, NULL) >= 0);
            strata_xfer_plan_free(&p);
            for (int r = 0; r < n; r++)
                free(vec[r]);
            free(vec);
            free(sum);
        }
        strata_fabric_free(&f);
    }
}

static void check_all_plans(const char *const *paths, int n, int nlevels, bool regular)
{
    strata_fabric_t f;
    make(paths, n, nlevels, &f);
    for (int k = 0; k <= STRATA_PLAN_HIER; k++)
        for (int ph = 1; ph <= 3; ph++)
            for (int segs = 1; segs <= 3; segs += 2)
                for (size_t m = 0; m <= 9; m += 9)
                    check_plan(&f, (strata_plan_kind_t)k, (strata_plan_phase_t)ph, m, segs,
                               regular);
    strata_fabric_free(&f);
}

static void test_plans_regular(void **state)
{
    (void)state;
    const char *two_racks[] = {"a/h0", "b/h4", "a/h1", "b/h5", "a/h2", "b/h6", "a/h3", "b/h7"};
    check_all_plans(two_racks, 8, 3, true);
    const char *hosts[] = {"h0", "h0", "h1", "h1", "h2", "h2"}; // 3 hosts of 2 ranks
    check_all_plans(hosts, 6, 2, true);
    const char *one[] = {"h0"};
    check_all_plans(one, 1, 2, true);
    const char *flat[] = {"h0", "h1", "h2", "h3", "h4"};
    check_all_plans(flat, 5, 2, true);
}

static void test_plans_irregular(void **state)
{
    (void)state;
    // Racks of 3 and 5 hosts, hosts of 1..3 ranks, a lone host in its own rack, 3 levels deep.
    const char *odd[] = {"z0/r0/h0", "z0/r0/h0", "z0/r0/h1", "z0/r1/h2", "z0/r1/h2", "z0/r1/h2",
                         "z1/r2/h3", "z1/r3/h4", "z1/r3/h5", "z1/r3/h5", "z0/r1/h6"};
    check_all_plans(odd, 11, 4, false);
    const char *lone[] = {"r0/h0", "r0/h0", "r0/h0", "r1/h1"};
    check_all_plans(lone, 4, 3, false);
}

static const char *write_tmp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/strata_cluster_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* A cluster file's "hosts" place hosts by Slurm hostlist; bad entries name file and line. */
static void test_cluster_hosts(void **state)
{
    (void)state;
    const char *levels = "{\"levels\": [\n"
                         " {\"name\": \"host\", \"fanout\": 2, \"bandwidth_GBps\": 8},\n"
                         " {\"name\": \"rack\", \"fanout\": 4, \"bandwidth_GBps\": 1},\n"
                         " {\"name\": \"spine\", \"fanout\": 2, \"bandwidth_GBps\": 1}],\n";
    char text[1024];
    snprintf(text, sizeof text,
             "%s \"hosts\": [\n  {\"names\": \"n[01-04]\", \"path\": \"r1\"},\n"
             "  {\"names\": \"n[05-08],gpu9\", \"path\": \"r2\"}]}\n",
             levels);
    const char *f = write_tmp(text);
    char path[128];
    assert_int_equal(strata_topo_host_path(f, "n06", path, sizeof path), STRATA_OK);
    assert_string_equal(path, "r2/n06");
    assert_int_equal(strata_topo_host_path(f, "gpu9", path, sizeof path), STRATA_OK);
    assert_string_equal(path, "r2/gpu9");
    assert_int_equal(strata_topo_host_path(f, "n09", path, sizeof path), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "n09"));
    strata_topo_t t;
    assert_int_equal(strata_topo_load(f, &t), STRATA_OK);
    assert_true(strata_topo_file_is_json(f));
    unlink(f);

    const char *bad[][2] = {
        {" \"hosts\": [\n  {\"names\": \"n[01-04\", \"path\": \"r1\"}]}\n", ":6:"},
        {" \"hosts\": [\n  {\"names\": \"n1\", \"path\": \"r1//x\"}]}\n", "path"},
        {" \"hosts\": [\n  {\"names\": \"n1\", \"rack\": \"r1\"}]}\n", "rack"},
        {" \"hosts\": {\"names\": \"n1\"}}\n", "array"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "%s%s", levels, bad[i][0]);
        f = write_tmp(text);
        strata_status_t rc = strata_topo_load(f, &t);
        if (rc != STRATA_ERR_PARSE || !strstr(strata_last_error(), bad[i][1]) ||
            !strstr(strata_last_error(), f))
            fail_msg("bad hosts %zu: expected a parse error with '%s', got %d: %s", i, bad[i][1],
                     rc, strata_last_error());
        unlink(f);
    }
    f = write_tmp("SwitchName=s0 Nodes=n1\n");
    assert_false(strata_topo_file_is_json(f));
    unlink(f);
}

static void test_model_orders_plans(void **state)
{
    (void)state;
    // 2 racks x 4 hosts, one rank per host, numbered round-robin; rack uplinks 8:1 oversubscribed.
    const char *paths[] = {"a/h0", "b/h4", "a/h1", "b/h5", "a/h2", "b/h6", "a/h3", "b/h7"};
    strata_topo_t t;
    levels3(&t, 8);
    strata_fabric_t f;
    assert_int_equal(strata_fabric_from_paths(&t, 8, paths, &f), STRATA_OK);
    double bytes = 64.0 * 1024 * 1024;
    strata_xfer_pipe_t pipe = {0, 0};
    double oblivious =
        strata_netmodel_fabric_cost(&f, STRATA_COLL_ALLREDUCE, STRATA_PLAN_RING, bytes, 4, NULL);
    double aware = strata_netmodel_fabric_cost(&f, STRATA_COLL_ALLREDUCE, STRATA_PLAN_RING_TREE,
                                               bytes, 4, NULL);
    double hier =
        strata_netmodel_fabric_cost(&f, STRATA_COLL_ALLREDUCE, STRATA_PLAN_HIER, bytes, 4, &pipe);
    // A ring step moves bytes/8; the oblivious ring puts 4 flows on each uplink (R/2 shared by
    // 4), the aware ring one: 14 steps of (bytes/8)/(R/8) and of (bytes/8)/(R/2).
    double R = 1e8, step = bytes / 8;
    assert_float_equal(oblivious, 14 * (25e-6 + step / (R / 8)), 1e-6 * oblivious);
    assert_float_equal(aware, 14 * (25e-6 + step / (R / 2)), 1e-6 * aware);
    assert_true(hier < aware && aware < oblivious);
    assert_true(pipe.segments >= 1 && pipe.stagger >= 1);
    // Ring in tree order: at most one flow per direction through a rack uplink in any slot.
    size_t off[8], len[8];
    for (int b = 0; b < 8; b++) {
        off[b] = (size_t)b * 100;
        len[b] = 100;
    }
    // 256 ranks, 4 levels: pricing the hierarchical plan (its whole pipeline grid) stays quick.
    char names[256][32];
    const char *big[256];
    for (int i = 0; i < 256; i++) {
        snprintf(names[i], sizeof names[i], "z%d/r%d/h%d", i % 4, (i / 4) % 8, i);
        big[i] = names[i];
    }
    strata_fabric_t fb;
    strata_topo_t t4;
    strata_fabric_default_levels(4, &t4);
    assert_int_equal(strata_fabric_from_paths(&t4, 256, big, &fb), STRATA_OK);
    assert_true(strata_netmodel_fabric_cost(&fb, STRATA_COLL_ALLREDUCE, STRATA_PLAN_HIER, bytes, 4,
                                            NULL) > 0);
    strata_fabric_free(&fb);
    strata_xfer_plan_t p;
    assert_int_equal(strata_xfer_plan_build(&f, STRATA_PLAN_RING_TREE, STRATA_PHASE_ALLREDUCE, off,
                                            len, NULL, -1, &p),
                     STRATA_OK);
    for (int s = 0; s < p.nslots; s++) {
        int cross = 0;
        for (int i = 0; i < p.n; i++)
            cross +=
                p.x[i].slot == s && strata_fabric_common_level(&f, p.x[i].src, p.x[i].dst) == 2;
        assert_int_equal(cross, 2);
    }
    strata_xfer_plan_free(&p);
    strata_fabric_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths_and_order), cmocka_unit_test(test_plans_regular),
        cmocka_unit_test(test_plans_irregular), cmocka_unit_test(test_flat_patterns),
        cmocka_unit_test(test_cluster_hosts),   cmocka_unit_test(test_model_orders_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
