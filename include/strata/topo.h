/* The fabric as a tree of levels.
 *
 * Level 0 is one accelerator (a GPU, a GCD, a CPU rank). Each level above groups `fanout` units of
 * the level below: 8 GPUs make a host, 2 hosts a rack, 192 racks a pod, 8 pods a cluster. A level
 * says how fast traffic moves between its children:
 *
 *   bw_Bps       bandwidth per accelerator, one direction, for traffic that crosses between two
 *                children of this level (NVLink per GPU at the host level, NIC per GPU above it)
 *   latency_s    one-way latency of a message that crosses between children of this level
 *   oversub      >= 1; the children's injection capacity divided by what this level's switches
 *                carry for them (1 = full bisection, 7 = the 1:7 aggregation layer of a 24K
 * cluster) link_class   scale-up (NVLink, xGMI, shared memory) or scale-out (InfiniBand, RoCE,
 * TCP): the network cost model applies a calibrated efficiency per class efficiency   fraction of
 * bw_Bps that collectives reach on this level; 0 = the class default
 *
 * A level may instead join its children as a TORUS (2D or 3D, e.g. 4x4 or 2x2x2): each child has
 * a link of its own to each neighbour in every dimension (one link per dimension of size 2), and
 * `torus` gives the dimensions, whose product is the fanout. bw_Bps is then per accelerator and
 * direction on each torus link, so a dimension's ring gets it both ways round; oversub does not
 * apply. Child i sits at the coordinates of i in the dimensions, the first varying fastest.
 *
 * Accelerators are numbered by packing the tree innermost first: accelerator r sits in host
 * r / 8, rack r / 16 and so on. strata_topo_t is a plain value (no allocation, copy freely); it is
 * built by presets, read from a JSON cluster file, or assembled level by level. Later parts (Slurm
 * topology.conf, hwloc, probes) fill the same structure.
 *
 * Thread-safety: every function only reads or writes the structure it is given.
 */
#ifndef STRATA_TOPO_H
#define STRATA_TOPO_H

#include "strata/status.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_TOPO_MAX_LEVELS 8
#define STRATA_TOPO_NAME_MAX   48
#define STRATA_TORUS_MAX_DIMS  3

typedef enum strata_link_class {
    STRATA_LINK_SCALE_UP = 0,  /* NVLink / NVSwitch, Infinity Fabric, shared memory */
    STRATA_LINK_SCALE_OUT = 1, /* InfiniBand, RoCE, Slingshot, TCP */
    STRATA_LINK_CLASS_COUNT
} strata_link_class_t;

typedef struct strata_topo_level {
    char name[STRATA_TOPO_NAME_MAX]; /* "host", "rack", "pod", "zone", ... */
    int fanout;                      /* units of the level below in one unit of this level, >= 1 */
    double bw_Bps;                   /* per accelerator, per direction, bytes/s, > 0 */
    double latency_s;                /* one-way per message, seconds, >= 0 */
    double oversub;                  /* >= 1 */
    strata_link_class_t link_class;
    double efficiency; /* (0, 1], or 0 for the calibrated class default */
    int torus[STRATA_TORUS_MAX_DIMS]; /* the children as a torus of these sizes (each >= 2,
                                         product = fanout), unused dimensions 0; all 0: the
                                         children meet in a switch, as in a tree */
} strata_topo_level_t;

typedef struct strata_topo {
    char name[STRATA_TOPO_NAME_MAX];
    char accel[STRATA_TOPO_NAME_MAX]; /* accelerator preset the cluster is built from ("" = any) */
    int nlevels;                      /* levels above the accelerator, innermost first */
    strata_topo_level_t level[STRATA_TOPO_MAX_LEVELS];
} strata_topo_t;

/* Empties *topo and names it. */
STRATA_API void strata_topo_init(strata_topo_t *topo, const char *name);

/* Appends a level above the current outermost one. Errors: STRATA_ERR_INVALID_ARG when the level is
 * malformed (fanout < 1, bandwidth <= 0, oversub < 1, efficiency outside [0, 1], torus dimensions
 * below 2 or whose product is not the fanout), when it is a second torus level, or when the tree
 * already has STRATA_TOPO_MAX_LEVELS levels; the message names the level and the field. */
STRATA_API strata_status_t strata_topo_add_level(strata_topo_t *topo,
                                                 const strata_topo_level_t *lvl);

/* Checks every level as strata_topo_add_level does and that the tree holds at least one level. */
STRATA_API strata_status_t strata_topo_validate(const strata_topo_t *topo);

/* Accelerators in one unit of level `l` (0 = one accelerator, nlevels = the whole cluster).
 * Saturates at LLONG_MAX / 2 for absurd trees. */
STRATA_API long long strata_topo_domain_size(const strata_topo_t *topo, int l);

/* Accelerators in the whole tree. */
STRATA_API long long strata_topo_capacity(const strata_topo_t *topo);

/* The path of accelerator `rank` in the tree: coord[i] is its index among the children of its
 * level-(i+1) unit, for i in [0, nlevels). Errors: STRATA_ERR_INVALID_ARG for a rank outside the
 * tree. */
STRATA_API strata_status_t strata_topo_rank_path(const strata_topo_t *topo, long long rank,
                                                 int coord[STRATA_TOPO_MAX_LEVELS]);

/* The lowest level whose unit holds both ranks (0 when a == b). */
STRATA_API int strata_topo_common_level(const strata_topo_t *topo, long long a, long long b);

/* The torus dimensions of level `lvl` (0 when it is not a torus). */
STRATA_API int strata_topo_torus_ndims(const strata_topo_level_t *lvl);

/* Parses torus dimensions written "4x4" or "2x2x2" (1 to STRATA_TORUS_MAX_DIMS sizes, each 2 to
 * 65536) into dims (unused ones 0). Errors: STRATA_ERR_INVALID_ARG "expected ..." quoting text. */
STRATA_API strata_status_t strata_topo_torus_parse(const char *text,
                                                   int dims[STRATA_TORUS_MAX_DIMS]);

/* Writes dims as "4x4" into buf. */
STRATA_API void strata_topo_torus_format(const int dims[STRATA_TORUS_MAX_DIMS], char *buf,
                                         size_t cap);

/* Index of the level named `name`, or -1. */
STRATA_API int strata_topo_find_level(const strata_topo_t *topo, const char *name);

/* "scale-up" / "scale-out"; parse accepts those and "up"/"out". */
STRATA_API const char *strata_link_class_name(strata_link_class_t cls);
STRATA_API strata_status_t strata_link_class_parse(const char *text, strata_link_class_t *out);

/* ---- presets and files -------------------------------------------------------------------------
 */

/* Built-in cluster presets: "dgx-a100-superpod", "h100-roce-24k", "frontier", "cpu-local", ...
 * Errors: STRATA_ERR_INVALID_ARG for an unknown name (the message lists the known ones). */
STRATA_API strata_status_t strata_topo_preset(const char *name, strata_topo_t *out);
STRATA_API int strata_topo_preset_count(void);
STRATA_API const char *strata_topo_preset_name(int i);
STRATA_API const char *strata_topo_preset_summary(int i);

/* Reads a cluster file (JSON; format in docs/plan.md):
 *   {"name": "...", "accelerator": "h100-sxm", "levels": [
 *      {"name": "host", "fanout": 8, "bandwidth_GBps": 450, "latency_us": 3,
 *       "oversubscription": 1, "class": "scale-up"}, ...]}
 * Errors: STRATA_ERR_IO when the file cannot be read, STRATA_ERR_PARSE for malformed JSON or a bad
 * field; the message is "path:line: expected ...". */
STRATA_API strata_status_t strata_topo_load(const char *path, strata_topo_t *out);

/* This host's name as the cluster files name it: Slurm's node name (SLURMD_NODENAME, set in every
 * Slurm task; it differs from gethostname() on many clusters), else the host name. Errors:
 * STRATA_ERR_SYSTEM. */
STRATA_API strata_status_t strata_topo_this_host(char *out, size_t size);

/* A cluster file may also place hosts: "hosts": [{"names": "node[01-04]", "path": "zone1/rack1"}]
 * (Slurm hostlists). This gives `host`'s path, "zone1/rack1/node03", in out (cap bytes). Errors:
 * STRATA_ERR_UNSUPPORTED when the file has no "hosts"; STRATA_ERR_INVALID_ARG when `host` is not
 * listed; those of strata_topo_load. */
STRATA_API strata_status_t strata_topo_host_path(const char *file, const char *host, char *out,
                                                 size_t cap);

/* True when `path` holds JSON (a cluster file) rather than a Slurm topology.conf, judged by its
 * first non-blank character; an unreadable or empty file counts as JSON so that the JSON reader
 * reports the problem. STRATA_TOPO_FILE accepts both. */
STRATA_API bool strata_topo_file_is_json(const char *path);

/* Parses the same format from a string; `origin` names it in messages. */
STRATA_API strata_status_t strata_topo_parse(const char *text, const char *origin,
                                             strata_topo_t *out);

/* Writes the tree as a cluster file (the format strata_topo_load reads). */
STRATA_API void strata_topo_write_json(const strata_topo_t *topo, FILE *f);

/* Writes a human-readable table of the levels. */
STRATA_API void strata_topo_describe(const strata_topo_t *topo, FILE *f);

/* ---- Slurm hostlists and topology.conf (src/topo/hostlist.c, src/topo/topo_slurm.c) ----------- */

#define STRATA_HOSTNAME_MAX 64

/* Expands a Slurm hostlist expression ("node[01-16,20],gpu7,r[1-2]n[1-3]") into host names, in
 * the order written; zero padding follows the lower bound of each range ("[08-10]" gives 08 09 10).
 * *names is an array of *count strings; the caller frees it with strata_hostlist_free. Errors:
 * STRATA_ERR_PARSE "expected ..." for unbalanced brackets, empty or reversed ranges, names longer
 * than STRATA_HOSTNAME_MAX - 1 or more than 1,000,000 names; STRATA_ERR_NO_MEMORY. */
STRATA_API strata_status_t strata_hostlist_expand(const char *expr, char ***names, int *count);
STRATA_API void strata_hostlist_free(char **names, int count);

/* Compares host names the way people sort them: digit runs by value ("n9" < "n10"); names equal
 * in value but not in zero padding are still different hosts, the less padded first
 * ("n1" < "n01" < "n2"). Zero only for identical names. */
STRATA_API int strata_hostname_cmp(const char *a, const char *b);

typedef struct strata_slurm_switch {
    char name[STRATA_HOSTNAME_MAX];
    int parent;        /* index of the switch listing this one in Switches=, or -1 (a root) */
    double link_speed; /* LinkSpeed= as written (Slurm leaves the unit to the site), 0 when absent */
    int line;          /* where it was defined */
} strata_slurm_switch_t;

typedef struct strata_slurm_node {
    char name[STRATA_HOSTNAME_MAX];
    int sw; /* the leaf switch (tree form) or the block (block form) that lists it */
} strata_slurm_node_t;

/* A parsed topology.conf. Tree form (topology/tree): switches with Nodes= are leaves, Switches=
 * names children. Block form (topology/block): each BlockName is a switch without parent, and
 * BlockSizes= (at most 8) is kept. Owned arrays; free with strata_slurm_topo_free. */
typedef struct strata_slurm_topo {
    bool block;
    int nswitches;
    strata_slurm_switch_t *switches;
    int nnodes;
    strata_slurm_node_t *nodes;
    int nblock_sizes;
    int block_sizes[8];
} strata_slurm_topo_t;

/* Reads a Slurm topology.conf (tree or block form; '#' comments; backslash continuation lines are
 * not supported). Errors: STRATA_ERR_IO; STRATA_ERR_PARSE "path:line: expected ..." for an unknown
 * key, a malformed hostlist, a switch defined twice, a child switch never defined, a switch with
 * two parents, a cycle, a node listed twice, tree and block lines mixed, or no node at all. On
 * error *out is empty. */
STRATA_API strata_status_t strata_slurm_topo_load(const char *path, strata_slurm_topo_t *out);
STRATA_API strata_status_t strata_slurm_topo_parse(const char *text, const char *origin,
                                                   strata_slurm_topo_t *out);
STRATA_API void strata_slurm_topo_free(strata_slurm_topo_t *t);

/* The path of `host` through the switches, outermost first ("spine/leaf3/node07"; block form:
 * "block2/node07"), for STRATA_TOPO_PATH. Returns its depth (components), or
 * STRATA_ERR_INVALID_ARG when the host is not listed or the path does not fit in cap bytes. */
STRATA_API int strata_slurm_topo_host_path(const strata_slurm_topo_t *t, const char *host, char *out,
                                           size_t cap);

/* ---- the local host through hwloc (src/topo/topo_hwloc.c) ------------------------------------- */

typedef struct strata_host_shape {
    int packages, numa_nodes, cores, pus; /* as hwloc counts them on this machine */
    char cpu_model[96];                   /* "" when hwloc does not say */
} strata_host_shape_t;

/* Reads the local host with hwloc. Errors: STRATA_ERR_SYSTEM when hwloc cannot load it. */
STRATA_API strata_status_t strata_host_shape(strata_host_shape_t *out);

/* The host as a tree of levels for ranks pinned one per core: "socket" (fanout: cores per
 * package) and "host" (fanout: packages), every level with the given link (shared memory). */
STRATA_API void strata_host_shape_levels(const strata_host_shape_t *shape, double bw_Bps,
                                         double latency_s, strata_topo_t *out);


/* ---- a job's ranks on the fabric (src/topo/fabric.c) -------------------------------------------
 *
 * Where the tree above describes the fabric's levels, a fabric says where each rank of one job
 * sits: for every level l (innermost first, the levels of `topo`), the unit of that level holding
 * the rank (its host, its rack, ...). Units need not be of equal size: racks of unequal size and a
 * lone host are described as they are. Two ranks whose lowest common unit is at level l talk over
 * level l's links; a unit's uplink towards level l+1 carries size(unit) * bw(l+1) / oversub(l+1).
 * The outermost level holds every rank. The cost model (netmodel.h) and the communicator's
 * topology-aware algorithms read it. */

typedef struct strata_fabric {
    int nranks;
    strata_topo_t topo; /* the levels (names, links); fanout is ignored */
    int *unit;          /* unit[l * nranks + r]: rank r's unit at level l, dense from 0 in order of
                           first appearance by rank; the outermost level is all 0 */
    int *nunits;        /* units per level */
} strata_fabric_t;

/* Places `nranks` ranks given each one's path, outermost component first ("zone1/rack3/host7"; the
 * last component is the innermost unit, a host). Levels beyond a path's depth are shared by all
 * ranks (a path "host7" in a host<rack<spine tree puts the rank in one rack shared with every
 * other short path), and so is the outermost level, named or not. `topo` gives the levels (a
 * cluster file, or strata_fabric_default_levels() in netmodel.h). Errors: STRATA_ERR_INVALID_ARG
 * for a malformed path (strata_topo_path_keys), one with more components than the tree has
 * levels, or no levels. */
STRATA_API strata_status_t strata_fabric_from_paths(const strata_topo_t *topo, int nranks,
                                                    const char *const *paths, strata_fabric_t *out);

/* Places ranks given each one's unit key per level (keys[r * stride + l], l < stride; equal keys
 * at a level mean the same unit; levels at or beyond `stride`, and the outermost, are shared).
 * Used by the communicator, which exchanges the keys of strata_topo_path_keys. Errors (this and
 * strata_fabric_from_paths): STRATA_ERR_INVALID_ARG when the ranks sit in more children of a
 * torus unit than the torus has cells, naming the level, its dimensions and the count. */
STRATA_API strata_status_t strata_fabric_from_keys(const strata_topo_t *topo, int nranks,
                                                   const uint64_t *keys, int stride,
                                                   strata_fabric_t *out);

/* The unit keys of a path ("zone1/rack3/host7", a leading '/' allowed): keys[l] for the unit of
 * level l, innermost first (keys[0] names the host), each the hash of the path up to that unit;
 * *depth = the number of components. Errors: STRATA_ERR_INVALID_ARG for an empty component or a
 * path deeper than STRATA_TOPO_MAX_LEVELS; the message quotes the path. */
STRATA_API strata_status_t strata_topo_path_keys(const char *path,
                                                 uint64_t keys[STRATA_TOPO_MAX_LEVELS], int *depth);

/* The sub-fabric of `n` ranks `members[i]` of `f`, renumbered 0..n-1 (a split communicator). */
STRATA_API strata_status_t strata_fabric_subset(const strata_fabric_t *f, int n,
                                                const int *members, strata_fabric_t *out);

STRATA_API void strata_fabric_free(strata_fabric_t *f);

static inline int strata_fabric_unit(const strata_fabric_t *f, int level, int rank)
{
    return f->unit[level * f->nranks + rank];
}

/* The lowest level whose unit holds both ranks (-1 when a == b). */
STRATA_API int strata_fabric_common_level(const strata_fabric_t *f, int a, int b);

/* Ranks in `rank`'s unit at `level`. */
STRATA_API int strata_fabric_unit_size(const strata_fabric_t *f, int level, int rank);

/* The ranks in tree order: every unit of every level contiguous, units in order of their lowest
 * rank, ranks ascending inside a host. A ring in this order crosses each uplink the minimum number
 * of times (twice: once out, once back in). */
STRATA_API void strata_fabric_tree_order(const strata_fabric_t *f, int *order);

/* The grid of the multi-dimensional ring on a fabric whose ranks fill one torus: every rank in one
 * unit of the torus level, every child (cell) of that unit holding ranks, and each the same
 * number m of them. A child's cell is its unit id (children are numbered in order of their first
 * rank, so ranks numbered host by host in torus order put host i in cell i). When m > 1 the ranks
 * of a child form an inner dimension of size m that meets below the torus. */
typedef struct strata_torus_grid {
    int level;  /* the torus level */
    int ndims;  /* dimensions of the grid, innermost first */
    int dims[STRATA_TORUS_MAX_DIMS + 1]; /* [0] = m when inner, then the torus's */
    bool inner; /* dims[0] counts the ranks of one child */
} strata_torus_grid_t;

/* True when the ranks of `f` fill one torus (above); *out describes its grid and, when `cell` is
 * not NULL, cell[r] = rank r's index in the grid (its coordinates as digits, dims[0] fastest; an
 * inner digit is the rank's place among its child's ranks in rank order). False (and *out zeroed)
 * for a fabric with no torus level, a part of a torus (a split), or ranks spread unevenly. */
STRATA_API bool strata_fabric_torus(const strata_fabric_t *f, strata_torus_grid_t *out, int *cell);

/* Writes "host 4 units (sizes 2..2), rack 2 units, spine 1 unit" style summary. */
STRATA_API void strata_fabric_describe(const strata_fabric_t *f, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
