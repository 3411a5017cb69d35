/* strata's scheduler: topology-aware placement of training jobs and their ranks on a cluster, and a
 * simulation of many jobs over time with host failures and spare capacity.
 *
 * A cluster is a list of hosts, each with a name, its accelerators, a state (free, busy, failed)
 * and its domain at every level of a fabric tree (host, rack, zone, ...). Level parameters
 * (bandwidth, latency, oversubscription) come from a strata_topo_t; the membership may be
 * irregular (racks of different sizes, from a Slurm topology.conf). A job is a parallel layout
 * (TP x CP x PP x DP in a given order, innermost first, as strata plan maps it) with the bytes one
 * device sends per step for each dimension. A placement gives every rank a host and a slot.
 *
 * The cost of a placement is the predicted communication time of one step by the pricing module
 * the communicator and the planner use (strata/price.h): every group of every dimension is priced
 * on its members' hosts, TP/CP/DP groups as the allreduce their communicator would run, pipeline
 * groups by their slowest hop with every stage sending; the slowest group of each dimension sets
 * that dimension's time (the step waits for it), and the dimensions add up. Network only: no
 * reduction cost.
 *
 * strata does not replace Slurm or mpirun: it writes what they take (SLURM_HOSTFILE for
 * --distribution=arbitrary, an Open MPI rankfile, a per-host torchrun-style environment).
 * Everything here is single-threaded and keeps no global state.
 */
#ifndef STRATA_SCHED_H
#define STRATA_SCHED_H

#include "strata/netmodel.h" /* strata_dim_t */
#include "strata/status.h"
#include "strata/topo.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- cluster ----------------------------------------------------------------------------------- */

typedef enum strata_host_state {
    STRATA_HOST_FREE = 0,
    STRATA_HOST_BUSY,   /* used by another job */
    STRATA_HOST_FAILED, /* down, drained or failed: never placed on */
} strata_host_state_t;

typedef struct strata_host {
    char name[STRATA_HOSTNAME_MAX];
    int accels;
    strata_host_state_t state;
    int dom[STRATA_TOPO_MAX_LEVELS]; /* dom[0] = host index, dom[i] = its level-i unit's id */
} strata_host_t;

typedef struct strata_cluster {
    strata_topo_t topo; /* level parameters; level 0 is the host, the last level one unit */
    int nhosts;
    strata_host_t *hosts; /* owned */
    int ndom[STRATA_TOPO_MAX_LEVELS]; /* units per level */
    char (*dom_name)[STRATA_HOSTNAME_MAX]; /* owned; names of level-i units at dom_off[i] + id */
    int dom_off[STRATA_TOPO_MAX_LEVELS + 1];
    int *by_name; /* owned: host indices sorted by name (strata_hostname_cmp) */
} strata_cluster_t;

/* Expands a regular tree into hosts named "<prefix>NNNNN" in tree order (prefix "node" when NULL):
 * the host level is topo->level[0], whose fanout is the accelerators per host. Errors:
 * STRATA_ERR_INVALID_ARG for an invalid tree or more than 1,000,000 hosts. */
STRATA_API strata_status_t strata_cluster_from_topo(const strata_topo_t *topo, const char *prefix,
                                                    strata_cluster_t *out);

/* Builds a cluster from a Slurm topology: a level per switch height (leaf switches or blocks are
 * level 1, their parents level 2, ...) and one top level holding everything. Level parameters come
 * from `params` (level i uses params->level[min(i, nlevels-1)]; NULL = NVLink host, 50 GB/s
 * scale-out). `accels_per_host` accelerators per node. Errors: STRATA_ERR_INVALID_ARG. */
STRATA_API strata_status_t strata_cluster_from_slurm(const strata_slurm_topo_t *st,
                                                     const strata_topo_t *params,
                                                     int accels_per_host, strata_cluster_t *out);

/* Applies a state file: lines "<hostlist> STATE", '#' comments; STATE is free, busy or failed, or
 * any node state sinfo prints (long or short, either case, with flags: idle, MIXED, drng, down*,
 * idle~, plnd, ...), so `sinfo -N -h -o "%N %t"` is a state file. Errors:
 * STRATA_ERR_IO, STRATA_ERR_PARSE "path:line: expected ..." naming an unknown host or state. */
STRATA_API strata_status_t strata_cluster_load_state(strata_cluster_t *c, const char *path);
STRATA_API strata_status_t strata_cluster_parse_state(strata_cluster_t *c, const char *text,
                                                      const char *origin);

/* Index of the host named `name`, or -1. */
STRATA_API int strata_cluster_find_host(const strata_cluster_t *c, const char *name);

/* "/dc0/zone3/rack17/node00042": the host's path from the top (STRATA_TOPO_PATH). */
STRATA_API const char *strata_cluster_host_path(const strata_cluster_t *c, int host, char *buf,
                                                size_t size);

STRATA_API void strata_cluster_free(strata_cluster_t *c);

/* ---- job --------------------------------------------------------------------------------------- */

typedef struct strata_job {
    int tp, cp, pp, dp;
    strata_dim_t order[STRATA_DIM_COUNT]; /* innermost first; rank = sum coord[d] * stride[d] */
    int procs_per_host;                   /* ranks per host; 0 = the host's accelerators */
    double bytes[STRATA_DIM_COUNT];       /* bytes one device sends per step in that dimension */
} strata_job_t;

/* tp=cp=pp=dp=1, order tp,cp,pp,dp, and default volumes (TP 4 GB, CP 0, PP 0.5 GB, DP 2 GB per
 * device per step: a 70B-class model's orders of magnitude). */
STRATA_API strata_job_t strata_job_default(void);
STRATA_API long long strata_job_world(const strata_job_t *job);
/* The coordinate of `rank` in dimension d of the job's layout (0 .. size of d - 1), by its order:
 * for d = STRATA_DIM_DP, the data-parallel replica the rank belongs to. */
STRATA_API int strata_job_coord(const strata_job_t *job, long long rank, strata_dim_t d);

/* Reads the layout and per-dimension bytes from `strata plan --json` output (predict: the root
 * object; search: its first "top" entry). Errors: STRATA_ERR_IO, STRATA_ERR_PARSE. */
STRATA_API strata_status_t strata_job_load_plan(const char *path, strata_job_t *out);

/* ---- placement --------------------------------------------------------------------------------- */

typedef enum strata_policy {
    STRATA_POLICY_TOPO = 0, /* strata: fewest zones, balanced, pipelines inside the smallest level */
    STRATA_POLICY_FIRST_FIT, /* free hosts in hostname order, ranks in order */
    STRATA_POLICY_RANDOM,    /* free hosts shuffled (seeded) */
    STRATA_POLICY_COUNT
} strata_policy_t;

STRATA_API const char *strata_policy_name(strata_policy_t p);
STRATA_API strata_status_t strata_policy_parse(const char *s, strata_policy_t *out);

typedef struct strata_place_opts {
    strata_policy_t policy;
    uint64_t seed;     /* for STRATA_POLICY_RANDOM */
    int spares;        /* free hosts kept back per failure domain (topo policy), default 0 */
    int spare_level;   /* level of the failure domain; 0 = the top's children (zones) */
} strata_place_opts_t;

STRATA_API strata_place_opts_t strata_place_opts_default(void);

typedef struct strata_cost {
    double dim_s[STRATA_DIM_COUNT]; /* slowest group of each dimension */
    int dim_level[STRATA_DIM_COUNT]; /* outermost level its groups cross (-1: no traffic) */
    double total_s;                 /* sum of dim_s: predicted communication time per step */
    double cross_bytes[STRATA_TOPO_MAX_LEVELS]; /* per step, all ranks: bytes of groups whose
                                                   outermost crossed level is >= i */
    int hosts_per_level[STRATA_TOPO_MAX_LEVELS]; /* distinct units of each level the job uses */
    int group_span[STRATA_DIM_COUNT][STRATA_TOPO_MAX_LEVELS]; /* [d][l]: the most level-l units
                                     one group of dimension d touches (1: every group stays inside
                                     one; [d][0] counts hosts). Set for every dimension, priced or
                                     not: how many racks and zones a TP/PP/DP group spans */
} strata_cost_t;

typedef struct strata_placement {
    long long world;
    int nhosts;
    int *hosts;         /* owned: nhosts host indices, in job order (host-slot j) */
    int *rank_host;     /* owned: world entries, host index of each rank */
    int *rank_slot;     /* owned: world entries, slot (local rank) on that host */
    int nspares;
    int *spares;        /* owned: hosts kept back as spares (topo policy) */
    strata_cost_t cost;
} strata_placement_t;

/* Places `job` on the free hosts of `c` by `opts->policy` and prices it. Does not change host
 * states. Errors: STRATA_ERR_INVALID_ARG when the layout is malformed, procs_per_host does not
 * divide the world or exceeds a host, or the job needs more hosts than are free (the message
 * gives both numbers); STRATA_ERR_NO_MEMORY. On error *out is empty. */
STRATA_API strata_status_t strata_place(const strata_cluster_t *c, const strata_job_t *job,
                                        const strata_place_opts_t *opts, strata_placement_t *out);

/* Prices a placement whose rank_host is filled (also used for hand-made placements in tests). */
STRATA_API strata_status_t strata_place_cost(const strata_cluster_t *c, const strata_job_t *job,
                                             const int *rank_host, strata_cost_t *out);

STRATA_API void strata_placement_free(strata_placement_t *p);

/* ---- outputs ------------------------------------------------------------------------------------ */

/* SLURM_HOSTFILE for `srun --distribution=arbitrary`: line r is the host of rank r. */
STRATA_API void strata_write_slurm_hostfile(const strata_cluster_t *c, const strata_placement_t *p,
                                            FILE *f);
/* Open MPI rankfile: "rank R=HOST slot=S" per rank (mpirun --rankfile / --map-by rankfile:file=). */
STRATA_API void strata_write_rankfile(const strata_cluster_t *c, const strata_placement_t *p,
                                      FILE *f);
/* One block per host: "# host NAME" then NNODES, NODE_RANK, NPROC_PER_NODE, MASTER_ADDR,
 * MASTER_PORT, STRATA_RANKS (comma list of that host's global ranks by local rank) and
 * STRATA_TOPO_PATH as KEY=VALUE lines. */
STRATA_API void strata_write_env(const strata_cluster_t *c, const strata_placement_t *p,
                                 const strata_job_t *job, FILE *f);
/* SVG of the placement: a panel per child of the top level (zones; one panel when the tree has
 * fewer than four levels), in it a column per level-1 unit (rack) holding its hosts top down, wider
 * gaps where columns differ at a higher level; each labelled. Hosts of the job are coloured by
 * data-parallel replica (never red), free light grey, busy grey, failed red, spares outlined; each
 * host's tooltip gives its path, state and ranks. Below: a colour key and a table of the job's
 * groups per dimension (how many, of how many ranks, the most hosts/racks/zones... one group spans
 * (cost.group_span), its predicted time per step). Every name is XML-escaped; the picture is as
 * wide as its longest text. Errors: STRATA_ERR_NO_MEMORY (nothing written). */
STRATA_API strata_status_t strata_write_place_svg(const strata_cluster_t *c,
                                                  const strata_placement_t *p,
                                                  const strata_job_t *job, FILE *f);

/* ---- simulation -------------------------------------------------------------------------------- */

typedef enum strata_event_kind {
    STRATA_EV_JOB = 0, /* a job arrives */
    STRATA_EV_FAIL,    /* a host fails */
} strata_event_kind_t;

typedef struct strata_trace_event {
    strata_event_kind_t kind;
    double time_s;
    /* job */
    int id;
    strata_job_t job;
    double duration_s;
    int priority; /* higher first */
    /* failure */
    int host;
    double repair_s; /* the host returns after this long */
} strata_trace_event_t;

typedef struct strata_trace {
    int nevents;
    strata_trace_event_t *ev; /* owned, sorted by time */
} strata_trace_t;

/* A seeded trace: `njobs` jobs (sizes from 8 accelerators to a quarter of the cluster, TP 8, PP 1
 * to 16), Poisson arrivals that keep the cluster about 85% loaded, and `nfail` host failures.
 * The same seed gives the same trace. Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_NO_MEMORY. */
STRATA_API strata_status_t strata_trace_generate(const strata_cluster_t *c, int njobs, int nfail,
                                                 uint64_t seed, strata_trace_t *out);

/* Reads a trace file: lines "job TIME ID ACCELS tp=T pp=P [cp=C] duration=S [priority=N]" and
 * "fail TIME HOST [repair=S]" (ACCELS, T, P, C from 1 to 2^24; times and durations finite seconds
 * >= 0; priority within +-1,000,000). Errors: STRATA_ERR_IO, STRATA_ERR_PARSE
 * "path:line: expected ...". */
STRATA_API strata_status_t strata_trace_load(const strata_cluster_t *c, const char *path,
                                             strata_trace_t *out);
STRATA_API void strata_trace_write(const strata_cluster_t *c, const strata_trace_t *t, FILE *f);
STRATA_API void strata_trace_free(strata_trace_t *t);

typedef struct strata_sim_opts {
    strata_policy_t policy;
    uint64_t seed;
    int spares;      /* spare hosts kept per failure domain (topo policy), default 2 */
    int spare_level; /* failure domain level; 0 (default) = the top's children (zones) */
    int samples;     /* most utilisation samples kept for plots, 2 to 256 (default 200) */
} strata_sim_opts_t;

STRATA_API strata_sim_opts_t strata_sim_opts_default(void);

typedef struct strata_sim_report {
    strata_policy_t policy;
    int jobs, started, finished, never_started;
    double makespan_s;
    double utilisation;      /* accelerator-seconds used / (capacity x makespan) */
    double wait_mean_s, wait_p95_s;
    double cross_zone_bytes; /* per-step bytes crossing the zone level, x job seconds, summed */
    double cross_rack_bytes; /* per-step bytes crossing the rack level, x job seconds, summed */
    double comm_s_mean;      /* mean predicted communication time per step of started jobs */
    double fragmentation;    /* time-averaged share of free hosts outside fully free racks */
    int failures, failures_hit_jobs;
    int spare_used;     /* replacements taken from the spare buffer */
    int same_domain;    /* replacements in the failed host's rack or zone */
    int restarts;       /* jobs requeued whole because no replacement was found */
    long long ranks_moved;
    double resched_mean_us, resched_max_us; /* wall time to choose a replacement */
    double wall_s;                          /* wall time of the simulation */
    /* Utilisation over time, for plots: sample k is the mean over [k w, (k+1) w) of busy
     * accelerators / capacity, w = sample_width_s, the last sample ending at the makespan. Equal
     * widths from time 0: when the run outgrows them, neighbours merge and w doubles. */
    int nsamples;
    double sample_width_s;
    double sample_util[256];
} strata_sim_report_t;

/* Replays `trace` on a copy of `c` (the cluster is not changed). Errors: STRATA_ERR_NO_MEMORY. */
STRATA_API strata_status_t strata_sim_run(const strata_cluster_t *c, const strata_trace_t *trace,
                                          const strata_sim_opts_t *opts, strata_sim_report_t *out);

/* On a failure of `failed` (a host of placement p), picks the replacement: a free host in the same
 * failure domain, walking up the levels (rack, then zone, ...), spares of that domain first. Returns
 * its index in *out (or -1 when no free host exists). Exposed for tests. */
STRATA_API strata_status_t strata_place_replace(const strata_cluster_t *c, int failed,
                                                const bool *is_spare, int *out);

/* SVG plot of utilisation over time: a lane per report (its own colour, label, 0-100% axis), all
 * on one time axis with ticks, each drawn as a step over its samples from 0 to its makespan. */
STRATA_API void strata_write_sim_svg(const strata_sim_report_t *r, int nreports, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
