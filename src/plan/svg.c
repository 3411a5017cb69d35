/* The picture of a predicted step: the schedule's own lists (strata/schedule.h) simulated with
 * the critical device's per-micro-batch forward, backward and weight-gradient times split over
 * its chunks, and its hop; the data-parallel tail and optimizer after them; the breakdown and the
 * memory as notes. The drawing itself is the schedule part's (strata_pp_timeline_svg_opts): the
 * planner and the trainer draw pipelines the same way. */
#include "base/base.h"
#include "plan/plan_internal.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DRAWN_OPS 60000

strata_status_t strata_plan_svg(const strata_plan_problem_t *pb, const strata_parallel_t *par,
                                const strata_prediction_t *pred, FILE *f)
{
    const int p = par->pp, v = par->vp, C = p * v;
    const bool split = strata_schedule_splits_backward(par->schedule);
    int m = pred->microbatches;
    bool compressed = false;
    if ((long long)m * C * (split ? 3 : 2) > MAX_DRAWN_OPS) {
        // Draw fewer micro-batches (a multiple of pp) and say so: the steady state repeats itself.
        int m2 = MAX_DRAWN_OPS / (C * (split ? 3 : 2));
        m2 -= m2 % p;
        m = m2 < p ? p : m2;
        compressed = true;
    }
    double *cost = malloc(3 * (size_t)C * sizeof *cost);
    if (!cost)
        return st_error(STRATA_ERR_NO_MEMORY, "svg: out of memory");
    for (int c = 0; c < C; c++) {
        cost[c] = pred->fwd_s / v;
        cost[C + c] = (split ? pred->bwd_s - pred->wgrad_s : pred->bwd_s) / v;
        cost[2 * C + c] = split ? pred->wgrad_s / v : 0;
    }
    const strata_pp_costs_t costs = {cost, cost + C, cost + 2 * C, pred->p2p_s, NULL, NULL};
    strata_pp_plan_t plan;
    strata_pp_timeline_t tl;
    strata_status_t rc = strata_pp_generate(par->schedule, p, v, m, &plan);
    if (rc == STRATA_OK) {
        rc = strata_pp_simulate(&plan, &costs, &tl);
        strata_pp_plan_free(&plan);
    }
    free(cost);
    if (rc < 0)
        return rc;

    char cfg[160], title[512], subtitle[320], lines[3][320];
    strata_parallel_format(par, cfg, sizeof cfg);
    snprintf(title, sizeof title, "%s on %lld x %s (%s): %s, micro-batch %d", pb->model.name,
             st_gpus(pb), pb->accel.name, pb->topo.name, cfg, pb->train.micro_batch);
    snprintf(subtitle, sizeof subtitle,
             "step %.3f s, %.0f tokens/s, MFU %.1f%%, HFU %.1f%%, %d micro-batches per pipeline%s",
             pred->step_s, pred->tokens_per_s, 100 * pred->mfu, 100 * pred->hfu,
             pred->microbatches,
             compressed ? " (the first ones drawn; the steady state repeats)" : "");
    snprintf(lines[0], sizeof lines[0],
             "Breakdown of the step on the critical device (seconds, exposed / total):");
    snprintf(lines[1], sizeof lines[1],
             "compute %.3f | bubble %.3f | TP %.3f/%.3f | CP %.3f/%.3f | PP %.3f/%.3f | DP "
             "%.3f/%.3f | optimizer %.3f | straggler wait %.3f",
             pred->compute_s, pred->bubble_s, pred->comm[0].exposed_s, pred->comm[0].total_s,
             pred->comm[1].exposed_s, pred->comm[1].total_s, pred->comm[2].exposed_s,
             pred->comm[2].total_s, pred->comm[3].exposed_s, pred->comm[3].total_s,
             pred->optimizer_s, pred->straggler_s);
    snprintf(lines[2], sizeof lines[2], "memory per accelerator %.1f GiB of %.1f GiB (%s)",
             pred->mem.total / 1073741824.0, pred->mem.capacity / 1073741824.0,
             pred->mem.fits ? "fits" : "does NOT fit");
    const char *const notes[] = {lines[0], lines[1], lines[2]};
    char name[96];
    snprintf(name, sizeof name, "%s schedule, %d stages", strata_schedule_name(par->schedule), p);
    const strata_pp_svg_opts_t opts = {.title = title,
                                       .subtitle = subtitle,
                                       .tail_s = pred->dp_tail_s,
                                       .tail_label = "data-parallel tail + optimizer",
                                       .notes = notes,
                                       .nnotes = 3};
    rc = strata_pp_timeline_svg_opts(&tl, name, NULL, NULL, &opts, f);
    strata_pp_timeline_free(&tl);
    return rc;
}
