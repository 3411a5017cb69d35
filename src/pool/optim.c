/* The optimizer's operations of the pool client (docs/pool.md, "Optimizer state in the pool"): the
 * layout of AdamW's regions, ADAMW over a global range (one packet per block, to the node holding
 * it) and SUMSQ (one partial sum per block, added here in block order, so the result does not
 * depend on the order the answers arrive in). */
#include <stdlib.h>

#include "base/base.h"
#include "pool/client.h"

strata_status_t strata_pool_optim_layout(const strata_pool_t *p, size_t count,
                                         strata_pool_optim_layout_t *out)
{
    uint64_t stripe = (uint64_t)p->block * (uint64_t)p->n;
    if (count > (UINT64_MAX / 8 - stripe) / 4)
        return st_error(STRATA_ERR_INVALID_ARG, "pool: %zu parameters do not fit any pool", count);
    uint64_t region = ((uint64_t)count * 4 + stripe - 1) / stripe * stripe;
    if (region > p->capacity / 4) {
        uint64_t per_node = 4 * region / (uint64_t)p->n;
        return st_error(STRATA_ERR_INVALID_ARG,
                        "pool: AdamW's state of %zu parameters (parameters, m, v and gradients: "
                        "4 x %llu bytes) needs %llu bytes on each of the %d pool nodes, more than "
                        "they serve (the pool holds %llu bytes): start the nodes with --bytes %lluK "
                        "or more, or add nodes", count, (unsigned long long)region,
                        (unsigned long long)per_node, p->n, (unsigned long long)p->capacity,
                        (unsigned long long)((per_node + 1023) / 1024));
    }
    *out = (strata_pool_optim_layout_t){0, region, 2 * region, 3 * region, region};
    return STRATA_OK;
}

/* The range [addr, addr + bytes) is float32 inside the pool. */
static strata_status_t check_range(const strata_pool_t *p, const char *what, uint64_t addr,
                                   size_t bytes)
{
    if (addr % 4)
        return st_error(STRATA_ERR_INVALID_ARG, "pool %s at %llu: not a multiple of 4 (float32)",
                        what, (unsigned long long)addr);
    if (addr > p->capacity || bytes > p->capacity - addr)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "pool %s of %zu bytes at %llu: outside the pool's %llu bytes", what, bytes,
                        (unsigned long long)addr, (unsigned long long)p->capacity);
    return STRATA_OK;
}

strata_status_t strata_pool_adamw(strata_pool_t *p, const strata_pool_adamw_t *a)
{
    if (a->count > SIZE_MAX / 4)
        return st_error(STRATA_ERR_INVALID_ARG, "pool adamw: %zu elements", a->count);
    size_t bytes = a->count * 4;
    const uint64_t at[4] = {a->params, a->m, a->v, a->grads};
    static const char *const names[4] = {"adamw parameters", "adamw m", "adamw v",
                                         "adamw gradients"};
    uint64_t stripe = (uint64_t)p->block * (uint64_t)p->n;
    for (int i = 0; i < 4; i++) {
        ST_TRY(check_range(p, names[i], at[i], bytes));
        if (at[i] % stripe != a->params % stripe)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "pool adamw: %s at %llu and the parameters at %llu are not at the "
                            "same offset within a stripe of %llu bytes (block x nodes), so their "
                            "elements would lie on different nodes (strata_pool_optim_layout)",
                            names[i] + 6, (unsigned long long)at[i],
                            (unsigned long long)a->params, (unsigned long long)stripe);
        for (int j = 0; j < i; j++)
            if (bytes && at[i] < at[j] + bytes && at[j] < at[i] + bytes)
                return st_error(STRATA_ERR_INVALID_ARG, "pool adamw: the %s and %s ranges overlap",
                                names[j] + 6, names[i] + 6);
    }
    // Congruent ranges: node-local addresses differ by the global difference over the node count.
    op_t o = {.p = p, .kind = PL_ADAMW, .dtype = STRATA_POOL_F32, .flow = ++p->flow, .adamw = a};
    for (int i = 0; i < 3; i++)
        o.adamw_delta[i] = ((int64_t)at[i + 1] - (int64_t)a->params) / p->n;
    ST_TRY(pc_split(p, "adamw", a->params, bytes, &o.items, &o.n));
    strata_status_t rc = pc_run(&o);
    free(o.items);
    return rc;
}

strata_status_t strata_pool_sumsq(strata_pool_t *p, uint64_t addr, size_t count, double *out)
{
    *out = 0;
    if (count > SIZE_MAX / 4)
        return st_error(STRATA_ERR_INVALID_ARG, "pool sumsq: %zu elements", count);
    ST_TRY(check_range(p, "sumsq", addr, count * 4));
    op_t o = {.p = p, .kind = PL_SUMSQ, .dtype = STRATA_POOL_F32, .flow = ++p->flow};
    ST_TRY(pc_split(p, "sumsq", addr, count * 4, &o.items, &o.n));
    o.sums = calloc(o.n ? o.n : 1, sizeof *o.sums);
    strata_status_t rc = o.sums ? pc_run(&o)
                                : st_error(STRATA_ERR_NO_MEMORY, "pool sumsq: out of memory");
    if (rc == STRATA_OK)
        for (size_t i = 0; i < o.n; i++)
            *out += o.sums[i];
    free(o.sums);
    free(o.items);
    return rc;
}
