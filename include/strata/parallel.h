/* Data parallelism with ZeRO stages 0/1/2/3, hierarchical (secondary) partitions, optional int8
 * quantisation and communication overlapped with the model's compute.
 *
 * The engine (strata_zero_t) sits between a model and a communicator. The model keeps its parameters
 * in one contiguous float32 arena of `nparams` floats cut into segments in forward order (segment 0 =
 * embeddings, 1..L = blocks, S-1 = final norm) and its gradients in a gradient arena of the same
 * layout. The model calls three hooks (acquire, release, grad_ready) around each segment; the optimizer
 * belongs to the caller and runs, between strata_zero_step_begin() and strata_zero_step_end(), on the
 * shard ranges the engine hands out. docs/parallel.md explains the stages, memory and overlap.
 *
 *   stage 0  gradients all-reduced (averaged) in buckets; every rank updates every parameter
 *   stage 1  gradients all-reduced; each rank updates only its shard (optimizer state / N), then the
 *            parameters are all-gathered back into the model's arena
 *   stage 2  gradients reduce-scattered in buckets into an engine-owned shard (gradients / N)
 *   stage 3  parameters sharded too: the engine keeps only the shard and all-gathers a segment just
 *            before the model reads it (prefetching the next one), freeing it after release
 *
 * Partition. Every segment is split into N nearly equal pieces (the first count % N pieces one element
 * longer), so a segment smaller than N leaves some ranks an empty piece. A rank's shard is its piece of
 * every segment; a shard range is that piece, at most one per segment.
 *
 * Hierarchy (stages 1-3). `ntiers` tier colours per rank, fastest first (tier 0 = host, tier 1 = rack
 * ...), define nested groups of equal size. All-gathers run slowest tier first on the smallest data and
 * reduce-scatters fastest tier first, so a slow link carries only 1/N of a segment per rank. At stage 3
 * the engine also keeps a secondary partition: the tier-0 group's share of each segment (ZeRO++ hpZ),
 * cut from the forward all-gather, so the backward all-gather runs only inside tier 0. ntiers = 1 is
 * hpZ; ntiers = 2 is the 3-level scheme (tier 0, tier 1, across tier 1).
 *
 * Progress. strata's non-blocking collectives advance only inside strata calls; every hook and
 * strata_zero_progress() advance all outstanding operations without blocking. A model that calls
 * strata_zero_progress() between its GEMMs gets its communication hidden behind them.
 *
 * Thread-safety: an engine and its communicator are used from one thread at a time.
 * Errors: every call returns a status; after a communication error (a dead peer: PEER_FAILED, a
 * timeout) the engine is broken and every later call returns that error again. Destroy it.
 */
#ifndef STRATA_PARALLEL_H
#define STRATA_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/comm.h"
#include "strata/model.h"
#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_zero strata_zero_t;

/* One segment of the parameter arena: floats [offset, offset + count). */
typedef struct strata_zero_segment {
    size_t offset;
    size_t count;
} strata_zero_segment_t;

#define STRATA_ZERO_MAX_TIERS 3

typedef struct strata_zero_config {
    int stage;                              /* 0, 1, 2 or 3 */
    size_t nparams;                         /* floats in the arena */
    int nsegments;                          /* S >= 1 */
    const strata_zero_segment_t *segments;  /* S entries in forward order, contiguous from 0; copied */
    size_t bucket_count;  /* floats per gradient bucket (0 = STRATA_ZERO_BUCKET knob, default 4M) */
    int ntiers;           /* 0 = flat; 1 = hpZ (2 levels); 2 = 3-level; at most STRATA_ZERO_MAX_TIERS */
    int tier_colors[STRATA_ZERO_MAX_TIERS]; /* this rank's colour per tier, fastest first */
    bool quant_weights;   /* qwZ: forward parameter all-gathers carry blockwise int8 (stages 1-3) */
    bool quant_grads;     /* qgZ: gradient reduce-scatter by int8 all-to-all per tier (stages 2-3) */
    bool bf16_grads;      /* gradient reductions (every stage, every level) send bfloat16: half the
                             bytes. Each bucket is rounded to bf16 once, summed by the collective
                             (each addition in fp32, its result rounded to bf16), then widened to
                             fp32 and divided by N into the arena (stages 0-1) or the gradient shard
                             (2-3). Master weights, optimizer, gradient norm and parameter gathers
                             stay fp32. Not with quant_grads (int8 already) */
    bool prefetch;        /* stage 3: gather the next segment while the current one computes */
    int head_segment;     /* the segment the model's head acquires after the last one and first in
                             the backward (strata_model_head_segment: 0 for a tied head, S-1 for
                             an untied one): the order stage 3 prefetches in and keeps a
                             gathered segment for */
} strata_zero_config_t;

/* Stage 0, no tiers, no quantisation, fp32 gradients, prefetch on, bucket from the knob; segments
 * must be set. */
STRATA_API strata_zero_config_t strata_zero_config_default(void);

/* Creates an engine on `comm` (the data-parallel group); collective over comm (it splits the tier
 * communicators). `params` is the model's arena of cfg->nparams floats, identical on every rank:
 * at stages 0-2 the engine borrows it for the engine's lifetime and keeps it consistent; at stage 3
 * it reads its shard from it during this call only and never touches it again (the model may free
 * it). `grads` is the model's gradient arena, borrowed for the engine's lifetime; the engine reads a
 * segment after its grad_ready and, at stages 0-1, writes the averaged gradients back in place. The
 * engine borrows `comm`; destroy the engine first. On failure *out is NULL and nothing leaks.
 * Errors: INVALID_ARG (bad stage, segments not contiguous, tier groups not nested or unequal,
 * qwZ below stage 3, qgZ below stage 2, qgZ with bf16_grads), NO_MEMORY, communication errors. */
STRATA_API strata_status_t strata_zero_create(strata_comm_t *comm, const strata_zero_config_t *cfg,
                                              float *params, float *grads, strata_zero_t **out);

/* Waits for nothing: outstanding operations must have completed (call step_begin/step_end, or after
 * an error just destroy). Frees every engine buffer. NULL is a no-op. */
STRATA_API void strata_zero_destroy(strata_zero_t *z);

/* ---- the model's hooks (ctx is the strata_zero_t) ------------------------------------------------ */

/* Before the model reads segment `seg`: *params points to its `count` full parameters, valid until
 * the matching release. Forward acquires 0..S-1 then 0 (tied head) with backward = false; backward
 * acquires 0, S-1, ..., 0 with backward = true. At stage 3 this waits for the segment's all-gather and
 * starts the next one in that order (prefetch); at stages 1-2 it waits for the segment's share of the
 * previous step's parameter all-gather. Any other order still works, without prefetch. */
STRATA_API strata_status_t strata_zero_acquire(void *ctx, int seg, bool backward,
                                               const float **params);

/* The model is done reading the segment. Stage 3 frees the gathered copy unless the next acquire in
 * the order above is the same segment. */
STRATA_API strata_status_t strata_zero_release(void *ctx, int seg, bool backward);

/* Exactly once per backward per segment, when its gradients in the arena are final (segment 0 last).
 * Starts the reduction of every bucket whose gradients are now all final; the final call of a step
 * starts the rest. After this call the segment's gradients belong to the engine until step_end. */
STRATA_API strata_status_t strata_zero_grad_ready(void *ctx, int seg);

/* Advances every outstanding operation without blocking; cheap when nothing is pending. For the
 * model to call between GEMMs. */
STRATA_API strata_status_t strata_zero_progress(strata_zero_t *z);

/* The hook table the model takes (same members, same order as the model's struct in model.h). */
typedef struct strata_zero_hooks {
    void *ctx;
    strata_status_t (*acquire)(void *ctx, int seg, bool backward, const float **params);
    strata_status_t (*release)(void *ctx, int seg, bool backward);
    strata_status_t (*grad_ready)(void *ctx, int seg);
} strata_zero_hooks_t;

STRATA_API strata_zero_hooks_t strata_zero_hooks(strata_zero_t *z);

/* ---- the optimizer step ------------------------------------------------------------------------- */

/* One range of parameters this rank updates. `params` and `grads` (averaged over the group, the
 * gradient of the global batch mean) point to `count` floats for arena elements
 * [offset, offset + count); `state_offset` is where the range starts in this rank's optimizer state
 * (strata_zero_state_count() elements in all), so elementwise AdamW over
 * state[state_offset .. state_offset + count) is the caller's whole job. */
typedef struct strata_zero_shard {
    size_t offset;
    size_t count;
    size_t state_offset;
    float *params;
    const float *grads;
} strata_zero_shard_t;

/* Elements of optimizer state per rank: nparams at stage 0, about nparams / N otherwise. */
STRATA_API size_t strata_zero_state_count(const strata_zero_t *z);

/* The ranges this rank updates (as step_begin hands them out; `grads` is NULL), without waiting for
 * anything: for checkpoints and for loading optimizer state. `params` points to the engine's
 * parameter shard at stage 3 (writable: a restored shard goes there), into the model's arena
 * otherwise. Fills at most max entries of out; returns the number of ranges (stage 0: one, the
 * whole arena). */
STRATA_API int strata_zero_ranges(strata_zero_t *z, strata_zero_shard_t *out, int max);

/* After the backward: waits for every gradient reduction and fills *shards (engine-owned, valid until
 * step_end) and *nshards. Every segment must have had its grad_ready. */
STRATA_API strata_status_t strata_zero_step_begin(strata_zero_t *z, const strata_zero_shard_t **shards,
                                                  int *nshards);

/* Between step_begin and step_end: the global L2 norm of the averaged gradients (for clipping),
 * summed in double over this rank's shards and all-reduced over the group. Collective. */
STRATA_API strata_status_t strata_zero_grad_norm(strata_zero_t *z, double *norm);

/* Sums `n` doubles over the group in place (for the caller's own statistics, e.g. the loss).
 * Collective; not allowed while a step has reductions in flight (between grad_ready and step_begin). */
STRATA_API strata_status_t strata_zero_allreduce_f64(strata_zero_t *z, double *vals, int n);

/* After the caller has updated its shards' params: makes the parameters consistent again. Stages 1-2
 * start all-gathers of the updated shards into the arena (non-blocking; each segment's share is
 * awaited by its next acquire, or by strata_zero_sync()); stage 3 invalidates the secondary partition
 * and prefetches segment 0 for the next forward. */
STRATA_API strata_status_t strata_zero_step_end(strata_zero_t *z);

/* Waits for every outstanding operation (e.g. before reading the arena for a checkpoint). */
STRATA_API strata_status_t strata_zero_sync(strata_zero_t *z);

/* Stage 3: copies the full current parameters into `out` (nparams floats). Collective. */
STRATA_API strata_status_t strata_zero_gather_params(strata_zero_t *z, float *out);

/* ---- observability ------------------------------------------------------------------------------ */

typedef struct strata_zero_stats {
    uint64_t buckets_issued;          /* gradient bucket reductions started */
    uint64_t buckets_before_last;     /* ... of which before the step's last grad_ready */
    uint64_t gathers_issued;          /* parameter all-gathers started (one per segment fetch) */
    uint64_t gathers_prefetched;      /* ... started ahead of their acquire (prefetch) */
    uint64_t gathers_waited;          /* acquires that had to wait for a gather still in flight */
    uint64_t gathers_secondary;       /* stage 3 backward gathers served inside tier 0 */
    uint64_t max_prefetch_distance;   /* most acquires between a prefetch's issue and its use (1) */
    uint64_t bytes_sent_gather;       /* payload bytes this rank contributed to gathers, all levels */
    uint64_t bytes_sent_reduce;       /* ... to gradient reductions (bytes as sent: int8, bf16, fp32) */
    size_t peak_gathered_floats;      /* stage 3: most gathered floats resident at once */
} strata_zero_stats_t;

STRATA_API strata_zero_stats_t strata_zero_stats(const strata_zero_t *z);

/* ---- blockwise int8 quantisation (qwZ / qgZ), exposed for tests and tools ---------------------- */

#define STRATA_ZERO_QBLOCK 256

/* Bytes of the quantised form of `count` floats: one float scale per block of STRATA_ZERO_QBLOCK
 * values, then one int8 per value. */
STRATA_API size_t strata_zero_qbytes(size_t count);
/* Symmetric: scale = max|x| / 127 per block, q = round(x / scale). |x - dequant(q)| <= scale / 2. */
STRATA_API void strata_zero_quantize(const float *x, size_t count, void *out);
/* Writes (accumulate = false) or adds (true) the dequantised values into y. */
STRATA_API void strata_zero_dequantize(const void *in, size_t count, float *y, bool accumulate);

/* ---- tensor parallelism: the TP group's collectives for the model ----------------------------------
 * A strata_tp_group_t runs the model's tensor-parallel collectives (strata_tp_ops_t in model.h) as
 * non-blocking collectives on a communicator (the mesh's tp group) and measures them: how long each
 * was in flight (start to completion) and how long the model waited for it, so 1 - wait/flight is
 * the share of TP communication hidden behind computation. Waits appear as "tp.wait" spans in the
 * Chrome trace. One thread; the group borrows comm. */
typedef struct strata_tp_group strata_tp_group_t;

typedef struct strata_tp_stats {
    uint64_t ops;    /* collectives completed */
    uint64_t bytes;  /* payload per rank */
    double flight_s; /* sum over collectives of start -> completion */
    double wait_s;   /* time the model was blocked waiting */
} strata_tp_stats_t;

STRATA_API strata_status_t strata_tp_group_create(strata_comm_t *comm, strata_tp_group_t **out);
/* Waits for whatever is still in flight (after an error), then frees. NULL is a no-op. */
STRATA_API void strata_tp_group_destroy(strata_tp_group_t *g);
/* The ops table to put in strata_gpt_shard_t.ops (valid while g lives). */
STRATA_API strata_tp_ops_t strata_tp_group_ops(strata_tp_group_t *g);
STRATA_API strata_tp_stats_t strata_tp_group_stats(const strata_tp_group_t *g);
STRATA_API void strata_tp_group_reset_stats(strata_tp_group_t *g);

#ifdef __cplusplus
}
#endif
#endif
