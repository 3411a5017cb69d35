/* The fabric tree: levels above the accelerator, each with fan-out, per-accelerator bandwidth,
 * latency, oversubscription and link class; domain sizes and rank paths by packing the tree
 * innermost first; the built-in cluster presets. Reading and writing cluster files lives in
 * topo_json.c; what a collective costs on the tree lives in the network model
 * (src/netmodel/hier.c). */
#include "strata/topo.h"

#include "base/base.h"

#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

void strata_topo_init(strata_topo_t *topo, const char *name)
{
    memset(topo, 0, sizeof *topo);
    snprintf(topo->name, sizeof topo->name, "%s", name ? name : "");
}

/* A torus level: 1 to 3 dimensions of at least 2, no gaps, product = fanout, and the only one. */
static strata_status_t check_torus(const strata_topo_t *topo, int i, const strata_topo_level_t *l)
{
    const char *n = l->name[0] ? l->name : "(unnamed)";
    int nd = strata_topo_torus_ndims(l);
    if (nd == 0)
        return STRATA_OK;
    long long cells = 1;
    for (int d = 0; d < STRATA_TORUS_MAX_DIMS; d++) {
        if ((d < nd && (l->torus[d] < 2 || l->torus[d] > 65536)) || (d >= nd && l->torus[d]))
            return st_error(STRATA_ERR_INVALID_ARG,
                            "topo %s: level %d (%s): expected torus dimensions of 2 to 65536, "
                            "got %d in dimension %d",
                            topo->name, i, n, l->torus[d], d);
        cells *= d < nd ? l->torus[d] : 1;
    }
    char dims[64];
    strata_topo_torus_format(l->torus, dims, sizeof dims);
    if (cells != l->fanout)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "topo %s: level %d (%s): a %s torus has %lld children, but fanout is %d",
                        topo->name, i, n, dims, cells, l->fanout);
    for (int k = 0; k < i; k++)
        if (strata_topo_torus_ndims(&topo->level[k]))
            return st_error(STRATA_ERR_INVALID_ARG,
                            "topo %s: level %d (%s): expected at most one torus level, level %d "
                            "(%s) is one already",
                            topo->name, i, n, k, topo->level[k].name);
    return STRATA_OK;
}

int strata_topo_torus_ndims(const strata_topo_level_t *lvl)
{
    int nd = 0;
    while (nd < STRATA_TORUS_MAX_DIMS && lvl->torus[nd] != 0)
        nd++;
    return nd;
}

strata_status_t strata_topo_torus_parse(const char *text, int dims[STRATA_TORUS_MAX_DIMS])
{
    memset(dims, 0, STRATA_TORUS_MAX_DIMS * sizeof *dims);
    const char *p = text ? text : "";
    int nd = 0;
    bool ok = *p != '\0';
    while (ok && *p) {
        char *end;
        long v = (*p >= '0' && *p <= '9') ? strtol(p, &end, 10) : 0;
        ok = v >= 2 && v <= 65536 && nd < STRATA_TORUS_MAX_DIMS;
        if (!ok)
            break;
        dims[nd++] = (int)v;
        p = end;
        if (*p == 'x' && p[1])
            p++;
        else
            ok = *p == '\0';
    }
    if (!ok) {
        memset(dims, 0, STRATA_TORUS_MAX_DIMS * sizeof *dims);
        return st_error(STRATA_ERR_INVALID_ARG,
                        "expected torus dimensions like \"4x4\" or \"2x2x2\" (1 to %d sizes, each "
                        "2 to 65536), got \"%s\"",
                        STRATA_TORUS_MAX_DIMS, text ? text : "");
    }
    return STRATA_OK;
}

void strata_topo_torus_format(const int dims[STRATA_TORUS_MAX_DIMS], char *buf, size_t cap)
{
    size_t at = 0;
    if (cap)
        buf[0] = '\0';
    for (int d = 0; d < STRATA_TORUS_MAX_DIMS && dims[d] && at < cap; d++) {
        int w = snprintf(buf + at, cap - at, "%s%d", d ? "x" : "", dims[d]);
        at += w > 0 ? (size_t)w : 0;
    }
}

static strata_status_t check_level(const strata_topo_t *topo, int i, const strata_topo_level_t *l)
{
    const char *n = l->name[0] ? l->name : "(unnamed)";
    if (l->fanout < 1)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "topo %s: level %d (%s): expected fanout >= 1, got %d", topo->name, i, n,
                        l->fanout);
    if (!(l->bw_Bps > 0))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "topo %s: level %d (%s): expected bandwidth > 0, "
                        "got %g",
                        topo->name, i, n, l->bw_Bps);
    if (!(l->latency_s >= 0))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "topo %s: level %d (%s): expected latency >= 0, "
                        "got %g",
                        topo->name, i, n, l->latency_s);
    if (!(l->oversub >= 1))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "topo %s: level %d (%s): expected oversubscription "
                        ">= 1, got %g",
                        topo->name, i, n, l->oversub);
    if (!(l->efficiency >= 0 && l->efficiency <= 1))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "topo %s: level %d (%s): expected efficiency in "
                        "[0, 1] (0 = calibrated default), got %g",
                        topo->name, i, n, l->efficiency);
    if ((unsigned)l->link_class >= STRATA_LINK_CLASS_COUNT)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "topo %s: level %d (%s): expected link class "
                        "scale-up or scale-out",
                        topo->name, i, n);
    return check_torus(topo, i, l);
}

strata_status_t strata_topo_add_level(strata_topo_t *topo, const strata_topo_level_t *lvl)
{
    if (topo->nlevels >= STRATA_TOPO_MAX_LEVELS)
        return st_error(STRATA_ERR_INVALID_ARG, "topo %s: expected at most %d levels", topo->name,
                        STRATA_TOPO_MAX_LEVELS);
    ST_TRY(check_level(topo, topo->nlevels, lvl));
    topo->level[topo->nlevels++] = *lvl;
    return STRATA_OK;
}

strata_status_t strata_topo_validate(const strata_topo_t *topo)
{
    if (topo->nlevels < 1 || topo->nlevels > STRATA_TOPO_MAX_LEVELS)
        return st_error(STRATA_ERR_INVALID_ARG, "topo %s: expected 1 to %d levels, got %d",
                        topo->name, STRATA_TOPO_MAX_LEVELS, topo->nlevels);
    for (int i = 0; i < topo->nlevels; i++)
        ST_TRY(check_level(topo, i, &topo->level[i]));
    return STRATA_OK;
}

long long strata_topo_domain_size(const strata_topo_t *topo, int l)
{
    long long d = 1;
    for (int i = 0; i < l && i < topo->nlevels; i++) {
        if (d > LLONG_MAX / 2 / (topo->level[i].fanout > 0 ? topo->level[i].fanout : 1))
            return LLONG_MAX / 2;
        d *= topo->level[i].fanout > 0 ? topo->level[i].fanout : 1;
    }
    return d;
}

long long strata_topo_capacity(const strata_topo_t *topo)
{
    return strata_topo_domain_size(topo, topo->nlevels);
}

strata_status_t strata_topo_rank_path(const strata_topo_t *topo, long long rank,
                                      int coord[STRATA_TOPO_MAX_LEVELS])
{
    if (rank < 0 || rank >= strata_topo_capacity(topo))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "topo %s: rank %lld outside the tree (capacity %lld)", topo->name, rank,
                        strata_topo_capacity(topo));
    long long r = rank;
    for (int i = 0; i < topo->nlevels; i++) {
        coord[i] = (int)(r % topo->level[i].fanout);
        r /= topo->level[i].fanout;
    }
    for (int i = topo->nlevels; i < STRATA_TOPO_MAX_LEVELS; i++)
        coord[i] = 0;
    return STRATA_OK;
}

int strata_topo_common_level(const strata_topo_t *topo, long long a, long long b)
{
    for (int l = 0; l <= topo->nlevels; l++) {
        long long d = strata_topo_domain_size(topo, l);
        if (a / d == b / d)
            return l;
    }
    return topo->nlevels;
}

int strata_topo_find_level(const strata_topo_t *topo, const char *name)
{
    for (int i = 0; i < topo->nlevels; i++)
        if (!strcmp(topo->level[i].name, name))
            return i;
    return -1;
}

const char *strata_link_class_name(strata_link_class_t cls)
{
    return cls == STRATA_LINK_SCALE_UP    ? "scale-up"
           : cls == STRATA_LINK_SCALE_OUT ? "scale-out"
                                          : "?";
}

strata_status_t strata_link_class_parse(const char *text, strata_link_class_t *out)
{
    if (!strcmp(text, "scale-up") || !strcmp(text, "up") || !strcmp(text, "scaleup")) {
        *out = STRATA_LINK_SCALE_UP;
        return STRATA_OK;
    }
    if (!strcmp(text, "scale-out") || !strcmp(text, "out") || !strcmp(text, "scaleout")) {
        *out = STRATA_LINK_SCALE_OUT;
        return STRATA_OK;
    }
    return st_error(STRATA_ERR_INVALID_ARG, "expected link class scale-up or scale-out, got '%s'",
                    text);
}

/* ---- presets -----------------------------------------------------------------------------------
 */

typedef struct preset_level {
    const char *name;
    int fanout;
    double gbps; /* GB/s per accelerator per direction */
    double lat_us;
    double oversub;
    strata_link_class_t cls;
} preset_level_t;

typedef struct preset {
    const char *name, *accel, *summary;
    preset_level_t levels[STRATA_TOPO_MAX_LEVELS];
} preset_t;

#define UP  STRATA_LINK_SCALE_UP
#define OUT STRATA_LINK_SCALE_OUT

/* Numbers are vendor link rates per accelerator and direction; what collectives reach of them is
 * the calibrated class efficiency (docs/plan.md). */
static const preset_t presets[] = {
    {"dgx-a100-superpod",
     "a100-80gb",
     "NVIDIA DGX A100 SuperPOD (Selene-like, 4,480 GPUs): NVLink3 300 GB/s per GPU in a host, one "
     "HDR 200 Gb/s rail per GPU, non-blocking leaf/spine/core fat tree",
     {{"host", 8, 300, 3, 1, UP},
      {"su", 20, 25, 5, 1, OUT},
      {"pod", 7, 25, 6, 1, OUT},
      {"cluster", 4, 25, 7, 1, OUT}}},
    {"dgx-h100-superpod",
     "h100-sxm",
     "NVIDIA DGX H100 SuperPOD (1,024 GPUs): NVLink4 450 GB/s per GPU, one NDR 400 Gb/s rail per "
     "GPU, "
     "non-blocking fat tree",
     {{"host", 8, 450, 3, 1, UP}, {"su", 32, 50, 5, 1, OUT}, {"cluster", 4, 50, 7, 1, OUT}}},
    {"h100-roce-24k",
     "h100-sxm",
     "24,576-GPU H100 RoCE cluster of the kind Meta trained Llama 3 on: 2 hosts per rack (ToR), "
     "192 "
     "racks per zone with full bisection, 8 zones joined by an aggregation layer oversubscribed "
     "1:7",
     {{"host", 8, 450, 3, 1, UP},
      {"rack", 2, 50, 4, 1, OUT},
      {"zone", 192, 50, 6, 1, OUT},
      {"dc", 8, 50, 9, 7, OUT}}},
    {"frontier",
     "mi250x-gcd",
     "OLCF Frontier: 8 GCDs per node in three bandwidth tiers (GCD-GCD in one MI250X 200 GB/s, "
     "GPU-GPU Infinity Fabric 50 GB/s, 4 Slingshot 200 Gb/s NICs per node = 12.5 GB/s per GCD), "
     "dragonfly groups of 128 nodes, global links about 2:1",
     {{"package", 2, 200, 2, 1, UP},
      {"node", 4, 50, 3, 1, UP},
      {"group", 128, 12.5, 5, 1, OUT},
      {"system", 74, 12.5, 8, 2, OUT}}},
    {"cpu-local",
     "cpu",
     "strata's own CPU runs: ranks on the cores of one host over shared memory, hosts over TCP "
     "(the "
     "same links as the communicator's defaults)",
     {{"host", 8, 8, 1.5, 1, UP}, {"network", 64, 2.5, 25, 1, OUT}}},
};

#undef UP
#undef OUT

int strata_topo_preset_count(void)
{
    return (int)(sizeof presets / sizeof presets[0]);
}

const char *strata_topo_preset_name(int i)
{
    return i >= 0 && i < strata_topo_preset_count() ? presets[i].name : NULL;
}

const char *strata_topo_preset_summary(int i)
{
    return i >= 0 && i < strata_topo_preset_count() ? presets[i].summary : NULL;
}

strata_status_t strata_topo_preset(const char *name, strata_topo_t *out)
{
    for (int i = 0; i < strata_topo_preset_count(); i++) {
        const preset_t *p = &presets[i];
        if (strcmp(p->name, name))
            continue;
        strata_topo_init(out, p->name);
        snprintf(out->accel, sizeof out->accel, "%s", p->accel);
        for (int l = 0; l < STRATA_TOPO_MAX_LEVELS && p->levels[l].name; l++) {
            strata_topo_level_t lv = {.fanout = p->levels[l].fanout,
                                      .bw_Bps = p->levels[l].gbps * 1e9,
                                      .latency_s = p->levels[l].lat_us * 1e-6,
                                      .oversub = p->levels[l].oversub,
                                      .link_class = p->levels[l].cls};
            snprintf(lv.name, sizeof lv.name, "%s", p->levels[l].name);
            ST_TRY(strata_topo_add_level(out, &lv));
        }
        return STRATA_OK;
    }
    char list[512] = "";
    size_t used = 0;
    for (int i = 0; i < strata_topo_preset_count(); i++) {
        int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", presets[i].name);
        if (w < 0 || (size_t)w >= sizeof list - used)
            break;
        used += (size_t)w;
    }
    return st_error(STRATA_ERR_INVALID_ARG,
                    "unknown cluster preset '%s' (expected one of: %s, or a "
                    "cluster file ending in .json)",
                    name, list);
}

void strata_topo_describe(const strata_topo_t *topo, FILE *f)
{
    fprintf(f, "cluster %s: %lld accelerators%s%s\n", topo->name, strata_topo_capacity(topo),
            topo->accel[0] ? " of " : "", topo->accel);
    fprintf(f, "  %-10s %7s %10s %10s %9s %8s %-9s\n", "level", "fanout", "accels", "GB/s/accel",
            "lat(us)", "oversub", "class");
    for (int i = 0; i < topo->nlevels; i++) {
        const strata_topo_level_t *l = &topo->level[i];
        char torus[64] = "";
        if (strata_topo_torus_ndims(l)) {
            memcpy(torus, " torus ", 8);
            strata_topo_torus_format(l->torus, torus + 7, sizeof torus - 7);
        }
        fprintf(f, "  %-10s %7d %10lld %10.4g %9.1f %8.2f %-9s%s\n", l->name, l->fanout,
                strata_topo_domain_size(topo, i + 1), l->bw_Bps / 1e9, l->latency_s * 1e6,
                l->oversub, strata_link_class_name(l->link_class), torus);
    }
}
