/* strata's planner: a closed-form performance model of one training step, and a search over
 * parallel configurations.
 *
 * Given a model (layers, hidden, heads, GQA, FFN, vocabulary, sequence), a training setup (batch,
 * micro-batch, precision, optimizer, recomputation, sequence parallelism, flash attention), an
 * accelerator (peak FLOP/s, memory, bandwidth, GEMM efficiency by shape) and a fabric tree
 * (strata/topo.h), strata_plan_predict() prices one optimizer step of a parallel configuration
 * (TP x CP x PP(virtual) x DP, ZeRO 0-3 with an optional secondary partition, pipeline schedule,
 * overlap, mapping of dimensions onto the tree). Every term is reported: compute, each dimension's
 * communication (total and exposed after overlap, and the outermost fabric level it crosses),
 * pipeline bubble, optimizer; tokens/s, TFLOP/s, MFU and HFU; memory per accelerator by kind.
 * Communication is priced by the shared pricing module (strata/price.h).
 *
 * FLOP conventions (docs/plan.md):
 *   model FLOPs    = 3 x forward FLOPs of every matrix multiply, attention counted in full (QK^T
 * and AV over all s x s positions, as Megatron-LM and MegaScale report MFU), logits included; no
 * recomputation. MFU = model FLOPs / (step time x accelerators x peak). hardware FLOPs = model
 * FLOPs + recomputed forward work (full: every layer's forward again; selective: the attention
 * core). HFU uses it. Megatron Eq. 3 = 96 B s l h^2 (1 + s/6h + V/16lh), the formula of Narayanan
 * et al. (SC'21) that its TFLOP/s figures use; the validation compares like with like.
 *
 * Everything here is allocation-free except the search result, the validation report, file
 * readers and the memos below (built once per shape), and thread-safe: problems and
 * configurations are plain values (the only state is per-thread memos of pure functions: the scale
 * terms, src/plan/scale.c, the price tables, and the pipeline schedules' bubbles and peak
 * activations, strata/schedule.h).
 */
#ifndef STRATA_PLAN_H
#define STRATA_PLAN_H

#include "strata/precision.h"
#include "strata/price.h"
#include "strata/schedule.h"
#include "strata/status.h"
#include "strata/topo.h"

#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_PLAN_NAME_MAX 48

/* ---- model -------------------------------------------------------------------------------------
 */

typedef enum strata_mlp {
    STRATA_MLP_GELU = 0, /* two matrices h->f->h with GeLU (GPT) */
    STRATA_MLP_SWIGLU,   /* three matrices: gate and up h->f, down f->h (Llama) */
} strata_mlp_t;

typedef struct strata_model {
    char name[STRATA_PLAN_NAME_MAX];
    int layers, hidden, heads, kv_heads, ffn, vocab, seq;
    strata_mlp_t mlp;
    bool rmsnorm;         /* RMSNorm (one vector) instead of LayerNorm (two) */
    bool bias;            /* linear layers carry biases */
    bool tied_embeddings; /* output projection shares the input embedding */
    bool learned_pos;     /* learned absolute positions (seq x hidden); else rotary */
    bool dropout;         /* dropout after attention, MLP and on attention probabilities */
} strata_model_t;

/* The largest sizes a model may have: far beyond any model trained so far, and small enough that
 * the planner's integer products of them (4 x hidden, 2 x cp x seq chunks, ...) cannot overflow.
 * heads and kv_heads are bounded by hidden, which they divide. */
#define STRATA_MODEL_MAX_LAYERS (1 << 16)
#define STRATA_MODEL_MAX_HIDDEN (1 << 20)
#define STRATA_MODEL_MAX_FFN    (1 << 22)
#define STRATA_MODEL_MAX_VOCAB  (1 << 24)
#define STRATA_MODEL_MAX_SEQ    (1 << 24)

/* A GPT-style model (LayerNorm, GeLU, biases, tied embeddings, learned positions, dropout). */
STRATA_API strata_model_t strata_model_gpt(const char *name, int layers, int hidden, int heads,
                                           int vocab, int seq);

/* Checks the model's fields. Errors: STRATA_ERR_INVALID_ARG naming the field and what was expected
 * (sizes from 1 to their STRATA_MODEL_MAX_*, heads dividing hidden, kv_heads dividing heads). */
STRATA_API strata_status_t strata_model_validate(const strata_model_t *m);

/* Parameters, counted exactly (weights, biases, norms, embeddings; tied output counted once). */
STRATA_API double strata_model_params(const strata_model_t *m);

/* Forward FLOPs per token (every matmul, attention over all `seq` positions, logits). */
STRATA_API double strata_model_fwd_flops_per_token(const strata_model_t *m, int seq);

/* Presets: "gpt3-175b", "megatron-1.7b" ... "megatron-1t" (Narayanan et al. Table 1),
 * "llama2-7b" ... "llama3-405b", "mt-nlg-530b", ... */
STRATA_API strata_status_t strata_model_preset(const char *name, strata_model_t *out);
STRATA_API int strata_model_preset_count(void);
STRATA_API const char *strata_model_preset_name(int i);

/* Reads a model file (JSON, docs/plan.md). Errors: STRATA_ERR_IO, or STRATA_ERR_PARSE with
 * "path:line: expected ...". */
STRATA_API strata_status_t strata_model_load(const char *path, strata_model_t *out);
STRATA_API void strata_model_write_json(const strata_model_t *m, FILE *f);

/* ---- training ----------------------------------------------------------------------------------
 */

typedef enum strata_optimizer {
    STRATA_OPT_ADAM = 0,
    STRATA_OPT_ADAMW,
    STRATA_OPT_LAMB,
} strata_optimizer_t;

typedef enum strata_recompute {
    STRATA_RECOMPUTE_NONE = 0,
    STRATA_RECOMPUTE_SELECTIVE, /* recompute the attention core (Korthikanti et al. 2022) */
    STRATA_RECOMPUTE_FULL,      /* keep each layer's input, recompute the whole layer */
} strata_recompute_t;

typedef struct strata_training {
    int global_batch; /* sequences per optimizer step */
    int micro_batch;  /* sequences per micro-batch */
    int seq;          /* tokens per sequence; 0 = the model's */
    strata_precision_t precision;
    strata_optimizer_t optimizer;
    strata_recompute_t recompute;
    bool sequence_parallel; /* shard norms/dropout over TP (Korthikanti et al.) */
    bool flash_attention;   /* fused attention: no s x s tensors in memory */
    int grad_bytes;         /* bytes per gradient element; 0 = 4 for bf16 and fp32 (fp32 main
                               grads, Megatron's default), 2 for fp16 */
} strata_training_t;

STRATA_API strata_training_t strata_training_default(void);
STRATA_API const char *strata_optimizer_name(strata_optimizer_t o);
STRATA_API const char *strata_recompute_name(strata_recompute_t r);
STRATA_API strata_status_t strata_optimizer_parse(const char *s, strata_optimizer_t *out);
STRATA_API strata_status_t strata_recompute_parse(const char *s, strata_recompute_t *out);

/* Reads a training file (JSON). Errors as strata_model_load. */
STRATA_API strata_status_t strata_training_load(const char *path, strata_training_t *out);

/* ---- accelerator -------------------------------------------------------------------------------
 */

typedef struct strata_accel {
    char name[STRATA_PLAN_NAME_MAX];
    double peak_flops_16;  /* dense bf16/fp16 matrix FLOP/s */
    double peak_flops_32;  /* fp32 matrix FLOP/s (what fp32 training gets) */
    double mem_bytes;      /* memory capacity */
    double mem_bw_Bps;     /* memory bandwidth */
    double gemm_eff;       /* achieved / peak of a large square GEMM (microbenchmark) */
    double gemm_dim0;      /* shape constant: a GEMM dimension x scales efficiency by x/(x+dim0) */
    double reserved_bytes; /* runtime context, communicator buffers, allocator slack */
    double kernel_floor_s; /* shortest time one kernel takes (launch and tail) */
    double peak_flops_8;   /* dense FP8 matrix FLOP/s; 0 = no FP8 (training in fp8 is refused) */
    double gemm_eff_8;     /* achieved / peak of a large square FP8 GEMM; 0 = gemm_eff */
    int sms;               /* streaming multiprocessors (compute units) a GEMM's tiles fill in
                              waves; 0 = no wave quantization (a CPU) */
    int tile_m, tile_n;    /* output tile of the GEMM library's large kernels */
} strata_accel_t;

/* Presets: "a100-40gb", "a100-80gb", "h100-sxm", "h200", "mi250x-gcd", "cpu". */
STRATA_API strata_status_t strata_accel_preset(const char *name, strata_accel_t *out);
STRATA_API int strata_accel_preset_count(void);
STRATA_API const char *strata_accel_preset_name(int i);
STRATA_API strata_status_t strata_accel_load(const char *path, strata_accel_t *out);
STRATA_API void strata_accel_write_json(const strata_accel_t *a, FILE *f);
STRATA_API strata_status_t strata_accel_validate(const strata_accel_t *a);

/* Achieved FLOP/s of one (M x K) * (K x N) GEMM on `a` in `prec` under the roofline of its memory
 * bandwidth, before the calibrated training-loop factor: the large-GEMM efficiency, the shape curve
 * of each dimension, and the waves of output tiles over the accelerator's SMs (docs/plan.md). */
STRATA_API double strata_accel_gemm_flops(const strata_accel_t *a, strata_precision_t prec,
                                          double M, double N, double K);

/* The fraction of the accelerator an M x N output keeps busy: tiles / (waves x SMs), with the
 * tile laid along whichever orientation wastes less; 1 when a->sms is 0. */
STRATA_API double strata_accel_wave_util(const strata_accel_t *a, double M, double N);

/* Measures this machine's CPU: single-precision GEMM through OpenBLAS when it can be loaded
 * (libopenblas.so.0, else a blocked C loop) at several shapes and the memory copy bandwidth, and
 * fills an accelerator description for strata's own CPU runs (one rank per core, `threads` BLAS
 * threads). Takes about a second. Errors: STRATA_ERR_NO_MEMORY. */
STRATA_API strata_status_t strata_accel_measure_cpu(int threads, strata_accel_t *out);

/* ---- parallel configuration --------------------------------------------------------------------
 */

typedef struct strata_parallel {
    int tp, cp, pp, vp, dp; /* vp: model chunks per device (1; >= 2 interleaved; 2 zb-v) */
    int zero;               /* ZeRO stage 0..3 over the data(x context)-parallel group */
    int zero_secondary;     /* ZeRO-3 secondary partition (ZeRO++ hpZ): backward gathers stay in
                               groups of this many DP ranks; 1 = none */
    bool zero_keep_params;  /* ZeRO-3: parameters gathered for the forward stay until the backward
                               (FSDP reshard_after_forward=False): no backward gather, the stage's
                               full weights in memory */
    bool zero_reduce_once;  /* ZeRO-2/3: gradients accumulate unsharded over the micro-batches and
                               are reduce-scattered once per step (FSDP no_sync), not per
                               micro-batch */
    strata_schedule_t schedule; /* strata/schedule.h: the trainer's own schedules */
    bool overlap[STRATA_DIM_COUNT];       /* communication of that dimension overlaps compute */
    strata_dim_t order[STRATA_DIM_COUNT]; /* mapping onto the fabric, innermost first */
} strata_parallel_t;

/* tp=cp=pp=vp=dp=1, ZeRO 1, 1F1B, overlap of DP and PP, order tp,cp,pp,dp. */
STRATA_API strata_parallel_t strata_parallel_default(void);
/* strata_schedule_name and strata_schedule_parse are in schedule.h. */
/* strata_order_parse ("tp,cp,pp,dp", any permutation) is in netmodel.h. */
/* Parses "none", "all" or a '+'/',' list of dims ("dp+pp"). */
STRATA_API strata_status_t strata_overlap_parse(const char *s, bool overlap[STRATA_DIM_COUNT]);
/* "tp8 cp1 pp16 vp1 dp128 zero1 1f1b" into buf. */
STRATA_API const char *strata_parallel_format(const strata_parallel_t *p, char *buf, size_t size);

/* ---- calibration -------------------------------------------------------------------------------
 */

/* The few fitted constants of the model (docs/plan.md: what each means, how it is fitted). */
typedef struct strata_calib {
    double eta_gemm;     /* training-loop GEMM throughput / microbenchmark GEMM throughput */
    double eta_mem;      /* memory-bound kernels: fraction of peak memory bandwidth */
    double eta_up;       /* collectives on scale-up links: fraction of link bandwidth */
    double eta_out;      /* collectives on scale-out links: fraction of link bandwidth */
    double eta_zero3;    /* ZeRO-3 per-layer gathers/scatters: fraction of the collective rate */
    double overlap_cost; /* fraction of overlapped communication time still paid (contention) */
    double zero3_overlap_cost; /* the same for ZeRO-3's prefetched gathers and scatters */
    /* scale terms (docs/plan.md "What grows with scale") */
    double straggler_cv;  /* coefficient of variation of one accelerator's compute speed: a
                             synchronous step waits for the slowest of N */
    double ecmp_subflows; /* sub-flows (queue pairs, channels) one connection is hashed as onto
                             the equal-cost uplinks of a switch tier */
    /* memory */
    double mem_frag; /* allocator fragmentation: fraction of the memory allocated and freed
                        within a step (activations, buffers) that cannot be reused */
} strata_calib_t;

#define STRATA_CALIB_NPARAMS 10

/* The constants fitted on the Megatron-LM tables (data/presets/calibration.json). */
STRATA_API strata_calib_t strata_calib_default(void);
STRATA_API const char *strata_calib_param_name(int i);
STRATA_API double *strata_calib_param(strata_calib_t *c, int i);
/* The range a constant may take ([lo, hi]); the fit keeps it inside. */
STRATA_API void strata_calib_param_range(int i, double *lo, double *hi);
/* Applies "name=value[,name=value]" overrides. */
STRATA_API strata_status_t strata_calib_apply(strata_calib_t *c, const char *assignments);
STRATA_API strata_status_t strata_calib_load(const char *path, strata_calib_t *out);
STRATA_API void strata_calib_write_json(const strata_calib_t *c, FILE *f);

/* ---- problem and prediction --------------------------------------------------------------------
 */

/* The model's terms beyond the base step model, each of which can be switched off (to measure what
 * it does: `strata plan validate` reports the error with each added in turn). */
#define STRATA_TERM_SCALE  1u /* stragglers (slowest of N) and ECMP collisions on switch tiers */
#define STRATA_TERM_MEMORY 2u /* ZeRO-3 gathers per weight matrix, allocator fragmentation */
#define STRATA_TERM_HW     4u /* GEMM tiles in waves over the accelerator's SMs */
#define STRATA_TERM_ALL    7u

typedef struct strata_plan_problem {
    strata_model_t model;
    strata_training_t train;
    strata_accel_t accel;
    strata_topo_t topo;
    strata_calib_t calib;
    long long gpus;     /* accelerators used, packed from accelerator 0; 0 = the whole tree */
    unsigned terms_off; /* STRATA_TERM_* bits switched off; 0 = the full model */
} strata_plan_problem_t;

/* Checks model, training, accelerator and cluster on their own. */
STRATA_API strata_status_t strata_plan_problem_validate(const strata_plan_problem_t *pb);

typedef struct strata_plan_comm {
    double total_s;   /* all communication of this dimension in one step, on the critical device */
    double exposed_s; /* what is left on the step's critical path after overlap */
    double bytes;     /* bytes one device sends for this dimension in one step */
    int level;        /* outermost fabric level its groups cross: 0 = none, i+1 = topo level[i] */
} strata_plan_comm_t;

typedef struct strata_plan_memory {
    double weights, grads, optimizer, activations, comm_buffers, fragmentation, reserved, total,
        capacity;
    bool fits;
    int stage; /* pipeline stage (device position) holding the most */
} strata_plan_memory_t;

typedef struct strata_prediction {
    double step_s;
    double compute_s;   /* forward, backward and recompute work of all micro-batches */
    double bubble_s;    /* pipeline fill and drain */
    double optimizer_s; /* optimizer update after the gradients are ready */
    double straggler_s; /* waiting for the slowest accelerator of the job */
    strata_plan_comm_t comm[STRATA_DIM_COUNT]; /* DP includes ZeRO traffic and CP gradients */
    /* step_s == compute_s + bubble_s + optimizer_s + straggler_s + sum of comm[].exposed_s */
    double tokens_per_s;
    double model_flops;      /* per step, all devices */
    double hw_flops;         /* per step, all devices, with recomputation */
    double megatron_flops;   /* per step: Megatron-LM Eq. 3 (assumes full recomputation) */
    double tflops_per_accel; /* model FLOPs / step / accelerators / 1e12 */
    double mfu, hfu;         /* fractions of peak */
    strata_plan_memory_t mem;
    int microbatches; /* per pipeline per step */
    int layers_max;   /* layers on the busiest device */
    /* per micro-batch on the critical device, for the timeline: forward, backward (with recompute),
     * of which weight-gradient, and one pipeline hop, all with their exposed communication */
    double fwd_s, bwd_s, wgrad_s, p2p_s, dp_tail_s;
    int critical_stage;
} strata_prediction_t;

/* Validates `par` against the problem (sizes multiply to the accelerators, TP divides heads, KV
 * heads and FFN, CP divides the sequence into 2*cp chunks, PP and VP fit the layers, the batch
 * divides into micro-batches, interleaving needs pp, vp > 1 and micro-batches a multiple of pp,
 * zb-v pp > 1 and vp = 2, ZeRO
 * stage and secondary partition, the order is a permutation). Errors: STRATA_ERR_INVALID_ARG with
 * a message naming the constraint. */
STRATA_API strata_status_t strata_plan_check(const strata_plan_problem_t *pb,
                                             const strata_parallel_t *par);

/* Predicts one step. A configuration that does not fit in memory is still predicted
 * (out->mem.fits is false). Errors: those of strata_plan_check. */
STRATA_API strata_status_t strata_plan_predict(const strata_plan_problem_t *pb,
                                               const strata_parallel_t *par,
                                               strata_prediction_t *out);

/* ---- search ------------------------------------------------------------------------------------
 */

typedef struct strata_search_opts {
    int top;             /* how many to keep (default 10) */
    int max_tp;          /* 0 = no limit beyond divisibility */
    int max_cp;          /* 0 = no limit */
    int max_vp;          /* largest interleaving degree tried (default 8) */
    int max_micro_batch; /* 0 = no limit */
    bool all_orders;     /* try every mapping order, not only the default */
    bool allow_no_fit;   /* keep configurations that exceed memory (ranked after those that fit) */
    unsigned zero_mask;  /* bit z: try ZeRO stage z (default 0xF) */
    unsigned sched_mask; /* bit s: try schedule s (default all) */
    unsigned recompute_mask;        /* bit r (default all) */
    unsigned sp_mask;               /* bit 0: without SP, bit 1: with SP (default both) */
    bool overlap[STRATA_DIM_COUNT]; /* overlap assumed for every candidate */
    int zero_secondary; /* also try ZeRO-3 with this secondary partition (0 = only none) */
    bool zero_variants; /* also try ZeRO-3 keeping parameters and ZeRO-2/3 reducing once
                           (default true) */
} strata_search_opts_t;

STRATA_API strata_search_opts_t strata_search_opts_default(void);

typedef struct strata_candidate {
    strata_parallel_t par;
    strata_training_t train; /* the problem's, with the micro-batch, SP and recompute chosen */
    strata_prediction_t pred;
} strata_candidate_t;

typedef struct strata_search_result {
    strata_candidate_t *top; /* best first; owned, free with strata_search_result_free */
    int ntop;
    long long enumerated; /* configurations generated */
    long long valid;      /* passing divisibility checks */
    long long fitting;    /* of those, fitting in memory */
    long long evaluated;  /* full step predictions computed */
    double seconds;       /* wall time of the search */
    double configs_per_s; /* enumerated / seconds */
} strata_search_result_t;

/* Enumerates TP x CP x PP x VP x DP x micro-batch x ZeRO x recompute x SP x schedule (x order),
 * prunes by divisibility and memory, predicts the rest and keeps the best `top` by step time.
 * Errors: invalid problem; STRATA_ERR_NO_MEMORY; STRATA_ERR_INVALID_ARG when nothing is valid. On
 * error *out holds nothing (freeing it anyway is harmless). */
STRATA_API strata_status_t strata_plan_search(const strata_plan_problem_t *pb,
                                              const strata_search_opts_t *opts,
                                              strata_search_result_t *out);
STRATA_API void strata_search_result_free(strata_search_result_t *r);

/* ---- picture -----------------------------------------------------------------------------------
 */

/* Writes an SVG picture of the predicted step: the schedule's own lists (strata/schedule.h)
 * simulated with the critical device's per-micro-batch times and hop, drawn by
 * strata_pp_timeline_svg_opts (a row per stage, forward, backward and weight-gradient blocks,
 * bubbles as gaps), the data-parallel tail and optimizer after them, and the breakdown and memory
 * as notes. Long pipelines are drawn with fewer micro-batches (a multiple of pp), which the
 * subtitle says. */
STRATA_API strata_status_t strata_plan_svg(const strata_plan_problem_t *pb,
                                           const strata_parallel_t *par,
                                           const strata_prediction_t *pred, FILE *f);

/* ---- validation against published measurements ------------------------------------------------
 */

typedef enum strata_metric {
    STRATA_METRIC_TFLOPS_MEGATRON = 0, /* TFLOP/s per GPU by Megatron-LM Eq. 3 */
    STRATA_METRIC_MFU,                 /* percent */
    STRATA_METRIC_HFU,                 /* percent */
    STRATA_METRIC_TFLOPS_MODEL,        /* model TFLOP/s per GPU */
    STRATA_METRIC_TOKENS_PER_S,        /* whole job */
} strata_metric_t;

typedef struct strata_vrow {
    char id[32];
    char source[96];
    strata_plan_problem_t pb;
    strata_parallel_t par;
    strata_metric_t metric;
    double measured;
    bool calibrate; /* used to fit the constants */
    int line;       /* in its file */
} strata_vrow_t;

typedef struct strata_vtable {
    strata_vrow_t *rows; /* owned */
    int nrows;
} strata_vtable_t;

/* Appends the rows of a validation CSV (format in data/validation/README.md). Errors:
 * STRATA_ERR_IO, STRATA_ERR_PARSE "path:line: expected ...", STRATA_ERR_NO_MEMORY. */
STRATA_API strata_status_t strata_vtable_load(const char *path, strata_vtable_t *t);
STRATA_API void strata_vtable_free(strata_vtable_t *t);

/* The predicted value of the row's metric under `calib` (and the row's problem's terms_off). */
STRATA_API strata_status_t strata_vrow_predict(const strata_vrow_t *row,
                                               const strata_calib_t *calib, double *value,
                                               strata_prediction_t *pred);

/* Fits the calibration constants on the rows with calibrate=yes (skipping row `skip`, -1 for none)
 * by minimising the sum of squared log errors with Nelder-Mead from `start`; `free_mask` bit i
 * frees parameter i (others stay at start). Errors: STRATA_ERR_INVALID_ARG when no row is usable.
 */
STRATA_API strata_status_t strata_calib_fit(const strata_vtable_t *t, int skip, unsigned free_mask,
                                            const strata_calib_t *start, strata_calib_t *out,
                                            double *mape);

/* Parameters fitted by default: eta_gemm, eta_mem, eta_zero3, zero3_overlap_cost. The link
 * efficiencies eta_up and eta_out are fixed at NCCL bus-bandwidth measurements and overlap_cost at
 * a typical contention figure: the tables barely constrain them (docs/plan.md). */
#define STRATA_CALIB_FIT_DEFAULT 0x53u

/* The stages `strata plan validate` compares, each adding terms to the one before. */
typedef enum strata_vstage {
    STRATA_VSTAGE_BASE = 0, /* none of the STRATA_TERM_* terms */
    STRATA_VSTAGE_SCALE,    /* + stragglers and ECMP collisions */
    STRATA_VSTAGE_MEMORY,   /* + ZeRO-3 gathers per matrix, fragmentation */
    STRATA_VSTAGE_HW,       /* + GEMM wave quantization: the full model */
    STRATA_VSTAGE_COUNT
} strata_vstage_t;

STRATA_API const char *strata_vstage_name(strata_vstage_t s);
/* The STRATA_TERM_* bits switched off at stage s. */
STRATA_API unsigned strata_vstage_terms_off(strata_vstage_t s);

typedef struct strata_vresult {
    double predicted[STRATA_VSTAGE_COUNT]; /* with the constants fitted on every calibration row */
    /* relative error (predicted / measured - 1) out of sample: a calibration row predicted by
     * constants refitted without it (leave-one-out), a held-out row by the full fit (it is never
     * fitted on). Without leave-one-out, the in-sample error of calibration rows. */
    double error[STRATA_VSTAGE_COUNT];
    double mem_bytes[STRATA_VSTAGE_COUNT]; /* memory per accelerator predicted */
    bool fits[STRATA_VSTAGE_COUNT];
} strata_vresult_t;

typedef struct strata_vreport {
    strata_vresult_t *rows; /* one per table row; owned, free with strata_vreport_free */
    int nrows;
    strata_calib_t fit[STRATA_VSTAGE_COUNT]; /* constants fitted on all calibration rows */
    /* mean absolute relative error, out of sample as above */
    double mae_calibration[STRATA_VSTAGE_COUNT], mae_held_out[STRATA_VSTAGE_COUNT],
        mae_all[STRATA_VSTAGE_COUNT];
    int n_calibration, n_held_out;
} strata_vreport_t;

/* Validates the model on table t stage by stage: at each stage, fits the constants in free_mask
 * that the stage uses (from `start`) on the calibration rows, predicts every row, and with `loo`
 * refits without each calibration row (again from `start`, so nothing of the row leaks in) to
 * predict it. Constants a stage does not use (the scale terms' in the base stage, mem_frag always:
 * it moves memory, not time) stay at `start`. Errors: those of strata_calib_fit and
 * strata_vrow_predict; STRATA_ERR_NO_MEMORY; on error *out holds nothing. */
STRATA_API strata_status_t strata_validate(const strata_vtable_t *t, unsigned free_mask,
                                           const strata_calib_t *start, bool loo,
                                           strata_vreport_t *out);
STRATA_API void strata_vreport_free(strata_vreport_t *r);

#ifdef __cplusplus
}
#endif
#endif
