/* Placement on hand-made small clusters where the optimum is known: irregular leaves, busy and
 * failed hosts, pipelines that must not straddle a spine, a brute-force check of the optimum, the
 * spare-replacement rule, output syntax (Slurm hostfile, Open MPI rankfile, environment), the
 * `strata plan --json` reader, and refusal of invalid inputs. */
#include "harness/st_test.h"
#include "strata/sched.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* leaf1 n01-04, leaf2 n05-08 under spine1; leaf3 n09-10 (irregular), leaf4 n11-16 under spine2. */
static const char *tree_conf = "SwitchName=leaf1 Nodes=n[01-04]\n"
                               "SwitchName=leaf2 Nodes=n[05-08]\n"
                               "SwitchName=leaf3 Nodes=n[09-10]\n"
                               "SwitchName=leaf4 Nodes=n[11-16]\n"
                               "SwitchName=spine1 Switches=leaf[1-2]\n"
                               "SwitchName=spine2 Switches=leaf[3-4]\n"
                               "SwitchName=core Switches=spine[1-2]\n";

static void params(strata_topo_t *t)
{
    strata_topo_init(t, "small");
    const char *names[] = {"host", "leaf", "spine", "core"};
    double bw[] = {450e9, 50e9, 50e9, 50e9}, over[] = {1, 1, 2, 4}, lat[] = {3e-6, 4e-6, 6e-6, 9e-6};
    for (int i = 0; i < 4; i++) {
        strata_topo_level_t lv = {.fanout = i == 0 ? 4 : 2, .bw_Bps = bw[i], .latency_s = lat[i],
                                  .oversub = over[i],
                                  .link_class = i ? STRATA_LINK_SCALE_OUT : STRATA_LINK_SCALE_UP};
        snprintf(lv.name, sizeof lv.name, "%s", names[i]);
        assert_int_equal(strata_topo_add_level(t, &lv), STRATA_OK);
    }
}

static void small_cluster(strata_cluster_t *c, const char *state)
{
    strata_slurm_topo_t st;
    strata_topo_t p;
    params(&p);
    assert_int_equal(strata_slurm_topo_parse(tree_conf, "tree.conf", &st), STRATA_OK);
    assert_int_equal(strata_cluster_from_slurm(&st, &p, 4, c), STRATA_OK);
    strata_slurm_topo_free(&st);
    if (state)
        assert_int_equal(strata_cluster_parse_state(c, state, "state"), STRATA_OK);
}

static strata_job_t job_of(int tp, int pp, int dp)
{
    strata_job_t j = strata_job_default();
    j.tp = tp;
    j.pp = pp;
    j.dp = dp;
    return j;
}

static int leaf_of(const strata_cluster_t *c, int h)
{
    return c->hosts[h].dom[1];
}

static void test_cluster_levels(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_cluster(&c, NULL);
    assert_int_equal(c.nhosts, 16);
    assert_int_equal(c.topo.nlevels, 4);
    assert_int_equal(c.ndom[1], 4);
    assert_int_equal(c.ndom[2], 2);
    assert_int_equal(c.ndom[3], 1);
    int n10 = strata_cluster_find_host(&c, "n10");
    assert_true(n10 >= 0);
    char buf[128];
    assert_string_equal(strata_cluster_host_path(&c, n10, buf, sizeof buf),
                        "/core/spine2/leaf3/n10");
    assert_int_equal(strata_cluster_find_host(&c, "n99"), -1);
    strata_cluster_free(&c);
}

/* A 4-host job fits one leaf: best fit takes the smallest leaf that holds it whole. */
static void test_one_leaf(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_cluster(&c, "n01 busy\nn[11-12] failed\n");
    strata_job_t j = job_of(4, 2, 2);
    strata_placement_t p;
    assert_int_equal(strata_place(&c, &j, NULL, &p), STRATA_OK);
    assert_int_equal(p.nhosts, 4);
    for (int k = 0; k < p.nhosts; k++) {
        assert_int_equal(c.hosts[p.hosts[k]].state, STRATA_HOST_FREE);
        assert_int_equal(leaf_of(&c, p.hosts[k]), leaf_of(&c, p.hosts[0]));
    }
    assert_int_equal(p.cost.hosts_per_level[1], 1);
    // TP stays inside the host: its level is the host level.
    assert_int_equal(p.cost.dim_level[STRATA_DIM_TP], 0);
    assert_int_equal(p.cost.dim_level[STRATA_DIM_PP], 1);
    strata_placement_free(&p);
    strata_cluster_free(&c);
}

/* The irregular 6-host leaf is the only one that holds a 6-host job. */
static void test_irregular_leaf(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_cluster(&c, NULL);
    strata_job_t j = job_of(4, 2, 3);
    strata_placement_t p;
    assert_int_equal(strata_place(&c, &j, NULL, &p), STRATA_OK);
    int leaf4 = leaf_of(&c, strata_cluster_find_host(&c, "n11"));
    for (int k = 0; k < p.nhosts; k++)
        assert_int_equal(leaf_of(&c, p.hosts[k]), leaf4);
    strata_placement_free(&p);
    strata_cluster_free(&c);
}

/* Ten hosts need both spines; no pipeline (2 hosts) may straddle them, and the split is even in
 * whole pipelines (6 + 4), and topo beats hostname order, which crosses with n09-n10's leaf. */
static void test_pipelines_whole(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_cluster(&c, "n[01,05] busy\n");
    strata_job_t j = job_of(4, 2, 5);
    strata_placement_t p, ff;
    assert_int_equal(strata_place(&c, &j, NULL, &p), STRATA_OK);
    int per_spine[2] = {0, 0};
    for (int k = 0; k < p.nhosts; k += 2) {
        assert_int_equal(c.hosts[p.hosts[k]].dom[2], c.hosts[p.hosts[k + 1]].dom[2]);
        per_spine[c.hosts[p.hosts[k]].dom[2]] += 2;
    }
    assert_true((per_spine[0] == 6 && per_spine[1] == 4) ||
                (per_spine[0] == 4 && per_spine[1] == 6));
    strata_place_opts_t o = strata_place_opts_default();
    o.policy = STRATA_POLICY_FIRST_FIT;
    assert_int_equal(strata_place(&c, &j, &o, &ff), STRATA_OK);
    assert_true(p.cost.total_s <= ff.cost.total_s);
    strata_placement_free(&p);
    strata_placement_free(&ff);
    strata_cluster_free(&c);
}

/* Brute force over every choice of 2 hosts out of the free ones (and both orders): the topology
 * policy reaches the minimum cost. */
static void test_brute_force_optimum(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_cluster(&c, "n[01-03,05-07,09,11-15] busy\n"); // free: n04 n08 n10 n16
    strata_job_t j = job_of(4, 2, 1);
    j.bytes[STRATA_DIM_PP] = 1e9;
    strata_placement_t p;
    assert_int_equal(strata_place(&c, &j, NULL, &p), STRATA_OK);
    int freeh[16], nf = 0;
    for (int h = 0; h < c.nhosts; h++)
        if (c.hosts[h].state == STRATA_HOST_FREE)
            freeh[nf++] = h;
    assert_int_equal(nf, 4);
    double best = 1e300;
    int rank_host[8];
    for (int a = 0; a < nf; a++)
        for (int b = 0; b < nf; b++) {
            if (a == b)
                continue;
            for (int r = 0; r < 8; r++)
                rank_host[r] = r < 4 ? freeh[a] : freeh[b];
            strata_cost_t k;
            assert_int_equal(strata_place_cost(&c, &j, rank_host, &k), STRATA_OK);
            if (k.total_s < best)
                best = k.total_s;
        }
    assert_true(p.cost.total_s <= best * (1 + 1e-12));
    // The two stages share a spine (n08 and n04 in spine1, or n10 and n16 in spine2).
    assert_int_equal(c.hosts[p.hosts[0]].dom[2], c.hosts[p.hosts[1]].dom[2]);
    strata_placement_free(&p);
    strata_cluster_free(&c);
}

/* Spares: kept out of the job; a failed host is replaced inside its leaf, spares first, then in
 * its spine when the leaf has nothing free. */
static void test_spare_replacement(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_cluster(&c, NULL);
    strata_place_opts_t o = strata_place_opts_default();
    o.spares = 1;
    o.spare_level = 1; // per leaf
    strata_job_t j = job_of(4, 1, 3);
    strata_placement_t p;
    assert_int_equal(strata_place(&c, &j, &o, &p), STRATA_OK);
    assert_int_equal(p.nspares, 4);
    bool spare[16] = {false};
    for (int s = 0; s < p.nspares; s++)
        spare[p.spares[s]] = true;
    for (int k = 0; k < p.nhosts; k++) {
        assert_false(spare[p.hosts[k]]);
        c.hosts[p.hosts[k]].state = STRATA_HOST_BUSY;
    }
    int failed = p.hosts[1], rep;
    assert_int_equal(strata_place_replace(&c, failed, spare, &rep), STRATA_OK);
    assert_true(rep >= 0);
    assert_int_equal(leaf_of(&c, rep), leaf_of(&c, failed));
    assert_true(spare[rep]);
    // Fill the leaf: the replacement comes from the same spine.
    for (int h = 0; h < c.nhosts; h++)
        if (leaf_of(&c, h) == leaf_of(&c, failed) && c.hosts[h].state == STRATA_HOST_FREE)
            c.hosts[h].state = STRATA_HOST_BUSY;
    assert_int_equal(strata_place_replace(&c, failed, spare, &rep), STRATA_OK);
    assert_true(rep >= 0);
    assert_int_not_equal(leaf_of(&c, rep), leaf_of(&c, failed));
    assert_int_equal(c.hosts[rep].dom[2], c.hosts[failed].dom[2]);
    strata_placement_free(&p);
    strata_cluster_free(&c);
}

static void test_output_syntax(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_cluster(&c, NULL);
    strata_job_t j = job_of(4, 2, 2);
    strata_placement_t p;
    assert_int_equal(strata_place(&c, &j, NULL, &p), STRATA_OK);
    FILE *f = tmpfile();
    assert_non_null(f);
    strata_write_slurm_hostfile(&c, &p, f);
    rewind(f);
    char line[256];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        assert_true(strata_cluster_find_host(&c, line) >= 0); // one known host name per line
        assert_int_equal(strata_cluster_find_host(&c, line), p.rank_host[n]);
        n++;
    }
    assert_int_equal(n, 16);
    fclose(f);
    f = tmpfile();
    strata_write_rankfile(&c, &p, f);
    rewind(f);
    n = 0;
    while (fgets(line, sizeof line, f)) {
        int r, slot, used = 0;
        char host[64];
        assert_int_equal(sscanf(line, "rank %d=%63[^ ] slot=%d%n", &r, host, &slot, &used), 3);
        assert_string_equal(line + used, "\n");
        assert_int_equal(r, n);
        assert_true(slot >= 0 && slot < 4);
        assert_int_equal(strata_cluster_find_host(&c, host), p.rank_host[n]);
        n++;
    }
    assert_int_equal(n, 16);
    fclose(f);
    f = tmpfile();
    strata_write_env(&c, &p, &j, f);
    rewind(f);
    int paths = 0;
    while (fgets(line, sizeof line, f))
        paths += !strncmp(line, "STRATA_TOPO_PATH=/core/", 23);
    assert_int_equal(paths, 4);
    fclose(f);
    strata_placement_free(&p);
    strata_cluster_free(&c);
}

static void test_plan_json(void **state)
{
    (void)state;
    char path[] = "/tmp/strata-test-plan-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"config\": {\"tp\": 8, \"cp\": 1, \"pp\": 4, \"vp\": 1, \"dp\": 2,\n"
          "  \"order\": [\"tp\", \"pp\", \"cp\", \"dp\"]},\n"
          " \"comm\": {\"tp\": {\"bytes\": 100}, \"pp\": {\"bytes\": 20}, \"dp\": {\"bytes\": 5},\n"
          "          \"cp\": {\"bytes\": 0}}}\n",
          f);
    fclose(f);
    strata_job_t j;
    assert_int_equal(strata_job_load_plan(path, &j), STRATA_OK);
    assert_int_equal(j.tp, 8);
    assert_int_equal(j.pp, 4);
    assert_int_equal(j.dp, 2);
    assert_int_equal(j.order[1], STRATA_DIM_PP);
    assert_true(j.bytes[STRATA_DIM_PP] == 20);
    f = fopen(path, "w");
    fputs("{\"config\": {\"cp\": 1}}\n", f);
    fclose(f);
    assert_int_equal(strata_job_load_plan(path, &j), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), "tp"));
    // Four sizes of 2^20 (each within the reader's range): their product overflowed a long long
    // in strata_job_world (UBSan); now it saturates and placement refuses the job.
    f = fopen(path, "w");
    fputs("{\"config\": {\"tp\": 1048576, \"cp\": 1048576, \"pp\": 1048576, "
          "\"dp\": 1048576}}\n", f);
    fclose(f);
    assert_int_equal(strata_job_load_plan(path, &j), STRATA_OK);
    assert_true(strata_job_world(&j) == LLONG_MAX);
    strata_cluster_t c;
    small_cluster(&c, NULL);
    strata_placement_t p;
    assert_int_equal(strata_place(&c, &j, NULL, &p), STRATA_ERR_INVALID_ARG);
    strata_cluster_free(&c);
    remove(path);
}

static void test_invalid(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_cluster(&c, "n[01-04] failed\n");
    strata_placement_t p;
    strata_job_t big = job_of(4, 2, 7); // 14 hosts, 12 free
    assert_int_equal(strata_place(&c, &big, NULL, &p), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "needs 14 hosts"));
    assert_non_null(strstr(strata_last_error(), "12 free"));
    strata_job_t odd = job_of(3, 1, 1);
    assert_int_equal(strata_place(&c, &odd, NULL, &p), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "multiple of 4"));
    strata_job_t wide = job_of(4, 1, 1);
    wide.procs_per_host = 8;
    assert_int_equal(strata_place(&c, &wide, NULL, &p), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_cluster_parse_state(&c, "n77 busy\n", "s.state"), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), "s.state:1: expected a host of the cluster, got "
                                                "unknown host \"n77\""));
    assert_int_equal(strata_cluster_parse_state(&c, "\nn01 sleepy\n", "s.state"), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), "s.state:2:"));
    // Every sinfo state code, long or short, either case, with its flags.
    const struct { const char *word; strata_host_state_t st; } sinfo[] = {
        {"idle", STRATA_HOST_FREE},   {"IDLE", STRATA_HOST_FREE},   {"idle~", STRATA_HOST_FREE},
        {"idle#", STRATA_HOST_FREE},  {"mix", STRATA_HOST_BUSY},    {"mix-", STRATA_HOST_BUSY},
        {"MIXED", STRATA_HOST_BUSY},  {"alloc", STRATA_HOST_BUSY},  {"comp", STRATA_HOST_BUSY},
        {"resv", STRATA_HOST_BUSY},   {"plnd", STRATA_HOST_BUSY},   {"maint", STRATA_HOST_BUSY},
        {"drng", STRATA_HOST_FAILED}, {"drain", STRATA_HOST_FAILED}, {"DRAINED", STRATA_HOST_FAILED},
        {"down*", STRATA_HOST_FAILED}, {"idle*", STRATA_HOST_FAILED}, {"fail", STRATA_HOST_FAILED},
        {"futr", STRATA_HOST_FAILED}, {"unk", STRATA_HOST_FAILED},  {"inval", STRATA_HOST_FAILED},
    };
    for (size_t i = 0; i < sizeof sinfo / sizeof sinfo[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "n01 %s\n", sinfo[i].word);
        assert_int_equal(strata_cluster_parse_state(&c, line, "sinfo"), STRATA_OK);
        assert_int_equal(c.hosts[strata_cluster_find_host(&c, "n01")].state, sinfo[i].st);
    }
    strata_cluster_free(&c);
}

/* Hostnames that do not follow the tree (rack-striped naming): hostname order scatters the
 * pipelines, the topology policy does not. */
static void test_beats_hostname_order(void **state)
{
    (void)state;
    const char *conf = "SwitchName=l1 Nodes=n[01,03,05,07]\nSwitchName=l2 Nodes=n[02,04,06,08]\n"
                       "SwitchName=top Switches=l[1-2]\n";
    strata_slurm_topo_t st;
    strata_topo_t pr;
    params(&pr);
    strata_cluster_t c;
    assert_int_equal(strata_slurm_topo_parse(conf, "striped.conf", &st), STRATA_OK);
    assert_int_equal(strata_cluster_from_slurm(&st, &pr, 4, &c), STRATA_OK);
    strata_slurm_topo_free(&st);
    strata_job_t j = job_of(4, 4, 1);
    strata_placement_t p, ff;
    assert_int_equal(strata_place(&c, &j, NULL, &p), STRATA_OK);
    strata_place_opts_t o = strata_place_opts_default();
    o.policy = STRATA_POLICY_FIRST_FIT;
    assert_int_equal(strata_place(&c, &j, &o, &ff), STRATA_OK);
    assert_int_equal(p.cost.hosts_per_level[1], 1);
    assert_int_equal(ff.cost.hosts_per_level[1], 2);
    assert_true(p.cost.total_s < ff.cost.total_s);
    strata_placement_free(&p);
    strata_placement_free(&ff);
    strata_cluster_free(&c);
}

/* Hosts whose names differ only in zero padding are different hosts (Slurm's view): the cluster
 * takes both and finds each by its own name (it used to refuse "n01 appears twice"). */
static void test_padded_names(void **state)
{
    (void)state;
    const char *conf = "SwitchName=l1 Nodes=n1,n01\nSwitchName=l2 Nodes=n001,n2\n"
                       "SwitchName=top Switches=l[1-2]\n";
    strata_slurm_topo_t st;
    strata_cluster_t c;
    assert_int_equal(strata_slurm_topo_parse(conf, "padded.conf", &st), STRATA_OK);
    assert_int_equal(strata_cluster_from_slurm(&st, NULL, 4, &c), STRATA_OK);
    strata_slurm_topo_free(&st);
    assert_int_equal(c.nhosts, 4);
    for (int h = 0; h < c.nhosts; h++)
        assert_int_equal(strata_cluster_find_host(&c, c.hosts[h].name), h);
    assert_int_equal(strata_cluster_find_host(&c, "n0001"), -1);
    assert_int_equal(strata_cluster_parse_state(&c, "n01 failed\n", "state"), STRATA_OK);
    assert_int_equal(c.hosts[strata_cluster_find_host(&c, "n01")].state, STRATA_HOST_FAILED);
    assert_int_equal(c.hosts[strata_cluster_find_host(&c, "n1")].state, STRATA_HOST_FREE);
    strata_cluster_free(&c);
}

/* ---- the picture (strata_write_place_svg) --------------------------------------------------------- */

/* The picture as one string. */
static char *place_svg(const strata_cluster_t *c, const strata_placement_t *p, const strata_job_t *j)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(strata_write_place_svg(c, p, j, f), STRATA_OK);
    long len = ftell(f);
    assert_true(len > 0);
    char *buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    rewind(f);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    buf[len] = '\0';
    fclose(f);
    return buf;
}

typedef struct drawn_host {
    char name[64];
    double x, y, hue; /* hue in degrees, -1 for a grey */
    char fill[32];
} drawn_host_t;

/* Hue of "#rrggbb" or "hsl(h,...)"; -1 for a grey. */
static double fill_hue(const char *fill)
{
    double h;
    unsigned rgb;
    if (sscanf(fill, "hsl(%lf", &h) == 1)
        return h;
    assert_int_equal(sscanf(fill, "#%6x", &rgb), 1);
    double r = (rgb >> 16 & 255) / 255.0, g = (rgb >> 8 & 255) / 255.0, b = (rgb & 255) / 255.0;
    double mx = r > g ? (r > b ? r : b) : (g > b ? g : b), mn = r < g ? (r < b ? r : b) : (g < b ? g : b);
    if (mx - mn < 0.05)
        return -1;
    double hue = mx == r ? 60 * fmod((g - b) / (mx - mn), 6) : mx == g ? 60 * ((b - r) / (mx - mn) + 2)
                                                                      : 60 * ((r - g) / (mx - mn) + 4);
    return hue < 0 ? hue + 360 : hue;
}

/* Every cell with a tooltip, in the order drawn: its host's name (the last part of a path), where
 * it is and its colour. */
static int drawn_hosts(const char *svg, drawn_host_t *out, int max)
{
    int n = 0;
    for (const char *t = strstr(svg, "<title>"); t && n < max; t = strstr(t + 1, "<title>")) {
        const char *start = svg;
        for (const char *q = t; q > svg; q--)
            if (!strncmp(q, "<rect", 5)) {
                start = q;
                break;
            }
        drawn_host_t *d = &out[n++];
        const char *x = strstr(start, " x=\""), *y = strstr(start, " y=\""), *fl = strstr(start, "fill=\"");
        assert_true(x && y && fl && x < t && y < t && fl < t);
        d->x = atof(x + 4);
        d->y = atof(y + 4);
        sscanf(fl + 6, "%31[^\"]", d->fill);
        d->hue = fill_hue(d->fill);
        const char *nm = t + 7, *end = strpbrk(nm, ":<");
        for (const char *q = nm; q < end; q++)
            if (*q == '/')
                nm = q + 1;
        snprintf(d->name, sizeof d->name, "%.*s", (int)(end - nm), nm);
    }
    return n;
}

static const drawn_host_t *drawn(const drawn_host_t *d, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(d[i].name, name))
            return &d[i];
    fail_msg("host %s is not drawn", name);
    return NULL;
}

/* The gap between racks falls between the last host of one leaf and the first of the next: every
 * pair of consecutive hosts of one leaf lies closer (horizontally) than any pair that crosses into
 * the next leaf of the same spine. (It was drawn one host late: n04|n05 adjacent, n05 n06 apart.) */
static void test_svg_rack_gap(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_cluster(&c, NULL);
    strata_job_t j = job_of(4, 1, 1);
    strata_placement_t p;
    assert_int_equal(strata_place(&c, &j, NULL, &p), STRATA_OK);
    char *svg = place_svg(&c, &p, &j);
    drawn_host_t d[16];
    assert_int_equal(drawn_hosts(svg, d, 16), 16);
    double within = 0, across = 1e9;
    for (int h = 0; h + 1 < c.nhosts; h++) {
        if (c.hosts[h].dom[2] != c.hosts[h + 1].dom[2])
            continue; // another spine: another panel
        const double dx = fabs(drawn(d, 16, c.hosts[h + 1].name)->x - drawn(d, 16, c.hosts[h].name)->x);
        if (leaf_of(&c, h) == leaf_of(&c, h + 1))
            within = dx > within ? dx : within;
        else
            across = dx < across ? dx : across;
    }
    assert_true(within < across);
    free(svg);
    strata_placement_free(&p);
    strata_cluster_free(&c);
}

/* A replica is never coloured like a failed host: every host of the job has a hue at least 30
 * degrees from the failed hosts' red, and replicas that differ get different colours. */
static void test_svg_replica_not_failed_red(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_cluster(&c, "n[11-12] failed\nn01 busy\n");
    strata_job_t j = job_of(4, 1, 4);
    strata_placement_t p;
    assert_int_equal(strata_place(&c, &j, NULL, &p), STRATA_OK);
    char *svg = place_svg(&c, &p, &j);
    drawn_host_t d[16];
    assert_int_equal(drawn_hosts(svg, d, 16), 16);
    const drawn_host_t *f11 = drawn(d, 16, "n11"), *f12 = drawn(d, 16, "n12");
    assert_string_equal(f11->fill, f12->fill);
    assert_true(f11->hue >= 0 && (f11->hue < 15 || f11->hue > 345)); // failed stays red
    for (int k = 0; k < p.nhosts; k++) {
        const drawn_host_t *h = drawn(d, 16, c.hosts[p.hosts[k]].name);
        assert_true(h->hue >= 0); // coloured, not a grey
        double dist = fabs(h->hue - f11->hue);
        dist = dist > 180 ? 360 - dist : dist;
        assert_true(dist >= 30);
        for (int m = 0; m < k; m++) // one host per replica here: all differ
            assert_string_not_equal(h->fill, drawn(d, 16, c.hosts[p.hosts[m]].name)->fill);
    }
    free(svg);
    strata_placement_free(&p);
    strata_cluster_free(&c);
}

/* The picture is XML whatever the names: host, switch and cluster names with & < > " ' come out
 * escaped, and every '<' opens a tag, every '&' an entity. */
static void test_svg_escapes_names(void **state)
{
    (void)state;
    const char *conf = "SwitchName=le&af1 Nodes=a&b[1-2]\nSwitchName=l<2> Nodes=c<d[1-2]\n"
                       "SwitchName=top Switches=le&af1,l<2>\n";
    strata_slurm_topo_t st;
    strata_cluster_t c;
    assert_int_equal(strata_slurm_topo_parse(conf, "names.conf", &st), STRATA_OK);
    assert_int_equal(strata_cluster_from_slurm(&st, NULL, 4, &c), STRATA_OK);
    strata_slurm_topo_free(&st);
    snprintf(c.topo.name, sizeof c.topo.name, "lab \"A&B\" <x>");
    strata_job_t j = job_of(4, 1, 2);
    strata_placement_t p;
    assert_int_equal(strata_place(&c, &j, NULL, &p), STRATA_OK);
    char *svg = place_svg(&c, &p, &j);
    assert_non_null(strstr(svg, "a&amp;b1"));
    assert_non_null(strstr(svg, "c&lt;d2"));
    assert_non_null(strstr(svg, "lab &quot;A&amp;B&quot; &lt;x&gt;"));
    for (const char *s = svg; *s; s++) {
        if (*s == '<')
            assert_true(s[1] == '/' || s[1] == '!' || s[1] == '?' || (s[1] >= 'a' && s[1] <= 'z'));
        if (*s == '&')
            assert_true(!strncmp(s, "&amp;", 5) || !strncmp(s, "&lt;", 4) || !strncmp(s, "&gt;", 4) ||
                        !strncmp(s, "&quot;", 6) || !strncmp(s, "&apos;", 6));
    }
    free(svg);
    strata_placement_free(&p);
    strata_cluster_free(&c);
}

/* Every line of text that is not turned fits the picture's width (at 0.55 em a character, less
 * than sans-serif takes): the title used to run off a small cluster's picture. */
static void test_svg_text_fits(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_cluster(&c, "n[11-12] failed\n");
    strata_job_t j = job_of(4, 1, 5); // five replicas: the colour key is at its longest
    strata_placement_t p;
    assert_int_equal(strata_place(&c, &j, NULL, &p), STRATA_OK);
    char *svg = place_svg(&c, &p, &j);
    const char *w = strstr(svg, "width=\"");
    assert_non_null(w);
    const double width = atof(w + 7);
    int lines = 0;
    for (const char *t = strstr(svg, "<text "); t; t = strstr(t + 1, "<text ")) {
        const char *gt = strchr(t, '>'), *end = strstr(t, "</text>");
        assert_true(gt && end);
        if (memmem(t, (size_t)(gt - t), "transform", 9))
            continue;
        const char *xa = strstr(t, " x=\""), *fs = strstr(t, "font-size=\"");
        double x = atof(xa + 4), font = fs && fs < gt ? atof(fs + 11) : 11;
        int chars = 0;
        for (const char *q = gt + 1; q < end; q++, chars++)
            if (*q == '&') // an entity is one character
                q = strchr(q, ';');
        assert_true(x + 0.55 * font * chars <= width);
        lines++;
    }
    assert_true(lines >= 5);
    free(svg);
    strata_placement_free(&p);
    strata_cluster_free(&c);
}

/* How many hosts, leafs and spines the biggest group of each dimension spans, on a hand placement:
 * slots 0-3 (ranks 4j..4j+3: tp inside a host, pp pairs slots 0-1 and 2-3, dp pairs 0-2 and 1-3)
 * on n01 (leaf1), n05 (leaf2), n09 (leaf3), n13 (leaf4); leaf1-2 under spine1, leaf3-4 under
 * spine2. A dimension without traffic still has its span. */
static void test_group_span(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_cluster(&c, NULL);
    strata_job_t j = job_of(4, 2, 2);
    j.bytes[STRATA_DIM_DP] = 0;
    const char *slot_host[4] = {"n01", "n05", "n09", "n13"};
    int rank_host[16];
    for (int r = 0; r < 16; r++)
        rank_host[r] = strata_cluster_find_host(&c, slot_host[r / 4]);
    strata_cost_t k;
    assert_int_equal(strata_place_cost(&c, &j, rank_host, &k), STRATA_OK);
    const int want[STRATA_DIM_COUNT][4] = {
        [STRATA_DIM_TP] = {1, 1, 1, 1}, [STRATA_DIM_CP] = {1, 1, 1, 1},
        [STRATA_DIM_PP] = {2, 2, 1, 1}, [STRATA_DIM_DP] = {2, 2, 2, 1}};
    for (int d = 0; d < STRATA_DIM_COUNT; d++)
        for (int l = 0; l < 4; l++)
            assert_int_equal(k.group_span[d][l], want[d][l]);
    assert_int_equal(k.dim_level[STRATA_DIM_DP], -1); // no traffic, no price
    assert_true(k.dim_s[STRATA_DIM_DP] == 0);
    assert_int_equal(k.dim_level[STRATA_DIM_PP], 2);
    // The coordinate of a rank in each dimension, by the job's order.
    assert_int_equal(strata_job_coord(&j, 13, STRATA_DIM_TP), 1);
    assert_int_equal(strata_job_coord(&j, 13, STRATA_DIM_PP), 1);
    assert_int_equal(strata_job_coord(&j, 13, STRATA_DIM_DP), 1);
    assert_int_equal(strata_job_coord(&j, 5, STRATA_DIM_DP), 0);
    strata_cluster_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_levels),    cmocka_unit_test(test_one_leaf),
        cmocka_unit_test(test_irregular_leaf),    cmocka_unit_test(test_pipelines_whole),
        cmocka_unit_test(test_brute_force_optimum), cmocka_unit_test(test_spare_replacement),
        cmocka_unit_test(test_output_syntax),     cmocka_unit_test(test_plan_json),
        cmocka_unit_test(test_invalid),           cmocka_unit_test(test_beats_hostname_order),
        cmocka_unit_test(test_padded_names),      cmocka_unit_test(test_svg_rack_gap),
        cmocka_unit_test(test_svg_replica_not_failed_red), cmocka_unit_test(test_svg_escapes_names),
        cmocka_unit_test(test_svg_text_fits),     cmocka_unit_test(test_group_span),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
