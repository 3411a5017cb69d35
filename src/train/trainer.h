/* The trainer's state, shared by the loop (loop.c) and its checkpoints (trainer_ckpt.c). Internal to
 * src/train. */
#ifndef ST_TRAIN_TRAINER_H
#define ST_TRAIN_TRAINER_H

#include <signal.h>
#include <stdio.h>

#include "strata/harvest.h"
#include "strata/mesh.h"
#include "strata/pipeline.h"
#include "strata/pool.h"
#include "strata/train.h"
#include "train/prefetch.h"
#include "train/progress.h"
#include "train/side_tasks.h"
#include "train/slowlink.h"
#include "train/straggler.h"

struct strata_trainer {
    strata_train_config_t cfg;
    strata_gpt_t *model;
    strata_data_t *data;
    st_prefetch_t *loader; /* the loader thread (trainer_data.c); NULL until the first batch */
    double data_wait_s;    /* the last training batch's wait (strata_step_info_t.data_wait_s) */
    float *m, *v;
    double *wsq, *usq;
    int32_t *tokens, *targets;
    int64_t step;
    strata_grad_sync_fn sync;
    void *sync_ctx;
    FILE *metrics;
    double peak_gflops;
    char run_id[17];
    const volatile sig_atomic_t *stop_flag;
    int stopped;           /* strata_trainer_stopped */
    strata_resume_info_t resumed; /* strata_trainer_resume_info */
    bool mem_failed;       /* a memory checkpoint failed (warned once) */
    st_progress_t prog;    /* the progress line of strata_trainer_run */
    /* data parallel (strata_trainer_distribute): NULL zero = single process */
    strata_comm_t *comm;
    strata_zero_t *zero;
    strata_zero_config_t zcfg;
    strata_zero_segment_t *segs;
    strata_zero_shard_t *ranges;
    int nranges, rank, nranks;
    size_t state_count; /* elements of m and v */
    /* the device mesh (strata_trainer_distribute with tp > 1 or an order): NULL mesh = the world
       is the data-parallel group */
    strata_mesh_t *mesh;
    strata_tp_group_t *tpg;   /* the TP group's collectives (tp > 1) */
    strata_comm_t *tp_comm;   /* borrowed from the mesh */
    int tp, tp_rank, dp, dp_rank;
    /* pipeline (pp > 1): this stage's executor, its comms, the cut of every stage */
    strata_pipeline_t *pipe;
    strata_comm_t *pp_comm, *embed_comm; /* borrowed from the mesh; embed_comm may be NULL */
    int pp, pp_rank, micro, micro_rows;
    strata_gpt_layers_t *stage_layers;   /* [pp] the chunks of every stage */
    double *pp_bubbles;                  /* [2 pp] the last step's measured | predicted per stage */
    /* side work in the bubbles (cfg.harvest; trainer_harvest.c) */
    strata_harvester_t *harvester;       /* NULL: none */
    st_side_chain_t *side_eval, *side_sample;
    st_side_data_t *side_data;
    void *side_gemm;
    struct { const char *name; int id; } side[ST_MAX_SIDE_TASKS]; /* in priority order */
    int nside;
    int64_t side_pass_step[2];           /* the snapshot eval's | sample's pass runs on (0: none) */
    double harvested_before;             /* side-work seconds up to the last step */
    /* the optimizer in the pool (cfg.optimizer_in_pool; trainer_pool.c): NULL pool = off */
    strata_pool_t *pool;
    strata_pool_optim_layout_t pool_layout;
    bool pool_stale;      /* the pool does not hold this trainer's state yet (start, resume) */
    st_straggler_t strag; /* distributed: which rank the others wait for */
    st_slowlink_t links;  /* distributed: which link runs far below the others */
};

/* Sums n doubles over the ranks in place (in the engine's collective order); nothing to do in one
 * process. Collective. */
strata_status_t st_trainer_all_sum(strata_trainer_t *t, double *v, int n);

/* Writes and commits a checkpoint of the current step to the disk (cfg.ckpt_dir, durable, pruned to
 * cfg.ckpt_keep steps) or to memory (cfg.mem_ckpt_dir, no fsync, every other step removed).
 * Collective. On failure *agreed tells whether every rank fails this step alike (a file that could
 * not be written, a manifest not committed: the job may go on) or not (a collective failed), and
 * *here whether the failure is this rank's own (its message names its file) or another rank's. */
strata_status_t st_trainer_write_step(strata_trainer_t *t, bool memory, bool *agreed, bool *here);

/* ---- trainer_data.c: the data pipeline ---------------------------------------------------------- */

/* Whether this rank reads the data file: TP rank 0 of a stage that uses tokens or targets. */
bool st_trainer_reads_data(const strata_trainer_t *t);

/* Reads this data-parallel rank's rows of batch `index` of a split (0: training, the batch of step
 * `index`; 1: validation), the parts its stage uses, into tokens / targets (batch x seq each); a
 * middle stage of a pipeline reads nothing. No broadcast: any TP rank reads for itself.
 * Thread-safe (the loader thread's fill). */
strata_status_t st_trainer_read_rows(const strata_trainer_t *t, int split, int64_t index,
                                     int32_t *tokens, int32_t *targets);

/* Rows [row_begin, row_begin + rows) of training step `step` into t->tokens / t->targets, the
 * parts this stage uses: on the reading rank from the data side task's ring, else from the loader
 * thread (this data-parallel rank's rows of steps 1..cfg.steps; cfg.prefetch batches ahead), else
 * (another cut of the batch, a step past the run) read here; then broadcast over the TP group. *wait_s: the time it took. Collective over
 * the TP group. Errors: the read's, naming the step and the file. */
strata_status_t st_trainer_batch(strata_trainer_t *t, int64_t step, int row_begin, int rows,
                                 double *wait_s);

/* This data-parallel rank's rows of validation batch `index` into t->tokens / t->targets, read
 * by the reading rank and broadcast over the TP group. Collective over the TP group. */
strata_status_t st_trainer_val_batch(strata_trainer_t *t, int64_t index);

/* Stops and joins the loader thread (idempotent). */
void st_trainer_data_stop(strata_trainer_t *t);

/* ---- trainer_tp.c: the mesh and tensor parallelism ---------------------------------------------- */

/* Builds the device mesh over comm (tp from the config, dp = the rest, the order from the config or
 * the cost model; rank 0 prints where each dimension's groups lie), re-creates the model as this
 * rank's TP part when tp > 1, and gives the data-parallel group in *dp_comm. Collective. */
strata_status_t st_trainer_build_mesh(strata_trainer_t *t, strata_comm_t *comm,
                                      strata_comm_t **dp_comm);

/* This rank's share of the sum of squares of the gradients in shards sh[0..ns): the replicated
 * tensors count 1/tp on each TP rank and a tied copy of wte not at all, so the sum over the world
 * counts every tensor once. */
double st_trainer_grad_sumsq(const strata_trainer_t *t, const strata_zero_shard_t *sh, int ns);

/* Scales the per-tensor sums of a LAMB step (wsq, usq) of replicated tensors by 1/tp, then sums
 * both over the TP group. Nothing to do at tp 1. Collective over the TP group. */
strata_status_t st_trainer_tp_tensor_sums(strata_trainer_t *t, double *wsq, double *usq);

/* Every world rank's work for straggler detection: the ranks of one TP and PP place (a pipeline
 * stage's part of the model) share a role. Needs the mesh. */
strata_status_t st_trainer_straggler_roles(strata_trainer_t *t);

/* ---- trainer_pp.c: pipeline parallelism ------------------------------------------------------------ */

/* The chunks of every stage (t->stage_layers) from cfg.pp_layers or balanced by compute. */
strata_status_t st_trainer_pp_cut(strata_trainer_t *t);

/* Creates this stage's pipeline executor (the model made with the stage's chunks). */
strata_status_t st_trainer_pp_create(strata_trainer_t *t);

/* One step's forward and backward through the pipeline: the gradients accumulated over the
 * micro-batches, tied over the embedding group, handed to the engine (grads_done); *loss: the mean
 * loss of this data-parallel rank's rows, the same on every rank of the pipeline. */
strata_status_t st_trainer_pp_forward_backward(strata_trainer_t *t, float *loss);

/* After a step: every stage's measured and predicted bubble fraction into t->pp_bubbles and s
 * (collective over the pipeline), this rank's idle and harvested seconds into s; with `svg`, rank 0
 * also draws the step's planned and measured timelines there. */
strata_status_t st_trainer_pp_report(strata_trainer_t *t, strata_step_info_t *s, const char *svg);


/* The mean loss of validation batch `batch_index` (this data-parallel rank's rows) through the
 * pipeline's forwards, the same on every rank of the pipeline. */
strata_status_t st_trainer_pp_eval(strata_trainer_t *t, int64_t batch_index, float *loss);

/* ---- trainer_harvest.c: side work in the bubbles --------------------------------------------------- */

/* Sets up the side tasks of cfg.harvest (in priority order) on this stage's bubbles. Collective
 * over the pipeline (eval and sample split its communicator). */
strata_status_t st_trainer_harvest_create(strata_trainer_t *t);
void st_trainer_harvest_destroy(strata_trainer_t *t);
/* After a step (every rank): the side work done in it into s; with eval or sample, every rank
 * agrees whether the side passes are over (their results into s) and, at an evaluation step (every
 * step without --eval-every), starts new ones on a snapshot of this step's parameters. Collective. */
strata_status_t st_trainer_harvest_report(strata_trainer_t *t, strata_step_info_t *s);
/* At the run's last step: finishes the side passes still running (every rank together), their
 * results into s (the last step's). Collective. */
strata_status_t st_trainer_harvest_finish(strata_trainer_t *t, strata_step_info_t *s);
/* The side tasks and their progress, "eval 40%, gemm", for the progress line. */
void st_trainer_harvest_snprint(const strata_trainer_t *t, char *out, size_t size);

/* ---- trainer_pool.c: the optimizer in the pool ------------------------------------------------------ */

/* Checks that the run is one the pool's optimizer serves (data parallel, AdamW, ZeRO 0), opens the
 * pool on STRATA_POOL_NODES (secret STRATA_POOL_SECRET, else STRATA_SECRET) and lays out AdamW's
 * regions there; the state is written at the first step (st_trainer_pool_upload). */
strata_status_t st_trainer_pool_open(strata_trainer_t *t);

/* Writes this rank's cut of the parameters, m and v into the pool and zeroes its cut of the
 * gradient region, then waits for every rank. Collective; clears t->pool_stale. */
strata_status_t st_trainer_pool_upload(strata_trainer_t *t);

/* Adds this rank's gradients into the pool's gradient region (exactly once). */
strata_status_t st_trainer_pool_push(strata_trainer_t *t);

/* After every rank's push: the global norm of the averaged gradient, from the nodes' sums of
 * squares of every rank's cut. Collective. */
strata_status_t st_trainer_pool_grad_norm(strata_trainer_t *t, double *norm);

/* The nodes apply AdamW to this rank's cut (per run of tensors with the same weight decay, the
 * averaged gradient times scale), then every rank reads the new parameters into its arena.
 * Collective. */
strata_status_t st_trainer_pool_update(strata_trainer_t *t, int64_t step, float scale, float lr);

/* A skipped step: zeroes this rank's cut of the gradient region, then waits for every rank.
 * Collective. */
strata_status_t st_trainer_pool_clear_grads(strata_trainer_t *t);

/* Before a checkpoint: this rank's cut of m and v, read from the pool into t->m and t->v (what
 * the shard stores). Nothing to do when the pool is off or not written yet. */
strata_status_t st_trainer_pool_pull_state(strata_trainer_t *t);

/* A fresh run id (16 hex digits) from the system's entropy. */
void st_trainer_new_run_id(char out[17]);

#endif
