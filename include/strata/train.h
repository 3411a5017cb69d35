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
#include "strata/schedule.h"
#include "strata/status.h"

#include <signal.h>
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

/* Opens the file (it is not loaded: each batch reads its rows' windows, so a corpus larger than
 * memory works; docs/train.md "Data"). val_fraction in [0, 0.5] goes to the validation split.
 * Errors: STRATA_ERR_IO naming the file, STRATA_ERR_INVALID_ARG when it has fewer than 2 tokens per
 * split. */
STRATA_API strata_status_t strata_data_open(const char *path, double val_fraction,
                                            strata_data_t **out);
STRATA_API void strata_data_close(strata_data_t *d);
/* Tokens in a split (0 = train, 1 = validation). */
STRATA_API size_t strata_data_ntokens(const strata_data_t *d, int split);

/* Fills tokens and targets (rows x T each; targets are tokens shifted by one) with rows
 * [row_begin, row_begin + rows) of the global batch of `step`, read from the file. Either may be
 * NULL: only the other is read (a pipeline's first stage needs the tokens, its last the targets).
 * Thread-safe. Errors: STRATA_ERR_INVALID_ARG when the split is shorter than T + 1 tokens,
 * STRATA_ERR_IO naming the file and the byte when a read fails or the file was truncated. */
STRATA_API strata_status_t strata_data_batch(const strata_data_t *d, int split, uint64_t seed,
                                             int64_t step, int row_begin, int rows, int T,
                                             int32_t *tokens, int32_t *targets);
/* Bytes read from the file so far (every batch, every thread). */
STRATA_API uint64_t strata_data_bytes_read(const strata_data_t *d);

/* ---- checkpoints (safetensors) ------------------------------------------------------------------
 * One file: an 8-byte little-endian header length, a JSON header
 * {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"format": "strata", "step": "...", "crc32": "...", "header_crc32": "...", ...}}
 * and the raw data. "crc32" (zlib's) covers every data byte; "header_crc32" covers the 8 length
 * bytes and the whole header (so every metadata field and, through "crc32", the data), computed as
 * if its own 8 digits were '0'. Written atomically: a temporary file <path>.tmp.<pid>.<host> beside
 * the target, fsync, rename, fsync of the directory. Loadable by safetensors.torch.load_file. */

typedef struct strata_ckpt_tensor {
    const char *name;
    int ndim;          /* 1..4 */
    int64_t shape[4];
    float *data;       /* written from / read into */
} strata_ckpt_tensor_t;

typedef struct strata_ckpt_meta {
    int64_t step;         /* optimizer steps done, 0 .. 2^53 */
    uint64_t seed;        /* data/init seed */
    int64_t data_pos;     /* data position (the next step's index for the stateless loader) */
    int rank, nranks;     /* shard of a ZeRO run (0, 1 when not sharded) */
    int64_t shard_offset; /* arena range of this shard's optimizer state (0, P when not sharded) */
    int64_t shard_count;
    char run_id[17];      /* the training run (16 hex digits, kept across resumes; "" = none) */
    char config[4096];    /* the training configuration as JSON text ("" when none) */
} strata_ckpt_meta_t;

/* What identifies one written file: its header checksum (which covers its data checksum) and size. */
typedef struct strata_ckpt_digest {
    uint32_t header_crc32;
    uint64_t bytes;
} strata_ckpt_digest_t;

/* Writes n tensors and the metadata atomically to path; *digest (may be NULL) receives the file's
 * identity. A tensor holding a NaN or an infinity is refused (STRATA_ERR_INVALID_ARG naming the
 * tensor and element: a non-finite state is never checkpointed), so are metadata out of range.
 * Errors: STRATA_ERR_IO naming the file and the system's reason (a full disk, a file size limit). */
STRATA_API strata_status_t strata_ckpt_write(const char *path, const strata_ckpt_tensor_t *t, int n,
                                             const strata_ckpt_meta_t *meta,
                                             strata_ckpt_digest_t *digest);

/* An open checkpoint: the whole file validated and held in memory. */
typedef struct strata_ckpt strata_ckpt_t;

/* Opens and validates: the header checksum (so an edited metadata field is refused), the data
 * checksum, every metadata field's type and range (a step of -5 or "abc" is refused), every tensor's
 * dtype, shape and extent (the extents tile the data section), and every value finite. A truncated,
 * corrupt, edited or non-strata file, or one holding NaN/inf, is refused with STRATA_ERR_PARSE and a
 * message naming the file (and the tensor); a missing one with STRATA_ERR_IO. */
STRATA_API strata_status_t strata_ckpt_open(const char *path, strata_ckpt_t **out);
STRATA_API void strata_ckpt_close(strata_ckpt_t *ck);
STRATA_API const strata_ckpt_meta_t *strata_ckpt_meta(const strata_ckpt_t *ck);
/* The open file's identity (as strata_ckpt_write reported it). */
STRATA_API strata_ckpt_digest_t strata_ckpt_digest(const strata_ckpt_t *ck);
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

/* What a rank's shard holds, model tensor by model tensor (the file's own tensors are arena ranges,
 * "params@<range>" ...): piece i is elements [begin, end) (row-major) of the model tensor `name`,
 * or of this rank's tensor-parallel part of it, stored from element `at` on of the file's tensors
 * "params@<range>", "optim.m@<range>" and "optim.v@<range>". Written by the trainer into every
 * shard's __metadata__ as "tensors" (a JSON text, the same fields; "tp" only under tensor
 * parallelism, "tied_copy" only when true), so other tools can read a shard without the arena
 * layout; checked when the file is opened (the ranges they name exist and hold them). A file
 * without the record (an unsharded file, or a shard of an older strata) has no pieces. Every element
 * of every tensor is held once over a step's shards, except copies: a tensor that the TP group
 * replicates (split_dim -1, tp > 1) is held by every TP rank (assembling reads tp_rank 0's), and a
 * pipeline's last stage holds a tied copy of wte. */
typedef struct strata_ckpt_piece {
    const char *name;      /* the model's tensor, "h.3.attn.qkv.weight" (valid until close) */
    int ndim;              /* 1 or 2 */
    int64_t shape[2];      /* the whole tensor */
    int tp, tp_rank;       /* the TP rank whose part holds it, of tp (1, 0 without TP) */
    int split_dim;         /* how the part cuts it (strata_tensor_info_t): 0 rows, 1 columns, -1
                              not at all (the whole tensor, replicated when tp > 1) */
    int split_groups;      /* blocks cut separately (3 for qkv: q | k | v), 1 otherwise */
    int64_t part_shape[2]; /* the part's shape (shape when whole): what begin and end count in */
    int64_t begin, end;    /* the elements held */
    int64_t range;         /* in the file's tensors "params@<range>", "optim.m@<range>", ... */
    int64_t at;            /* from their element `at` on */
    bool tied_copy;        /* a pipeline's last-stage copy of wte (the first stage's is the tensor) */
} strata_ckpt_piece_t;

/* The pieces of an open checkpoint: count, and the i-th (NULL when out of range). */
STRATA_API int strata_ckpt_npieces(const strata_ckpt_t *ck);
STRATA_API const strata_ckpt_piece_t *strata_ckpt_piece(const strata_ckpt_t *ck, int i);

/* ---- checkpoint steps: shards and their manifest ----------------------------------------------------
 * A checkpoint of step s in dir is one file per rank, dir/ckpt_<s 8 digits>.rank<r>.safetensors
 * (dir/ckpt_<s>.safetensors when one process trains), and the step's manifest
 * dir/ckpt_<s>.manifest.json, written last, once every shard is known written. A rank's shard holds,
 * for every parameter-arena range [off, off + n) it owns, the 1-D tensors "params@<off>",
 * "optim.m@<off>" and "optim.v@<off>" of n floats; the one-process file holds the parameters by name
 * plus "optim.m" and "optim.v". The manifest is the step's identity: run id, step, rank count,
 * parameter count, the training config, and every shard's digest (header checksum and size). A step
 * exists only when its manifest does (a step interrupted by a crash or a full disk has none), and it
 * is used only when every shard matches the manifest (digest, run id, step, rank, rank count), passes
 * strata_ckpt_open, and the shards' ranges cover the arena exactly once; so a shard of another step,
 * an older one, or one of another run is refused, naming the file. The manifest carries its own
 * sealed checksum ("manifest_crc32"). Resume and sample assemble the whole arena from the shards, so
 * a run may resume on a different rank count or ZeRO stage (a re-cut of the assembled arena).
 * Tensor and pipeline parallelism: a run with TP groups of tp ranks and pp stages writes, in every
 * rank's ranges, offsets into the parts of every (stage, TP rank) laid one after another (stage 0's
 * TP ranks first, each part strata_gpt_config_part_nparams of its stage's chunks;
 * strata_gpt_arena_convert), and the manifest records "tp", "pp" and every stage's chunks; assembling
 * turns the parts back into the whole model's arena (every tensor by name, strata_tensor_part_copy;
 * the last stage's copy of wte is not read: the first stage's wte is the tensor), so a run resumes
 * at any TP, PP, DP and ZeRO layout. */

typedef struct strata_ckpt_manifest {
    int64_t step;
    char run_id[17];
    int nranks;
    int64_t nparams;               /* floats written: the whole arena, or tp * a TP part's */
    int tp;                        /* tensor-parallel group size (1; "tp" in the JSON) */
    int pp;                        /* pipeline stages (1; "pp") */
    strata_gpt_layers_t *stages;   /* [pp] the chunks of every stage ("stages": [[[b, e], ...],
                                      ...]); NULL when pp is 1 (malloc'd by manifest_read) */
    uint64_t seed;
    char config[4096];             /* the training config (JSON text); its "model" builds the model */
    strata_ckpt_digest_t *shards;  /* nranks entries (malloc'd by manifest_read) */
} strata_ckpt_manifest_t;

/* Writes m as the manifest of step m->step in dir (atomically), making the step exist. */
STRATA_API strata_status_t strata_ckpt_commit(const char *dir, const strata_ckpt_manifest_t *m);

/* Removes the manifest of step `step` (before its shards are rewritten). Missing is fine. */
STRATA_API strata_status_t strata_ckpt_uncommit(const char *dir, int64_t step);

/* Reads and validates the manifest of `step` in dir (its checksum, every field's type and range, the
 * shard file names). Errors: STRATA_ERR_IO when missing, STRATA_ERR_PARSE naming the file. */
STRATA_API strata_status_t strata_ckpt_manifest_read(const char *dir, int64_t step,
                                                     strata_ckpt_manifest_t *out);
STRATA_API void strata_ckpt_manifest_free(strata_ckpt_manifest_t *m);

/* The model configuration recorded in a manifest ("model" of its config). Errors: STRATA_ERR_PARSE. */
STRATA_API strata_status_t strata_ckpt_manifest_model(const strata_ckpt_manifest_t *m,
                                                      strata_gpt_config_t *out);

typedef struct strata_ckpt_full {
    strata_ckpt_meta_t meta; /* rank 0's file (nranks = number of files) */
    size_t nparams;
    float *params;           /* the whole model's arena (one-process layout, whatever the layout
                                written), nparams floats each; malloc'd */
    float *m, *v;            /* optimizer state, arena-indexed; NULL unless asked for */
} strata_ckpt_full_t;

/* Assembles step `step` of dir for model m (whole or a TP part: its configuration is what counts):
 * the manifest, then every shard it lists, each checked against it as above, and the model recorded
 * in the manifest against m's; a tensor-parallel step is turned into the whole model. Errors: STRATA_ERR_IO for
 * a missing file, STRATA_ERR_PARSE for a corrupt, partial, mixed, stale or foreign one, and
 * STRATA_ERR_INVALID_ARG for another model; the message names the file and why. */
STRATA_API strata_status_t strata_ckpt_assemble(const strata_gpt_t *m, const char *dir, int64_t step,
                                                bool with_state, strata_ckpt_full_t *out);
STRATA_API void strata_ckpt_full_free(strata_ckpt_full_t *f);

/* Steps of dir that have a manifest, newest first (at most max). Returns the count. */
STRATA_API int strata_ckpt_steps(const char *dir, int64_t *steps, int max);

/* Checkpoint files in dir of any kind (shards, manifests, temporaries), and the name of the newest
 * one in first (may be NULL): what resume reports when no step can be used. */
STRATA_API int strata_ckpt_count_files(const char *dir, char *first, size_t size);

/* The path of the file of `rank` of step `step` in dir: dir/ckpt_<step 8 digits>.safetensors for an
 * unsharded run (nranks 1), dir/ckpt_<step>.rank<r>.safetensors otherwise. */
STRATA_API void strata_ckpt_path(const char *dir, int64_t step, int rank, int nranks, char *out,
                                 size_t size);
/* Lists the steps that have a checkpoint file of this rank in dir (committed or not), newest first
 * (at most max). Returns the count (0 when the directory is missing). */
STRATA_API int strata_ckpt_list(const char *dir, int rank, int nranks, int64_t *steps, int max);

/* Pruning, decided once for the whole job right after step `newest` was committed: keeps `newest`
 * and the keep - 1 newest other committed steps before it, and removes every file (manifest first,
 * then every rank's shard) of every other step older than `newest`, committed or left over by an
 * interrupted write. Steps newer than `newest` are left alone. Returns the files removed. */
STRATA_API int strata_ckpt_prune(const char *dir, int64_t newest, int keep);

/* Removes the temporary files (*.tmp.<pid>.<host>) of writers that are dead: this host, no such
 * process. Those of other hosts or of live processes stay. Returns the files removed. */
STRATA_API int strata_ckpt_clean_tmp(const char *dir);

/* ---- export ---------------------------------------------------------------------------------------- */

/* Writes model m as a HuggingFace GPT-2 directory, the layout transformers' GPT2LMHeadModel loads
 * (from_pretrained(dir)): dir/model.safetensors (__metadata__ {"format": "pt"}) with GPT-2's names,
 * transformer.wte.weight, transformer.wpe.weight, transformer.h.<n>.ln_1.weight ..., attn.c_attn,
 * attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj, transformer.ln_f.*, the projections in GPT-2's Conv1D
 * layout [in, out] (strata's transposed), the tied head left out as save_pretrained leaves it; and
 * dir/config.json (model_type gpt2, architectures [GPT2LMHeadModel], n_embd, n_layer, n_head,
 * n_positions, n_inner, vocab_size, layer_norm_epsilon, activation_function gelu_new: strata's
 * tanh GELU). Tokens are strata's (bytes: token id = byte value); no tokenizer files are written.
 * dir is created when missing; both files are written atomically. Errors: STRATA_ERR_INVALID_ARG
 * for a tensor-parallel part or pipeline stage (the whole model is needed), STRATA_ERR_UNSUPPORTED
 * naming a tensor GPT-2's layout has no place for, STRATA_ERR_INVALID_ARG for a non-finite value,
 * STRATA_ERR_IO naming the file. */
STRATA_API strata_status_t strata_export_hf_gpt2(strata_gpt_t *m, const char *dir);

/* ---- the training loop ----------------------------------------------------------------------------- */

/* What a step whose loss or gradient norm is NaN or infinite does. */
typedef enum strata_nonfinite {
    STRATA_NONFINITE_STOP = 0, /* the run fails with a report (step, loss, norm, ranks) */
    STRATA_NONFINITE_SKIP = 1, /* the update is skipped (parameters and optimizer state untouched),
                                  a warning names the step, and the run goes on with the next */
} strata_nonfinite_t;

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
    strata_precision_t precision; /* of the matrix products: STRATA_PREC_FP32 (default) or
                                     STRATA_PREC_BF16 with fp32 master weights, gradients and
                                     optimizer state (strata_blas_set_precision, docs/train.md) */
    char ckpt_dir[1024];   /* "" = no checkpoints */
    int64_t ckpt_every;    /* steps between checkpoints (0 = only at the end) */
    int ckpt_keep;         /* newest committed checkpoint steps kept (2) */
    char mem_ckpt_dir[1024]; /* memory checkpoints: a directory that outlives the ranks but not the
                                host (tmpfs, e.g. the launcher's STRATA_MEM_CKPT_DIR) */
    int64_t mem_ckpt_every;  /* steps between memory checkpoints (0 = none; needs mem_ckpt_dir) */
    strata_nonfinite_t nonfinite; /* a non-finite loss or gradient norm: stop (default) or skip */
    char metrics[1024];    /* JSON-lines file ("" = none) */
    char trace[1024];      /* Chrome trace of one step ("" = none) */
    int64_t trace_step;    /* which step to trace (default 2) */
    int64_t eval_every;    /* steps between validation losses (0 = never) */
    int eval_batches;
    int prefetch;          /* batches a loader thread reads ahead of the step (2; 0 = the step
                              reads its own; docs/train.md "Data") */
    bool progress;         /* progress on rank 0's stderr: redrawn in place on a terminal (or with
                              STRATA_PROGRESS=bar), else complete lines; a summary at the end */
    double progress_every; /* seconds between progress lines when not redrawn (5; 0 = every step) */
    /* data parallel (used when strata train runs under a launcher with more than one rank) */
    int zero;              /* ZeRO stage 0..3 (0) */
    char hpz[32];          /* hpZ: secondary partition inside this fabric level ("host", "rack",
                              or a level number); "" = none */
    int tiers;             /* 3 = the 3-level scheme over the fabric's fastest splitting levels;
                              0 = flat (or hpz) */
    bool qwz, qgz;         /* int8 weight all-gathers / gradient reduce-scatters (off) */
    bool bf16_grads;       /* gradient reductions in bfloat16 ("grad_dtype": "bf16"; off = fp32;
                              strata_zero_config_t.bf16_grads); not with qgz */
    int64_t bucket;        /* floats per gradient bucket (0 = engine default) */
    int straggler_window;  /* steps per straggler- and slow-link-detection window (20; 0 = off) */
    /* the device mesh (strata/mesh.h): tensor parallelism inside, data parallelism over the rest */
    int tp;                /* tensor-parallel group size (1) */
    bool sp;               /* sequence parallelism inside the TP group (off) */
    bool tp_overlap;       /* TP collectives cut in row blocks to overlap the products (on) */
    char order[32];        /* mesh order, innermost first ("tp,cp,pp,dp"); "" = the cost model's */
    /* pipeline parallelism (strata/pipeline.h) */
    int pp;                /* pipeline stages (1) */
    int vp;                /* model chunks per stage (1; interleaved >= 2; zb-v 2) */
    strata_schedule_t schedule; /* 1f1b */
    int micro_batch;       /* rows per micro-batch (0: 1 row per micro-batch when pp > 1) */
    char pp_layers[256];   /* layers per chunk, "3,3,2" (pp x vp entries); "" = balanced by the
                              predicted compute of each chunk */
    char pp_svg[1024];     /* the planned and measured pipeline timeline of trace_step as SVG ("" =
                              none) */
    char harvest[128];     /* side tasks run inside the pipeline's bubbles (strata/harvest.h), in
                              priority order: "eval,sample,data,gemm" or any of them; "" = none */
    /* the optimizer in the pool (docs/pool.md): AdamW's master parameters, m and v live on the
       pool nodes of STRATA_POOL_NODES, which apply the update; the ranks push gradients and read
       the parameters back. Data parallel, AdamW, ZeRO 0, no TP or PP (off) */
    bool optimizer_in_pool;
} strata_train_config_t;

STRATA_API strata_train_config_t strata_train_config_default(void);

/* Reads a JSON training config over *cfg: {"model": {...}, "data": "...", "batch": 8, "seq": 64,
 * "steps": 100, "seed": 1, "optimizer": "adamw"|"lamb", "lr": 1e-3, "min_lr": ..., "warmup": ...,
 * "weight_decay": ..., "beta1", "beta2", "eps", "grad_clip", "threads", "ckpt_dir", "ckpt_every",
 * "ckpt_keep", "mem_ckpt_dir", "mem_ckpt_every", "metrics", "trace", "trace_step", "eval_every",
 * "eval_batches", "val_fraction", "progress_every", "optimizer_in_pool",
 * "nonfinite": "stop"|"skip", "zero", "hpz", "tiers", "qwz", "qgz", "grad_dtype": "fp32"|"bf16",
 * "bucket", "tp", "sp", "order",
 * "tp_overlap", "pp", "vp", "schedule", "micro_batch", "pp_layers", "pp_svg", "harvest"}.
 * Unknown keys are refused. Errors: STRATA_ERR_IO / STRATA_ERR_PARSE naming file:line. */
STRATA_API strata_status_t strata_train_config_load(const char *path, strata_train_config_t *cfg);

/* Takes the parallel layout of a plan written by `strata plan --json` (predict: its "config";
 * search: the first of "top") into *cfg: tp, pp, vp, zero, schedule, micro_batch (rows), sequence
 * parallelism, order; *ranks gets the ranks it is for (tp x pp x dp). Precision and recompute are
 * the planner's business (the CPU trainer computes in fp32 and keeps activations). Errors:
 * STRATA_ERR_IO / STRATA_ERR_PARSE naming file:line, STRATA_ERR_INVALID_ARG for a layout strata
 * train does not run (context parallelism). */
STRATA_API strata_status_t strata_train_config_apply_plan(const char *path,
                                                          strata_train_config_t *cfg, int *ranks);
/* "stop" or "skip". Errors: STRATA_ERR_INVALID_ARG. */
STRATA_API strata_status_t strata_nonfinite_parse(const char *text, strata_nonfinite_t *out);
/* The gradient reductions' dtype: "fp32" (*bf16 = false) or "bf16". Errors: STRATA_ERR_INVALID_ARG. */
STRATA_API strata_status_t strata_grad_dtype_parse(const char *text, bool *bf16);

/* The config as JSON text (stored in checkpoint metadata). Returns length or -1 if too small. */
STRATA_API int strata_train_config_to_json(const strata_train_config_t *cfg, char *buf,
                                           size_t size);

typedef struct strata_trainer strata_trainer_t;

/* Builds the model, opens the data, allocates optimizer state (for the whole arena), opens metrics,
 * creates the checkpoint directories. Errors: from the model, data and files;
 * STRATA_ERR_INVALID_ARG when mem_ckpt_every > 0 without mem_ckpt_dir, or when mem_ckpt_dir is
 * ckpt_dir. */
STRATA_API strata_status_t strata_trainer_create(const strata_train_config_t *cfg,
                                                 strata_trainer_t **out);
STRATA_API void strata_trainer_destroy(strata_trainer_t *t);

STRATA_API strata_gpt_t *strata_trainer_model(strata_trainer_t *t);
/* The pipeline executor of a trainer distributed with pp > 1 (its bubbles, its bubble hook), or NULL. */
STRATA_API struct strata_pipeline *strata_trainer_pipeline(strata_trainer_t *t);
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
 * borrows comm (destroy the trainer first). With cfg.optimizer_in_pool the gradients go to the pool
 * nodes of STRATA_POOL_NODES instead of the engine's all-reduce, and the nodes run AdamW
 * (docs/pool.md). Errors: STRATA_ERR_INVALID_ARG when the global batch is not a multiple of the rank
 * count, or for what the optimizer in the pool does not run (LAMB, ZeRO > 0, TP, PP, no nodes);
 * engine errors; the pool's, naming the node. */
STRATA_API strata_status_t strata_trainer_distribute(strata_trainer_t *t, strata_comm_t *comm,
                                                     const strata_zero_config_t *zc);

/* Step phase 1: loads this step's batch rows [row_begin, row_begin + rows) (the whole global batch
 * with 0, cfg.batch), forward with loss, backward. */
STRATA_API strata_status_t strata_trainer_forward_backward(strata_trainer_t *t, int row_begin,
                                                           int rows, float *loss);

/* Step phase 2 (optional): called by strata_trainer_step between backward and update with this
 * process's loss. In one process it may average gradients and the loss across ranks (a data-parallel
 * scheme of the caller's). In a distributed trainer it runs after this rank's backward, before the
 * engine reduces the loss; the gradients are the engine's (a hook may observe or replace the loss). */
typedef strata_status_t (*strata_grad_sync_fn)(void *ctx, strata_trainer_t *t, float *loss);
STRATA_API void strata_trainer_set_sync(strata_trainer_t *t, strata_grad_sync_fn fn, void *ctx);

/* Step phase 3: global-norm clipping and the optimizer over the whole arena, then step += 1.
 * *grad_norm (may be NULL) receives the norm before clipping, *lr the rate used. A gradient norm that
 * is not finite is refused (STRATA_ERR_INVALID_ARG) and nothing is updated. */
STRATA_API strata_status_t strata_trainer_update(strata_trainer_t *t, float *grad_norm, float *lr);

typedef struct strata_step_info {
    int64_t step;
    float loss, grad_norm, lr;
    double seconds, tokens_per_s;
    bool skipped;       /* loss or norm not finite and cfg.nonfinite is skip: nothing was updated */
    bool stop;          /* a stop was requested (strata_trainer_set_stop_flag) on some rank */
    int straggler;      /* distributed: the rank the others have waited for, persistently (slower
                           by 20% than the others' median in cfg.straggler_window-step windows,
                           3 in a row); -1 none */
    float straggler_ratio; /* its busy time per step over the others' median */
    int slow_link_from;    /* distributed over TCP, 3 hosts or more: the link flagged slow carries
                              data from rank slow_link_from to rank slow_link_to, persistently (a
                              receive rate, strata_comm_link_stats, below an eighth of the median of
                              the other hosts' links in cfg.straggler_window-step windows, 3 in a
                              row; docs/train.md); -1 none */
    int slow_link_to;
    float slow_link_MBps;        /* its latest rate, MB/s (10^6 bytes) */
    float slow_link_median_MBps; /* the other hosts' links' median rate it was compared with */
    /* tensor parallelism (tp > 1), this rank: its TP collectives' time in flight (start to
       completion, summed) and the time it waited for them; 1 - wait/flight of it was hidden */
    double tp_flight_s, tp_wait_s;
    /* pipeline parallelism (pp > 1): the mean over the stages of the measured bubble fraction
       (idle share of the step) and of the schedule's prediction from the measured durations; each
       stage's in pp_bubble[] / pp_bubble_predicted[] (cfg.pp entries, valid until the next step) */
    double pp_bubble_mean, pp_bubble_predicted_mean;
    double bubble_s, harvest_s; /* this rank's measured idle time and the side work done in it */
    /* side passes finished at this step (--harvest eval / sample): the validation loss of the
       snapshot taken after step side_val_step (0: none finished), the text generated from the
       snapshot of side_sample_step (NULL: none; on the rank holding it, rank 0) */
    double side_val_loss;
    int64_t side_val_step;
    const char *side_sample;
    int64_t side_sample_step;
    const double *pp_bubble, *pp_bubble_predicted;
    double data_wait_s; /* this rank: the time the step waited for its batch (the loader thread's
                           read not done yet, or the whole read with cfg.prefetch 0, or the TP
                           group's broadcast of it) */
    /* distributed: the payload bytes this rank contributed to the ZeRO engine's collectives issued
       during the step (strata_zero_stats), its parameter gathers and its gradient reductions (as
       sent: fp32, bf16 with --grad-dtype bf16, int8 with qgZ) */
    uint64_t zero_gather_bytes, zero_reduce_bytes;
} strata_step_info_t;

/* One whole step (phases 1-3 on the full global batch; distributed: this rank's rows through the
 * engine). A loss or gradient norm that is not finite (the mean loss and the global norm, the same
 * on every rank) stops the step before the update: with cfg.nonfinite stop it fails
 * (STRATA_ERR_INVALID_ARG, the message naming the step, loss, norm and the ranks whose own loss or
 * gradient shard is not finite; every rank fails alike), with skip it returns with info->skipped and
 * the step counted. */
STRATA_API strata_status_t strata_trainer_step(strata_trainer_t *t, strata_step_info_t *info);

/* Runs to cfg.steps: progress bar, metrics (a non-finite number is written as null, so every line is
 * JSON), trace of cfg.trace_step, checkpoints (strata_trainer_checkpoint) every ckpt_every and at
 * the end. When a stop is requested it finishes the current step, every rank stops after the same
 * step (the request travels with the step's loss reduction, so no extra collective), writes a final
 * checkpoint (when ckpt_dir is set) and returns STRATA_OK; strata_trainer_stopped says so.
 * `losses` (may be NULL) receives the loss of each step run, indexed by step - 1. */
STRATA_API strata_status_t strata_trainer_run(strata_trainer_t *t, float *losses);

/* Asks strata_trainer_run to stop: *flag is read once per step, non-zero means stop, and its value
 * (a signal number) is reported. Setting it is async-signal-safe, so a SIGTERM/SIGINT handler may
 * store the signal there. NULL clears. The flag must outlive the trainer's use of it. */
STRATA_API void strata_trainer_set_stop_flag(strata_trainer_t *t,
                                             const volatile sig_atomic_t *flag);

/* After run: 0 when it ran to cfg.steps, the signal number (the flag's value) when this rank's flag
 * stopped it, -1 when it stopped because another rank's flag was set. */
STRATA_API int strata_trainer_stopped(const strata_trainer_t *t);

/* The run's identity (16 hex digits): made at create (agreed by every rank at distribute) and
 * taken from the checkpoint on resume, so every checkpoint of one run carries the same id. */
STRATA_API const char *strata_trainer_run_id(const strata_trainer_t *t);

/* Bytes this rank has read from the data file (training and validation rows): none on a rank that
 * receives its rows (TP ranks > 0) or needs none (a pipeline's middle stages); docs/train.md
 * "Data". */
STRATA_API uint64_t strata_trainer_data_bytes_read(const strata_trainer_t *t);

/* Writes a checkpoint of the current step to cfg.ckpt_dir and commits it. Collective when
 * distributed: every rank writes its shard (rank r of a single process: the one unsharded file),
 * all ranks learn every shard's outcome and digest, then rank 0 writes the step's manifest, and
 * after that prunes (strata_ckpt_prune: keeps cfg.ckpt_keep committed steps, never the newest one)
 * and removes the temporaries of dead writers. A failure on any rank (a full disk, a non-finite
 * value) fails every rank and leaves the step uncommitted; the message names the file on the rank
 * that failed and the failing ranks on the others. */
STRATA_API strata_status_t strata_trainer_checkpoint(strata_trainer_t *t);

/* Writes a memory checkpoint of the current step to cfg.mem_ckpt_dir: the same files, identity,
 * validation and two phases as strata_trainer_checkpoint, without the fsyncs (the copy must survive
 * the death of a rank, not of the host), and then every other step of that directory is removed,
 * older or newer (one step is kept: two only while the next is being written). Collective. Errors
 * as strata_trainer_checkpoint; strata_trainer_run reports a failed memory checkpoint as a warning
 * and goes on (the disk checkpoints are still there). */
STRATA_API strata_status_t strata_trainer_checkpoint_memory(strata_trainer_t *t);

/* Restores from one unsharded checkpoint file (parameters, optimizer state, step, run id), outside
 * the step/manifest machinery. Errors as strata_ckpt_open plus a shape mismatch. */
STRATA_API strata_status_t strata_trainer_load(strata_trainer_t *t, const char *path);

/* Resumes from the newest usable committed step in cfg.ckpt_dir and, with memory checkpoints on
 * (mem_ckpt_every > 0), cfg.mem_ckpt_dir (collective when distributed: rank 0 proposes steps newest
 * first, memory before disk at the same step, every rank assembles the proposal, a step is taken
 * only when it assembled on every rank). A memory step is proposed only when it belongs to this run: its
 * run id is that of the newest readable manifest on disk when the disk has a committed step, and
 * otherwise its recorded training config equals this trainer's. A step refused for any reason is
 * reported on stderr (a warning naming the file or the run and why) and the previous one is tried,
 * on any rank count or stage. Outcomes:
 *   a step was usable             -> STRATA_OK, *resumed_step = that step, the run id adopted;
 *   no checkpoint files at all    -> STRATA_OK, *resumed_step = 0 (a fresh start; the caller says so);
 *   files but no usable step      -> STRATA_ERR_PARSE naming the newest step's problem, or the disk
 *                                    files left without a committed step: never a silent fresh
 *                                    start.
 * Files of a memory directory without a committed step (a first memory write that was cut short)
 * do not prevent a fresh start. Temporaries of dead writers are removed first. Rank 0 appends a
 * "resumed_from" record to the metrics file (docs/train.md). */
STRATA_API strata_status_t strata_trainer_resume(strata_trainer_t *t, int64_t *resumed_step);

/* Where the last strata_trainer_resume took its step from. */
typedef struct strata_resume_info {
    int64_t step;        /* the step resumed at (0: a fresh start) */
    bool from_memory;    /* taken from cfg.mem_ckpt_dir, else from cfg.ckpt_dir */
    int64_t disk_step;   /* the newest committed step on disk, usable or not (-1: none) */
    int64_t memory_step; /* the newest committed step in memory, usable or not (-1: none or off) */
    double seconds;      /* the resume's wall time (finding, checking and loading the step) */
} strata_resume_info_t;

/* The outcome of the last strata_trainer_resume (all zero and -1 before one). */
STRATA_API strata_resume_info_t strata_trainer_resume_info(const strata_trainer_t *t);

/* strata_measure_gemm_peak (this CPU's GEMM peak, for MFU) is in model.h. */

#ifdef __cplusplus
}
#endif
#endif
