/* The hierarchical piece layout of the ZeRO engine: which piece of every segment a rank owns and which
 * sub-communicators the hierarchical all-gather and reduce-scatter run on. Pure arithmetic over the
 * tier colours of all ranks; the engine (zero.c) does the communication. */
#include <string.h>

#include "base/base.h"
#include "parallel/zero_internal.h"

size_t st_zero_piece_off(size_t count, int n, int p)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n;
    return (size_t)p * base + ST_MIN((size_t)p, rem);
}

size_t st_zero_piece_count(size_t count, int n, int p)
{
    return count / (size_t)n + ((size_t)p < count % (size_t)n ? 1 : 0);
}

/* Group id of rank r at tier t: the lowest rank with the same colour; tier == ntiers is the job. */
static int group_of(int nranks, int ntiers, const int *colors, int t, int r)
{
    if (t >= ntiers)
        return 0;
    for (int y = 0; y < nranks; y++)
        if (colors[y * ntiers + t] == colors[r * ntiers + t])
            return y;
    return r;
}

/* Digit of rank r at level i: level 0 counts lower ranks in r's tier-0 group; level i > 0 counts the
 * tier-(i-1) groups inside r's tier-i group whose lowest rank is below that of r's own group. */
static int digit_of(int nranks, int ntiers, const int *colors, int i, int r, int *size)
{
    int g = group_of(nranks, ntiers, colors, i, r);
    int mine = i == 0 ? r : group_of(nranks, ntiers, colors, i - 1, r), d = 0, n = 0;
    for (int y = 0; y < nranks; y++) {
        if (group_of(nranks, ntiers, colors, i, y) != g)
            continue;
        if (i > 0 && group_of(nranks, ntiers, colors, i - 1, y) != y)
            continue; // count each tier-(i-1) group once, by its lowest rank
        n++;
        if (y < mine)
            d++;
    }
    *size = n;
    return d;
}

strata_status_t st_zero_layout(int nranks, int ntiers, const int *colors, int rank,
                               st_zero_layout_t *out)
{
    memset(out, 0, sizeof *out);
    if (nranks < 1 || rank < 0 || rank >= nranks || ntiers < 0 || ntiers > STRATA_ZERO_MAX_TIERS ||
        (ntiers > 0 && !colors))
        return st_error(STRATA_ERR_INVALID_ARG, "zero layout: bad arguments");
    // Nesting: ranks sharing a tier-t group share their tier-(t+1) group.
    for (int t = 0; t + 1 < ntiers; t++)
        for (int x = 0; x < nranks; x++) {
            int g = group_of(nranks, ntiers, colors, t, x);
            if (group_of(nranks, ntiers, colors, t + 1, x) != group_of(nranks, ntiers, colors, t + 1, g))
                return st_error(STRATA_ERR_INVALID_ARG,
                                "zero: tier %d group of rank %d is split across tier %d groups "
                                "(ranks %d and %d); tiers must nest",
                                t, x, t + 1, g, x);
        }
    out->nlevels = ntiers + 1;
    for (int i = 0; i <= ntiers; i++) {
        int size0 = -1;
        for (int x = 0; x < nranks; x++) {
            int s;
            int d = digit_of(nranks, ntiers, colors, i, x, &s);
            if (size0 < 0)
                size0 = s;
            if (s != size0)
                return st_error(STRATA_ERR_INVALID_ARG,
                                "zero: level %d groups differ in size (%d and %d members); "
                                "hierarchical partitions need equal groups at every tier",
                                i, size0, s);
            if (x == rank)
                out->digit[i] = d;
        }
        out->size[i] = size0;
    }
    // Colours: level i < ntiers = (tier-i group, digits below i); level ntiers = digits below it.
    int idx = 0, below = 0, mult = 1;
    for (int i = 0; i <= ntiers; i++) {
        int g = group_of(nranks, ntiers, colors, i, rank);
        out->color[i] = g * nranks + below;
        below += out->digit[i] * mult;
        mult *= out->size[i];
        idx = idx * out->size[i] + out->digit[i];
    }
    out->idx = idx;
    return STRATA_OK;
}
