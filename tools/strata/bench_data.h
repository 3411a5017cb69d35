/* What one size of `strata bench` means for a collective, and the data it checks (bench_data.c).
 *
 * Sizes mean what they mean in nccl-tests: the bytes of the collective's largest buffer, so the one
 * buffer of allreduce, reduce and bcast, and the full nranks-block buffer of reduce_scatter,
 * allgather, alltoall, gather and scatter (the per-rank count is bytes / size / nranks, rounded
 * down). The in-place pass puts input and output in one buffer where nccl-tests puts them:
 * reduce_scatter's and scatter's output at block `rank` of the input, allgather's and gather's
 * input at block `rank` of the output, the others at the same address.
 *
 * Inputs are small integers chosen so that every partial result is exact in the dtype (sums stay
 * below its largest exact integer, a product has one factor 2, an average has rank offsets summing
 * to zero); each rank compares its output exactly with a value computed locally in closed form.
 * Only an average in a floating type is allowed 2 ulps, since dividing by nranks may be done as a
 * multiplication by 1/nranks. */
#ifndef STRATA_TOOL_BENCH_DATA_H
#define STRATA_TOOL_BENCH_DATA_H

#include <stdbool.h>
#include <stddef.h>

#include "strata/comm.h"

/* One benchmarked size, resolved for a communicator. Counts are in elements. */
typedef struct bench_shape {
    size_t param;      /* the count passed to the API (per rank or per block, as the API wants) */
    size_t send_count; /* this rank's send buffer (on the root for scatter) */
    size_t recv_count; /* this rank's receive buffer (on the root for gather) */
    size_t total;      /* what nccl-tests reports: the largest buffer */
    size_t send_inplace, recv_inplace; /* in place: offsets of input and output in the buffer */
} bench_shape_t;

bench_shape_t bench_shape(strata_coll_t coll, size_t bytes, size_t esize, int nranks, int rank);

/* The bus-bandwidth factor of nccl-tests (its PERFORMANCE.md and, for gather, scatter and alltoall,
 * its source): allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall, gather, scatter (n-1)/n;
 * bcast and reduce 1. */
double bench_busbw_factor(strata_coll_t coll, int nranks);

bool bench_has_op(strata_coll_t coll);   /* takes a reduction op */
bool bench_has_root(strata_coll_t coll); /* takes a root */

/* What every rank puts in and expects out for one collective, dtype and op. */
typedef struct bench_fill {
    strata_coll_t coll;
    strata_dtype_t dtype;
    strata_op_t op;
    int nranks, root;
    unsigned m;    /* sum/min/max: values cycle through 0..m-1 */
    unsigned kmod; /* avg: the expected value cycles through 1..kmod */
    int zero_pct;  /* sum: this percent of the 8 KiB blocks are zero everywhere (spread evenly) */
} bench_fill_t;

bench_fill_t bench_fill_make(strata_coll_t coll, strata_dtype_t dtype, strata_op_t op, int nranks,
                             int root);

/* Poisons this rank's output (recv_count elements at `recv`), then writes its input at `send`
 * (the order matters in place, where the two overlap). */
void bench_fill_inputs(const bench_fill_t *f, const bench_shape_t *sh, int rank, void *send,
                       void *recv);

/* The elements of this rank's output (at `recv`) that differ from what they must be; 0 where the
 * rank has no output (a non-root of reduce or gather). */
size_t bench_count_wrong(const bench_fill_t *f, const bench_shape_t *sh, int rank,
                         const void *recv);

#endif
