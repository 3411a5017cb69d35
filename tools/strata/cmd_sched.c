/* `strata sched`: replays a trace of job arrivals and host failures on a cluster under each
 * placement policy (src/sched/sim.c) and prints, per policy, utilisation, waits, traffic across
 * racks and zones, fragmentation, spare use and rescheduling time; --json and an SVG plot. */
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/sched.h"
#include "strata/strata.h"

static const char *usage_text =
    "usage: strata sched --cluster NAME|FILE.json | --slurm topology.conf [--state FILE]\n"
    "                    [--trace FILE | --jobs N --failures F --seed S]\n"
    "                    [--policy topo|first-fit|random|all] [--spares N] [--spare-level rack]\n"
    "                    [--write-trace FILE] [--json] [--svg FILE]\n"
    "trace lines: job TIME ID ACCELS tp=T pp=P [cp=C] duration=S [priority=N]\n"
    "             fail TIME HOST [repair=S]\n";

static json_object *report_json(const strata_sim_report_t *r)
{
    json_object *o = json_object_new_object();
#define D(k, v) json_object_object_add(o, k, json_object_new_double(v))
#define I(k, v) json_object_object_add(o, k, json_object_new_int64(v))
    json_object_object_add(o, "policy", json_object_new_string(strata_policy_name(r->policy)));
    I("jobs", r->jobs);
    I("started", r->started);
    I("finished", r->finished);
    D("makespan_s", r->makespan_s);
    D("utilisation", r->utilisation);
    D("wait_mean_s", r->wait_mean_s);
    D("wait_p95_s", r->wait_p95_s);
    D("cross_zone_bytes", r->cross_zone_bytes);
    D("cross_rack_bytes", r->cross_rack_bytes);
    D("comm_s_mean", r->comm_s_mean);
    D("fragmentation", r->fragmentation);
    I("failures", r->failures);
    I("failures_hit_jobs", r->failures_hit_jobs);
    I("spare_used", r->spare_used);
    I("same_domain_replacements", r->same_domain);
    I("restarts", r->restarts);
    I("ranks_moved", r->ranks_moved);
    D("resched_mean_us", r->resched_mean_us);
    D("resched_max_us", r->resched_max_us);
    D("wall_s", r->wall_s);
#undef D
#undef I
    return o;
}

int cmd_sched(int argc, char **argv)
{
    const char *cluster = NULL, *slurm = NULL, *state = NULL, *trace_path = NULL, *svg = NULL;
    const char *write_trace = NULL, *policy = "all", *spare_level = NULL;
    int jobs = 1000, failures = 50, spares = 2, gph = 0;
    unsigned long long seed = 1;
    bool json = false;
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
        if (i + 1 >= argc) {
            fprintf(stderr, "strata sched: \"%s\" needs a value or is unknown\n%s", a, usage_text);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--cluster"))
            cluster = v;
        else if (!strcmp(a, "--slurm"))
            slurm = v;
        else if (!strcmp(a, "--state"))
            state = v;
        else if (!strcmp(a, "--gpus-per-host")) {
            if (!cmd_int_option("sched", a, v, INT_MIN, INT_MAX, &gph))
                return 2;
        } else if (!strcmp(a, "--trace"))
            trace_path = v;
        else if (!strcmp(a, "--write-trace"))
            write_trace = v;
        else if (!strcmp(a, "--jobs")) {
            if (!cmd_int_option("sched", a, v, INT_MIN, INT_MAX, &jobs))
                return 2;
        } else if (!strcmp(a, "--failures")) {
            if (!cmd_int_option("sched", a, v, INT_MIN, INT_MAX, &failures))
                return 2;
        } else if (!strcmp(a, "--seed")) {
            long long n;
            if (!cmd_parse_int(v, 0, LLONG_MAX, &n)) {
                fprintf(stderr, "strata sched: --seed expects a non-negative integer, got '%s'\n",
                        v);
                return 2;
            }
            seed = (unsigned long long)n;
        } else if (!strcmp(a, "--policy"))
            policy = v;
        else if (!strcmp(a, "--spares")) {
            if (!cmd_int_option("sched", a, v, INT_MIN, INT_MAX, &spares))
                return 2;
        } else if (!strcmp(a, "--spare-level"))
            spare_level = v;
        else if (!strcmp(a, "--svg"))
            svg = v;
        else {
            fprintf(stderr, "strata sched: unknown argument \"%s\"\n%s", a, usage_text);
            return 2;
        }
    }
    strata_cluster_t c;
    int rc = cmd_load_cluster(cluster, slurm, gph, state, &c);
    if (rc)
        return rc;
    strata_trace_t tr = {0};
    strata_sim_report_t rep[STRATA_POLICY_COUNT];
    int nrep = 0;
    strata_sim_opts_t so = strata_sim_opts_default();
    so.seed = seed;
    so.spares = spares;
    if (spare_level) {
        so.spare_level = strata_topo_find_level(&c.topo, spare_level);
        if (so.spare_level < 1) {
            rc = cmd_fail(NULL, "--spare-level: expected a level above the host, got \"%s\"",
                          spare_level);
            goto out;
        }
    }
    if (strcmp(policy, "all")) {
        strata_policy_t p;
        if (strata_policy_parse(policy, &p) < 0) {
            rc = cmd_fail(NULL, "%s", strata_last_error());
            goto out;
        }
        so.policy = p;
    }
    strata_status_t st = trace_path ? strata_trace_load(&c, trace_path, &tr)
                                    : strata_trace_generate(&c, jobs, failures, seed, &tr);
    if (st < 0) {
        rc = cmd_fail(NULL, "%s", strata_last_error());
        goto out;
    }
    if (write_trace) {
        FILE *f = fopen(write_trace, "w");
        if (!f) {
            rc = cmd_fail(NULL, "%s: cannot open for writing", write_trace);
            goto out;
        }
        strata_trace_write(&c, &tr, f);
        fclose(f);
    }
    for (int p = 0; p < STRATA_POLICY_COUNT; p++) {
        if (strcmp(policy, "all") && p != (int)so.policy)
            continue;
        strata_sim_opts_t o = so;
        o.policy = (strata_policy_t)p;
        if (strata_sim_run(&c, &tr, &o, &rep[nrep]) < 0) {
            rc = cmd_fail(NULL, "%s", strata_last_error());
            goto out;
        }
        nrep++;
    }
    if (json) {
        json_object *root = json_object_new_object(), *arr = json_object_new_array();
        json_object_object_add(root, "cluster", json_object_new_string(c.topo.name));
        json_object_object_add(root, "events", json_object_new_int(tr.nevents));
        json_object_object_add(root, "seed", json_object_new_int64((long long)seed));
        for (int i = 0; i < nrep; i++)
            json_object_array_add(arr, report_json(&rep[i]));
        json_object_object_add(root, "policies", arr);
        puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                      JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(root);
    } else {
        printf("cluster %s: %d hosts; trace: %d events (seed %llu); spares %d per %s\n",
               c.topo.name, c.nhosts, tr.nevents, seed, spares,
               c.topo
                   .level[so.spare_level >= 1 ? so.spare_level
                                              : (c.topo.nlevels > 2 ? c.topo.nlevels - 2 : 1)]
                   .name);
        printf("%-10s %6s %6s %9s %9s %11s %11s %7s %6s %6s %7s %9s %8s\n", "policy", "util",
               "frag", "wait s", "wait p95", "xzone TB.s", "xrack TB.s", "fails", "spare", "moved",
               "restart", "resched", "wall s");
        for (int i = 0; i < nrep; i++) {
            const strata_sim_report_t *r = &rep[i];
            printf("%-10s %5.1f%% %5.1f%% %9.0f %9.0f %11.3g %11.3g %7d %6d %6lld %7d %7.1fus "
                   "%8.3f\n",
                   strata_policy_name(r->policy), 100 * r->utilisation, 100 * r->fragmentation,
                   r->wait_mean_s, r->wait_p95_s, r->cross_zone_bytes / 1e12,
                   r->cross_rack_bytes / 1e12, r->failures_hit_jobs, r->spare_used, r->ranks_moved,
                   r->restarts, r->resched_mean_us, r->wall_s);
        }
    }
    if (svg) {
        FILE *f = fopen(svg, "w");
        if (!f) {
            rc = cmd_fail(NULL, "%s: cannot open for writing", svg);
            goto out;
        }
        strata_write_sim_svg(rep, nrep, f);
        fclose(f);
    }
out:
    strata_trace_free(&tr);
    strata_cluster_free(&c);
    return rc;
}
