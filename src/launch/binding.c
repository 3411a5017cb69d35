/* CPU binding of the ranks strata launch starts (launch_internal.h): each rank gets a core, or a
 * NUMA node, of the CPUs the launcher itself may run on (hwloc's topology), so a launcher that is
 * itself bound (srun --cpu-bind, taskset, a cgroup) is honoured: its ranks divide its CPUs. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "base/base.h"
#include "launch/launch_internal.h"

const char *st_bind_name(st_bind_t b)
{
    static const char *const names[] = {"none", "core", "numa"};
    return (unsigned)b < sizeof names / sizeof names[0] ? names[b] : "?";
}

bool st_bind_parse(const char *s, st_bind_t *out)
{
    for (int b = ST_BIND_NONE; b <= ST_BIND_NUMA; b++)
        if (!strcmp(s, st_bind_name((st_bind_t)b))) {
            *out = (st_bind_t)b;
            return true;
        }
    return false;
}

/* The objects of `type` that have CPUs in `allowed`, each as its CPUs within it. */
static int objects(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_const_cpuset_t allowed,
                   hwloc_bitmap_t *sets, int max)
{
    int n = 0, total = hwloc_get_nbobjs_by_type(topo, type);
    for (int i = 0; i < total && n < max; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, i);
        if (!o->cpuset || !hwloc_bitmap_intersects(o->cpuset, allowed))
            continue;
        sets[n] = hwloc_bitmap_alloc();
        hwloc_bitmap_and(sets[n], o->cpuset, allowed);
        n++;
    }
    return n;
}

static void to_cpu_set(hwloc_const_bitmap_t b, cpu_set_t *out)
{
    CPU_ZERO(out);
    int i;
    hwloc_bitmap_foreach_begin(i, b) if (i < CPU_SETSIZE) CPU_SET(i, out);
    hwloc_bitmap_foreach_end();
}

st_bind_t st_bind_sets(st_bind_t want, int nranks, cpu_set_t *sets, char *why, size_t size)
{
    why[0] = 0;
    if (want == ST_BIND_NONE)
        return ST_BIND_NONE;
    cpu_set_t mine;
    hwloc_topology_t topo;
    if (sched_getaffinity(0, sizeof mine, &mine) != 0 || hwloc_topology_init(&topo) != 0) {
        snprintf(why, size, "cannot read this machine's CPUs");
        return ST_BIND_NONE;
    }
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        snprintf(why, size, "hwloc cannot read this machine's topology");
        return ST_BIND_NONE;
    }
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &mine))
            hwloc_bitmap_set(allowed, (unsigned)i);
    int max = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU) + 1;
    hwloc_bitmap_t *objs = calloc((size_t)max, sizeof *objs);
    st_bind_t got = objs ? want : ST_BIND_NONE;
    int n = !objs ? 0 : objects(topo, want == ST_BIND_CORE ? HWLOC_OBJ_CORE : HWLOC_OBJ_NUMANODE,
                                allowed, objs, max);
    if (got == ST_BIND_CORE && nranks > n) { // more ranks than cores: as mpirun, a coarser unit
        int cores = n;
        for (int i = 0; i < n; i++)
            hwloc_bitmap_free(objs[i]);
        n = objects(topo, HWLOC_OBJ_NUMANODE, allowed, objs, max);
        got = n > 1 ? ST_BIND_NUMA : ST_BIND_NONE;
        snprintf(why, size, "%d ranks on %d cores: %s", nranks, cores,
                 got == ST_BIND_NUMA ? "bound to NUMA nodes instead" : "not bound");
    }
    if (n == 0)
        got = ST_BIND_NONE;
    // Cores: rank r on the r-th (packed, as mpirun --bind-to core); NUMA nodes: blocks of ranks.
    for (int r = 0; got != ST_BIND_NONE && r < nranks; r++)
        to_cpu_set(objs[got == ST_BIND_CORE ? r : (int)((long long)r * n / nranks)], &sets[r]);
    for (int i = 0; i < n; i++)
        hwloc_bitmap_free(objs[i]);
    free(objs);
    hwloc_bitmap_free(allowed);
    hwloc_topology_destroy(topo);
    return got;
}
