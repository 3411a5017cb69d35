/* The planner's side of the price (strata/price.h): the price tables of a layout's groups under
 * the problem's fabric, calibrated link efficiencies and the accelerator's reduction speed, and
 * their prices at a size. Every collective and pipeline hop the planner predicts comes through
 * here, so a prediction is the price the communicator of that group would pay for the algorithm it
 * would choose (tests/unit/test_price_agree.c runs both). Tables are memoised by netmodel, so the
 * search pays for a group's shape once. */
#include "base/base.h"
#include "plan/plan_internal.h"

strata_status_t st_plan_table(const strata_plan_problem_t *pb, const strata_group_t *g,
                              strata_coll_t coll, strata_price_table_t *out)
{
    const strata_net_eff_t ne = st_plan_net_eff(pb);
    return strata_price_group_table(&pb->topo, g, &ne, coll, out);
}

double st_plan_price_s(const strata_price_table_t *t, double bytes)
{
    if (!(bytes > 0))
        return 0;
    strata_price_t p;
    double s = strata_price_table_choose(t, bytes, STRATA_PRICE_OFFER_PLAIN, &p);
    return s > 0 ? s : 0;
}

strata_status_t st_plan_coll(const strata_plan_problem_t *pb, const strata_group_t *g,
                             strata_coll_t coll, double bytes, strata_price_t *out)
{
    strata_price_table_t t;
    ST_TRY(st_plan_table(pb, g, coll, &t));
    strata_price_table_choose(&t, bytes, STRATA_PRICE_OFFER_PLAIN, out);
    out->seconds = st_plan_price_s(&t, bytes);
    return STRATA_OK;
}
