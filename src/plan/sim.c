/* Pipeline schedules as explicit operation lists, simulated by dependencies: each device runs its
 * list in order, and an operation starts when its device is free and its input has arrived from
 * the neighbouring stage (plus one hop). The closed-form bubbles of step.c are checked against this
 * in the tests, and the SVG timeline is drawn from it. Orders follow Megatron-LM (1F1B, interleaved
 * with its warm-up of 2(p-i-1) + (v-1)p chunks) and Qi et al. (ZB-H1: weight gradients postponed
 * by i steps on device i to fill the drain). */
#include "base/base.h"
#include "plan/plan_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct op {
    int kind; /* strata_op_kind_t */
    int mb, chunk;
} op_t;

/* Builds device i's operation order into ops (capacity 3*m*v); returns the count. */
static int device_order(const strata_parallel_t *par, int m, int i, op_t *ops)
{
    const int p = par->pp, v = par->schedule == STRATA_SCHED_INTERLEAVED ? par->vp : 1;
    int n = 0;
    switch (par->schedule) {
    case STRATA_SCHED_GPIPE:
        for (int k = 0; k < m; k++)
            ops[n++] = (op_t){STRATA_OPK_FWD, k, 0};
        for (int k = 0; k < m; k++)
            ops[n++] = (op_t){STRATA_OPK_BWD, k, 0};
        return n;
    case STRATA_SCHED_INTERLEAVED: {
        const int total = m * v;
        int warm = 2 * (p - i - 1) + (v - 1) * p;
        if (warm > total)
            warm = total;
        int f = 0, b = 0;
#define FOP(k) ((op_t){STRATA_OPK_FWD, ((k) / (p * v)) * p + (k) % p, ((k) / p) % v})
#define BOP(k) ((op_t){STRATA_OPK_BWD, ((k) / (p * v)) * p + (k) % p, v - 1 - ((k) / p) % v})
        for (; f < warm; f++)
            ops[n++] = FOP(f);
        while (f < total) {
            ops[n++] = FOP(f);
            f++;
            ops[n++] = BOP(b);
            b++;
        }
        while (b < total) {
            ops[n++] = BOP(b);
            b++;
        }
#undef FOP
#undef BOP
        return n;
    }
    default: {
        // 1F1B, and ZB-H1 with the weight gradient of micro-batch k run i steps later.
        const bool zb = par->schedule == STRATA_SCHED_ZB_H1;
        int warm = p - i - 1 < m ? p - i - 1 : m;
        int f = 0, b = 0, w = 0;
        for (; f < warm; f++)
            ops[n++] = (op_t){STRATA_OPK_FWD, f, 0};
        while (b < m) {
            if (f < m)
                ops[n++] = (op_t){STRATA_OPK_FWD, f++, 0};
            ops[n++] = (op_t){STRATA_OPK_BWD, b++, 0};
            if (zb && b - w > i)
                ops[n++] = (op_t){STRATA_OPK_WGRAD, w++, 0};
        }
        while (zb && w < m)
            ops[n++] = (op_t){STRATA_OPK_WGRAD, w++, 0};
        return n;
    }
    }
}

strata_status_t strata_plan_simulate(const strata_parallel_t *par, int m, double f, double b,
                                     double w, double p2p, strata_sched_op_t *out, long long cap,
                                     long long *nops, double *makespan_s)
{
    const int p = par->pp, v = par->schedule == STRATA_SCHED_INTERLEAVED ? par->vp : 1;
    if (p < 1 || v < 1 || m < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "simulate: expected pp, vp and micro-batches >= 1");
    if (par->schedule == STRATA_SCHED_INTERLEAVED && m % p)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "simulate: interleaving needs micro-batches (%d) to "
                        "be a multiple of pp (%d)",
                        m, p);
    const bool zb = par->schedule == STRATA_SCHED_ZB_H1;
    // Per chunk: forward f/v, backward (b - w if ZB splits W out, else b) / v.
    const double fc = f / v, bc = (zb ? b - w : b) / v, wc = w / v;
    const int per = m * v * (zb ? 3 : 2);
    const size_t nvs = (size_t)p * v;
    op_t *ops = malloc((size_t)per * p * sizeof *ops);
    int *count = calloc((size_t)p, sizeof *count), *next = calloc((size_t)p, sizeof *next);
    double *fend = malloc(nvs * (size_t)m * sizeof *fend),
           *bend = malloc(nvs * (size_t)m * sizeof *bend);
    double *free_at = calloc((size_t)p, sizeof *free_at);
    if (!ops || !count || !next || !fend || !bend || !free_at) {
        free(ops), free(count), free(next), free(fend), free(bend), free(free_at);
        return st_error(STRATA_ERR_NO_MEMORY, "simulate: out of memory");
    }
    for (size_t k = 0; k < nvs * (size_t)m; k++)
        fend[k] = bend[k] = -1;
    for (int i = 0; i < p; i++)
        count[i] = device_order(par, m, i, ops + (size_t)i * per);
    long long done = 0, total = 0, written = 0;
    for (int i = 0; i < p; i++)
        total += count[i];
    double makespan = 0;
    strata_status_t rc = STRATA_OK;
    while (done < total) {
        bool progress = false;
        for (int i = 0; i < p; i++) {
            while (next[i] < count[i]) {
                const op_t *o = &ops[(size_t)i * per + next[i]];
                size_t vs = (size_t)o->chunk * p + i; /* virtual stage */
                double ready;
                if (o->kind == STRATA_OPK_FWD) {
                    if (vs == 0)
                        ready = 0;
                    else {
                        double e = fend[(vs - 1) * m + o->mb];
                        if (e < 0)
                            break;
                        ready = e + p2p;
                    }
                } else if (o->kind == STRATA_OPK_BWD) {
                    if (vs == nvs - 1) {
                        ready = fend[vs * m + o->mb];
                        if (ready < 0)
                            break;
                    } else {
                        double e = bend[(vs + 1) * m + o->mb];
                        if (e < 0)
                            break;
                        ready = e + p2p;
                    }
                } else {
                    ready = bend[vs * m + o->mb];
                    if (ready < 0)
                        break;
                }
                double start = fmax(ready, free_at[i]);
                double dur = o->kind == STRATA_OPK_FWD ? fc : o->kind == STRATA_OPK_BWD ? bc : wc;
                double end = start + dur;
                free_at[i] = end;
                if (o->kind == STRATA_OPK_FWD)
                    fend[vs * m + o->mb] = end;
                else if (o->kind == STRATA_OPK_BWD)
                    bend[vs * m + o->mb] = end;
                if (out && written < cap)
                    out[written++] = (strata_sched_op_t){
                        i, o->mb, o->chunk, (strata_op_kind_t)o->kind, start, end};
                if (end > makespan)
                    makespan = end;
                next[i]++;
                done++;
                progress = true;
            }
        }
        if (!progress) {
            rc =
                st_error(STRATA_ERR_INTERNAL, "simulate: schedule %s deadlocked (pp=%d vp=%d m=%d)",
                         strata_schedule_name(par->schedule), p, v, m);
            break;
        }
    }
    free(ops), free(count), free(next), free(fend), free(bend), free(free_at);
    if (nops)
        *nops = total;
    if (makespan_s)
        *makespan_s = makespan;
    return rc;
}
