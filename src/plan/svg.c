/* The picture of a predicted step: one row per pipeline stage, forward / backward / weight-gradient
 * blocks from the schedule simulation with the critical device's per-micro-batch times, gaps for
 * bubbles, and the data-parallel tail and optimizer at the end; the breakdown as a legend. Plain
 * SVG written with fprintf, viewable in any browser. */
#include "base/base.h"
#include "plan/plan_internal.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DRAWN_OPS 60000

strata_status_t strata_plan_svg(const strata_plan_problem_t *pb, const strata_parallel_t *par,
                                const strata_prediction_t *pred, FILE *f)
{
    const int p = par->pp, v = par->schedule == STRATA_SCHED_INTERLEAVED ? par->vp : 1;
    int m = pred->microbatches;
    const int per_mb = p * v * (par->schedule == STRATA_SCHED_ZB_H1 ? 3 : 2);
    bool compressed = false;
    if ((long long)m * per_mb > MAX_DRAWN_OPS) {
        // Draw fewer micro-batches (a multiple of pp) and say so: steady state repeats itself.
        int m2 = MAX_DRAWN_OPS / per_mb;
        m2 -= m2 % p;
        if (m2 < p)
            m2 = p;
        m = m2;
        compressed = true;
    }
    long long cap = (long long)m * per_mb, n = 0;
    strata_sched_op_t *ops = malloc((size_t)cap * sizeof *ops);
    if (!ops)
        return st_error(STRATA_ERR_NO_MEMORY, "svg: out of memory");
    double makespan = 0;
    strata_status_t rc = strata_plan_simulate(par, m, pred->fwd_s, pred->bwd_s, pred->wgrad_s,
                                              pred->p2p_s, ops, cap, &n, &makespan);
    if (rc < 0) {
        free(ops);
        return rc;
    }
    const double total = makespan + pred->dp_tail_s;
    const double W = 1200, left = 100, right = 20, row = p > 64 ? 8 : p > 16 ? 14 : 24;
    const double top = 60, plot_w = W - left - right, H = top + p * row + 150;
    const double sx = plot_w / (total > 0 ? total : 1);
    char cfg[160];
    strata_parallel_format(par, cfg, sizeof cfg);
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f,
            "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">%s on %lld x %s (%s): "
            "%s, micro-batch %d</text>\n",
            pb->model.name, st_gpus(pb), pb->accel.name, pb->topo.name, cfg, pb->train.micro_batch);
    fprintf(f,
            "<text x=\"10\" y=\"40\">step %.3f s, %.0f tokens/s, MFU %.1f%%, HFU %.1f%%, "
            "%d micro-batches per pipeline%s</text>\n",
            pred->step_s, pred->tokens_per_s, 100 * pred->mfu, 100 * pred->hfu, pred->microbatches,
            compressed ? " (first micro-batches drawn; the steady state repeats)" : "");
    static const char *const colour[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759"};
    for (int i = 0; i < p; i++) {
        double y = top + i * row;
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#eeeeee\"/>\n",
                left, y, plot_w, row - 2);
        if (row >= 12 || i % 8 == 0)
            fprintf(f, "<text x=\"10\" y=\"%.1f\">stage %d</text>\n", y + row - 6, i);
        fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"/>\n",
                left + makespan * sx, y, pred->dp_tail_s * sx, row - 2, colour[3]);
    }
    for (long long k = 0; k < n && k < cap; k++) {
        const strata_sched_op_t *o = &ops[k];
        double x = left + o->start_s * sx, w = (o->end_s - o->start_s) * sx;
        fprintf(f,
                "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                "stroke=\"white\" stroke-width=\"%.2f\"><title>stage %d mb %d chunk "
                "%d</title></rect>\n",
                x, top + o->stage * row, w > 0.2 ? w : 0.2, row - 2, colour[o->kind],
                w > 3 ? 0.5 : 0.0, o->stage, o->microbatch, o->chunk);
    }
    free(ops);
    double ly = top + p * row + 25;
    static const char *const label[] = {"forward", "backward", "weight gradient",
                                        "data-parallel tail + optimizer"};
    for (int i = 0; i < 4; i++) {
        fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"%s\"/>",
                left + i * 220, ly - 11, colour[i]);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">%s</text>\n", left + i * 220 + 20, ly, label[i]);
    }
    fprintf(
        f,
        "<text x=\"%.0f\" y=\"%.1f\">grey: pipeline bubble (idle). Breakdown of the step on the "
        "critical device (seconds, exposed / total):</text>\n",
        left, ly + 25);
    fprintf(f,
            "<text x=\"%.0f\" y=\"%.1f\">compute %.3f | bubble %.3f | TP %.3f/%.3f | CP %.3f/%.3f "
            "| PP %.3f/%.3f | DP %.3f/%.3f | optimizer %.3f | straggler wait %.3f</text>\n",
            left, ly + 45, pred->compute_s, pred->bubble_s, pred->comm[0].exposed_s,
            pred->comm[0].total_s, pred->comm[1].exposed_s, pred->comm[1].total_s,
            pred->comm[2].exposed_s, pred->comm[2].total_s, pred->comm[3].exposed_s,
            pred->comm[3].total_s, pred->optimizer_s, pred->straggler_s);
    fprintf(f,
            "<text x=\"%.0f\" y=\"%.1f\">memory per accelerator %.1f GiB of %.1f GiB (%s)</text>\n",
            left, ly + 65, pred->mem.total / 1073741824.0, pred->mem.capacity / 1073741824.0,
            pred->mem.fits ? "fits" : "does NOT fit");
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"black\"/>\n", left,
            top + p * row + 2, left + plot_w, top + p * row + 2);
    fprintf(f,
            "<text x=\"%.0f\" y=\"%.1f\">0</text><text x=\"%.0f\" y=\"%.1f\" "
            "text-anchor=\"end\">%.3f s</text>\n",
            left, top + p * row + 14, left + plot_w, top + p * row + 14, total);
    fprintf(f, "</svg>\n");
    return ferror(f) ? st_error(STRATA_ERR_IO, "svg: write failed") : STRATA_OK;
}
