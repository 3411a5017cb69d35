/* The model's kernels: one forward/backward pair per layer with the same argument order (llm.c),
 * shapes in a comment at each. All arrays are row-major float32. Backward kernels ACCUMULATE (+=)
 * into parameter gradients and, where stated, into input gradients; the driver (gpt.c) zeroes the
 * gradient arena once per backward pass. Matrix products go through BLAS (blas.c); everything else is
 * plain loops the compiler vectorises. Internal to the model part; the tests include it to check
 * each layer's backward by finite differences. */
#ifndef ST_MODEL_LAYERS_H
#define ST_MODEL_LAYERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major, with leading dimensions (a thin cblas call). */
void st_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);
/* C[M,N] = op(A) op(B) + bias[N] in every row (bias may be NULL). On oneDNN the bias is the
 * product's own argument, so C is written once: C filled with the bias rows and a beta = 1 product
 * would read all of C back (a tenth of a 1024 x 3072 x 768 bf16 product's time on AVX512-BF16). */
void st_sgemm_bias(int trans_a, int trans_b, int M, int N, int K, const float *A, int lda,
                   const float *B, int ldb, const float *bias, float *C, int ldc);

/* A matrix several products read at bf16 precision, rounded once for all of them (gemm.h's
 * st_gemm_bf16_hold, on this thread) until st_operand_release(x); x must not change meanwhile.
 * round false: the caller fills the returned copy (rows x cols, packed) as it writes x. NULL at
 * fp32 (nothing to do) or when nothing could be held. */
uint16_t *st_operand_hold(const float *x, int rows, int cols, int ld, bool round);
void st_operand_release(const float *x);
/* At bf16 precision, x's n floats held with the caller's copy (st_gemm_bf16_hold_copy: any product
 * reading inside x reads the copy, rounded from x first when round) until st_operand_release(x);
 * false at fp32 or when nothing could be held (then nothing is to be released). */
bool st_operand_hold_copy(const float *x, size_t n, uint16_t *copy, bool round);
/* At bf16 precision, a layer's weight w (rows x cols) held with the caller's copy packed for the
 * products that read it whole (gemm.h's st_gemm_bf16_hold_weight), until st_operand_release(w);
 * the copy's elements (0 at fp32 or where the products cannot read one); false where nothing was
 * held. */
size_t st_operand_weight_size(int rows, int cols);
bool st_operand_hold_weight(const float *w, int rows, int cols, uint16_t *packed, bool pack);

/* st_parallel_range (parallel_range.h) for pieces that call st_sgemm: the pieces' products each
 * run on their piece's thread instead of asking the BLAS for every thread at once. */
void st_parallel_products(size_t n, size_t grain, void (*fn)(void *ctx, size_t b, size_t e),
                          void *ctx);

/* out[B,T,C] = wte[tok[b,t] - v0] + wpe[t], where wte holds the vocabulary rows [v0, v1) (a token
 * outside them contributes zeros) and wpe may be NULL (no position term). */
void st_encoder_forward(float *out, const int32_t *tok, const float *wte, int v0, int v1,
                        const float *wpe, int B, int T, int C);
/* dwte[v1-v0,C] += scatter of the rows whose token is in [v0, v1), dwpe[T,C] += sum over b (dwpe
 * may be NULL). */
void st_encoder_backward(float *dwte, int v0, int v1, float *dwpe, const float *dout,
                         const int32_t *tok, int B, int T, int C);

/* out[N,C] = (inp - mean) * rstd * w + b; saves mean[N], rstd[N]. */
void st_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C, float eps);
/* dinp[N,C] += ..., dw[C] += ..., db[C] += ... */
void st_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C);

/* RMSNorm: out[N,C] = inp * rstd * w, rstd = 1 / sqrt(mean(inp^2) + eps); saves rstd[N]. */
void st_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps);

/* The residual add fused into the norm's pass: x[N,C] += res (in place), then the norm of the sum
 * as above, each row normalised while it is still in cache (one pass over x where the add and the
 * norm took two). */
void st_add_layernorm_forward(float *out, float *mean, float *rstd, float *x, const float *res,
                              const float *w, const float *b, int N, int C, float eps);
void st_add_rmsnorm_forward(float *out, float *rstd, float *x, const float *res, const float *w,
                            int N, int C, float eps);
/* dinp[N,C] += ..., dw[C] += ... */
void st_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int N, int C);

/* out[N,OC] = inp[N,C] w[OC,C]^T + bias[OC] (bias may be NULL). */
void st_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                       int C, int OC);
/* dinp[N,C] = dinp_beta * dinp + dout w; dw[OC,C] += dout^T inp; dbias[OC] += colsum(dout)
 * (dbias may be NULL). */
void st_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, float dinp_beta);
/* Its two halves: dinp[N,C] = dout w (written); dw[OC,C] = dw_beta dw + dout^T inp (dw_beta 0:
 * dw holds nothing yet, and the product does not read it), dbias[OC] += colsum(dout). */
void st_matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int C, int OC);
void st_matmul_backward_weight(float *dw, float *dbias, const float *dout, const float *inp, int N,
                               int C, int OC, float dw_beta);
/* dbias[OC] += column sums of dout[N,OC]. */
void st_bias_backward(float *dbias, const float *dout, int N, int OC);

/* out[n] = gelu_tanh(inp[n]): unfused, as the fusions' benchmark compares. */
void st_gelu_forward(float *out, const float *inp, size_t n);
/* dinp[n] = gelu'(inp[n]) * dout[n] (written, not accumulated): unfused, from the input. */
void st_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* Fused bias + GeLU (tanh approximation): out = gelu(pre + bias) (bias NULL: gelu(pre)); with
 * out16 not NULL the values go rounded to bf16 into out16 instead of out (the copy the next product
 * reads, which then has no pass of its own to round them). pre[N,OC] holds the product without its
 * bias and becomes GeLU's derivative at the pre-activation, all the backward needs. Rows over the
 * threads. */
void st_bias_gelu_forward(float *pre, float *out, uint16_t *out16, const float *bias, int N,
                          int OC);
/* Its backward: dinp[N,OC] = dgelu * dout (dgelu: the derivative st_bias_gelu_forward left in pre;
 * dinp written, and may alias dout), and dbias[OC] += column sums of dinp (dbias NULL: none). */
void st_gelu_bias_backward(float *dinp, float *dbias, const float *dgelu, const float *dout, int N,
                           int OC);

/* SwiGLU: out[N,F] = silu(g) * u, where gu[N,2F] holds the gate g (columns [0, F)) and the up
 * projection u (columns [F, 2F)) of each row; silu(g) = g * sigmoid(g); out16 as for
 * st_bias_gelu_forward. Rows over the threads. */
void st_swiglu_forward(float *out, uint16_t *out16, const float *gu, int N, int F);
/* dgu[N,2F] = the gradients of g and u (written, not accumulated). */
void st_swiglu_backward(float *dgu, const float *gu, const float *dout, int N, int F);

/* Rotary position embedding, in place, on x[B,T, row stride ld]: NH heads of hs columns each from
 * column 0, every head rotated by position t: for i < hs/2 the pair (x[i], x[i + hs/2]) turns by
 * the angle whose cos and sin are cs[t, i], sn[t, i] (tables [T', hs/2], T' >= T). */
void st_rope_forward(float *x, int ld, const float *cs, const float *sn, int B, int T, int NH,
                     int hs);
/* The backward of the above on a gradient dx (same layout): the inverse rotation, in place. */
void st_rope_backward(float *dx, int ld, const float *cs, const float *sn, int B, int T, int NH,
                      int hs);

/* out[n] += inp[n]. */
void st_add_inplace(float *out, const float *inp, size_t n);

/* The columns of att a query row keeps: T without a window, about window + 64 with one. */
int st_attention_band(int T, int window);
/* Causal multi-head attention on packed qkv[B,T,C+2KV] (q | k | v; query head h at columns h*hs
 * of q, KV = NKV*hs): query head h reads k/v head h / (NH / NKV) (grouped-query attention; NKV = NH
 * is plain multi-head attention). att[B,NH,T,band] (band = st_attention_band) = softmax(q k^T /
 * sqrt(hs)) over the keys each query attends, (t - window, t] (window 0: [0, t]), each row holding
 * its block's computed keys (see attention.c); out[B,T,C] = att v. backward reads only what
 * forward wrote. qkv16 (B*T*(C+2KV) halves) and, in the backward, dout16 (B*T*C): at bf16, room
 * for qkv and dout rounded once for every head's products (NULL: each product rounds its
 * operands). The forward returns whether qkv16 then holds qkv rounded: a backward on the same qkv
 * may read it as it is (qkv16_rounded) instead of rounding qkv again. */
bool st_attention_forward(float *out, float *att, const float *qkv, uint16_t *qkv16, int B, int T,
                          int C, int NH, int NKV, int window);
/* dqkv[B,T,C+2KV] is WRITTEN (a k/v head's gradient summed over its group's query heads in head
 * order); scratch holds nscratch blocks of T*band floats, one per thread at most that the (batch
 * row, k/v head) pairs are spread over. */
void st_attention_backward(float *dqkv, float *scratch, int nscratch, const float *dout,
                           const float *qkv, const float *att, uint16_t *qkv16, bool qkv16_rounded,
                           uint16_t *dout16, int B, int T, int C, int NH, int NKV, int window);

/* Cross-entropy of logits[N,V] against targets[N]: saves lse[N] (log-sum-exp per row) and returns
 * the mean loss (summed in double). */
float st_xent_forward(float *lse, const float *logits, const int32_t *targets, int N, int V);
/* dlogits[N,V] = (softmax(logits) - onehot(target - v0)) * scale, for the vocabulary slice
 * [v0, v0 + V) of the logits (v0 0: all of it; a target outside the slice has no one-hot here);
 * may alias logits. lse is the log-sum-exp over the whole vocabulary. dlogits_h not NULL: also
 * dlogits rounded to bf16 there (N x V), in the same pass (st_operand_hold's copy, round false). */
void st_xent_backward(float *dlogits, uint16_t *dlogits_h, const float *logits, const float *lse,
                      const int32_t *targets, int v0, int N, int V, float scale);

/* The pieces of a cross-entropy whose vocabulary is cut in slices (tensor parallelism), for the
 * slice [v0, v0 + V) of logits[N,V]: mx[n] = the row's max; then, given the max over every slice,
 * sumexp[n] = sum of exp(logit - mx[n]) over the slice and tlogit[n] = the target's logit when the
 * target is in the slice, else 0. Summed over the slices: lse = mx + log(sumexp). */
void st_xent_rowmax(float *mx, const float *logits, int N, int V);
void st_xent_slice(float *sumexp, float *tlogit, const float *logits, const float *mx,
                   const int32_t *targets, int v0, int N, int V);

#endif
