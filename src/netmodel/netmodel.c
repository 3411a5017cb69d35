/* Links: the defaults strata assumes for shared memory and TCP, and the levels of a fabric nobody
 * described. Prices are in price.c; kinds and names in kinds.c. */
#include "strata/netmodel.h"

#include <stdio.h>

strata_link_t strata_link_default_shm(void)
{
    // Measured on the development machine: ~1 us per small message, ~8 GB/s per copy stream.
    return (strata_link_t){
        .alpha_s = 1.5e-6, .beta_s_per_b = 1.0 / 8e9, .gamma_s_per_b = 1.0 / 10e9};
}

strata_link_t strata_link_default_tcp(void)
{
    return (strata_link_t){
        .alpha_s = 25e-6, .beta_s_per_b = 1.0 / 2.5e9, .gamma_s_per_b = 1.0 / 10e9};
}

void strata_fabric_default_levels(int nlevels, strata_topo_t *out)
{
    strata_topo_init(out, "default");
    strata_link_t shm = strata_link_default_shm(), tcp = strata_link_default_tcp();
    for (int l = 0; l < nlevels && l < STRATA_TOPO_MAX_LEVELS; l++) {
        const strata_link_t *k = l == 0 ? &shm : &tcp;
        strata_topo_level_t lv = {.fanout = 1,
                                  .bw_Bps = 1.0 / k->beta_s_per_b,
                                  .latency_s = k->alpha_s,
                                  .oversub = 1,
                                  .link_class =
                                      l == 0 ? STRATA_LINK_SCALE_UP : STRATA_LINK_SCALE_OUT};
        snprintf(lv.name, sizeof lv.name, l == 0 ? "host" : "tier%d", l);
        out->level[out->nlevels++] = lv;
    }
}
