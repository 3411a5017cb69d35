/* One training step from its pieces: the layers each pipeline device holds, its forward and
 * backward per micro-batch with the exposed part of tensor/context-parallel and ZeRO traffic, the
 * pipeline schedule's bubble and the activations it keeps in flight (both from the very lists the
 * trainer runs, strata/schedule.h, timed by their memoised simulation), the data-parallel gradient
 * and parameter traffic at the end of the step, and the optimizer; memory per device by kind.
 * Allocation-free once the schedule's memo is warm: the search calls it hundreds of thousands of
 * times. */
#include "base/base.h"
#include "plan/plan_internal.h"

#include <math.h>
#include <string.h>

int st_layers_on_device(int layers, int pp, int i)
{
    int base = layers / pp, extra = layers % pp;
    if (!extra)
        return base;
    // The first and last devices also carry the embedding and the head: give the extra layers to
    // the devices in the middle (Llama 3 trims the first and last stages the same way).
    int lo = (pp - extra) / 2;
    return base + (i >= lo && i < lo + extra ? 1 : 0);
}

/* Cost of communication `c` overlapped with compute `w`: the part that does not fit in the window,
 * plus the contention the overlapped part still costs. */
static double overlapped(double c, double w, double cost)
{
    return c > w ? c - w + cost * w : cost * c;
}

/* The first `want` members of group g (innermost first) as a group. */
static strata_group_t sub_group(const strata_group_t *g, long long want)
{
    strata_group_t s = {0};
    for (int i = 0; i < g->ndims && want > 1; i++) {
        int take = g->dim[i].size <= want ? g->dim[i].size : (int)want;
        s.dim[s.ndims++] = (strata_group_dim_t){take, g->dim[i].stride};
        want /= take;
    }
    return s;
}

typedef struct dev {
    double P;             /* parameters on this device */
    double cf, cb, w;     /* compute per micro-batch: forward, backward (+recompute), wgrad */
    double tpf, tpb, tpe; /* TP total per pass and exposed per micro-batch */
    double cpf, cpb, cpe;
    double z_tot, z_exp; /* ZeRO-2/3 per micro-batch traffic */
    double F, B;         /* per micro-batch with exposed communication */
} dev_t;

strata_status_t st_plan_assemble(const strata_plan_problem_t *pb, const strata_parallel_t *par,
                                 const st_layer_cost_t *lc, bool memory_only,
                                 strata_prediction_t *out)
{
    const strata_model_t *m = &pb->model;
    const strata_training_t *tr = &pb->train;
    const strata_calib_t *cal = &pb->calib;
    const int p = par->pp, v = par->vp;
    // ZB-V puts the last chunk (final norm, head, loss) on the first device again, by its
    // embedding: the tied embedding needs no exchange there.
    const bool vshape = par->schedule == STRATA_SCHED_ZB_V;
    const int head_dev = vshape ? 0 : p - 1;
    const long long dc = (long long)par->dp * par->cp;
    const long long mb = tr->global_batch / par->dp / tr->micro_batch;
    const double wb = st_weight_bytes(tr), gb = st_grad_bytes(tr);
    const double ob = tr->precision == STRATA_PREC_FP32 ? 8 : 12; /* (master,) m, v */
    const double oc = cal->overlap_cost, oc3 = cal->zero3_overlap_cost;
    const double out_matrix = (double)m->vocab * m->hidden / par->tp;
    const bool memterms = !(pb->terms_off & STRATA_TERM_MEMORY);
    // FSDP-style variants: ZeRO-3 parameters kept from the forward to the backward that reduces
    // their gradients; ZeRO-2/3 gradients accumulated unsharded and reduced once per step.
    const bool keep = par->zero == 3 && par->zero_keep_params;
    const bool once = par->zero >= 2 && par->zero_reduce_once;
    const bool z3gather = par->zero == 3 && !(keep && once); /* gathers every micro-batch */
    memset(out, 0, sizeof *out);
    out->microbatches = (int)mb;

    // ---- memory, on the first and the last device (they bound every other) ----
    strata_plan_memory_t best = {0};
    for (int pass = 0; pass < (p > 1 ? 2 : 1); pass++) {
        int i = pass == 0 ? 0 : p - 1;
        int L = st_layers_on_device(m->layers, p, i);
        const bool head = i == head_dev;
        double P = L * lc->params + (i == 0 ? lc->emb_params : 0) +
                   (head ? lc->head_params - (m->tied_embeddings && i == 0 ? out_matrix : 0) : 0);
        strata_plan_memory_t mem = {.stage = i, .capacity = pb->accel.mem_bytes};
        if (keep) /* the shard, and the gathered stage for the whole step */
            mem.weights = P * wb * (1 + 1.0 / (double)dc);
        else
            mem.weights =
                P * wb / (par->zero == 3 ? (double)dc : 1.0) +
                (par->zero == 3 && par->zero_secondary > 1 ? P * wb / par->zero_secondary : 0);
        if (tr->precision == STRATA_PREC_FP8 && (par->zero < 3 || keep))
            mem.weights += P; /* the FP8 copy of the resident weights */
        if (once)             /* the unsharded accumulator, and the reduced shard */
            mem.grads = P * gb * (1 + 1.0 / (double)dc);
        else
            mem.grads = P * gb / (par->zero >= 2 ? (double)dc : 1.0);
        mem.optimizer = P * ob / (par->zero >= 1 ? (double)dc : 1.0);
        // The most (micro-batch, chunk) activations the schedule's list for this device keeps at
        // once (from a chunk's forward to its backward, or to its weight gradient when the
        // backward is split: those need nearly all of them), each chunk L / v layers.
        double chunks = 0;
        ST_TRY(strata_pp_peak_act(par->schedule, p, v, (int)mb, i, &chunks));
        const double inflight_mb = chunks / v;
        const double inflight = inflight_mb * L; /* layer-micro-batches held */
        mem.activations = inflight * lc->act_bytes + lc->act_full_bytes +
                          (i == 0 ? inflight_mb * lc->emb_act_bytes : 0) +
                          (head ? lc->head_act_bytes : 0);
        // ZeRO-3 gathers a module at a time (the largest weight matrix, and the next one
        // prefetched), not whole layers: DeepSpeed's per-module hooks.
        double z3buf = 0;
        if (par->zero == 3 && !keep)
            z3buf = memterms ? 2 * lc->max_matrix * wb : 2 * lc->params * wb * par->tp;
        mem.comm_buffers = lc->tp_buffer_bytes + (p > 1 ? 4 * lc->p2p_bytes : 0) + z3buf;
        // What is allocated and freed within a step leaves holes the allocator cannot reuse.
        mem.fragmentation = memterms ? cal->mem_frag * (mem.activations + mem.comm_buffers) : 0;
        mem.reserved = pb->accel.reserved_bytes;
        mem.total = mem.weights + mem.grads + mem.optimizer + mem.activations + mem.comm_buffers +
                    mem.fragmentation + mem.reserved;
        if (pass == 0 || mem.total > best.total)
            best = mem;
    }
    best.fits = best.total <= best.capacity;
    out->mem = best;
    if (memory_only && !best.fits)
        return STRATA_OK;

    // ---- prices of the data-parallel (x CP) group, its secondary partition, the pipeline ----
    // Each collective is priced by the pricing module for the group that runs it (net.c): the
    // algorithm its communicator would choose. ZeRO-3's gathers and scatters reach only eta_zero3
    // of that bandwidth (calibrated): they are priced as bytes / eta_zero3.
    strata_price_table_t d_ar = {.top = -1}, d_rs = {.top = -1}, d_ag = {.top = -1},
                         z_ag = {.top = -1};
    int dlevel = 0, plevel = 0;
    strata_group_t dg = st_plan_group(par, (1u << STRATA_DIM_DP) | (1u << STRATA_DIM_CP));
    if (dc > 1) {
        ST_TRY(st_plan_table(pb, &dg, par->zero == 0 ? STRATA_COLL_ALLREDUCE
                                                     : STRATA_COLL_REDUCE_SCATTER,
                             par->zero == 0 ? &d_ar : &d_rs));
        if (par->zero > 0)
            ST_TRY(st_plan_table(pb, &dg, STRATA_COLL_ALLGATHER, &d_ag));
        dlevel = (par->zero == 0 ? d_ar.top : d_rs.top) + 1;
    }
    long long z2 = par->zero == 3 && par->zero_secondary > 1 ? par->zero_secondary : dc;
    if (z2 > 1 && z2 != dc) {
        strata_group_t zg = sub_group(&dg, z2);
        ST_TRY(st_plan_table(pb, &zg, STRATA_COLL_ALLGATHER, &z_ag));
    } else {
        z_ag = d_ag;
    }
    const double z3 = cal->eta_zero3 > 0 ? cal->eta_zero3 : 1;
    double t_p2p = 0;
    if (p > 1) {
        strata_group_t pg = st_plan_group(par, 1u << STRATA_DIM_PP);
        strata_price_table_t pt;
        ST_TRY(st_plan_table(pb, &pg, STRATA_COLL_ALLREDUCE, &pt));
        plevel = pt.top + 1;
        t_p2p = strata_price_table_p2p(&pt, lc->p2p_bytes);
    }

    // ---- per device, per micro-batch ----
    const bool otp = par->overlap[STRATA_DIM_TP], ocp = par->overlap[STRATA_DIM_CP];
    const bool odp = par->overlap[STRATA_DIM_DP];
    const double pp_mb = p > 1 ? 2.0 * v * t_p2p * (par->overlap[STRATA_DIM_PP] ? oc : 1.0) : 0;
    double sum_f = 0, sum_b = 0, sum_w = 0, worst = -1;
    dev_t crit = {0};
    int crit_i = 0;
    double Pmax = 0;
    for (int i = 0; i < p; i++) {
        // Devices in the middle of a long pipeline are identical: evaluate one and reuse it.
        dev_t d = {0};
        int L = st_layers_on_device(m->layers, p, i);
        bool first = i == 0, head = i == head_dev;
        d.P = L * lc->params + (first ? lc->emb_params : 0) +
              (head ? lc->head_params - (m->tied_embeddings && first ? out_matrix : 0) : 0);
        d.cf = L * lc->fwd_s + (first ? lc->emb_fwd_s : 0) + (head ? lc->head_fwd_s : 0);
        d.cb = L * (lc->bwd_s + lc->recompute_s) + (first ? lc->emb_bwd_s : 0) +
               (head ? lc->head_bwd_s : 0);
        d.w = L * lc->wgrad_s + (head ? lc->head_wgrad_s : 0);
        double head_tp = head ? lc->head_tp_s : 0, emb_tp = first ? lc->emb_tp_s : 0;
        d.tpf = L * lc->tp_fwd_s + emb_tp + head_tp / 2;
        d.tpb = L * (lc->tp_bwd_s + lc->tp_rec_s) + head_tp / 2;
        if (otp)
            d.tpe = L * (overlapped(lc->tp_fwd_s, lc->gemm_fwd_s, oc) +
                         overlapped(lc->tp_bwd_s, 2 * lc->gemm_fwd_s, oc) +
                         overlapped(lc->tp_rec_s, lc->gemm_fwd_s, oc)) +
                    emb_tp + head_tp;
        else
            d.tpe = d.tpf + d.tpb;
        d.cpf = L * lc->cp_fwd_s;
        d.cpb = L * (lc->cp_bwd_s + lc->cp_rec_s);
        if (ocp)
            d.cpe = L * (overlapped(lc->cp_fwd_s, lc->attn_fwd_s, oc) +
                         overlapped(lc->cp_bwd_s, lc->attn_bwd_s, oc) +
                         overlapped(lc->cp_rec_s, lc->attn_fwd_s, oc));
        else
            d.cpe = d.cpf + d.cpb;
        double agf = 0; // ZeRO-3's forward gather
        if (par->zero == 3) {
            agf = z3gather ? st_plan_price_s(&d_ag, d.P * wb / z3) : 0;
            double agb = keep ? 0 : st_plan_price_s(&z_ag, d.P * wb / z3);
            double rs = once ? 0 : st_plan_price_s(&d_rs, d.P * gb / z3);
            d.z_tot = agf + agb + rs;
            d.z_exp = odp ? overlapped(agf, d.cf, oc3) + overlapped(agb + rs, d.cb, oc3) : d.z_tot;
        } else if (par->zero == 2 && !once) {
            double rs = st_plan_price_s(&d_rs, d.P * gb);
            d.z_tot = rs;
            d.z_exp = odp ? overlapped(rs, d.cb, oc) : rs;
        }
        d.F = d.cf + (otp ? 0 : d.tpf) + (ocp ? 0 : d.cpf);
        d.B = d.cb + (otp ? 0 : d.tpb) + (ocp ? 0 : d.cpb);
        // Exposed overlapped parts are spread over the pass they hide in.
        if (otp || ocp) {
            double extra = (otp ? d.tpe : 0) + (ocp ? d.cpe : 0);
            double share = d.cf + d.cb > 0 ? d.cf / (d.cf + d.cb) : 0.5;
            d.F += extra * share;
            d.B += extra * (1 - share);
        }
        if (par->zero == 3 && odp) {
            double ef = overlapped(agf, d.cf, oc3);
            d.F += ef;
            d.B += d.z_exp - ef;
        } else {
            d.B += d.z_exp;
        }
        double fb = d.F + d.B;
        sum_f += d.F;
        sum_b += d.B;
        sum_w += fmin(d.w, d.B);
        if (fb > worst) {
            worst = fb;
            crit = d;
            crit_i = i;
        }
        if (d.P > Pmax)
            Pmax = d.P;
        if (p > 4 && i == 1) {
            // Devices 1 .. p-2 with the same layer count cost the same: skip to the last ones,
            // adding the skipped devices' share to the averages.
            int j = 2;
            while (j < p - 1 && st_layers_on_device(m->layers, p, j) == L)
                j++;
            sum_f += d.F * (j - 2);
            sum_b += d.B * (j - 2);
            sum_w += fmin(d.w, d.B) * (j - 2);
            i = j - 1;
        }
    }
    const double M = (double)mb;

    // ---- pipeline ----
    // The bubble of the schedule's own lists on the average device's forward, backward and weight
    // gradient per micro-batch (its idle share of a step whose stages each compute M (F + B)); the
    // hops are priced apart: the fill and drain cross the pipeline once each way (twice in a V),
    // and every micro-batch's sends and receives (pp_mb).
    double bubble = 0, chain = 0;
    if (p > 1) {
        chain = (p - 1) * 2.0 * t_p2p * (vshape ? 2 : 1);
        const double f = sum_f / p, b = sum_b / p, w = sum_w / p;
        if (f > 0) {
            double frac = 0;
            ST_TRY(strata_pp_bubble(par->schedule, p, v, (int)mb, (b - w) / f, w / f, &frac, NULL));
            bubble = frac / (1 - frac) * M * (f + b);
        }
    }
    double pipe = M * (crit.F + crit.B + pp_mb) + bubble + chain;
    // The job waits for its slowest accelerator in every pass it computes (scale.c).
    double straggler = lc->straggler_frac * (M * (crit.cf + crit.cb) + bubble);

    // ---- end of step: data-parallel gradients and parameters, tied embeddings, optimizer ----
    double grad_c = 0, param_c = 0;
    if (par->zero == 0)
        grad_c = st_plan_price_s(&d_ar, Pmax * gb);
    else if (par->zero == 1 || once)
        grad_c = st_plan_price_s(&d_rs, Pmax * gb);
    if (par->zero == 1 || par->zero == 2 || (keep && once))
        param_c = st_plan_price_s(&d_ag, Pmax * wb);
    double tail =
        odp ? overlapped(grad_c, crit.cb, oc) + overlapped(param_c, crit.cf, oc) : grad_c + param_c;
    double emb_sync = 0;
    if (p > 1 && m->tied_embeddings && !vshape) {
        strata_group_t eg = st_plan_group(par, 1u << STRATA_DIM_PP);
        eg = (strata_group_t){1, {{2, eg.dim[0].stride * (p - 1)}}};
        strata_price_table_t et;
        ST_TRY(st_plan_table(pb, &eg, STRATA_COLL_ALLREDUCE, &et));
        emb_sync = st_plan_price_s(&et, out_matrix * gb);
    }
    double opt_bytes = tr->precision == STRATA_PREC_FP32 ? 28 + 4 : 24 + gb + wb + gb;
    if (tr->optimizer == STRATA_OPT_LAMB)
        opt_bytes += 12; /* trust-ratio norms read weights and updates once more */
    double opt = Pmax / (par->zero >= 1 ? (double)dc : 1.0) * opt_bytes /
                 (pb->accel.mem_bw_Bps * cal->eta_mem);

    out->step_s = pipe + straggler + tail + emb_sync + opt;
    out->compute_s = M * (crit.cf + crit.cb);
    out->bubble_s = bubble;
    out->optimizer_s = opt;
    out->straggler_s = straggler;

    strata_plan_comm_t *c = out->comm;
    c[STRATA_DIM_TP] = (strata_plan_comm_t){
        M * (crit.tpf + crit.tpb), M * (otp ? crit.tpe : crit.tpf + crit.tpb),
        M * lc->tp_bytes * st_layers_on_device(m->layers, p, crit_i), lc->tp_level};
    c[STRATA_DIM_CP] = (strata_plan_comm_t){
        M * (crit.cpf + crit.cpb), M * (ocp ? crit.cpe : crit.cpf + crit.cpb),
        M * lc->cp_bytes * st_layers_on_device(m->layers, p, crit_i), lc->cp_level};
    c[STRATA_DIM_PP] =
        (strata_plan_comm_t){M * 2.0 * v * t_p2p + chain + emb_sync, M * pp_mb + chain + emb_sync,
                             p > 1 ? M * 2.0 * v * lc->p2p_bytes : 0, plevel};
    double dbytes = 0;
    double frac = dc > 1 ? (double)(dc - 1) / dc : 0;
    if (par->zero == 0)
        dbytes = 2 * frac * Pmax * gb;
    else if (par->zero == 1 || (par->zero == 2 && once) || (keep && once))
        dbytes = frac * Pmax * (gb + wb);
    else if (par->zero == 2)
        dbytes = frac * Pmax * (M * gb + wb);
    else /* ZeRO-3: gathers for the forward and (unless kept) the backward; scatters */
        dbytes = M * frac * Pmax * (wb + (keep ? 0 : wb) + (once ? 0 : gb)) +
                 (once ? frac * Pmax * gb : 0);
    c[STRATA_DIM_DP] = (strata_plan_comm_t){M * crit.z_tot + grad_c + param_c,
                                            M * crit.z_exp + tail, dbytes, dc > 1 ? dlevel : 0};

    // ---- rates ----
    const long long n = st_gpus(pb);
    const double s = st_seq(pb), B = tr->global_batch, tokens = B * s;
    const double h = m->hidden;
    out->model_flops = 3 * tokens * strata_model_fwd_flops_per_token(m, (int)s);
    double rec = 0;
    if (tr->recompute == STRATA_RECOMPUTE_FULL)
        rec = strata_model_fwd_flops_per_token(m, (int)s) - 2.0 * h * m->vocab;
    else if (tr->recompute == STRATA_RECOMPUTE_SELECTIVE)
        rec = m->layers * 4.0 * s * h;
    out->hw_flops = out->model_flops + tokens * rec;
    out->megatron_flops = 96.0 * B * s * m->layers * h * h *
                          (1 + s / (6 * h) + (double)m->vocab / (16.0 * m->layers * h));
    double peak =
        tr->precision == STRATA_PREC_FP32 ? pb->accel.peak_flops_32 : pb->accel.peak_flops_16;
    out->tokens_per_s = tokens / out->step_s;
    out->tflops_per_accel = out->model_flops / out->step_s / n / 1e12;
    out->mfu = out->model_flops / (out->step_s * n * peak);
    out->hfu = out->hw_flops / (out->step_s * n * peak);
    out->layers_max = st_layers_on_device(m->layers, p, crit_i);
    out->critical_stage = crit_i;
    out->fwd_s = crit.F;
    out->bwd_s = crit.B;
    out->wgrad_s = crit.w;
    out->p2p_s = t_p2p;
    out->dp_tail_s = tail + emb_sync + opt;
    return STRATA_OK;
}

strata_status_t strata_plan_predict(const strata_plan_problem_t *pb, const strata_parallel_t *par,
                                    strata_prediction_t *out)
{
    ST_TRY(strata_plan_check(pb, par));
    strata_plan_problem_t eff;
    st_plan_effective(pb, &eff);
    st_layer_cost_t lc;
    ST_TRY(st_plan_layer_cost(&eff, par, &lc));
    lc.straggler_frac = st_plan_straggler_frac(&eff);
    return st_plan_assemble(&eff, par, &lc, false, out);
}
