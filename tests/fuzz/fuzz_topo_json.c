/* Fuzz target: cluster files (src/topo/topo_json.c, strata_topo_parse and strata_topo_host_path).
 * An accepted tree must write back (strata_topo_write_json) to a file that reads again with the same
 * levels, answer path queries for its first and last accelerator, and, when small, expand into the
 * scheduler's host list as `strata place --cluster FILE` does. */
#include "common.h"

#include "strata/sched.h"
#include "strata/topo.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    strata_topo_t t;
    if (strata_topo_parse(text, "fuzz.json", &t) < 0) {
        FUZZ_CHECK(strata_last_error()[0]);
        free(text);
        return 0;
    }
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    strata_topo_write_json(&t, f);
    fclose(f);
    strata_topo_t back;
    FUZZ_CHECK(strata_topo_parse(out, "written.json", &back) == STRATA_OK);
    FUZZ_CHECK(back.nlevels == t.nlevels);
    for (int i = 0; i < t.nlevels; i++)
        FUZZ_CHECK(back.level[i].fanout == t.level[i].fanout);
    free(out);

    long long cap = strata_topo_capacity(&t);
    int coord[STRATA_TOPO_MAX_LEVELS];
    FUZZ_CHECK(strata_topo_rank_path(&t, 0, coord) == STRATA_OK);
    FUZZ_CHECK(strata_topo_rank_path(&t, cap - 1, coord) == STRATA_OK);
    FUZZ_CHECK(strata_topo_common_level(&t, 0, cap - 1) <= t.nlevels);

    // The "hosts" section, looked up the way a launcher sets STRATA_TOPO_PATH.
    const char *path = fuzz_file("cluster.json", data, size);
    static const char *const hosts[] = {"node01", "n1", "a", "node0001"};
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        char hp[512];
        if (strata_topo_host_path(path, hosts[i], hp, sizeof hp) == STRATA_OK)
            FUZZ_CHECK(strlen(hp) > strlen(hosts[i]));
    }
    if (cap <= 4096 && cap / t.level[0].fanout <= 512) {
        strata_cluster_t c;
        if (strata_cluster_from_topo(&t, NULL, &c) == STRATA_OK) {
            char buf[512];
            FUZZ_CHECK(c.nhosts > 0);
            strata_cluster_host_path(&c, c.nhosts - 1, buf, sizeof buf);
            strata_cluster_free(&c);
        }
    }
    free(text);
    return 0;
}
