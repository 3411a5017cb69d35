/* ZeRO overlap benchmark, one rank: a compute-heavy synthetic model (S segments of a parameter arena;
 * forward and backward sweep each segment's parameters several times, like a GEMM would, calling
 * strata_zero_progress() between sweeps) trained a few steps under the ZeRO stage given, with a Chrome
 * trace per rank. bench/trace_overlap.py reads the traces and computes how much of the
 * communication was hidden behind compute. Run through bench/zero_overlap.sh.
 *
 * usage: strata_zero_overlap STAGE TRACE_PREFIX [--no-progress] [--segments S] [--count C]
 *        writes TRACE_PREFIX.r<rank>.json */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/strata.h"
#include "strata/trace.h"

#define SWEEPS 6    /* forward passes over a segment; the backward does twice as many */
#define CHUNK  8192 /* floats between progress calls */

static int progress_on = 1;
static volatile float sink;

/* Reads p[0..n) `sweeps` times (the "GEMM"), poking the engine every CHUNK floats. */
static void compute(strata_zero_t *z, const float *p, float *g, size_t n, int sweeps)
{
    float acc = 0.0f;
    for (int s = 0; s < sweeps; s++)
        for (size_t a = 0; a < n; a += CHUNK) {
            size_t b = a + CHUNK < n ? a + CHUNK : n;
            for (size_t j = a; j < b; j++) {
                acc += p[j] * (float)(j & 7);
                if (g)
                    g[j] += 1e-6f * p[j] + 1e-3f;
            }
            if (progress_on)
                strata_zero_progress(z);
        }
    sink = acc;
}

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if ((x) != STRATA_OK) {                                                                    \
            fprintf(stderr, "%s: %s\n", #x, strata_last_error());                                  \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s STAGE TRACE_PREFIX [--no-progress] [--segments S] [--count C]\n",
                argv[0]);
        return 2;
    }
    int stage = atoi(argv[1]), S = 8;
    size_t count = 1u << 18;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--no-progress"))
            progress_on = 0;
        else if (!strcmp(argv[i], "--segments") && i + 1 < argc)
            S = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--count") && i + 1 < argc)
            count = (size_t)atol(argv[++i]);
    }
    strata_comm_t *c;
    CHECK(strata_comm_create_from_env(&c));
    int rank = strata_comm_rank(c);
    strata_zero_segment_t *segs = malloc((size_t)S * sizeof *segs);
    for (int s = 0; s < S; s++)
        segs[s] = (strata_zero_segment_t){(size_t)s * count, count};
    size_t P = (size_t)S * count;
    float *params = malloc(P * sizeof(float)), *grads = calloc(P, sizeof(float));
    for (size_t j = 0; j < P; j++)
        params[j] = 1e-3f * (float)(j % 1000);
    strata_zero_config_t cfg = strata_zero_config_default();
    cfg.stage = stage;
    cfg.nparams = P;
    cfg.nsegments = S;
    cfg.segments = segs;
    cfg.bucket_count = count / 2;
    strata_zero_t *z;
    CHECK(strata_zero_create(c, &cfg, params, grads, &z));
    char path[512];
    snprintf(path, sizeof path, "%s.r%d.json", argv[2], rank);
    float *m = calloc(strata_zero_state_count(z) + 1, sizeof(float));
    const float *p;
    for (int step = 0; step < 6; step++) {
        if (step == 1) // step 0 warms up (connections, first allocations)
            CHECK(strata_trace_open(path, rank));
        strata_trace_begin("step", "step");
        for (int s = 0; s < S; s++) {
            CHECK(strata_zero_acquire(z, s, false, &p));
            strata_trace_begin("compute", "fwd");
            compute(z, p, NULL, count, SWEEPS);
            strata_trace_end("compute", "fwd");
            CHECK(strata_zero_release(z, s, false));
        }
        CHECK(strata_zero_acquire(z, 0, false, &p));
        CHECK(strata_zero_release(z, 0, false));
        CHECK(strata_zero_acquire(z, 0, true, &p));
        CHECK(strata_zero_release(z, 0, true));
        memset(grads, 0, P * sizeof(float));
        for (int s = S - 1; s >= 0; s--) {
            CHECK(strata_zero_acquire(z, s, true, &p));
            strata_trace_begin("compute", "bwd");
            compute(z, p, grads + segs[s].offset, count, 2 * SWEEPS);
            strata_trace_end("compute", "bwd");
            CHECK(strata_zero_release(z, s, true));
            CHECK(strata_zero_grad_ready(z, s));
        }
        const strata_zero_shard_t *sh;
        int k;
        CHECK(strata_zero_step_begin(z, &sh, &k));
        strata_trace_begin("compute", "optimizer");
        for (int i = 0; i < k; i++)
            for (size_t j = 0; j < sh[i].count; j++) {
                float *mo = m + sh[i].state_offset;
                mo[j] = 0.9f * mo[j] + 0.1f * sh[i].grads[j];
                sh[i].params[j] -= 1e-4f * mo[j];
            }
        strata_trace_end("compute", "optimizer");
        CHECK(strata_zero_step_end(z));
        strata_trace_end("step", "step");
    }
    CHECK(strata_zero_sync(z));
    CHECK(strata_trace_close());
    strata_zero_stats_t st = strata_zero_stats(z);
    if (rank == 0)
        printf("stage %d: buckets %llu (%llu before the last grad_ready), gathers %llu "
               "(%llu prefetched)\n",
               stage, (unsigned long long)st.buckets_issued,
               (unsigned long long)st.buckets_before_last, (unsigned long long)st.gathers_issued,
               (unsigned long long)st.gathers_prefetched);
    strata_zero_destroy(z);
    strata_comm_destroy(c);
    free(m);
    free(params);
    free(grads);
    free(segs);
    return 0;
}
