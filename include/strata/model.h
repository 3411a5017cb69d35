/* The GPT model: a decoder-only transformer trained on the CPU, forward and backward in C with every
 * matrix product through BLAS (sgemm), and the optimizers that update it.
 *
 * Architecture (GPT-2): byte tokens (vocab 256 by default) -> token + learned position embedding ->
 * L pre-norm blocks [x += proj(attn(LN1(x))); x += fc2(gelu(fc1(LN2(x))))] -> final LayerNorm ->
 * logits through the tied token embedding -> mean cross-entropy. Options (strata_gpt_config_t):
 * the parallel block, sliding-window attention, grouped-query attention, an untied head, and the
 * Llama shape (RMSNorm, SwiGLU, RoPE, no biases, untied), each alone or together. Linear weights use PyTorch's
 * nn.Linear layout (out_features x in_features), so a checkpoint loads into the peer model in
 * bench/torch_gpt.py by name.
 *
 * Memory: three families of arenas, each ONE contiguous float array (llm.c): parameters, gradients
 * (same layout), activations (sized at create for max_batch x max_seq). Optimizer state (m, v) is
 * owned by whoever runs the optimizer, for any flat range of the parameter arena, so a ZeRO shard is
 * an (offset, count).
 *
 * Segments (the contract with the ZeRO engine): the parameter arena is cut, in forward order, into
 * S = L + 2 segments: 0 = embeddings (wte, wpe), 1..L = block 1..L, S-1 = final norm. A tensor never
 * straddles two segments. A pipeline chunk (layers [begin, end) of the model, see "pipeline chunks"
 * below) has the segments of what it holds, in the same order: the embeddings when begin is 0, its
 * blocks, the final norm when end is L (with the untied head's lm_head.weight, or its own copy of
 * wte for the tied head when it does not hold the embeddings).
 *
 * The planner (plan.h) already owns the names strata_model_t / strata_model_load / strata_model_params
 * for its model *description*; the trainable model object here is therefore strata_gpt_t, while its
 * functions keep the part prefix strata_model_.
 *
 * Thread-safety: a model is used by one thread at a time. BLAS may use its own threads
 * (strata_blas_set_threads). Errors: every fallible call returns a status with a message in
 * strata_last_error().
 */
#ifndef STRATA_MODEL_H
#define STRATA_MODEL_H

#include "strata/precision.h"
#include "strata/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- configuration ----------------------------------------------------------------------------- */

/* The block's norm, MLP and position choices (0 = GPT-2's). */
typedef enum strata_gpt_norm {
    STRATA_GPT_NORM_LAYERNORM = 0, /* (x - mean) * rstd * w + b */
    STRATA_GPT_NORM_RMSNORM = 1,   /* x * rstd * w, rstd over the mean square: no mean, no bias */
} strata_gpt_norm_t;
typedef enum strata_gpt_mlp {
    STRATA_GPT_MLP_GELU = 0,   /* proj(gelu(fc(x))): mlp.fc, mlp.proj */
    STRATA_GPT_MLP_SWIGLU = 1, /* w2(silu(w1 x) * w3 x): mlp.w1 (gate), mlp.w3 (up), mlp.w2 (down) */
} strata_gpt_mlp_t;
typedef enum strata_gpt_pos {
    STRATA_GPT_POS_LEARNED = 0, /* a learned table wpe added to the token embedding */
    STRATA_GPT_POS_ROPE = 1,    /* rotary embedding of q and k in every head (no wpe) */
} strata_gpt_pos_t;

/* Every field's zero value but d_ff's, ln_eps's and init_std's is GPT-2's shape, so a configuration
 * written before an option existed means the same model. */
typedef struct strata_gpt_config {
    int vocab;      /* token count; 256 for byte-level text */
    int max_seq;    /* T max: rows of the position table */
    int n_layer;    /* L */
    int n_head;     /* NH; d_model % n_head == 0 */
    int d_model;    /* C */
    int d_ff;       /* MLP width; 0 means 4 * d_model */
    float ln_eps;   /* norm epsilon (1e-5) */
    float init_std; /* normal init std (0.02); residual projections get std / sqrt(2 L) */
    /* Model options (MegaScale, Llama; docs/train.md "Model options"): */
    bool parallel;  /* parallel block (GPT-J, PaLM): x + attn(norm(x)) + mlp(norm(x)), one norm
                       (ln1) per block, no ln2 */
    int window;     /* sliding-window attention: a query at t attends keys (t - window, t];
                       0 = full causal */
    strata_gpt_norm_t norm;
    strata_gpt_mlp_t mlp;
    strata_gpt_pos_t pos;
    bool no_bias;     /* linear layers without biases (qkv, proj, MLP) */
    float rope_theta; /* RoPE base; 0 means 10000 */
    int n_kv_head;    /* grouped-query attention: k/v heads, each read by n_head / n_kv_head query
                         heads (it must divide n_head); 0 means n_head (multi-head attention) */
    bool untied;      /* the head has its own weight, lm_head.weight [vocab, d_model], instead of
                         reading the embedding wte */
} strata_gpt_config_t;

/* The Llama shape on top of *cfg: RMSNorm, SwiGLU, RoPE, no biases, an untied head (the k/v heads,
 * n_kv_head, are a size, left as they are). */
STRATA_API void strata_gpt_config_llama(strata_gpt_config_t *cfg);

/* Sets a named choice from its text: key "norm" (layernorm, rmsnorm), "mlp" (gelu, swiglu) or "pos"
 * (learned, rope). Errors: STRATA_ERR_INVALID_ARG naming the key and the choices. */
STRATA_API strata_status_t strata_gpt_config_set_choice(strata_gpt_config_t *cfg, const char *key,
                                                        const char *value);

/* A tiny default: vocab 256, T 64, L 2, NH 4, C 64. */
STRATA_API strata_gpt_config_t strata_gpt_config_default(void);

/* Fills d_ff when 0 and checks every field (names the bad one). Errors: STRATA_ERR_INVALID_ARG. */
STRATA_API strata_status_t strata_gpt_config_validate(strata_gpt_config_t *cfg);

/* Writes the config as one JSON object ({"vocab":256,...}) into buf. Returns the length or -1 when
 * buf is too small. */
STRATA_API int strata_gpt_config_to_json(const strata_gpt_config_t *cfg, char *buf, size_t size);

/* Parses a JSON object text as written above (unknown keys refused; missing keys keep the value
 * already in *cfg). `origin` names the text in messages. Errors: STRATA_ERR_PARSE with origin:line. */
STRATA_API strata_status_t strata_gpt_config_from_json(const char *text, const char *origin,
                                                       strata_gpt_config_t *cfg);

/* Parameter count of a configuration (after validate). */
STRATA_API size_t strata_gpt_config_nparams(const strata_gpt_config_t *cfg);

/* ---- the model ---------------------------------------------------------------------------------- */

typedef struct strata_gpt strata_gpt_t;

/* One parameter tensor in the arena. Names follow PyTorch's state_dict of bench/torch_gpt.py:
 * "wte", "wpe", "h.3.ln1.weight", "h.3.attn.qkv.weight" (under grouped-query attention
 * "h.3.attn.q.weight" and "h.3.attn.kv.weight", k | v), ..., "lnf.bias", "lm_head.weight" (untied). */
typedef struct strata_tensor_info {
    const char *name;
    int ndim;
    int64_t shape[2]; /* this rank's part (the whole tensor without tensor parallelism) */
    size_t offset; /* in floats, from the arena start */
    size_t count;
    int segment;
    bool decay; /* weight decay applies (2-D matrices); not on norms, biases */
    /* Tensor parallelism: how this rank's part is cut from the whole tensor (see "tensor
     * parallelism" below). split_dim -1: replicated, the whole tensor on every TP rank. 0 or 1:
     * along that dimension, viewed as split_groups equal blocks each cut in tp equal parts, of which
     * the rank holds part tp_rank of every block (qkv: 3 blocks q | k | v, cut by heads; kv: 2). */
    int split_dim;
    int split_groups;
    int64_t full_shape[2]; /* the whole tensor */
    size_t full_offset;    /* its offset in the whole model's arena (the one-process layout) */
    int init_index;        /* its index in the whole model's table (its initialisation stream) */
    bool tied_copy;        /* a pipeline chunk's own copy of wte for the tied head: the same
                              tensor as the embedding's, kept equal by the caller (its gradient is
                              summed with the embedding's) */
} strata_tensor_info_t;

/* ---- tensor parallelism (Megatron-LM) -----------------------------------------------------------
 * A model of a TP group of tp ranks holds on each rank its part of every tensor:
 *   wte (vocab x C)          vocabulary-parallel: rows [r V/tp, (r+1) V/tp); the tied head computes
 *                            only those logits, and the cross-entropy reduces the row max, the
 *                            sum of exps and the target logit over the group (the full logits are
 *                            never gathered)
 *   attn.qkv (3C x C), bias  column-parallel by heads: heads [r NH/tp, (r+1) NH/tp) of q, k and v
 *   attn.q, attn.kv          grouped-query attention: q's heads as above, and k/v heads
 *                            [r NKV/tp, (r+1) NKV/tp) of k and of v (their query heads' group);
 *                            the rank's q, k and v rows lie one after the other: one product
 *   lm_head (vocab x C)      the untied head: vocabulary-parallel as wte
 *   attn.proj (C x C)        row-parallel: input columns of those heads; its bias replicated
 *   mlp.fc (F x C), bias     column-parallel: rows [r F/tp, (r+1) F/tp)
 *   mlp.proj (C x F)         row-parallel: input columns [r F/tp, ...); its bias replicated
 *   mlp.w1, mlp.w3 (F x C)   SwiGLU's gate and up: column-parallel as mlp.fc (one product: the
 *                            rank's rows of w1 and w3 lie one after the other in its arena)
 *   mlp.w2 (C x F)           SwiGLU's down: row-parallel as mlp.proj
 *   wpe, norms               replicated (RoPE rotates each head where it is)
 * One collective forward and one backward per sub-block (attention, MLP), none inside, plus the
 * embedding's and the head's. Without sequence parallelism the residual stream is whole on every
 * rank: an all-reduce after each row-parallel product, and one on the input gradient of each
 * column-parallel product. With sequence parallelism (sp) the residual stream, LayerNorms, biases
 * and dropout-free residual adds work on 1/tp of the B x T rows: an all-gather before each
 * column-parallel product and a reduce-scatter after each row-parallel one (and the mirror images
 * backward); the replicated tensors' gradients are then partial and are summed over the group
 * before their segment's grad_ready. Rows are cut in `chunks` blocks of B*T/chunks (each cut in tp),
 * so the collective of one block runs while the product of the next computes (overlap).
 *
 * The model does not talk to the network itself: it starts and waits for collectives over its TP
 * group through strata_tp_ops_t (src/parallel/tp.c implements them on a communicator). Every
 * buffer is float32; n counts floats per rank. */
typedef enum strata_tp_coll {
    STRATA_TP_ALLREDUCE_SUM = 0, /* out[n] = sum over ranks of in[n] (in == out allowed) */
    STRATA_TP_ALLREDUCE_MAX,     /* out[n] = max over ranks */
    STRATA_TP_ALLGATHER,         /* out[tp * n] = every rank's in[n], in rank order */
    STRATA_TP_REDUCE_SCATTER,    /* out[n] = block `rank` of the sum over ranks of in[tp * n] */
} strata_tp_coll_t;

typedef struct strata_tp_ops {
    void *ctx;
    /* Starts a collective; *handle is waited on with wait (exactly once). */
    strata_status_t (*start)(void *ctx, strata_tp_coll_t coll, const float *in, float *out,
                             size_t n, void **handle);
    strata_status_t (*wait)(void *ctx, void *handle);
    /* Advances outstanding collectives without blocking (may be NULL). */
    void (*progress)(void *ctx);
} strata_tp_ops_t;

#define STRATA_GPT_MAX_SLOTS 256
#define STRATA_GPT_MAX_CHUNKS 8

/* The pipeline chunks a model holds: chunk k is layers [begin[k], end[k]), ascending and disjoint;
 * n 0: the whole model as one chunk. */
typedef struct strata_gpt_layers {
    int n;
    int begin[STRATA_GPT_MAX_CHUNKS], end[STRATA_GPT_MAX_CHUNKS];
} strata_gpt_layers_t;

typedef struct strata_gpt_shard {
    int tp, tp_rank; /* group size and this rank's place in it (1, 0: the whole model) */
    strata_gpt_layers_t layers; /* pipeline chunks held (see "pipeline chunks") */
    int slots;       /* micro-batch activations held at once, over all chunks (0: 1) */
    bool split_backward; /* backward in two phases, input gradient then weight gradient (ZB) */
    bool sp;         /* sequence parallelism (needs B*T divisible by chunks * tp) */
    int chunks;      /* row blocks per TP collective for overlap; 0 = automatic (2 where B*T allows
                        it, else 1) */
    strata_tp_ops_t ops; /* required when tp > 1; must outlive the model */
} strata_gpt_shard_t;

/* The whole model: tp 1. */
STRATA_API strata_gpt_shard_t strata_gpt_shard_none(void);

/* Checks that a configuration can be cut tp ways: n_head, n_kv_head, vocab and d_ff divisible by tp
 * (names the constraint that fails). Errors: STRATA_ERR_INVALID_ARG. */
STRATA_API strata_status_t strata_gpt_config_check_tp(const strata_gpt_config_t *cfg, int tp);

/* As strata_model_create, for this rank's part of a TP group. The parameters are this rank's part of
 * exactly the parameters the whole model gets with `seed` (so a TP run starts where the one-process
 * run starts). Errors: as create, plus the TP constraints above and a missing ops table. */
STRATA_API strata_status_t strata_model_create_shard(const strata_gpt_config_t *cfg,
                                                     const strata_gpt_shard_t *shard, int max_batch,
                                                     uint64_t seed, strata_gpt_t **out);

STRATA_API const strata_gpt_shard_t *strata_model_shard(const strata_gpt_t *m);

/* Parameters of the whole model (equals strata_model_nparams at tp 1). */
STRATA_API size_t strata_model_full_nparams(const strata_gpt_t *m);

/* Copies between a whole tensor (full_shape, row-major) and part `tp_rank` of it for a TP group of
 * `tp` (t->shape): to_part true copies whole -> part, false part -> whole (only the part's elements
 * of `whole` are written). A replicated tensor is copied whole. */
STRATA_API void strata_tensor_part_copy(const strata_tensor_info_t *t, int tp, int tp_rank,
                                        float *whole, float *part, bool to_part);

/* Floats in the arena of one rank of a TP group of tp holding the chunks `layers` (NULL or n 0: all;
 * the whole model's at tp 1); 0 when the configuration cannot be cut so. */
STRATA_API size_t strata_gpt_config_part_nparams(const strata_gpt_config_t *cfg, int tp,
                                                 const strata_gpt_layers_t *layers);

/* Converts between the whole model's arena (the one-process layout) and the arenas of the tp ranks
 * of a TP group holding the chunks `layers` (NULL: all), laid one after another (rank 0's first,
 * strata_gpt_config_part_nparams floats each): to_parts true fills `parts` from `whole`, false
 * fills the part's tensors of `whole` from `parts` (a replicated tensor from rank 0; a tied copy of
 * wte never). Errors: STRATA_ERR_INVALID_ARG (cannot be cut), NO_MEMORY. */
STRATA_API strata_status_t strata_gpt_arena_convert(const strata_gpt_config_t *cfg, int tp,
                                                    const strata_gpt_layers_t *layers, float *whole,
                                                    float *parts, bool to_parts);

/* Allocates parameters (initialised with `seed`, GPT-2 scheme), gradients and activations for
 * batches of at most max_batch rows of at most cfg->max_seq tokens. *out is NULL on failure.
 * Errors: STRATA_ERR_INVALID_ARG (config), STRATA_ERR_NO_MEMORY. */
STRATA_API strata_status_t strata_model_create(const strata_gpt_config_t *cfg, int max_batch,
                                               uint64_t seed, strata_gpt_t **out);
/* Frees everything; NULL is a no-op. */
STRATA_API void strata_model_destroy(strata_gpt_t *m);

STRATA_API const strata_gpt_config_t *strata_model_config(const strata_gpt_t *m);

/* Re-initialises the parameters deterministically from seed (same as create). Errors:
 * STRATA_ERR_NO_MEMORY (a TP part is cut from a whole tensor drawn in a temporary buffer). */
STRATA_API strata_status_t strata_model_init_params(strata_gpt_t *m, uint64_t seed);

/* The arenas: P = strata_model_nparams floats each. The model owns them. */
STRATA_API size_t strata_model_nparams(const strata_gpt_t *m);
STRATA_API float *strata_model_param_arena(strata_gpt_t *m);
STRATA_API float *strata_model_grad_arena(strata_gpt_t *m);

/* Segments in forward order (see the file comment). */
STRATA_API int strata_model_nsegments(const strata_gpt_t *m);
STRATA_API void strata_model_segment(const strata_gpt_t *m, int seg, size_t *offset, size_t *count);
/* The segment the head's weight lies in, which the forward acquires again after the last one and
 * the backward first: 0 for a tied head on a model holding the embeddings (wte), the final
 * segment for an untied head (lm_head.weight) or a tied head's copy of wte; -1 without a head. */
STRATA_API int strata_model_head_segment(const strata_gpt_t *m);

/* The tensor table, in arena order; NULL when i is out of range. */
STRATA_API int strata_model_ntensors(const strata_gpt_t *m);
STRATA_API const strata_tensor_info_t *strata_model_tensor(const strata_gpt_t *m, int i);
/* Index of a tensor by name, or -1. */
STRATA_API int strata_model_find_tensor(const strata_gpt_t *m, const char *name);

/* Parameter hooks, for sharded parameters (ZeRO-3) and gradient overlap (ZeRO-2). */
typedef struct strata_param_hooks {
    void *ctx;
    /* Before the model reads segment `seg`'s parameters. Returns in *params the full parameters of
     * the segment (count floats, same layout as the arena slice) to read until release. Forward
     * acquires 0, 1, ..., S-1 and then H again for the head (backward = false); backward acquires
     * H (head), S-1, S-2, ..., 1, 0 (backward = true), H = strata_model_head_segment (0 for the
     * tied head, S-1 for the untied one). Every acquire is paired with a release. */
    strata_status_t (*acquire)(void *ctx, int seg, bool backward, const float **params);
    strata_status_t (*release)(void *ctx, int seg, bool backward);
    /* Called exactly once per backward pass per segment, as soon as that segment's gradients in
     * the gradient arena are final (segment 0 last, because of the tied head). */
    strata_status_t (*grad_ready)(void *ctx, int seg);
} strata_param_hooks_t;

/* Installs hooks (copied); NULL removes them, and the model reads its own arena. Any member may be
 * NULL. A hook's error aborts the pass and is returned unchanged (after releasing what was
 * acquired). */
STRATA_API void strata_model_set_hooks(strata_gpt_t *m, const strata_param_hooks_t *hooks);

/* A progress callback the model calls between its matrix products (forward and backward), so that
 * a communication engine without a progress thread (e.g. strata_zero_progress) can advance its
 * non-blocking collectives while the model computes. NULL removes it. It must not fail the pass: an
 * engine's error surfaces at its next hook. */
typedef void (*strata_model_progress_fn)(void *ctx);
STRATA_API void strata_model_set_progress(strata_gpt_t *m, strata_model_progress_fn fn, void *ctx);

/* Forward pass on B x T tokens (row-major, values < vocab). With targets (B x T, may be NULL) also
 * the mean cross-entropy over the B*T positions into *loss (may be NULL). B <= max_batch,
 * T <= max_seq. Errors: STRATA_ERR_INVALID_ARG (shape, token out of range), hook errors. */
STRATA_API strata_status_t strata_model_forward(strata_gpt_t *m, const int32_t *tokens,
                                                const int32_t *targets, int B, int T, float *loss);

/* ---- pipeline chunks ------------------------------------------------------------------------------
 * A model made with shard.layers holds chunks of a pipeline (one, or several: a stage of an
 * interleaved or V-shaped schedule): their blocks, plus the embeddings when a chunk starts at layer 0
 * and the final norm, the tied head and the loss when one ends at the last layer. It runs
 * micro-batches in activation slots (shard.slots of them): a slot holds one micro-batch's
 * activations on one chunk from its forward until its backward (and weight gradient) is done. The
 * whole-model calls above (strata_model_forward/backward) are slot 0 of a model holding every layer.
 * Gradients accumulate over micro-batches: strata_model_zero_grads once per step, then each
 * micro-batch's backward adds to them (a block's weight gradients, still clear at its first
 * backward after the clearing, are written there without being read: write nothing into the arena
 * between the two); the parameter hooks' acquire/release still run around every
 * segment, grad_ready only from strata_model_grads_done. Rows: the residual stream of R rows (B*T,
 * or B*T/tp under sequence parallelism) is what chunks pass to each other. */

/* Forward of one micro-batch in `slot` on chunk `chunk` (0 .. layers.n-1, in the model's order):
 * the chunk starting at layer 0 reads tokens (B x T), any other chunk
 * `input` (R x d_model floats, copied); the last chunk with targets computes the mean loss. Errors:
 * INVALID_ARG (slot, shape, a missing input), hook and TP errors. */
STRATA_API strata_status_t strata_model_forward_chunk(strata_gpt_t *m, int chunk, int slot,
                                                      const int32_t *tokens, const float *input,
                                                      const int32_t *targets, int B, int T,
                                                      float *loss);
/* The output activations (R x d_model) of slot's forward (not the last chunk); valid until the
 * slot's next forward. */
STRATA_API const float *strata_model_chunk_output(const strata_gpt_t *m, int slot);

/* Backward of slot's micro-batch: `dout` is the gradient of the chunk's output (R x d_model), NULL
 * for the last chunk (the loss's, times loss_scale: 1/M for the mean over M micro-batches). Adds the
 * parameter gradients (with split_backward: all but the linear layers' weight gradients, which
 * strata_model_backward_weights adds) and leaves the input gradient (R x d_model, not the first
 * chunk) in strata_model_chunk_input_grad until the next backward. The slot is free again after this
 * (after strata_model_backward_weights when split). */
STRATA_API strata_status_t strata_model_backward_chunk(strata_gpt_t *m, int slot, const float *dout,
                                                       float loss_scale);
STRATA_API const float *strata_model_chunk_input_grad(const strata_gpt_t *m);
/* The deferred weight gradients of slot's backward (split_backward only). */
STRATA_API strata_status_t strata_model_backward_weights(strata_gpt_t *m, int slot);

/* Clears the gradient arena (before the first micro-batch of a step) and marks every segment
 * clear: its blocks' next backward writes their linear layers' weight gradients instead of adding
 * to them. Those are not zeroed here (a pass over most of the arena for nothing): until that
 * backward they hold the previous step's values; every other gradient is zero. */
STRATA_API void strata_model_zero_grads(strata_gpt_t *m);
/* The step's gradients are final: sums the replicated tensors' partial gradients over the TP group
 * (sequence parallelism) and calls grad_ready for every segment, last first. */
STRATA_API strata_status_t strata_model_grads_done(strata_gpt_t *m);

/* Activation floats one slot holds (for memory accounting and the bubbles' free memory). */
STRATA_API size_t strata_model_slot_floats(const strata_gpt_t *m);

/* Logits (B x T x vocab) of the last forward; valid until the next forward or backward. Under
 * tensor parallelism: B x T x vocab/tp, this rank's vocabulary slice. */
STRATA_API const float *strata_model_logits(const strata_gpt_t *m);

/* The next token from one row of logits: the largest at temperature <= 0, else a draw from
 * softmax(logits / temperature) advancing the random stream *rng (the same stream, the same text). */
STRATA_API int strata_sample_token(const float *logits, int vocab, double temperature,
                                   uint64_t *rng);

/* Backward pass of the last forward (which must have had targets): OVERWRITES the gradient arena
 * with d(mean loss)/d(params). Under data parallelism with N equal row shards, averaging the
 * ranks' gradients (and losses) gives exactly the one-process mean. Errors: STRATA_ERR_INVALID_ARG
 * (no forward with targets), hook errors. */
STRATA_API strata_status_t strata_model_backward(strata_gpt_t *m);

/* Training FLOPs per token (forward + backward) at sequence length T: 6 * matmul params plus the
 * attention products counted dense (T x T; T x window with a sliding window), the usual MFU
 * convention, although the attention kernel skips the key blocks above the causal diagonal (and
 * those before the window). */
STRATA_API double strata_model_flops_per_token(const strata_gpt_t *m, int T);

/* Forward FLOPs per token of one block of cfg (validated or not) whose queries attend `keys` keys:
 * its products 2 (C (C + 2 KV) + C^2 + 2 C F, 3 C F for SwiGLU; KV the k/v width) and the attention
 * 4 keys C. The pipeline's cut weighs blocks by it; strata_model_flops_per_token is built on it. */
STRATA_API double strata_gpt_config_block_flops(const strata_gpt_config_t *cfg, int keys);

/* ---- BLAS -------------------------------------------------------------------------------------- */

/* Sets the thread count of the matrix products (OpenBLAS's, and oneDNN's OpenMP threads for the
 * calling thread); n <= 0 leaves the library default. */
STRATA_API void strata_blas_set_threads(int n);

/* The CPU's bfloat16 matrix units as oneDNN sees them at run time: "amx" (AMX-BF16 tiles),
 * "avx512_bf16" (AVX512-BF16 dot products) or NULL (neither: bf16 products would be emulated,
 * slower than float32, so BF16 is not used there). */
STRATA_API const char *strata_blas_bf16_units(void);

/* The library the float32 products run on: "oneDNN" (its kernels for this CPU, on the model's
 * OpenMP threads) or "OpenBLAS". By default oneDNN wherever its engine runs, else OpenBLAS;
 * STRATA_GEMM=openblas or onednn forces either. */
STRATA_API const char *strata_blas_f32_library(void);

/* Sets the precision of every matrix product this process runs from now on (process-wide, like the
 * thread count). STRATA_PREC_FP32: float32 throughout (strata_blas_f32_library). STRATA_PREC_BF16:
 * both operands rounded to bfloat16 (nearest even), the products accumulated and returned in
 * float32 (oneDNN's matmul on the CPU's AMX or AVX512-BF16 units); everything else (norms, softmax,
 * GeLU, the loss, gradients, master weights, optimizer state) stays float32, as under torch's CPU
 * autocast. *in_effect (may be NULL) gets the precision used: FP32 when BF16 is asked for on a CPU
 * without bf16 units. Errors: STRATA_ERR_UNSUPPORTED for fp16 and fp8, which only the planner
 * models. */
STRATA_API strata_status_t strata_blas_set_precision(strata_precision_t want,
                                                     strata_precision_t *in_effect);
STRATA_API strata_precision_t strata_blas_precision(void);

/* GEMM peak of this CPU, measured (GFLOP/s of a square n x n product at the current BLAS threads
 * and precision); the trainer's MFU divides by it. Takes about half a second; 0 when out of
 * memory. */
STRATA_API double strata_measure_gemm_peak(int n);

/* ---- optimizers --------------------------------------------------------------------------------
 * Every update works on a flat range [offset, offset + count) of the parameter arena. `params` and
 * `grads` point at element `offset` (so a shard-local buffer works), `m` and `v` hold `count`
 * elements for that range only. Updates are elementwise (AdamW) or elementwise given the per-tensor
 * norms (LAMB), so one range updated at once or in pieces gives bit-identical results. Weight decay
 * is decided per tensor (strata_tensor_info_t.decay). `step` counts from 1 (bias correction).
 * `grad_scale` multiplies every gradient first (clipping; 1 for none). */

typedef enum strata_optim_kind { STRATA_OPTIM_ADAMW = 0, STRATA_OPTIM_LAMB = 1 } strata_optim_kind_t;

typedef struct strata_optim_config {
    strata_optim_kind_t kind;
    float beta1, beta2, eps, weight_decay;
} strata_optim_config_t;

/* AdamW defaults as in PyTorch: 0.9, 0.999, 1e-8, weight decay 0.01. */
STRATA_API strata_optim_config_t strata_optim_config_default(void);

/* AdamW (decoupled weight decay, PyTorch's formula). Errors: STRATA_ERR_INVALID_ARG (range). */
STRATA_API strata_status_t strata_adamw_update(const strata_gpt_t *m, const strata_optim_config_t *oc,
                                               float *params, const float *grads, float *mstate,
                                               float *vstate, size_t offset, size_t count,
                                               float lr, int64_t step, float grad_scale);

/* LAMB, two phases so a sharded run can allreduce the per-tensor norms in between:
 * 1. strata_lamb_partial updates m and v of the range and ADDS, for every tensor i that the range
 *    touches, sum(p^2) into wsq[i] and sum(u^2) into usq[i], where u = m_hat / (sqrt(v_hat) + eps)
 *    + wd * p (arrays of strata_model_ntensors doubles, zeroed by the caller before the first range);
 * 2. (sharded: allreduce-sum wsq and usq over the ranks holding pieces of the arena)
 * 3. strata_lamb_apply: p -= lr * trust_i * u, trust_i = sqrt(wsq[i]) / sqrt(usq[i]) (1 when either
 *    is 0). Single process: call both on [0, P). */
STRATA_API strata_status_t strata_lamb_partial(const strata_gpt_t *m, const strata_optim_config_t *oc,
                                               const float *params, const float *grads,
                                               float *mstate, float *vstate, size_t offset,
                                               size_t count, int64_t step, float grad_scale,
                                               double *wsq, double *usq);
STRATA_API strata_status_t strata_lamb_apply(const strata_gpt_t *m, const strata_optim_config_t *oc,
                                             float *params, const float *mstate,
                                             const float *vstate, size_t offset, size_t count,
                                             float lr, int64_t step, const double *wsq,
                                             const double *usq);

/* Sum of squares in double precision, summed in a fixed order (sharded runs add partial sums). */
STRATA_API double strata_sumsq(const float *x, size_t n);

/* Gradient clipping: the factor to multiply gradients by so that the global norm sqrt(sumsq) is at
 * most max_norm (1 when max_norm <= 0 or already below). */
STRATA_API float strata_clip_scale(double global_sumsq, float max_norm);

/* Learning rate: linear warm-up from lr/warmup to lr over `warmup` steps, then cosine decay to
 * min_lr at step `total`, min_lr after. Steps count from 1. */
typedef struct strata_lr_schedule {
    float lr, min_lr;
    int64_t warmup, total;
} strata_lr_schedule_t;
STRATA_API float strata_lr_at(const strata_lr_schedule_t *s, int64_t step);

#ifdef __cplusplus
}
#endif
#endif
