/* Internals of the ZeRO engine shared with its unit tests: the hierarchical piece layout (pure rank
 * arithmetic, no communication) and the partition of one segment into pieces. */
#ifndef ST_ZERO_INTERNAL_H
#define ST_ZERO_INTERNAL_H

#include <stddef.h>

#include "strata/parallel.h"

#define ST_ZERO_MAX_LEVELS (STRATA_ZERO_MAX_TIERS + 1)

/* Where a rank sits in the hierarchy. Level i < ntiers groups the ranks of one tier-i group that
 * share their position inside every faster tier; level ntiers spans the job. A rank's digits
 * (digit[i] = its rank inside its level-i communicator, size[i] members) give its piece index
 *   idx = ((digit[0] * size[1] + digit[1]) * size[2] + ...) * size[k] + digit[k],
 * tier 0 most significant: so pieces of one tier-0 group's members are never adjacent but the pieces a
 * slow-tier-first all-gather collects at each level always are (see docs/parallel.md). */
typedef struct st_zero_layout {
    int nlevels;                      /* ntiers + 1 */
    int size[ST_ZERO_MAX_LEVELS];     /* members of the level-i communicator */
    int digit[ST_ZERO_MAX_LEVELS];    /* this rank's position in it (the split key) */
    int color[ST_ZERO_MAX_LEVELS];    /* split colour of the level-i communicator */
    int idx;                          /* this rank's piece index, 0 <= idx < nranks */
} st_zero_layout_t;

/* Computes rank `rank`'s layout from every rank's tier colours (colors[r * ntiers + t]). Errors:
 * INVALID_ARG when the tier groups do not nest (a tier-i group split across tier-(i+1) groups) or are
 * not all the same size at a tier. */
strata_status_t st_zero_layout(int nranks, int ntiers, const int *colors, int rank,
                               st_zero_layout_t *out);

/* Piece p of a segment of `count` floats split into n pieces: [piece_off, piece_off + piece_count). */
size_t st_zero_piece_off(size_t count, int n, int p);
size_t st_zero_piece_count(size_t count, int n, int p);

#endif
