/* Planner internals shared by the files of src/plan: the per-layer cost pieces that the search
 * caches, and helpers. Not part of the public API. */
#ifndef ST_PLAN_INTERNAL_H
#define ST_PLAN_INTERNAL_H

#include "strata/plan.h"

/* Costs of one transformer layer for one micro-batch on one device, and of the first stage's
 * embedding and the last stage's logits, for a given (tp, cp, micro-batch, sp, recompute) and
 * mapping. Depends on neither pp, vp, dp, ZeRO nor the schedule, so the search computes it once
 * per combination of those. All times in seconds, bytes per device. */
typedef struct st_layer_cost {
    double fwd_s;       /* forward compute of one layer */
    double bwd_s;       /* backward compute (input and weight gradients), no recompute */
    double wgrad_s;     /* weight-gradient part of bwd_s */
    double recompute_s; /* extra forward compute for activation recomputation */
    double gemm_fwd_s;  /* linear-layer GEMMs of one forward: the window TP overlap hides in */
    double attn_fwd_s;  /* attention core forward: the window CP overlap hides in */
    double attn_bwd_s;
    double tp_fwd_s, tp_bwd_s, tp_rec_s; /* TP communication per pass */
    double cp_fwd_s, cp_bwd_s, cp_rec_s; /* CP communication per pass */
    double tp_bytes, cp_bytes;           /* bytes sent per layer per micro-batch, all passes */
    int tp_level, cp_level;
    double act_bytes;      /* activations kept per layer per micro-batch until its backward */
    double act_full_bytes; /* all activations of one layer (working set during its backward) */
    double params;         /* parameters of one layer on one device */
    double max_matrix;     /* elements of the layer's largest weight matrix on one device: the
                              unit ZeRO-3 gathers */
    /* first stage (embedding) and last stage (final norm, logits, loss) */
    double emb_fwd_s, emb_bwd_s, emb_tp_s;
    double head_fwd_s, head_bwd_s, head_wgrad_s, head_tp_s;
    double emb_params, head_params; /* on one device of the first / last stage */
    double head_act_bytes;          /* logits and loss buffers of one micro-batch */
    double emb_act_bytes;           /* embedding output kept per micro-batch */
    double p2p_bytes;               /* activation sent between stages per micro-batch */
    double tp_buffer_bytes;         /* gathered activation buffer under SP */
    /* Problem-wide, not per layer: the fraction of compute the job waits for its slowest
     * accelerator (st_plan_straggler_frac), set by the caller once per problem. */
    double straggler_frac;
} st_layer_cost_t;

/* Computes st_layer_cost_t. par supplies tp, cp, order and overlap (only). */
strata_status_t st_plan_layer_cost(const strata_plan_problem_t *pb, const strata_parallel_t *par,
                                   st_layer_cost_t *out);

/* Assembles a step from precomputed layer costs. When `memory_only` is true and the configuration
 * does not fit, returns after filling out->mem (the search's early pruning); *evaluated tells
 * whether the time model ran. par must already have passed strata_plan_check. */
strata_status_t st_plan_assemble(const strata_plan_problem_t *pb, const strata_parallel_t *par,
                                 const st_layer_cost_t *lc, bool memory_only,
                                 strata_prediction_t *out);

/* Validation of par without formatting a message (the search's fast path). Returns 0 when valid,
 * else a code naming the first failed constraint; st_plan_check_msg() formats it. */
int st_plan_check_fast(const strata_plan_problem_t *pb, const strata_parallel_t *par);

/* Bytes per element of activations, weights and gradients under the training setup. */
double st_act_bytes(const strata_training_t *t);
/* Bytes of a GEMM input kept for the backward (1 under FP8). */
double st_gemm_input_bytes(const strata_training_t *t);
double st_weight_bytes(const strata_training_t *t);
double st_grad_bytes(const strata_training_t *t);
int st_seq(const strata_plan_problem_t *pb);
long long st_gpus(const strata_plan_problem_t *pb);

/* The group of dimension set `dims` (bit per strata_dim_t) under the mapping of par. */
strata_group_t st_plan_group(const strata_parallel_t *par, unsigned dims);

/* Net efficiencies from calibration and accelerator. */
strata_net_eff_t st_plan_net_eff(const strata_plan_problem_t *pb);

/* ---- prices of the layout's groups (net.c, strata/price.h) ---- */

/* The price table of `coll` for group g under pb's fabric, efficiencies and reduction speed. */
strata_status_t st_plan_table(const strata_plan_problem_t *pb, const strata_group_t *g,
                              strata_coll_t coll, strata_price_table_t *out);
/* Seconds of the cheapest algorithm the communicator offers an even call (STRATA_PRICE_OFFER_PLAIN)
 * on table t at `bytes`; 0 when nothing moves (bytes <= 0 or one member). */
double st_plan_price_s(const strata_price_table_t *t, double bytes);
/* The same in one call, with the algorithm and pipeline: what step.c and model.c predict. */
strata_status_t st_plan_coll(const strata_plan_problem_t *pb, const strata_group_t *g,
                             strata_coll_t coll, double bytes, strata_price_t *out);

/* Layers held by pipeline device `i` of `pp` (uneven splits put the extra layers in the middle). */
int st_layers_on_device(int layers, int pp, int i);

/* ---- what grows with scale (scale.c) ----------------------------------------------------------
 */

/* E[max of n independent standard normal variables] (0 for n <= 1). */
double st_expected_max_normal(long long n);

/* E[max over `bins` bins of the number of balls in a bin] when balls fall independently with
 * `mean` per bin on average (Poisson loads). */
double st_expected_max_load(double bins, double mean);

/* How much slower than an even spread the most loaded of the uplink ports of one unit is when
 * every accelerator of the unit (`accels` of them) sends one connection of `subflows` hashed
 * sub-flows through `accels / oversub` ports: E[max load] / mean load. 1 when subflows is 0. */
double st_ecmp_factor(double accels, double oversub, double subflows);

/* The problem as the step model sees it: the fabric's switch tiers (scale-out levels above the
 * first: their children are switches, whose uplinks are picked by hashing) slowed by their ECMP
 * factor, unless STRATA_TERM_SCALE is off. A plain copy otherwise. */
void st_plan_effective(const strata_plan_problem_t *pb, strata_plan_problem_t *out);

/* Fraction of a step's compute and bubble that the job waits for its slowest accelerator:
 * straggler_cv x E[max of N normals] (0 with STRATA_TERM_SCALE off). */
double st_plan_straggler_frac(const strata_plan_problem_t *pb);

#endif
