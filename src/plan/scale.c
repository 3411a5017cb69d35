/* What grows with the size of a job, beyond what the per-group link model (netmodel/hier.c) sees:
 *
 *  - Stragglers. A synchronous step runs at the pace of its slowest accelerator: TP groups meet
 *    every layer, pipeline stages every micro-batch, data-parallel replicas every step. With
 *    accelerator speeds varying with a coefficient of variation cv, the step's compute stretches by
 *    cv x E[max of N standard normals], which grows like sqrt(2 ln N).
 *  - ECMP collisions. A switch whose uplinks are chosen by hashing (equal-cost multi-path) spreads
 *    flows at random, not evenly: some uplink carries more than its share, and a collective is as
 *    fast as its slowest flow. With every accelerator of a unit sending one connection (the data-
 *    parallel collectives of a 3D job at scale: all at once, all crossing the tier), split into q
 *    hashed sub-flows, the busiest of the unit's U ports carries E[max of U Poisson(q x oversub)]
 *    sub-flows against q x oversub on average. That ratio slows the tier.
 *
 * Both are closed forms: the expected maximum of N normals by numerical integration (once per
 * problem), the expected maximum load by the Poisson sum (once per fabric level).
 * docs/plan.md "What grows with scale" gives the sources and the constants. */
#include "base/base.h"
#include "plan/plan_internal.h"

#include <math.h>

double st_expected_max_normal(long long n)
{
    if (n <= 1)
        return 0;
    // A validation fit predicts the same rows thousands of times: remember the answers for the
    // last few sizes (per thread, so callers stay independent).
    enum { MEMO = 64 };
    static _Thread_local long long memo_n[MEMO];
    static _Thread_local double memo_v[MEMO];
    static _Thread_local int next;
    for (int i = 0; i < MEMO; i++)
        if (memo_n[i] == n)
            return memo_v[i];
    // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, by Simpson's rule on [-8, 9]: the density
    // of the maximum of up to 2^62 normals lies well inside, and is smooth on a 0.025 grid.
    const double lo = -8, hi = 9;
    const int steps = 680;
    const double hstep = (hi - lo) / steps, dn = (double)n;
    double sum = 0;
    for (int i = 0; i <= steps; i++) {
        double x = lo + i * hstep;
        double Phi = 0.5 * erfc(-x / M_SQRT2);
        double logdens = log(dn) - 0.5 * x * x - 0.5 * log(2 * M_PI) + (dn - 1) * log(Phi);
        double f = x * exp(logdens);
        sum += f * (i == 0 || i == steps ? 1 : i % 2 ? 4 : 2);
    }
    int slot = next;
    next = (next + 1) % MEMO;
    memo_n[slot] = n;
    memo_v[slot] = sum * hstep / 3;
    return memo_v[slot];
}

double st_expected_max_load(double bins, double mean)
{
    if (!(bins >= 1) || !(mean > 0))
        return 0;
    // E[max] = sum over k >= 0 of P(max > k) = 1 - F(k)^bins, F the Poisson CDF.
    double p = exp(-mean), tail = 1 - p, sum = 0;
    for (int k = 0; k < 100000; k++) {
        double term = -expm1(bins * log1p(-tail)); /* 1 - (1 - tail)^bins */
        sum += term;
        if (term < 1e-12 && k > mean)
            break;
        p *= mean / (k + 1);
        tail -= p;
        if (tail <= 0)
            break;
    }
    return sum;
}

double st_ecmp_factor(double accels, double oversub, double subflows)
{
    if (!(subflows > 0) || !(accels > 0))
        return 1;
    double ports = accels / (oversub >= 1 ? oversub : 1);
    if (ports < 2)
        return 1; /* one port: nothing to choose */
    double mean = subflows * accels / ports;
    // Remembered per thread for the fabric levels seen last (a fit prices the same ones often).
    enum { MEMO = 8 };
    static _Thread_local double memo[MEMO][4];
    static _Thread_local int next;
    for (int i = 0; i < MEMO; i++)
        if (memo[i][0] == accels && memo[i][1] == oversub && memo[i][2] == subflows)
            return memo[i][3];
    double f = st_expected_max_load(ports, mean) / mean;
    f = f > 1 ? f : 1;
    double *m = memo[next];
    next = (next + 1) % MEMO;
    m[0] = accels;
    m[1] = oversub;
    m[2] = subflows;
    m[3] = f;
    return f;
}

void st_plan_effective(const strata_plan_problem_t *pb, strata_plan_problem_t *out)
{
    *out = *pb;
    if ((pb->terms_off & STRATA_TERM_SCALE) || !(pb->calib.ecmp_subflows > 0))
        return;
    strata_topo_t *t = &out->topo;
    for (int l = 1; l < t->nlevels; l++) {
        strata_topo_level_t *lv = &t->level[l];
        // A switch tier: its children are scale-out units themselves (racks, pods), whose
        // switches choose an uplink per flow by hashing. The first scale-out level's children
        // are hosts, wired to their switch port by port.
        if (lv->link_class != STRATA_LINK_SCALE_OUT ||
            t->level[l - 1].link_class != STRATA_LINK_SCALE_OUT)
            continue;
        double child = (double)strata_topo_domain_size(t, l);
        double f = st_ecmp_factor(child, lv->oversub, pb->calib.ecmp_subflows);
        double e = lv->efficiency > 0 ? lv->efficiency : pb->calib.eta_out;
        lv->efficiency = e / f;
    }
}

double st_plan_straggler_frac(const strata_plan_problem_t *pb)
{
    if (pb->terms_off & STRATA_TERM_SCALE)
        return 0;
    return pb->calib.straggler_cv * st_expected_max_normal(st_gpus(pb));
}
