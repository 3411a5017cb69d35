/* The local host's shape from hwloc: packages (sockets), NUMA nodes, cores and hardware threads,
 * and the levels strata derives from it. hwloc does the discovery; this file only counts. */
#include <hwloc.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "strata/topo.h"

strata_status_t strata_host_shape(strata_host_shape_t *out)
{
    memset(out, 0, sizeof *out);
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0)
        return st_error(STRATA_ERR_SYSTEM, "hwloc: cannot initialise a topology");
    if (hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        return st_error(STRATA_ERR_SYSTEM, "hwloc: cannot load the local topology");
    }
    int np = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
    int nn = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    int nc = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    int nu = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
    out->packages = np > 0 ? np : 1; // a VM may hide its packages: one is implied
    out->numa_nodes = nn > 0 ? nn : 1;
    out->pus = nu > 0 ? nu : 1;
    out->cores = nc > 0 ? nc : out->pus;
    hwloc_obj_t pkg = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
    const char *model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
    if (model) {
        snprintf(out->cpu_model, sizeof out->cpu_model, "%s", model);
        for (size_t n = strlen(out->cpu_model); n && out->cpu_model[n - 1] == ' ';)
            out->cpu_model[--n] = '\0';
    }
    hwloc_topology_destroy(t);
    return STRATA_OK;
}

void strata_host_shape_levels(const strata_host_shape_t *shape, double bw_Bps, double latency_s,
                              strata_topo_t *out)
{
    strata_topo_init(out, "host");
    const char *names[2] = {"socket", "host"};
    int fanout[2] = {shape->cores / (shape->packages > 0 ? shape->packages : 1), shape->packages};
    for (int l = 0; l < 2; l++) {
        strata_topo_level_t lv = {.fanout = fanout[l] > 0 ? fanout[l] : 1,
                                  .bw_Bps = bw_Bps,
                                  .latency_s = latency_s,
                                  .oversub = 1,
                                  .link_class = STRATA_LINK_SCALE_UP};
        snprintf(lv.name, sizeof lv.name, "%s", names[l]);
        out->level[out->nlevels++] = lv;
    }
}
