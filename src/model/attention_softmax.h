/* Attention's softmax rows on AVX-512 (attention_softmax.c): one causal row's softmax and its
 * backward, over the row's keys only. Internal to the model part.
 *
 * Why: a row holds its keys up to the diagonal, 64 of them on average at T = 128, so the compiled
 * loops of attention.c spent most of a row in their scalar remainders (up to 15 exps a row, one
 * at a time) and in the reductions' set-up. These run every element in vectors of 16, the last one
 * masked. They compute what those loops compute: vecmath.h's st_exp step by step, and its
 * reductions' 8 lanes (element i into lane i % 8, each lane summed in order, the lanes combined as
 * st_lanes_sum does). The dot product of the backward fuses every multiply-add, where the compiled
 * loop fuses some, so the two can differ in the last bits; each row's result is the same at any
 * thread count. */
#ifndef ST_MODEL_ATTENTION_SOFTMAX_H
#define ST_MODEL_ATTENTION_SOFTMAX_H
#include <stdbool.h>

/* Whether this CPU runs them (x86-64-v4's AVX-512: F, BW, CD, DQ, VL; and FMA), with a compiler
 * that emits them. */
bool st_att_softmax_ready(void);

/* x[0, n) (n >= 1, finite) becomes softmax(x) in place: exp(x - max) / sum. */
void st_att_softmax_row(float *x, int n);

/* The softmax's backward on a row of n keys: d holds dP and becomes dS, d_j = p_j (d_j - sum_k p_k
 * d_k). */
void st_att_softmax_backward_row(const float *p, float *d, int n);
#endif
