/* `strata place`: places one job on a cluster (src/sched) and writes what Slurm, Open MPI and
 * torchrun take, with the cost of the placement beside hostname-order and random placements. Also
 * holds the cluster loading shared with `strata sched` (cmd_sched.c). */
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strata/cmd.h"
#include "strata/sched.h"
#include "strata/strata.h"

static const char *usage_text =
    "usage: strata place CLUSTER [STATE] JOB [OUTPUTS]\n"
    "cluster: --cluster NAME|FILE.json   (a preset or strata cluster file; hosts node00000...)\n"
    "         --slurm topology.conf [--cluster FILE for level speeds] [--gpus-per-host N]\n"
    "state:   --state FILE               lines \"<hostlist> free|busy|failed|down|drain\"\n"
    "job:     --plan PLAN.json (strata plan --json output) | --tp T --cp C --pp P --dp D\n"
    "         --world N (derives dp)  --order tp,cp,pp,dp  --procs-per-host N\n"
    "         --bytes tp=4e9,pp=5e8,dp=2e9 (bytes per device per step)\n"
    "policy:  --policy topo|first-fit|random (default topo)  --seed S\n"
    "         --spares N [--spare-level rack]   free hosts kept per failure domain\n"
    "outputs: --hostfile F (SLURM_HOSTFILE)  --rankfile F (Open MPI)  --env F (per host)\n"
    "         --svg F  --json\n";

static bool has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

int cmd_load_cluster(const char *cluster, const char *slurm, int gpus_per_host, const char *state,
                     strata_cluster_t *out)
{
    strata_topo_t topo;
    bool have_topo = false;
    if (cluster) {
        strata_status_t rc = has_suffix(cluster, ".json") ? strata_topo_load(cluster, &topo)
                                                          : strata_topo_preset(cluster, &topo);
        if (rc < 0)
            return cmd_fail(NULL, "%s", strata_last_error());
        have_topo = true;
    }
    if (slurm) {
        strata_slurm_topo_t st;
        if (strata_slurm_topo_load(slurm, &st) < 0)
            return cmd_fail("see docs/sched.md for the topology.conf forms strata reads", "%s",
                            strata_last_error());
        int g = gpus_per_host > 0 ? gpus_per_host : have_topo ? topo.level[0].fanout : 8;
        strata_status_t rc = strata_cluster_from_slurm(&st, have_topo ? &topo : NULL, g, out);
        strata_slurm_topo_free(&st);
        if (rc < 0)
            return cmd_fail(NULL, "%s", strata_last_error());
    } else {
        if (!have_topo)
            return cmd_fail("give --cluster NAME|FILE.json or --slurm topology.conf",
                            "no cluster given");
        if (gpus_per_host > 0)
            topo.level[0].fanout = gpus_per_host;
        if (strata_cluster_from_topo(&topo, "node", out) < 0)
            return cmd_fail(NULL, "%s", strata_last_error());
    }
    if (state && strata_cluster_load_state(out, state) < 0) {
        int rc = cmd_fail(NULL, "%s", strata_last_error());
        strata_cluster_free(out);
        return rc;
    }
    return 0;
}

static int parse_bytes(const char *s, strata_job_t *job)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq)
            return cmd_fail(NULL, "--bytes: expected dim=bytes, got \"%s\"", kv);
        *eq = '\0';
        char *end;
        double v = strtod(eq + 1, &end);
        int d = -1;
        for (int k = 0; k < STRATA_DIM_COUNT; k++)
            if (!strcmp(kv, strata_dim_name((strata_dim_t)k)))
                d = k;
        if (d < 0 || *end || !(v >= 0))
            return cmd_fail(NULL,
                            "--bytes: expected tp|cp|pp|dp=non-negative number, got "
                            "\"%s=%s\"",
                            kv, eq + 1);
        job->bytes[d] = v;
    }
    return 0;
}

static int write_file(const char *path, const strata_cluster_t *c, const strata_placement_t *p,
                      const strata_job_t *job, int kind)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return cmd_fail(NULL, "%s: cannot open for writing", path);
    if (kind == 0)
        strata_write_slurm_hostfile(c, p, f);
    else if (kind == 1)
        strata_write_rankfile(c, p, f);
    else if (kind == 2)
        strata_write_env(c, p, job, f);
    else if (strata_write_place_svg(c, p, job, f) < 0) {
        fclose(f);
        return cmd_fail(NULL, "%s: %s", path, strata_last_error());
    }
    if (fclose(f) != 0)
        return cmd_fail(NULL, "%s: write failed", path);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static json_object *cost_json(const strata_cluster_t *c, const strata_cost_t *k)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "comm_s", json_object_new_double(k->total_s));
    json_object *d = json_object_new_object();
    for (int i = 0; i < STRATA_DIM_COUNT; i++) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "s", json_object_new_double(k->dim_s[i]));
        json_object_object_add(e, "level",
                               json_object_new_string(k->dim_level[i] >= 0
                                                          ? c->topo.level[k->dim_level[i]].name
                                                          : "none"));
        json_object_object_add(d, strata_dim_name((strata_dim_t)i), e);
    }
    json_object_object_add(o, "dims", d);
    json_object *x = json_object_new_object(), *u = json_object_new_object();
    for (int l = 0; l < c->topo.nlevels; l++) {
        if (l >= 1)
            json_object_object_add(x, c->topo.level[l].name,
                                   json_object_new_double(k->cross_bytes[l]));
        json_object_object_add(u, c->topo.level[l].name,
                               json_object_new_int(k->hosts_per_level[l]));
    }
    json_object_object_add(o, "bytes_crossing", x);
    json_object_object_add(o, "units_used", u);
    json_object *g = json_object_new_object(); // the most units of each level one group touches
    for (int i = 0; i < STRATA_DIM_COUNT; i++) {
        json_object *e = json_object_new_object();
        for (int l = 0; l < c->topo.nlevels; l++)
            json_object_object_add(e, c->topo.level[l].name,
                                   json_object_new_int(k->group_span[i][l]));
        json_object_object_add(g, strata_dim_name((strata_dim_t)i), e);
    }
    json_object_object_add(o, "group_span", g);
    return o;
}

int cmd_place(int argc, char **argv)
{
    const char *cluster = NULL, *slurm = NULL, *state = NULL, *plan = NULL, *bytes = NULL;
    const char *hostfile = NULL, *rankfile = NULL, *envfile = NULL, *svg = NULL, *order = NULL;
    const char *spare_level = NULL;
    int gph = 0, tp = 0, cp = 0, pp = 0, dp = 0, pph = 0, spares = 0;
    long long world = 0;
    bool json = false;
    strata_place_opts_t po = strata_place_opts_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (strncmp(a, "--", 2) || i + 1 >= argc) {
            fprintf(stderr, "strata place: \"%s\" is unknown or needs a value\n%s", a, usage_text);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--cluster"))
            cluster = v;
        else if (!strcmp(a, "--slurm"))
            slurm = v;
        else if (!strcmp(a, "--state"))
            state = v;
        else if (!strcmp(a, "--plan"))
            plan = v;
        else if (!strcmp(a, "--gpus-per-host")) {
            if (!cmd_int_option("place", a, v, INT_MIN, INT_MAX, &gph))
                return 2;
        } else if (!strcmp(a, "--tp")) {
            if (!cmd_int_option("place", a, v, INT_MIN, INT_MAX, &tp))
                return 2;
        } else if (!strcmp(a, "--cp")) {
            if (!cmd_int_option("place", a, v, INT_MIN, INT_MAX, &cp))
                return 2;
        } else if (!strcmp(a, "--pp")) {
            if (!cmd_int_option("place", a, v, INT_MIN, INT_MAX, &pp))
                return 2;
        } else if (!strcmp(a, "--dp")) {
            if (!cmd_int_option("place", a, v, INT_MIN, INT_MAX, &dp))
                return 2;
        } else if (!strcmp(a, "--world")) {
            if (!cmd_parse_int(v, 0, LLONG_MAX, &world)) {
                fprintf(stderr, "strata place: --world expects a non-negative integer, got '%s'\n",
                        v);
                return 2;
            }
        } else if (!strcmp(a, "--order"))
            order = v;
        else if (!strcmp(a, "--procs-per-host")) {
            if (!cmd_int_option("place", a, v, INT_MIN, INT_MAX, &pph))
                return 2;
        } else if (!strcmp(a, "--bytes"))
            bytes = v;
        else if (!strcmp(a, "--seed")) {
            long long n;
            if (!cmd_parse_int(v, 0, LLONG_MAX, &n)) {
                fprintf(stderr, "strata place: --seed expects a non-negative integer, got '%s'\n",
                        v);
                return 2;
            }
            po.seed = (unsigned long long)n;
        } else if (!strcmp(a, "--spares")) {
            if (!cmd_int_option("place", a, v, INT_MIN, INT_MAX, &spares))
                return 2;
        } else if (!strcmp(a, "--spare-level"))
            spare_level = v;
        else if (!strcmp(a, "--hostfile"))
            hostfile = v;
        else if (!strcmp(a, "--rankfile"))
            rankfile = v;
        else if (!strcmp(a, "--env"))
            envfile = v;
        else if (!strcmp(a, "--svg"))
            svg = v;
        else if (!strcmp(a, "--policy")) {
            if (strata_policy_parse(v, &po.policy) < 0)
                return cmd_fail(NULL, "%s", strata_last_error());
        } else {
            fprintf(stderr, "strata place: unknown argument \"%s\"\n%s", a, usage_text);
            return 2;
        }
    }
    if (tp < 0 || cp < 0 || pp < 0 || dp < 0 || world < 0 || pph < 0 || spares < 0 || gph < 0)
        return cmd_fail(NULL, "sizes, counts and --spares must be positive");
    strata_cluster_t c;
    int rc = cmd_load_cluster(cluster, slurm, gph, state, &c);
    if (rc)
        return rc;
    strata_job_t job = strata_job_default();
    if (plan && strata_job_load_plan(plan, &job) < 0) {
        rc = cmd_fail(NULL, "%s", strata_last_error());
        goto out;
    }
    if (!plan)
        job.tp = c.hosts[0].accels;
    if (tp)
        job.tp = tp;
    if (cp)
        job.cp = cp;
    if (pp)
        job.pp = pp;
    if (dp)
        job.dp = dp;
    if (world > 0) {
        long long inner = (long long)job.tp * job.cp * job.pp;
        if (world % inner) {
            rc = cmd_fail(NULL, "--world %lld is not a multiple of tp*cp*pp = %lld", world, inner);
            goto out;
        }
        job.dp = (int)(world / inner);
    }
    if (order && strata_order_parse(order, job.order) < 0) {
        rc = cmd_fail(NULL, "%s", strata_last_error());
        goto out;
    }
    if (bytes && (rc = parse_bytes(bytes, &job)) != 0)
        goto out;
    job.procs_per_host = pph;
    po.spares = spares;
    if (spare_level) {
        po.spare_level = strata_topo_find_level(&c.topo, spare_level);
        if (po.spare_level < 1) {
            rc = cmd_fail(NULL, "--spare-level: expected a level above the host, got \"%s\"",
                          spare_level);
            goto out;
        }
    }
    strata_placement_t p, base[STRATA_POLICY_COUNT];
    memset(base, 0, sizeof base);
    double t0 = now_s();
    if (strata_place(&c, &job, &po, &p) < 0) {
        rc = cmd_fail("fewer ranks, more free hosts, or fewer spares", "%s", strata_last_error());
        goto out;
    }
    double place_ms = (now_s() - t0) * 1e3;
    bool have_base[STRATA_POLICY_COUNT] = {false};
    for (int k = 0; k < STRATA_POLICY_COUNT; k++) {
        strata_place_opts_t bo = po;
        bo.policy = (strata_policy_t)k;
        bo.spares = 0;
        have_base[k] = strata_place(&c, &job, &bo, &base[k]) >= 0;
    }
    if (hostfile && (rc = write_file(hostfile, &c, &p, &job, 0)) != 0)
        goto out2;
    if (rankfile && (rc = write_file(rankfile, &c, &p, &job, 1)) != 0)
        goto out2;
    if (envfile && (rc = write_file(envfile, &c, &p, &job, 2)) != 0)
        goto out2;
    if (svg && (rc = write_file(svg, &c, &p, &job, 3)) != 0)
        goto out2;
    double ff = have_base[STRATA_POLICY_FIRST_FIT] ? base[STRATA_POLICY_FIRST_FIT].cost.total_s : 0;
    if (json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "cluster", json_object_new_string(c.topo.name));
        json_object_object_add(o, "policy", json_object_new_string(strata_policy_name(po.policy)));
        json_object *jb = json_object_new_object();
        json_object_object_add(jb, "tp", json_object_new_int(job.tp));
        json_object_object_add(jb, "cp", json_object_new_int(job.cp));
        json_object_object_add(jb, "pp", json_object_new_int(job.pp));
        json_object_object_add(jb, "dp", json_object_new_int(job.dp));
        json_object_object_add(jb, "world", json_object_new_int64(p.world));
        json_object_object_add(o, "job", jb);
        json_object_object_add(o, "place_ms", json_object_new_double(place_ms));
        json_object_object_add(o, "cost", cost_json(&c, &p.cost));
        json_object *bj = json_object_new_object();
        for (int k = 0; k < STRATA_POLICY_COUNT; k++)
            if (have_base[k])
                json_object_object_add(bj, strata_policy_name((strata_policy_t)k),
                                       cost_json(&c, &base[k].cost));
        json_object_object_add(o, "baselines", bj);
        json_object_object_add(
            o, "gain_vs_hostname_order",
            json_object_new_double(p.cost.total_s > 0 ? ff / p.cost.total_s : 1));
        json_object *hs = json_object_new_array();
        for (int j = 0; j < p.nhosts; j++)
            json_object_array_add(hs, json_object_new_string(c.hosts[p.hosts[j]].name));
        json_object_object_add(o, "hosts", hs);
        json_object *sp = json_object_new_array();
        for (int j = 0; j < p.nspares; j++)
            json_object_array_add(sp, json_object_new_string(c.hosts[p.spares[j]].name));
        json_object_object_add(o, "spares", sp);
        puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                   JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(o);
    } else {
        printf("cluster %s: %d hosts; job tp%d cp%d pp%d dp%d = %lld ranks on %d hosts (%s, "
               "%.2f ms)\n",
               c.topo.name, c.nhosts, job.tp, job.cp, job.pp, job.dp, p.world, p.nhosts,
               strata_policy_name(po.policy), place_ms);
        printf("%-10s %12s", "placement", "comm s/step");
        for (int d = 0; d < STRATA_DIM_COUNT; d++)
            printf(" %10s", strata_dim_name((strata_dim_t)d));
        for (int l = 1; l < c.topo.nlevels; l++)
            printf(" %8ss", c.topo.level[l].name);
        printf("\n");
        for (int k = -1; k < STRATA_POLICY_COUNT; k++) {
            const strata_placement_t *q = k < 0 ? &p : &base[k];
            if (k >= 0 && !have_base[k])
                continue;
            printf("%-10s %12.4f", k < 0 ? "chosen" : strata_policy_name((strata_policy_t)k),
                   q->cost.total_s);
            for (int d = 0; d < STRATA_DIM_COUNT; d++)
                printf(" %10.4f", q->cost.dim_s[d]);
            for (int l = 1; l < c.topo.nlevels; l++)
                printf(" %9d", q->cost.hosts_per_level[l]);
            printf("\n");
        }
        if (p.cost.total_s > 0 && ff > 0)
            printf("gain vs hostname order: %.2fx\n", ff / p.cost.total_s);
        if (p.nspares)
            printf("spares kept: %d hosts\n", p.nspares);
    }
out2:
    strata_placement_free(&p);
    for (int k = 0; k < STRATA_POLICY_COUNT; k++)
        strata_placement_free(&base[k]);
out:
    strata_cluster_free(&c);
    return rc;
}
