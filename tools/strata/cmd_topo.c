/* `strata topo`: shows a fabric as strata reads it (a cluster file or a Slurm topology.conf), a
 * host's path in it, and the local host as hwloc sees it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/cmd.h"
#include "strata/netmodel.h"
#include "strata/strata.h"
#include "strata/topo.h"

static int usage(int rc)
{
    fprintf(rc ? stderr : stdout,
            "usage: strata topo show FILE          levels of a cluster file, or the switches of a\n"
            "                                      Slurm topology.conf, and every host's path\n"
            "       strata topo path FILE [HOST]   HOST's path (default: this host), as a rank\n"
            "                                      with STRATA_TOPO_FILE=FILE would place itself\n"
            "       strata topo hwloc              the local host: packages, NUMA nodes, cores\n");
    return rc;
}

static int show_slurm(const char *file, const char *only)
{
    strata_slurm_topo_t st;
    if (strata_slurm_topo_load(file, &st) != STRATA_OK)
        return cmd_fail(NULL, "%s", strata_last_error());
    if (!only)
        printf("%s: Slurm %s form, %d %s, %d nodes\n", file, st.block ? "block" : "tree",
               st.nswitches, st.block ? "blocks" : "switches", st.nnodes);
    int rc = 0;
    for (int i = 0; i < st.nnodes; i++) {
        if (only && strcmp(only, st.nodes[i].name))
            continue;
        char path[512];
        if (strata_slurm_topo_host_path(&st, st.nodes[i].name, path, sizeof path) < 0)
            rc = cmd_fail(NULL, "%s", strata_last_error());
        else
            printf(only ? "%s\n" : "  %s\n", path);
        if (only)
            break;
    }
    bool listed = !only;
    for (int i = 0; only && i < st.nnodes; i++)
        listed = listed || !strcmp(only, st.nodes[i].name);
    if (!listed)
        rc = cmd_fail("under Slurm the node name is SLURMD_NODENAME; give the name as the file "
                      "lists it", "%s: host \"%s\" is not listed", file, only);
    strata_slurm_topo_free(&st);
    return rc;
}

static int show(const char *file)
{
    if (!strata_topo_file_is_json(file))
        return show_slurm(file, NULL);
    strata_topo_t t;
    if (strata_topo_load(file, &t) != STRATA_OK)
        return cmd_fail(NULL, "%s", strata_last_error());
    strata_topo_describe(&t, stdout);
    return 0;
}

static int path_of(const char *file, const char *host)
{
    char me[256];
    if (!host) {
        if (strata_topo_this_host(me, sizeof me) != STRATA_OK)
            return cmd_fail(NULL, "%s", strata_last_error());
        host = me;
    }
    if (!strata_topo_file_is_json(file))
        return show_slurm(file, host);
    char path[512];
    if (strata_topo_host_path(file, host, path, sizeof path) != STRATA_OK)
        return cmd_fail("add it to the file's \"hosts\", or set STRATA_TOPO_PATH", "%s",
                        strata_last_error());
    printf("%s\n", path);
    return 0;
}

static int hwloc_show(void)
{
    strata_host_shape_t h;
    if (strata_host_shape(&h) != STRATA_OK)
        return cmd_fail(NULL, "%s", strata_last_error());
    printf("%d package%s, %d NUMA node%s, %d cores, %d hardware threads%s%s\n", h.packages,
           h.packages == 1 ? "" : "s", h.numa_nodes, h.numa_nodes == 1 ? "" : "s", h.cores, h.pus,
           h.cpu_model[0] ? "; " : "", h.cpu_model);
    strata_topo_t t;
    strata_link_t shm = strata_link_default_shm();
    strata_host_shape_levels(&h, 1.0 / shm.beta_s_per_b, shm.alpha_s, &t);
    strata_topo_describe(&t, stdout);
    return 0;
}

int cmd_topo(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return usage(argc < 2 ? 2 : 0);
    if (!strcmp(argv[1], "show") && argc == 3)
        return show(argv[2]);
    if (!strcmp(argv[1], "path") && (argc == 3 || argc == 4))
        return path_of(argv[2], argc == 4 ? argv[3] : NULL);
    if (!strcmp(argv[1], "hwloc") && argc == 2)
        return hwloc_show();
    return usage(2);
}
