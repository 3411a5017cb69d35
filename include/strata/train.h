/* Training: the byte-level data loader, safetensors checkpoints, and the single-process training loop
 * (progress bar, JSON-lines metrics, a Chrome trace of one step, checkpoint/resume).
 *
 * The loop is split so a data-parallel/ZeRO engine can plug in between backward and the update:
 *   strata_trainer_forward_backward()  -> loss, gradient arena filled (through the model's hooks)
 *   sync hook (strata_trainer_set_sync) -> e.g. allreduce / reduce-scatter of gradients and loss
 *   strata_trainer_update()            -> clipping + optimizer (optionally replaced by the engine)
 * strata_trainer_step() runs the three; strata_trainer_run() runs steps with progress, metrics and
 * checkpoints.
 *
 * Thread-safety: one thread per object. Errors: status + strata_last_error().
 */
#ifndef STRATA_TRAIN_H
#define STRATA_TRAIN_H

#include "strata/model.h"
#include "strata/parallel.h"
#include "strata/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- data --------------------------------------------------------------------------------------
 * Byte-level tokens (0..255) of one file, split into a training part and a validation tail.
 * Batches are a pure function of (seed, step, row): row r of the global batch of step s starts at a
 * position drawn from a hash of (seed, split, s, r). Rank r of N with global batch B therefore takes
 * rows [r*B/N, (r+1)*B/N) of the same global batch with strata_data_batch(..., row_begin = r*B/N,
 * rows = B/N, ...), and N ranks see exactly the rows one process would; resuming needs only the step. */

typedef struct strata_data strata_data_t;

/* Reads the whole file. val_fraction in [0, 0.5] goes to the validation split. Errors:
 * STRATA_ERR_IO naming the file, STRATA_ERR_INVALID_ARG when it has fewer than 2 tokens per split. */
STRATA_API strata_status_t strata_data_open(const char *path, double val_fraction,
                                            strata_data_t **out);
STRATA_API void strata_data_close(strata_data_t *d);
/* Tokens in a split (0 = train, 1 = validation). */
STRATA_API size_t strata_data_ntokens(const strata_data_t *d, int split);

/* Fills tokens and targets (rows x T each; targets are tokens shifted by one) with rows
 * [row_begin, row_begin + rows) of the global batch of `step`. Errors: STRATA_ERR_INVALID_ARG when
 * the split is shorter than T + 1 tokens. */
STRATA_API strata_status_t strata_data_batch(const strata_data_t *d, int split, uint64_t seed,
                                             int64_t step, int row_begin, int rows, int T,
                                             int32_t *tokens, int32_t *targets);

/* ---- checkpoints (safetensors) ------------------------------------------------------------------
 * One file: an 8-byte little-endian header length, a JSON header
 * {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"format": "strata", "step": "...", "crc32": "...", ...}} and the raw data. The
 * crc32 (zlib's) covers every data byte. Written atomically: a temporary file beside the target,
 * fsync, rename, fsync of the directory. Loadable by safetensors.torch.load_file. */

typedef struct strata_ckpt_tensor {
    const char *name;
    int ndim;          /* 1..4 */
    int64_t shape[4];
    float *data;       /* written from / read into */
} strata_ckpt_tensor_t;

typedef struct strata_ckpt_meta {
    int64_t step;         /* optimizer steps done */
    uint64_t seed;        /* data/init seed */
    int64_t data_pos;     /* data position (the next step's index for the stateless loader) */
    int rank, nranks;     /* shard of a ZeRO run (0, 1 when not sharded) */
    int64_t shard_offset; /* arena range of this shard's optimizer state (0, P when not sharded) */
    int64_t shard_count;
    char config[4096];    /* the training configuration as JSON text ("" when none) */
} strata_ckpt_meta_t;

/* Writes n tensors and the metadata atomically to path. Errors: STRATA_ERR_IO naming the file. */
STRATA_API strata_status_t strata_ckpt_write(const char *path, const strata_ckpt_tensor_t *t, int n,
                                             const strata_ckpt_meta_t *meta);

/* An open checkpoint: the whole file validated (header, sizes, crc32) and held in memory. */
typedef struct strata_ckpt strata_ckpt_t;

/* Opens and validates. A truncated, corrupt or non-strata file is refused with STRATA_ERR_PARSE and a
 * message naming the file and what is wrong; a missing one with STRATA_ERR_IO. */
STRATA_API strata_status_t strata_ckpt_open(const char *path, strata_ckpt_t **out);
STRATA_API void strata_ckpt_close(strata_ckpt_t *ck);
STRATA_API const strata_ckpt_meta_t *strata_ckpt_meta(const strata_ckpt_t *ck);
/* A tensor's data (valid until close), or NULL when absent; ndim/shape filled when not NULL. */
STRATA_API const float *strata_ckpt_find(const strata_ckpt_t *ck, const char *name, int *ndim,
                                         int64_t shape[4]);
/* Copies each named tensor into t[i].data, checking that it exists with exactly t[i]'s shape.
 * Errors: STRATA_ERR_PARSE naming the file and the tensor. */
STRATA_API strata_status_t strata_ckpt_load(const strata_ckpt_t *ck, const strata_ckpt_tensor_t *t,
                                            int n);

/* The tensors of an open checkpoint: count, and the i-th name (NULL when out of range). */
STRATA_API int strata_ckpt_ntensors(const strata_ckpt_t *ck);
STRATA_API const char *strata_ckpt_tensor_name(const strata_ckpt_t *ck, int i);

/* ---- sharded checkpoints (ZeRO) ------------------------------------------------------------------
 * Under data parallelism every rank writes its own file dir/ckpt_<step>.rank<r>.safetensors holding,
 * for every parameter-arena range [off, off + n) it owns, the 1-D tensors "params@<off>",
 * "optim.m@<off>" and "optim.v@<off>" of n floats (metadata: rank, nranks, step, config). The ranks'
 * ranges partition the arena. A step is complete only when every one of its nranks files is valid and
 * their ranges cover the arena exactly once; resume and sample assemble the whole arena from them, so
 * a run may resume on a different rank count or ZeRO stage (resharding is a re-cut of the assembled
 * arena). An unsharded file (the single-process trainer's) assembles the same way. */

typedef struct strata_ckpt_full {
    strata_ckpt_meta_t meta; /* rank 0's file (nranks = number of files) */
    size_t nparams;
    float *params;           /* arena-indexed, nparams floats each; malloc'd */
    float *m, *v;            /* optimizer state, arena-indexed; NULL unless asked for */
} strata_ckpt_full_t;

/* Assembles step `step` of dir for model m (its tensor table and arena size): the unsharded file
 * when present, else every rank's shard file, each validated (crc32) and checked (same step and
 * nranks, ranges inside the arena, no overlap, no gap). Errors: STRATA_ERR_IO for a missing file,
 * STRATA_ERR_PARSE for a corrupt/partial/inconsistent one; the message names the file. */
STRATA_API strata_status_t strata_ckpt_assemble(const strata_gpt_t *m, const char *dir, int64_t step,
                                                bool with_state, strata_ckpt_full_t *out);
STRATA_API void strata_ckpt_full_free(strata_ckpt_full_t *f);

/* Steps that have an unsharded file or a rank-0 shard file in dir, newest first, no duplicates
 * (at most max). Returns the count. */
STRATA_API int strata_ckpt_steps(const char *dir, int64_t *steps, int max);

/* The path of checkpoint `step` of `rank` in dir: dir/ckpt_<step 8 digits>.safetensors for rank 0 of
 * an unsharded run, dir/ckpt_<step>.rank<r>.safetensors otherwise. */
STRATA_API void strata_ckpt_path(const char *dir, int64_t step, int rank, int nranks, char *out,
                                 size_t size);
/* Lists the steps that have a checkpoint file of this rank in dir, newest first (at most max).
 * Returns the count (0 when the directory is missing). */
STRATA_API int strata_ckpt_list(const char *dir, int rank, int nranks, int64_t *steps, int max);

/* ---- the training loop ----------------------------------------------------------------------------- */

typedef struct strata_train_config {
    strata_gpt_config_t model;
    char data[1024];       /* text file (byte tokens) */
    double val_fraction;   /* validation tail of the data (0.1) */
    int batch;             /* global batch rows B */
    int seq;               /* T (<= model.max_seq) */
    int64_t steps;         /* total optimizer steps */
    uint64_t seed;         /* init and data seed */
    strata_optim_config_t optim;
    float lr, min_lr;
    int64_t warmup;
    float grad_clip;       /* max global norm; 0 = off */
    int threads;           /* BLAS threads; 0 = library default */
    char ckpt_dir[1024];   /* "" = no checkpoints */
    int64_t ckpt_every;    /* steps between checkpoints (0 = only at the end) */
    int ckpt_keep;         /* newest checkpoints kept (2) */
    char metrics[1024];    /* JSON-lines file ("" = none) */
    char trace[1024];      /* Chrome trace of one step ("" = none) */
    int64_t trace_step;    /* which step to trace (default 2) */
    int64_t eval_every;    /* steps between validation losses (0 = never) */
    int eval_batches;
    bool progress;         /* progress bar on stderr */
    /* data parallel (used when strata train runs under a launcher with more than one rank) */
    int zero;              /* ZeRO stage 0..3 (0) */
    char hpz[32];          /* hpZ: secondary partition inside this fabric level ("host", "rack",
                              or a level number); "" = none */
    int tiers;             /* 3 = the 3-level scheme over the fabric's fastest splitting levels;
                              0 = flat (or hpz) */
    bool qwz, qgz;         /* int8 weight all-gathers / gradient reduce-scatters (off) */
    int64_t bucket;        /* floats per gradient bucket (0 = engine default) */
} strata_train_config_t;

STRATA_API strata_train_config_t strata_train_config_default(void);

/* Reads a JSON training config over *cfg: {"model": {...}, "data": "...", "batch": 8, "seq": 64,
 * "steps": 100, "seed": 1, "optimizer": "adamw"|"lamb", "lr": 1e-3, "min_lr": ..., "warmup": ...,
 * "weight_decay": ..., "beta1", "beta2", "eps", "grad_clip", "threads", "ckpt_dir", "ckpt_every",
 * "ckpt_keep", "metrics", "trace", "trace_step", "eval_every", "eval_batches", "val_fraction"}.
 * Unknown keys are refused. Errors: STRATA_ERR_IO / STRATA_ERR_PARSE naming file:line. */
STRATA_API strata_status_t strata_train_config_load(const char *path, strata_train_config_t *cfg);

/* The config as JSON text (stored in checkpoint metadata). Returns length or -1 if too small. */
STRATA_API int strata_train_config_to_json(const strata_train_config_t *cfg, char *buf,
                                           size_t size);

typedef struct strata_trainer strata_trainer_t;

/* Builds the model, opens the data, allocates optimizer state (for the whole arena), opens metrics.
 * Errors: from the model, data and files. */
STRATA_API strata_status_t strata_trainer_create(const strata_train_config_t *cfg,
                                                 strata_trainer_t **out);
STRATA_API void strata_trainer_destroy(strata_trainer_t *t);

STRATA_API strata_gpt_t *strata_trainer_model(strata_trainer_t *t);
/* Steps done so far (the next step to run is this + 1). */
STRATA_API int64_t strata_trainer_step_count(const strata_trainer_t *t);

/* Distributes the trainer over the ranks of `comm` (data parallel) with a ZeRO engine configured by
 * zc (stage, tiers, quantisation, bucket, prefetch; nparams and segments are filled in from the
 * model). Collective; call once, before resume and run. Afterwards a step runs this rank's rows
 * [r*B/N, (r+1)*B/N) of the global batch through the engine's hooks (the model calls
 * strata_zero_progress between its GEMMs), then step_begin -> global-norm clipping -> AdamW/LAMB on
 * this rank's shards with the LR schedule -> step_end; the logged loss is the mean over the ranks.
 * Only rank 0 prints progress and writes metrics; the trace goes to one file per rank
 * (<trace without .json>.r<rank>.json); checkpoints are sharded (one file per rank, see above) and
 * resume assembles the newest step complete on every rank, on any rank count or stage. The trainer
 * borrows comm (destroy the trainer first). Errors: STRATA_ERR_INVALID_ARG when the global batch is
 * not a multiple of the rank count; engine errors. */
STRATA_API strata_status_t strata_trainer_distribute(strata_trainer_t *t, strata_comm_t *comm,
                                                     const strata_zero_config_t *zc);

/* Step phase 1: loads this step's batch rows [row_begin, row_begin + rows) (the whole global batch
 * with 0, cfg.batch), forward with loss, backward. */
STRATA_API strata_status_t strata_trainer_forward_backward(strata_trainer_t *t, int row_begin,
                                                           int rows, float *loss);

/* Step phase 2 (optional): called by strata_trainer_step between backward and update. It may
 * average gradients and the loss across ranks. */
typedef strata_status_t (*strata_grad_sync_fn)(void *ctx, strata_trainer_t *t, float *loss);
STRATA_API void strata_trainer_set_sync(strata_trainer_t *t, strata_grad_sync_fn fn, void *ctx);

/* Step phase 3: global-norm clipping and the optimizer over the whole arena, then step += 1.
 * *grad_norm (may be NULL) receives the norm before clipping, *lr the rate used. */
STRATA_API strata_status_t strata_trainer_update(strata_trainer_t *t, float *grad_norm, float *lr);

typedef struct strata_step_info {
    int64_t step;
    float loss, grad_norm, lr;
    double seconds, tokens_per_s;
} strata_step_info_t;

/* One whole step (phases 1-3 on the full global batch). */
STRATA_API strata_status_t strata_trainer_step(strata_trainer_t *t, strata_step_info_t *info);

/* Runs to cfg.steps: progress bar, metrics, trace of cfg.trace_step, checkpoints every ckpt_every
 * and at the end. `losses` (may be NULL) receives the loss of each step run, indexed by step - 1. */
STRATA_API strata_status_t strata_trainer_run(strata_trainer_t *t, float *losses);

/* Writes a checkpoint of the current state (parameters by name, optimizer m and v, metadata) to
 * path, atomically. */
STRATA_API strata_status_t strata_trainer_save(strata_trainer_t *t, const char *path);

/* Restores from one checkpoint file (parameters, optimizer state, step). Errors as strata_ckpt_open
 * plus a config mismatch (STRATA_ERR_INVALID_ARG). */
STRATA_API strata_status_t strata_trainer_load(strata_trainer_t *t, const char *path);

/* Resumes from the newest valid checkpoint in cfg.ckpt_dir: a corrupt or partial newest file is
 * reported (warning naming it and why) and the previous one is tried. *resumed_step receives the
 * step (0 when there was nothing to resume from, which is not an error). */
STRATA_API strata_status_t strata_trainer_resume(strata_trainer_t *t, int64_t *resumed_step);

/* GEMM peak of this CPU, measured (GFLOP/s of a square sgemm at the current BLAS threads); used for
 * MFU. Takes about half a second. */
STRATA_API double strata_measure_gemm_peak(int n);

#ifdef __cplusplus
}
#endif
#endif
