/* Fabrics: where the ranks of one job sit in the tree of levels (topo.h). Built from path strings
 * ("zone1/rack3/host7") or from per-level unit keys, subset for split communicators, ordered so
 * every unit is contiguous. Costs are not here: netmodel prices what runs on a fabric. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "strata/topo.h"

void strata_fabric_free(strata_fabric_t *f)
{
    if (!f)
        return;
    free(f->unit);
    free(f->nunits);
    f->unit = f->nunits = NULL;
    f->nranks = 0;
}

static strata_status_t fabric_alloc(const strata_topo_t *topo, int nranks, strata_fabric_t *out)
{
    memset(out, 0, sizeof *out);
    if (nranks < 1 || !topo || topo->nlevels < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "fabric: expected >= 1 rank and >= 1 level");
    out->topo = *topo;
    out->nranks = nranks;
    out->unit = calloc((size_t)nranks * (size_t)topo->nlevels, sizeof *out->unit);
    out->nunits = calloc((size_t)topo->nlevels, sizeof *out->nunits);
    if (!out->unit || !out->nunits) {
        strata_fabric_free(out);
        return st_error(STRATA_ERR_NO_MEMORY, "fabric: out of memory");
    }
    return STRATA_OK;
}

/* Dense unit ids at every level from keys, in order of first appearance by rank. Units nest:
 * the key of level l is combined with the unit of level l+1, so equal host names in different
 * racks stay different hosts. */
static strata_status_t densify(strata_fabric_t *f, const uint64_t *keys, int stride)
{
    const int n = f->nranks, L = f->topo.nlevels;
    uint64_t *seen = malloc((size_t)n * sizeof *seen);
    if (!seen)
        return st_error(STRATA_ERR_NO_MEMORY, "fabric: out of memory");
    for (int l = L - 1; l >= 0; l--) {
        int nu = 0;
        for (int r = 0; r < n; r++) {
            uint64_t k =
                l == L - 1 || l >= stride ? 0 : keys[(size_t)r * (size_t)stride + (size_t)l];
            if (l < L - 1) // nest inside the outer unit
                k = k * 0x9e3779b97f4a7c15ull + (uint64_t)f->unit[(l + 1) * n + r] + 1;
            int u = 0;
            while (u < nu && seen[u] != k)
                u++;
            if (u == nu)
                seen[nu++] = k;
            f->unit[l * n + r] = u;
        }
        f->nunits[l] = nu;
    }
    free(seen);
    return STRATA_OK;
}

strata_status_t strata_fabric_from_keys(const strata_topo_t *topo, int nranks, const uint64_t *keys,
                                        int stride, strata_fabric_t *out)
{
    ST_TRY(fabric_alloc(topo, nranks, out));
    strata_status_t rc = densify(out, keys, stride);
    if (rc < 0)
        strata_fabric_free(out);
    return rc;
}

static uint64_t fnv1a(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

strata_status_t strata_topo_path_keys(const char *path, uint64_t keys[STRATA_TOPO_MAX_LEVELS],
                                      int *depth)
{
    const char *comp[STRATA_TOPO_MAX_LEVELS];
    size_t len[STRATA_TOPO_MAX_LEVELS];
    const char *p =
        path && *path == '/' ? path + 1 : path; // "/dc0/rack1/n7" as strata place writes
    int d = 0;
    bool bad = !p || !*p;
    while (!bad && *p) {
        const char *slash = strchr(p, '/');
        size_t l = slash ? (size_t)(slash - p) : strlen(p);
        bad = l == 0 || d == STRATA_TOPO_MAX_LEVELS || (slash && !slash[1]);
        if (bad)
            break;
        comp[d] = p;
        len[d++] = l;
        p += l + (slash != NULL);
    }
    if (bad)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "path '%s': expected unit names separated by '/', outermost first "
                        "(zone1/rack3/host7), at most %d deep",
                        path ? path : "(null)", STRATA_TOPO_MAX_LEVELS);
    *depth = d;
    memset(keys, 0, STRATA_TOPO_MAX_LEVELS * sizeof *keys);
    for (int l = 0; l < d; l++) // a unit's key is the hash of its whole path prefix
        keys[l] = fnv1a(path, (size_t)(comp[d - 1 - l] + len[d - 1 - l] - path));
    return STRATA_OK;
}

strata_status_t strata_fabric_from_paths(const strata_topo_t *topo, int nranks,
                                         const char *const *paths, strata_fabric_t *out)
{
    memset(out, 0, sizeof *out);
    uint64_t *keys = calloc((size_t)nranks * STRATA_TOPO_MAX_LEVELS, sizeof *keys);
    if (!keys)
        return st_error(STRATA_ERR_NO_MEMORY, "fabric: out of memory");
    int depth = 1;
    for (int r = 0; r < nranks; r++) {
        int d;
        if (strata_topo_path_keys(paths[r], keys + (size_t)r * STRATA_TOPO_MAX_LEVELS, &d) < 0) {
            free(keys);
            return st_error(STRATA_ERR_INVALID_ARG, "fabric: rank %d's %s", r, strata_last_error());
        }
        depth = d > depth ? d : depth;
    }
    if (!topo || depth > topo->nlevels) {
        free(keys);
        return st_error(STRATA_ERR_INVALID_ARG,
                        "fabric: paths are %d deep but the tree has %d levels", depth,
                        topo->nlevels);
    }
    strata_status_t rc = strata_fabric_from_keys(topo, nranks, keys, STRATA_TOPO_MAX_LEVELS, out);
    free(keys);
    return rc;
}

strata_status_t strata_fabric_subset(const strata_fabric_t *f, int n, const int *members,
                                     strata_fabric_t *out)
{
    const int L = f->topo.nlevels;
    uint64_t *keys = malloc((size_t)n * (size_t)L * sizeof *keys);
    if (!keys)
        return st_error(STRATA_ERR_NO_MEMORY, "fabric: out of memory");
    for (int i = 0; i < n; i++)
        for (int l = 0; l < L; l++)
            keys[(size_t)i * (size_t)L + (size_t)l] =
                (uint64_t)strata_fabric_unit(f, l, members[i]);
    strata_status_t rc = strata_fabric_from_keys(&f->topo, n, keys, L, out);
    free(keys);
    return rc;
}

int strata_fabric_common_level(const strata_fabric_t *f, int a, int b)
{
    if (a == b)
        return -1;
    for (int l = 0; l < f->topo.nlevels; l++)
        if (strata_fabric_unit(f, l, a) == strata_fabric_unit(f, l, b))
            return l;
    return f->topo.nlevels - 1;
}

int strata_fabric_unit_size(const strata_fabric_t *f, int level, int rank)
{
    int u = strata_fabric_unit(f, level, rank), k = 0;
    for (int r = 0; r < f->nranks; r++)
        k += strata_fabric_unit(f, level, r) == u;
    return k;
}

static int tree_cmp(const void *pa, const void *pb, void *ctx)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    const strata_fabric_t *f = ctx;
    for (int l = f->topo.nlevels - 1; l >= 0; l--) {
        int ua = strata_fabric_unit(f, l, a), ub = strata_fabric_unit(f, l, b);
        if (ua != ub)
            return ua < ub ? -1 : 1;
    }
    return (a > b) - (a < b);
}

void strata_fabric_tree_order(const strata_fabric_t *f, int *order)
{
    // Units are numbered by first appearance, so sorting by (outermost unit .. host, rank) keeps
    // units contiguous and in order of their lowest rank.
    for (int r = 0; r < f->nranks; r++)
        order[r] = r;
    qsort_r(order, (size_t)f->nranks, sizeof *order, tree_cmp, (void *)f);
}

void strata_fabric_describe(const strata_fabric_t *f, FILE *out)
{
    for (int l = 0; l < f->topo.nlevels; l++) {
        int lo = f->nranks, hi = 0;
        for (int u = 0; u < f->nunits[l]; u++) {
            int k = 0;
            for (int r = 0; r < f->nranks; r++)
                k += strata_fabric_unit(f, l, r) == u;
            lo = k < lo ? k : lo;
            hi = k > hi ? k : hi;
        }
        fprintf(out, "%s%s %d unit%s of %d..%d ranks", l ? ", " : "", f->topo.level[l].name,
                f->nunits[l], f->nunits[l] == 1 ? "" : "s", lo, hi);
    }
    fputc('\n', out);
}
