/* Link calibration at communicator creation (comm/calibrate.c), on ranks that know only their
 * paths (STRATA_TOPO_PATH; ranks on one machine pretend to sit in hosts and racks, over TCP when
 * STRATA_HOST_ID tells them apart): every rank ends with bit-identical levels, predictions and
 * algorithm choices, each measured pair meets at its level, splits keep the calibration and
 * collectives still compute right. And when it must not run: every rank on one host (auto), a
 * cluster file giving the links (auto), one rank saying off (nobody measures, nobody hangs); a
 * bad STRATA_TOPO_CALIBRATE is refused by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/st_test.h"
#include "strata/link_calib.h"
#include "strata/netmodel.h"
#include "strata/topo.h"

typedef struct setup {
    int n;
    const char *paths[8];
    bool host_ids;    /* each path's host is a host of its own (STRATA_HOST_ID): TCP between them */
    int off_rank;     /* this rank sets STRATA_TOPO_CALIBRATE=off (-1: none) */
    bool want_done;   /* the communicator calibrates */
    const char *file; /* STRATA_TOPO_FILE, or NULL */
} setup_t;

static int place(int rank, const setup_t *s)
{
    if (setenv("STRATA_TOPO_PATH", s->paths[rank], 1) != 0 ||
        (s->host_ids && setenv("STRATA_HOST_ID", s->paths[rank], 1) != 0) ||
        (s->off_rank == rank && setenv("STRATA_TOPO_CALIBRATE", "off", 1) != 0) ||
        (s->file && setenv("STRATA_TOPO_FILE", s->file, 1) != 0))
        return ST_RANK_FAIL("setenv");
    return 0;
}

#define NSIZES 5
static const size_t sizes[NSIZES] = {8, 4096, 1u << 20, 16u << 20, 64u << 20};

/* What every rank must agree on, as doubles: per level bandwidth, latency, oversubscription,
 * efficiency; per size the predicted allreduce time and the chosen algorithm's index. */
static int digest(strata_comm_t *c, double *d)
{
    const strata_fabric_t *f = strata_comm_fabric(c);
    int k = 0;
    for (int l = 0; l < STRATA_TOPO_MAX_LEVELS; l++) {
        const strata_topo_level_t *lv = &f->topo.level[l];
        bool in = l < f->topo.nlevels;
        d[k++] = in ? lv->bw_Bps : 0;
        d[k++] = in ? lv->latency_s : 0;
        d[k++] = in ? lv->oversub : 0;
        d[k++] = in ? lv->efficiency : 0;
    }
    for (int i = 0; i < NSIZES; i++) {
        const char *algo = strata_comm_algo_for(c, STRATA_COLL_ALLREDUCE, sizes[i], false), *name;
        int idx = -1;
        for (int j = 0; strata_algo_info(STRATA_COLL_ALLREDUCE, j, &name, NULL); j++)
            if (!strcmp(name, algo))
                idx = j;
        d[k++] = strata_comm_predict(c, STRATA_COLL_ALLREDUCE, sizes[i], false);
        d[k++] = idx;
    }
    return k;
}

#define DIGEST (4 * STRATA_TOPO_MAX_LEVELS + 2 * NSIZES)

static int agree(strata_comm_t *c, int rank, int n, const char *what)
{
    double mine[DIGEST], *all = malloc((size_t)n * sizeof mine);
    if (!all)
        return ST_RANK_FAIL("out of memory");
    digest(c, mine);
    ST_RANK_CHECK_OK(strata_allgather(c, mine, all, DIGEST, STRATA_DTYPE_F64));
    int bad = 0;
    for (int r = 0; r < n && !bad; r++)
        for (int i = 0; i < DIGEST && !bad; i++)
            if (memcmp(&all[(size_t)r * DIGEST + i], &all[i], sizeof(double)))
                bad = ST_RANK_FAIL("%s: rank %d has %.17g at digest entry %d, rank 0 %.17g", what,
                                   r, all[(size_t)r * DIGEST + i], i, all[i]);
    (void)rank;
    free(all);
    return bad;
}

static int calibrated(int rank, int n, void *arg)
{
    const setup_t *s = arg;
    if (place(rank, s))
        return 1;
    strata_comm_t *c = st_test_comm();
    const strata_link_calib_t *cal = strata_comm_calibration(c);
    const strata_fabric_t *f = strata_comm_fabric(c);
    int bad = 0;
    if (cal->done != s->want_done)
        bad = ST_RANK_FAIL("calibrated: %d, expected %d", cal->done, s->want_done);
    for (int l = 0; cal->done && l < f->topo.nlevels && !bad; l++) {
        const strata_link_sample_t *sm = &cal->sample[l];
        if (!sm->measured)
            continue;
        if (strata_fabric_common_level(f, sm->a, sm->b) != l)
            bad = ST_RANK_FAIL("level %d was measured between ranks %d and %d, which meet at %d", l,
                               sm->a, sm->b, strata_fabric_common_level(f, sm->a, sm->b));
        if (memcmp(&cal->level[l], &f->topo.level[l], sizeof cal->level[l]))
            bad = ST_RANK_FAIL("level %d: the fabric does not price with the calibrated link", l);
        if (!(f->topo.level[l].bw_Bps > 0) || !(f->topo.level[l].oversub >= 1))
            bad = ST_RANK_FAIL("level %d: bandwidth %g, oversubscription %g", l,
                               f->topo.level[l].bw_Bps, f->topo.level[l].oversub);
    }
    if (!s->want_done && !s->file) { // nothing measured: strata's defaults
        strata_topo_t def;
        strata_fabric_default_levels(f->topo.nlevels, &def);
        for (int l = 0; l < f->topo.nlevels && !bad; l++)
            if (f->topo.level[l].bw_Bps != def.level[l].bw_Bps ||
                f->topo.level[l].latency_s != def.level[l].latency_s)
                bad = ST_RANK_FAIL("level %d: not strata's default link", l);
    }
    if (!bad)
        bad = agree(c, rank, n, "world");
    // A split prices with its parent's calibrated links, the same on every member.
    strata_comm_t *half;
    ST_RANK_CHECK_OK(strata_comm_split(c, rank % 2, rank, &half));
    const strata_fabric_t *hf = strata_comm_fabric(half);
    if (!bad && strata_comm_calibration(half)->done != cal->done)
        bad = ST_RANK_FAIL("the split does not report its parent's calibration");
    for (int l = 0; l < hf->topo.nlevels && !bad; l++)
        if (memcmp(&hf->topo.level[l], &f->topo.level[l], sizeof hf->topo.level[l]))
            bad = ST_RANK_FAIL("the split's level %d differs from its parent's", l);
    if (!bad)
        bad = agree(half, strata_comm_rank(half), strata_comm_size(half), "split");
    // And the calibrated communicator still computes.
    int64_t x = rank, sum = -1;
    if (!bad)
        ST_RANK_CHECK_OK(strata_allreduce(c, &x, &sum, 1, STRATA_DTYPE_I64, STRATA_OP_SUM));
    if (!bad && sum != (int64_t)n * (n - 1) / 2)
        bad = ST_RANK_FAIL("allreduce gave %lld", (long long)sum);
    strata_comm_destroy(half);
    strata_comm_destroy(c);
    return bad;
}

static void run(const setup_t *s, const char *env)
{
    st_ranks_opts_t o = {.deadline_ms = 120000, .extra_env = env, .expect_fail_rank = -1};
    assert_int_equal(st_test_ranks(s->n, calibrated, (void *)s, &o), 0);
}

// Racks of 3 and 2 ranks; host h0 holds two, so the host level is measured too.
static const setup_t racks_3_2 = {
    5, {"r0/h0", "r1/h1", "r0/h0", "r0/h2", "r1/h1"}, .off_rank = -1, .want_done = true};

/* 3 levels, uneven, each host a host of its own: auto measures. */
static const setup_t zones = {8,
                              {"z0/r0/h0", "z0/r0/h0", "z0/r1/h1", "z1/r2/h2", "z1/r2/h2",
                               "z1/r3/h3", "z0/r1/h4", "z1/r3/h3"},
                              .host_ids = true,
                              .off_rank = -1,
                              .want_done = true};

static void test_forced_on_one_host(void **state)
{
    (void)state;
    run(&racks_3_2, "STRATA_TOPO_CALIBRATE=on;STRATA_TOPO_CALIBRATE_MS=5");
}

static void test_auto_across_hosts(void **state)
{
    (void)state;
    run(&zones, "STRATA_TOPO_CALIBRATE_MS=5");
}

static void test_auto_one_host_measures_nothing(void **state)
{
    (void)state;
    setup_t s = racks_3_2;
    s.want_done = false;
    run(&s, NULL); // every rank on this machine: nothing to learn, nothing spent
}

static void test_one_rank_off(void **state)
{
    (void)state;
    setup_t s = zones;
    s.off_rank = 5;
    s.want_done = false; // nobody measures (and nobody waits for rank 5 to)
    run(&s, "STRATA_TOPO_CALIBRATE_MS=5");
}

static void test_cluster_file(void **state)
{
    (void)state;
    char file[] = "/tmp/strata_calib_XXXXXX";
    int fd = mkstemp(file);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"name\": \"given\", \"levels\": [\n"
          " {\"name\": \"host\", \"fanout\": 2, \"bandwidth_GBps\": 8, \"latency_us\": 2},\n"
          " {\"name\": \"rack\", \"fanout\": 2, \"bandwidth_GBps\": 0.125, \"latency_us\": 50},\n"
          " {\"name\": \"zone\", \"fanout\": 2, \"bandwidth_GBps\": 0.125, \"latency_us\": 80},\n"
          " {\"name\": \"spine\", \"fanout\": 2, \"bandwidth_GBps\": 0.125, \"latency_us\": 90,"
          "  \"oversubscription\": 8}]}\n",
          f);
    fclose(f);
    setup_t s = zones;
    s.file = file;
    s.want_done = false; // auto: the file gives the links
    run(&s, "STRATA_TOPO_CALIBRATE_MS=5");
    s.want_done = true; // on: measured over them
    run(&s, "STRATA_TOPO_CALIBRATE=on;STRATA_TOPO_CALIBRATE_MS=5");
    unlink(file);
}

static int refused(int rank, int n, void *arg)
{
    (void)n;
    if (place(rank, arg))
        return 1;
    strata_comm_t *c = NULL;
    strata_status_t rc = strata_comm_create_from_env(&c);
    if (rc != STRATA_ERR_INVALID_ARG || c)
        return ST_RANK_FAIL("STRATA_TOPO_CALIBRATE=sometimes: %s", strata_status_name(rc));
    if (!strstr(strata_last_error(), "STRATA_TOPO_CALIBRATE") ||
        !strstr(strata_last_error(), "sometimes"))
        return ST_RANK_FAIL("the error does not name the knob and value: %s", strata_last_error());
    return 0;
}

static void test_bad_value(void **state)
{
    (void)state;
    st_ranks_opts_t o = {.deadline_ms = 60000,
                         .extra_env = "STRATA_TOPO_CALIBRATE=sometimes",
                         .expect_fail_rank = -1};
    assert_int_equal(st_test_ranks(racks_3_2.n, refused, (void *)&racks_3_2, &o), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forced_on_one_host),
        cmocka_unit_test(test_auto_across_hosts),
        cmocka_unit_test(test_auto_one_host_measures_nothing),
        cmocka_unit_test(test_one_rank_off),
        cmocka_unit_test(test_cluster_file),
        cmocka_unit_test(test_bad_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
