/* The trainer's state, shared by the loop (loop.c) and its checkpoints (trainer_ckpt.c). Internal to
 * src/train. */
#ifndef ST_TRAIN_TRAINER_H
#define ST_TRAIN_TRAINER_H

#include <signal.h>
#include <stdio.h>

#include "strata/train.h"
#include "train/slowlink.h"
#include "train/straggler.h"

struct strata_trainer {
    strata_train_config_t cfg;
    strata_gpt_t *model;
    strata_data_t *data;
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
    /* data parallel (strata_trainer_distribute): NULL zero = single process */
    strata_comm_t *comm;
    strata_zero_t *zero;
    strata_zero_config_t zcfg;
    strata_zero_segment_t *segs;
    strata_zero_shard_t *ranges;
    int nranges, rank, nranks;
    size_t state_count; /* elements of m and v */
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

/* A fresh run id (16 hex digits) from the system's entropy. */
void st_trainer_new_run_id(char out[17]);

#endif
