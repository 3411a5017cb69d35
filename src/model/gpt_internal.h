/* The GPT model object, shared by its files: gpt.c (layout, initialisation, create), pass.c (the
 * forward/backward drivers and the parameter hooks) and tp.c (the tensor-parallel linear layers,
 * embedding and cross-entropy, with their collectives). Internal to the model part. */
#ifndef ST_MODEL_GPT_INTERNAL_H
#define ST_MODEL_GPT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/model.h"

/* The offset of a tensor this configuration does not have (no biases, no ln2, RMSNorm's bias, wpe
 * under RoPE); ST_AT gives NULL for it, which every kernel reads as "none". */
#define ST_ABSENT ((size_t)-1)
#define ST_AT(p, off) ((off) == ST_ABSENT ? NULL : (p) + (off))

/* Offsets of one block's tensors relative to the block's segment start (the same for every block).
 * The attention's first product: qkv, or under grouped-query attention q with kv (k | v) right
 * after it (and q's bias with kv's right after it), so one product of width Cl + 2 KVl computes
 * q, k and v. The MLP's first product: fc, or SwiGLU's w1 with w3 right after it (and w1's bias
 * with w3's), so one product of width 2F computes gate and up; fc2: mlp.proj or w2. */
typedef struct block_layout {
    size_t ln1w, ln1b, qkvw, kvw, qkvb, kvb, projw, projb, ln2w, ln2b, fcw, fcb, w3w, w3b, fc2w,
        fc2b;
} block_layout_t;

/* A block's activations that bf16 products read twice, in the forward and again for the weight
 * gradients, kept rounded in between (pass.c): ln1 and ln2, their column layers' input (not under
 * sequence parallelism, where the products read the gathered rows instead), and atty and the MLP's
 * activation, their row layers'; and qkv, which attention's products read in both passes. */
enum { ACT_LN1, ACT_LN2, ACT_ATTY, ACT_MLP, ACT_QKV, ACT_KINDS };

/* Activations of one block, pointers into the activation arena. Rows: the residual stream (x, ln*,
 * res*, their statistics) has R rows (B*T, or B*T/tp with sequence parallelism); the head-split
 * tensors (qkv, atty, att, fch) have all B*T rows and this rank's columns. fch is the MLP's first
 * product (Gl columns: SwiGLU's gate | up), replaced under GeLU by GeLU's derivative there (all its
 * backward reads), fch_gelu its activation (Fl columns). The parallel block has no ln2 (NULL). */
typedef struct block_acts {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *res1;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res2;
    /* split backward: the output gradients of the linear layers, for their weight gradients */
    float *dqkv, *dproj, *dfc, *dfc2;
    uint16_t *h16[ACT_KINDS]; /* bf16: the kept copies, in the slot's a16 (NULL until first used) */
    unsigned h16_ok;          /* bit k: h16[k] holds what the last forward rounded */
    unsigned h16_only;        /* bit k: ... and only there: that forward wrote no float32 values
                                 (the MLP's activation, rounded by its kernel) */
} block_acts_t;

/* One micro-batch's activations: a slot (pipeline chunks hold several). */
typedef struct slot {
    int chunk; /* the chunk its forward ran */
    int B, T;
    bool have_targets, logits_valid, wgt_pending;
    int32_t *tokens, *targets;
    float *encoded; /* the embedding's output, or the chunk's input */
    block_acts_t *ba; /* [nblocks] */
    float *lnf, *lnf_mean, *lnf_rstd, *logits, *lse;
    uint16_t *a16; /* bf16: the blocks' kept activation copies (block_acts_t.h16) */
} slot_t;

struct strata_gpt {
    strata_gpt_config_t cfg;
    strata_gpt_shard_t shard;
    int max_batch;
    size_t P, P_full;
    float *params, *grads;
    /* bf16 copies of the parameters the last forward read (pass.c), allocated on first use: */
    uint16_t *w16;     /* rounded as they lie */
    uint16_t *wpk;     /* the products' weights packed (st_operand_hold_weight) */
    size_t *wpk_off;   /* [nseg] a segment's weights' place in wpk */
    bool wpk_none;     /* the products cannot read packed weights here (or no memory for them) */
    uint8_t *w16_held; /* [nseg] the copy holding what the segment's last forward read (pass.c) */
    uint16_t *att16; /* bf16: attention's rounded qkv, then room for its output gradient (pass.c) */
    bool no_copies; /* bf16 products round every operand themselves (w16, a16, att16 unused): for
                       tests */
    int ntensors;
    strata_tensor_info_t *tensors;
    char *names; /* storage of the tensor names */
    int nseg;
    size_t *seg_off, *seg_cnt;
    bool *wgrad_fresh; /* [nseg] the segment's gradients are zero and its weight gradients unwritten
                          since strata_model_zero_grads: their products overwrite them (beta 0) */
    float wgrad_beta;  /* beta of the weight gradients' products being computed (read by tp.c) */
    strata_gpt_layers_t ch;  /* the chunks held (at least one) */
    int *blk;                /* [n_layer] block l's index among the blocks held, or -1 */
    int nblocks;
    bool has_embed, has_head;
    int seg_block0, seg_final; /* segment of the first block held; of the final norm (-1: none) */
    block_layout_t bl;
    size_t wte, wpe, lnfw, lnfb; /* offsets relative to their segment */
    int head_seg;                /* the segment of the head's weight: the embeddings' (the tied wte),
                                    else the final one (the tied head's copy of wte when the
                                    embeddings are not held, or the untied lm_head); -1: no head */
    size_t headw;                /* its offset relative to that segment */
    int Cl, Fl, NHl, Vl;         /* this rank's attention width, MLP width, heads, vocabulary */
    int NKVl, KVl;               /* this rank's k/v heads and their width (NKVl x head size) */
    int Gl;                      /* width of the MLP's first product: Fl, 2 Fl for SwiGLU */
    float *rope_cos, *rope_sin;  /* RoPE: [max_seq, head_size / 2] each (NULL without) */
    float *acts;
    int nslots;
    slot_t *slot;
    float *dres, *dbuf, *dqkv, *dfch, *dscratch;
    int nscratch; /* attention backward's T x T scratch blocks, one per thread */
    float *dact; /* the MLP activation's output gradient (N x Fl): dfch itself for GELU */
    float *dln;  /* parallel block: the MLP's share of d(ln1) (R x C) */
    float *full, *dfull, *dpart, *xent; /* TP: whole-row gather buffers, the CE reductions */
    float *packed;                      /* SP: a segment's replicated gradients, to sum */
    size_t slot_floats;
    strata_param_hooks_t hooks;
    bool has_hooks;
    strata_model_progress_fn progress;
    void *progress_ctx;
};

/* Lets a communication engine advance between matrix products (strata_model_set_progress, and the
 * TP group's collectives). */
void st_model_progress(strata_gpt_t *m);

/* Most row blocks a TP collective is cut into. */
#define ST_TP_MAX_CHUNKS 8

/* Width of the attention's first product on this rank: q, then k and v. */
static inline int st_qkv_width(const strata_gpt_t *m)
{
    return m->Cl + 2 * m->KVl;
}

/* Rows of the residual stream on this rank for N = B*T tokens. */
static inline int st_model_rows(const strata_gpt_t *m, int N)
{
    return m->shard.sp ? N / m->shard.tp : N;
}

/* ---- tp.c: layers over the TP group (plain kernels at tp 1) --------------------------------------
 * x/X: residual-stream rows (R = st_model_rows); full-row tensors have N rows. */

/* The row blocks collectives are cut into for N rows (1 at tp 1). */
int st_tp_chunks(const strata_gpt_t *m, int N);

/* Column-parallel linear forward: y[N, OC] = X w^T + bias, X the whole rows of x (gathered from
 * the sequence shards into m->full under sp; with `gathered` they are there already: the layer
 * before, reading the same x, gathered them, and nothing has written m->full since, as in the
 * parallel block, whose attention and MLP read ln1 both). */
strata_status_t st_tp_column_forward(strata_gpt_t *m, float *y, const float *x, const float *w,
                                     const float *bias, int N, int C, int OC, bool gathered);
/* Its backward: dx[R, C] = the input gradient (summed over the group; written); with dw not NULL
 * also dw/dbias += (dbias may be NULL), else the weight gradient is left to st_tp_column_weight.
 * x as in forward (re-gathered under sp, unless `gathered`: the last re-gather was of x). */
strata_status_t st_tp_column_backward(strata_gpt_t *m, float *dx, float *dw, float *dbias,
                                      const float *dy, const float *x, const float *w, int N,
                                      int C, int OC, bool gathered);
/* The weight gradient of a column-parallel layer: dw += dy^T X, dbias += column sums of dy (X
 * re-gathered under sp, unless `gathered`). */
strata_status_t st_tp_column_weight(strata_gpt_t *m, float *dw, float *dbias, const float *dy,
                                    const float *x, int N, int C, int OC, bool gathered);
/* Row-parallel linear forward: y[R, OC] = sum over the group of a w^T (a: N x K, this rank's input
 * columns), + bias, + residual (may be NULL). */
strata_status_t st_tp_row_forward(strata_gpt_t *m, float *y, const float *a, const float *w,
                                  const float *bias, const float *residual, int N, int K, int OC);
/* Its backward: da[N, K] = dy w (written), dbias += column sums of dy's rows here, and dw += dy^T a
 * when dw is not NULL; otherwise the whole-row dy is copied to keep (N x OC): its weight gradient is
 * then st_matmul_backward_weight(dw, NULL, keep, a, N, K, OC), every row being here. */
strata_status_t st_tp_row_backward(strata_gpt_t *m, float *da, float *dw, float *dbias,
                                   const float *dy, const float *a, const float *w, int N, int K,
                                   int OC, float *keep);
/* Vocabulary-parallel embedding: out[R, C] = wte[tok] + wpe[t], summed over the vocabulary slices. */
strata_status_t st_tp_embed_forward(strata_gpt_t *m, float *out, const int32_t *tokens,
                                    const float *wte, const float *wpe, int B, int T);
/* Its backward from dout[R, C]: dwte (this slice) and dwpe. */
strata_status_t st_tp_embed_backward(strata_gpt_t *m, float *dwte, float *dwpe, const float *dout,
                                     const int32_t *tokens, int B, int T);
/* Vocabulary-parallel cross-entropy of the slot's logits[N, Vl] (this rank's slice): its lse[N] and
 * the mean loss. */
strata_status_t st_tp_xent_forward(strata_gpt_t *m, slot_t *sl, float *loss, int N);
/* Sums, under sp, the replicated tensors' gradients of segment seg over the group (they are partial:
 * each rank saw its own rows). Nothing to do otherwise. */
strata_status_t st_tp_reduce_replicated(strata_gpt_t *m, int seg);

/* SplitMix64: the model's deterministic random stream (initialisation, sampling). */
static inline uint64_t st_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
