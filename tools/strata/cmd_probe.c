/* `strata probe`: measures latency, bandwidth and uplink oversubscription at every level of the
 * job's fabric and writes a calibrated cluster file (run it under a launcher, one rank per slot).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/netmodel.h"
#include "strata/strata.h"
#include "strata/topo.h"

static int usage(int rc)
{
    fprintf(
        rc ? stderr : stdout,
        "usage: strata probe [--bytes SIZE] [--lat-iters N] [--out FILE] [--json]\n"
        "  run under a launcher: strata launch -n 8 -- strata probe --out cluster.json\n"
        "  --bytes SIZE     bytes of every bandwidth stream, K/M/G suffixes (default: each\n"
        "                   sized to last about STRATA_TOPO_CALIBRATE_MS)\n"
        "  --lat-iters N    ping-pongs per latency test (default 20)\n"
        "  --out FILE       write the measured fabric as a cluster file (STRATA_TOPO_FILE)\n"
        "  --json           print the measurements as one JSON object\n"
        "The ranks' places come from STRATA_TOPO_PATH / STRATA_TOPO_FILE (else their hosts).\n");
    return rc;
}

static long long parse_size(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    long long mul = *end == 'K' ? 1024 : *end == 'M' ? 1024 * 1024 : *end == 'G' ? 1024LL << 20 : 1;
    if (end == s || v <= 0 || (mul > 1 && end[1]) || (mul == 1 && *end))
        return -1;
    return v * mul;
}

int cmd_probe(int argc, char **argv)
{
    strata_probe_opts_t o = strata_probe_opts_default();
    const char *out = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return usage(0);
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!v)
            return usage(2);
        i++;
        if (!strcmp(a, "--bytes")) {
            long long b = parse_size(v);
            if (b < 1) {
                fprintf(stderr, "strata probe: --bytes expects a size like 4M, got '%s'\n", v);
                return 2;
            }
            o.stream_bytes = (size_t)b;
        } else if (!strcmp(a, "--lat-iters")) {
            if (!cmd_int_option("probe", a, v, 1, 1000000, &o.lat_iters))
                return 2;
        } else if (!strcmp(a, "--out")) {
            out = v;
        } else {
            return usage(2);
        }
    }
    strata_comm_t *comm;
    if (cmd_comm_from_env("probe", "strata launch -n N -- strata probe", 0, &comm) != 0)
        return 1;
    strata_probe_result_t r;
    strata_status_t rc = strata_probe_run(comm, &o, &r);
    int rank = strata_comm_rank(comm), n = strata_comm_size(comm);
    if (rc != STRATA_OK) {
        int st = cmd_fail(NULL, "probe failed on rank %d: %s", rank, strata_last_error());
        strata_comm_abort(comm, "probe failed");
        strata_comm_destroy(comm);
        return st;
    }
    if (rank == 0) {
        if (json) {
            printf("{\"nranks\":%d,\"levels\":[", n);
            for (int l = 0; l < r.topo.nlevels; l++) {
                const strata_link_sample_t *p = &r.calib.sample[l];
                printf("%s{\"name\":\"%s\",\"measured\":%s", l ? "," : "", r.topo.level[l].name,
                       p->measured ? "true" : "false");
                double bw, agg;
                if (p->measured) {
                    strata_link_sample_rates(p, &bw, &agg);
                    printf(",\"pair\":[%d,%d],\"latency_us\":%.3f,\"bandwidth_GBps\":%.6f,"
                           "\"pairs\":%d,\"aggregate_GBps\":%.6f,\"oversubscription\":%.3f",
                           p->a, p->b, p->latency_s * 1e6, bw / 1e9, p->pairs, agg / 1e9,
                           r.topo.level[l].oversub);
                }
                printf("}");
            }
            printf("]}\n");
        } else {
            printf("# strata probe: %d ranks, measured in %.2f s\n", n, r.calib.seconds);
            strata_link_calib_describe(&r.calib, stdout);
        }
        if (out) {
            FILE *f = fopen(out, "w");
            if (!f) {
                strata_comm_destroy(comm);
                return cmd_fail(NULL, "cannot write %s", out);
            }
            strata_topo_write_json(&r.topo, f);
            if (fclose(f) != 0) {
                strata_comm_destroy(comm);
                return cmd_fail(NULL, "cannot write %s", out);
            }
            fprintf(stderr, "strata probe: wrote %s\n", out);
        }
    }
    strata_comm_destroy(comm);
    return 0;
}
