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

/* The children of unit u of level l that hold ranks: ranks themselves at level 0, else units of
 * level l - 1. */
static int children_of(const strata_fabric_t *f, int l, int u)
{
    int k = 0;
    if (l == 0) {
        for (int r = 0; r < f->nranks; r++)
            k += strata_fabric_unit(f, 0, r) == u;
        return k;
    }
    int last = -1; // child ids are dense in order of first appearance: count the distinct ones
    for (int r = 0; r < f->nranks; r++)
        if (strata_fabric_unit(f, l, r) == u && strata_fabric_unit(f, l - 1, r) > last) {
            last = strata_fabric_unit(f, l - 1, r);
            k++;
        }
    return k;
}

/* A torus unit has one cell per child: more children than cells cannot be placed. */
static strata_status_t check_tori(const strata_fabric_t *f)
{
    for (int l = 0; l < f->topo.nlevels; l++) {
        const strata_topo_level_t *lv = &f->topo.level[l];
        int nd = strata_topo_torus_ndims(lv), cells = 1;
        for (int d = 0; d < nd; d++)
            cells *= lv->torus[d];
        for (int u = 0; nd && u < f->nunits[l]; u++) {
            int k = children_of(f, l, u);
            if (k > cells) {
                char dims[64];
                strata_topo_torus_format(lv->torus, dims, sizeof dims);
                return st_error(STRATA_ERR_INVALID_ARG,
                                "fabric: level %d (%s) is a %s torus of %d cells (one %s each), "
                                "but the ranks sit in %d %ss of it",
                                l, lv->name, dims, cells,
                                l ? f->topo.level[l - 1].name : "accelerator", k,
                                l ? f->topo.level[l - 1].name : "accelerator");
            }
        }
    }
    return STRATA_OK;
}

strata_status_t strata_fabric_from_keys(const strata_topo_t *topo, int nranks, const uint64_t *keys,
                                        int stride, strata_fabric_t *out)
{
    ST_TRY(fabric_alloc(topo, nranks, out));
    strata_status_t rc = densify(out, keys, stride);
    if (rc == STRATA_OK)
        rc = check_tori(out);
    if (rc < 0)
        strata_fabric_free(out);
    return rc;
}

bool strata_fabric_torus(const strata_fabric_t *f, strata_torus_grid_t *out, int *cell)
{
    memset(out, 0, sizeof *out);
    const int n = f->nranks;
    int T = -1;
    for (int l = 0; l < f->topo.nlevels && T < 0; l++)
        if (strata_topo_torus_ndims(&f->topo.level[l]))
            T = l;
    if (T < 0 || f->nunits[T] != 1)
        return false;
    const strata_topo_level_t *lv = &f->topo.level[T];
    const int nd = strata_topo_torus_ndims(lv);
    int cells = 1;
    for (int d = 0; d < nd; d++)
        cells *= lv->torus[d];
    const int nchild = T == 0 ? n : f->nunits[T - 1];
    if (nchild != cells || n % cells)
        return false;
    const int m = n / cells;
    int *seen = calloc((size_t)cells, sizeof *seen);
    if (!seen)
        return false; // the caller then runs something else
    bool even = true;
    for (int r = 0; r < n && even; r++) {
        int c = T == 0 ? r : strata_fabric_unit(f, T - 1, r), k = seen[c]++;
        even = k < m;
        if (cell)
            cell[r] = k + m * c;
    }
    free(seen);
    if (!even)
        return false;
    out->level = T;
    out->inner = m > 1;
    if (out->inner)
        out->dims[out->ndims++] = m;
    for (int d = 0; d < nd; d++)
        out->dims[out->ndims++] = lv->torus[d];
    return true;
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
