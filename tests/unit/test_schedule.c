/* Pipeline schedules as data (strata/schedule.h): every schedule's lists pass the checker over a
 * grid of stages, chunks and micro-batches; the generator refuses what a schedule cannot run,
 * naming the constraint; the checker catches hand-broken plans, naming stage and action; and the
 * simulation gives the bubbles and memory the literature gives. */
#include "harness/st_test.h"
#include "strata/schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------- */

static int vmin_of(strata_schedule_t s)
{
    return s == STRATA_SCHED_INTERLEAVED || s == STRATA_SCHED_ZB_V ? 2 : 1;
}

static int vmax_of(strata_schedule_t s)
{
    return s == STRATA_SCHED_INTERLEAVED ? 4 : vmin_of(s);
}

/* Index of the first action of stage s matching (op, mb, chunk); fails the test if none. */
static int find(const strata_pp_plan_t *p, int s, strata_pp_op_t op, int mb, int chunk)
{
    for (int i = 0; i < p->count[s]; i++) {
        const strata_pp_action_t *a = &p->actions[s][i];
        if (a->op == op && a->mb == mb && a->chunk == chunk)
            return i;
    }
    fail_msg("stage %d has no %s mb %d chunk %d", s, strata_pp_op_name(op), mb, chunk);
    return -1;
}

static void remove_at(strata_pp_plan_t *p, int s, int i)
{
    memmove(&p->actions[s][i], &p->actions[s][i + 1],
            (size_t)(p->count[s] - i - 1) * sizeof p->actions[s][0]);
    p->count[s]--;
}

static void swap_at(strata_pp_plan_t *p, int s, int i, int j)
{
    strata_pp_action_t t = p->actions[s][i];
    p->actions[s][i] = p->actions[s][j];
    p->actions[s][j] = t;
}

static void expect_error(const strata_pp_plan_t *p, const char *const *words)
{
    assert_int_equal(strata_pp_check(p), STRATA_ERR_INVALID_ARG);
    const char *msg = strata_last_error();
    for (int i = 0; words[i]; i++)
        if (!strstr(msg, words[i]))
            fail_msg("expected '%s' in: %s", words[i], msg);
}

/* ---- generation and checking ---------------------------------------------------------------- */

static void test_every_schedule_passes_the_checker(void **state)
{
    (void)state;
    int checked = 0;
    for (int k = 0; k < STRATA_SCHED_COUNT; k++) {
        const strata_schedule_t s = (strata_schedule_t)k;
        for (int P = 1; P <= 8; P++)
            for (int V = vmin_of(s); V <= vmax_of(s); V++)
                for (int M = 1; M <= 3 * P; M++) {
                    if (s == STRATA_SCHED_INTERLEAVED && M % P)
                        continue; /* refused, below */
                    strata_pp_plan_t p;
                    strata_status_t rc = strata_pp_generate(s, P, V, M, &p);
                    if (rc != STRATA_OK)
                        fail_msg("%s P=%d V=%d M=%d: %s", strata_schedule_name(s), P, V, M,
                                 strata_last_error());
                    // generate checks already; check again as a user would, and count.
                    assert_int_equal(strata_pp_check(&p), STRATA_OK);
                    int compute = 0;
                    for (int st = 0; st < P; st++)
                        for (int i = 0; i < p.count[st]; i++)
                            compute += p.actions[st][i].op <= STRATA_PP_WGT;
                    assert_int_equal(compute,
                                     P * V * M * (strata_schedule_splits_backward(s) ? 3 : 2));
                    strata_pp_plan_free(&p);
                    checked++;
                }
    }
    assert_true(checked > 400);
}

static void test_refusals_name_the_constraint(void **state)
{
    (void)state;
    static const struct {
        strata_schedule_t s;
        int P, V, M;
        const char *words;
    } bad[] = {
        {STRATA_SCHED_1F1B, 0, 1, 4, "stages"},
        {STRATA_SCHED_1F1B, 4, 1, 0, "micro-batches"},
        {STRATA_SCHED_GPIPE, 4, 2, 8, "V = 1"},
        {STRATA_SCHED_ZB_H1, 4, 2, 8, "V = 1"},
        {STRATA_SCHED_INTERLEAVED, 4, 1, 8, "V >= 2"},
        {STRATA_SCHED_INTERLEAVED, 4, 2, 6, "multiple of the stages"},
        {STRATA_SCHED_ZB_V, 4, 3, 8, "V = 2"},
        {STRATA_SCHED_ZB_V, 4, 1, 8, "V = 2"},
        {STRATA_SCHED_COUNT, 4, 1, 8, "unknown schedule"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        strata_pp_plan_t p;
        memset(&p, 0x5a, sizeof p);
        assert_int_equal(strata_pp_generate(bad[i].s, bad[i].P, bad[i].V, bad[i].M, &p),
                         STRATA_ERR_INVALID_ARG);
        if (!strstr(strata_last_error(), bad[i].words))
            fail_msg("case %zu: expected '%s' in: %s", i, bad[i].words, strata_last_error());
        assert_null(p.count); /* zeroed on failure */
        assert_null(p.actions);
    }
    // M below P and M not a multiple of P are fine where the schedule allows them.
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(STRATA_SCHED_1F1B, 8, 1, 3, &p), STRATA_OK);
    strata_pp_plan_free(&p);
    assert_int_equal(strata_pp_generate(STRATA_SCHED_ZB_V, 4, 2, 5, &p), STRATA_OK);
    strata_pp_plan_free(&p);
}

static void test_names(void **state)
{
    (void)state;
    for (int k = 0; k < STRATA_SCHED_COUNT; k++) {
        strata_schedule_t s;
        assert_int_equal(strata_schedule_parse(strata_schedule_name((strata_schedule_t)k), &s),
                         STRATA_OK);
        assert_int_equal(s, k);
    }
    strata_schedule_t s;
    assert_int_equal(strata_schedule_parse("zbv", &s), STRATA_OK);
    assert_int_equal(s, STRATA_SCHED_ZB_V);
    assert_int_equal(strata_schedule_parse("pipedream", &s), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "zb-v"));
    assert_string_equal(strata_schedule_name(STRATA_SCHED_COUNT), "?");
    // Where the chunks live: in order, or in a V for zb-v.
    assert_int_equal(strata_pp_chunk_stage(STRATA_SCHED_INTERLEAVED, 4, 2, 5), 1);
    assert_int_equal(strata_pp_chunk_stage(STRATA_SCHED_ZB_V, 4, 2, 3), 3);
    assert_int_equal(strata_pp_chunk_stage(STRATA_SCHED_ZB_V, 4, 2, 4), 3);
    assert_int_equal(strata_pp_chunk_stage(STRATA_SCHED_ZB_V, 4, 2, 7), 0);
    assert_int_equal(strata_pp_chunk_stage(STRATA_SCHED_ZB_V, 4, 2, 8), -1);
}

static void test_checker_catches_a_missing_recv(void **state)
{
    (void)state;
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(STRATA_SCHED_1F1B, 4, 1, 8, &p), STRATA_OK);
    // Stage 2 forgets to receive the output gradient of micro-batch 3 from stage 3.
    int i = find(&p, 2, STRATA_PP_RECV_GRAD, 3, 2);
    remove_at(&p, 2, i);
    int b = find(&p, 2, STRATA_PP_BWD, 3, 2);
    char at[64];
    snprintf(at, sizeof at, "stage 2, action %d (B mb 3 chunk 2)", b);
    expect_error(&p, (const char *const[]){at, "its output gradient is never received", NULL});
    strata_pp_plan_free(&p);
}

static void test_checker_catches_a_channel_order_swap(void **state)
{
    (void)state;
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(STRATA_SCHED_1F1B, 2, 1, 4, &p), STRATA_OK);
    // Stage 0 computes micro-batches 0 and 1 but sends their activations in the other order:
    // every dependency still holds, only the channel 0 -> 1 delivers them swapped.
    strata_pp_action_t *l = p.actions[0];
    assert_int_equal(l[0].op, STRATA_PP_FWD);
    assert_int_equal(l[1].op, STRATA_PP_SEND_ACT);
    assert_int_equal(l[2].op, STRATA_PP_FWD);
    assert_int_equal(l[3].op, STRATA_PP_SEND_ACT);
    swap_at(&p, 0, 1, 2); /* F0 F1 S0 S1 */
    swap_at(&p, 0, 2, 3); /* F0 F1 S1 S0 */
    int r = find(&p, 1, STRATA_PP_RECV_ACT, 0, 1);
    char at[64];
    snprintf(at, sizeof at, "stage 1, action %d (recv_act mb 0 chunk 1)", r);
    expect_error(&p, (const char *const[]){at, "out of order", "from stage 0", NULL});
    strata_pp_plan_free(&p);
}

static void test_checker_catches_bwd_before_fwd(void **state)
{
    (void)state;
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(STRATA_SCHED_GPIPE, 3, 1, 2, &p), STRATA_OK);
    int f = find(&p, 2, STRATA_PP_FWD, 1, 2), b = find(&p, 2, STRATA_PP_BWD, 1, 2);
    swap_at(&p, 2, f, b);
    char at[64];
    snprintf(at, sizeof at, "stage 2, action %d (B mb 1 chunk 2)", f);
    expect_error(&p, (const char *const[]){at, "its forward (F) is run only at action", NULL});
    strata_pp_plan_free(&p);
}

static void test_checker_catches_a_deadlock(void **state)
{
    (void)state;
    // Two stages, one micro-batch: stage 0 waits for the gradient before sending the activation
    // stage 1 waits for. Every dependency is in order within each list; the wait is circular.
    strata_pp_action_t s0[] = {{STRATA_PP_FWD, 0, 0, -1},
                               {STRATA_PP_RECV_GRAD, 0, 0, 1},
                               {STRATA_PP_SEND_ACT, 0, 0, 1},
                               {STRATA_PP_BWD, 0, 0, -1}};
    strata_pp_action_t s1[] = {{STRATA_PP_RECV_ACT, 1, 0, 0},
                               {STRATA_PP_FWD, 1, 0, -1},
                               {STRATA_PP_BWD, 1, 0, -1},
                               {STRATA_PP_SEND_GRAD, 1, 0, 0}};
    int count[] = {4, 4};
    strata_pp_action_t *lists[] = {s0, s1};
    strata_pp_plan_t p = {STRATA_SCHED_1F1B, 2, 1, 1, false, count, lists};
    expect_error(&p, (const char *const[]){"deadlock", "2 stages blocked",
                                           "stage 0, action 1 (recv_grad mb 0 chunk 0) waits",
                                           "stage 1, action 0 (recv_act mb 0 chunk 1) waits",
                                           NULL});
    // The same lists with the send first run.
    s0[1] = (strata_pp_action_t){STRATA_PP_SEND_ACT, 0, 0, 1};
    s0[2] = (strata_pp_action_t){STRATA_PP_RECV_GRAD, 0, 0, 1};
    assert_int_equal(strata_pp_check(&p), STRATA_OK);
}

static void test_checker_catches_bad_fields(void **state)
{
    (void)state;
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(STRATA_SCHED_ZB_H1, 3, 1, 3, &p), STRATA_OK);
    int i = find(&p, 1, STRATA_PP_SEND_ACT, 0, 1);
    p.actions[1][i].peer = 0; /* chunk 2 is on stage 2 */
    expect_error(&p, (const char *const[]){"stage 1", "peer 0, but chunk 2 is on stage 2", NULL});
    p.actions[1][i].peer = 2;
    int w = find(&p, 0, STRATA_PP_WGT, 2, 0);
    remove_at(&p, 0, w);
    expect_error(&p, (const char *const[]){"stage 0 never runs the weight gradient (W) of "
                                           "micro-batch 2 on chunk 0",
                                           NULL});
    strata_pp_plan_free(&p);
    // A duplicate forward.
    assert_int_equal(strata_pp_generate(STRATA_SCHED_1F1B, 1, 1, 2, &p), STRATA_OK);
    p.actions[0][2] = p.actions[0][0];
    expect_error(&p, (const char *const[]){"stage 0, action 2 (F mb 0 chunk 0)", "second F", NULL});
    strata_pp_plan_free(&p);
}

/* ---- simulation ----------------------------------------------------------------------------- */

/* Simulates a generated schedule with every chunk's FWD f, BWD b (the whole backward unless
 * split), WGT w, hop p2p, activation act per chunk. */
static void run(strata_schedule_t s, int P, int V, int M, double f, double b, double w,
                double p2p, double act, strata_pp_timeline_t *t)
{
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(s, P, V, M, &p), STRATA_OK);
    const int C = P * V;
    double *c = malloc(4 * (size_t)C * sizeof *c);
    assert_non_null(c);
    for (int k = 0; k < C; k++)
        c[k] = f, c[C + k] = b, c[2 * C + k] = w, c[3 * C + k] = act;
    const strata_pp_costs_t costs = {c, c + C, c + 2 * C, p2p, c + 3 * C, c + 3 * C};
    if (strata_pp_simulate(&p, &costs, t) != STRATA_OK)
        fail_msg("%s: %s", strata_schedule_name(s), strata_last_error());
    free(c);
    strata_pp_plan_free(&p);
}

static double max_of(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static void test_textbook_bubbles(void **state)
{
    (void)state;
    // Equal forward and backward: (P-1)/(M+P-1) for GPipe and 1F1B, (P-1)/(VM+P-1) interleaved;
    // with a backward twice the forward too (the bubble does not depend on the ratio).
    for (int P = 1; P <= 8; P++)
        for (int M = 1; M <= 3 * P; M++)
            for (int b = 1; b <= 2; b++) {
                strata_pp_timeline_t t;
                const double want = (P - 1.0) / (M + P - 1);
                run(STRATA_SCHED_GPIPE, P, 1, M, 1, b, 0, 0, 1, &t);
                assert_true(fabs(t.bubble_mean - want) < 1e-12);
                strata_pp_timeline_free(&t);
                run(STRATA_SCHED_1F1B, P, 1, M, 1, b, 0, 0, 1, &t);
                assert_true(fabs(t.bubble_mean - want) < 1e-12);
                // 1F1B keeps at most P micro-batches in flight on stage 0, GPipe all of them.
                assert_true(t.peak_act[0] == (M < P ? M : P));
                strata_pp_timeline_free(&t);
                for (int V = 2; V <= 4 && M % P == 0; V++) {
                    run(STRATA_SCHED_INTERLEAVED, P, V, M, 1, b, 0, 0, 1, &t);
                    assert_true(fabs(t.bubble_mean - (P - 1.0) / (V * M + P - 1)) < 1e-12);
                    strata_pp_timeline_free(&t);
                }
            }
}

static void test_zero_bubble_h1(void **state)
{
    (void)state;
    // ZB-H1 with F = B = W: the bubble (P-1)(F+B-W) is a third of 1F1B's (P-1)(F+B+W), at the
    // same peak activation memory (P micro-batches on the stage holding the most).
    for (int P = 2; P <= 8; P++)
        for (int M = P; M <= 3 * P; M++) {
            strata_pp_timeline_t one, zb;
            run(STRATA_SCHED_1F1B, P, 1, M, 1, 2, 0, 0, 1, &one); /* B = the whole backward */
            run(STRATA_SCHED_ZB_H1, P, 1, M, 1, 1, 1, 0, 1, &zb);
            assert_true(zb.bubble_mean < one.bubble_mean);
            assert_true(fabs(zb.makespan - 3 * M - (P - 1)) < 1e-9);
            assert_true(fabs(one.makespan - 3 * M - 3 * (P - 1)) < 1e-9);
            assert_true(max_of(zb.peak_act, P) == max_of(one.peak_act, P));
            assert_true(max_of(one.peak_act, P) == P);
            strata_pp_timeline_free(&one);
            strata_pp_timeline_free(&zb);
        }
}

static void test_zero_bubble_v(void **state)
{
    (void)state;
    // ZB-V: two chunks per stage in a V (chunk c and 2P-1-c), the last chunk on stage 0.
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(STRATA_SCHED_ZB_V, 4, 2, 8, &p), STRATA_OK);
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < p.count[s]; i++)
            assert_true(p.actions[s][i].chunk == s || p.actions[s][i].chunk == 7 - s);
    strata_pp_plan_free(&p);
    // With each chunk's F, B and W taking 1 (a chunk is half a stage): the same bubble as ZB-H1
    // up to M = P, below it beyond, and from M = 2P on P-1 chunk passes, (P-1)/(6M+P-1): half
    // ZB-H1's bubble time. Peak activations: 2P chunks, each half of a stage's, so P micro-batches
    // of the stage: 1F1B's.
    for (int P = 2; P <= 8; P++)
        for (int M = 1; M <= 3 * P; M++) {
            strata_pp_timeline_t v, h;
            run(STRATA_SCHED_ZB_V, P, 2, M, 1, 1, 1, 0, 0.5, &v);
            run(STRATA_SCHED_ZB_H1, P, 1, M, 1, 1, 1, 0, 1, &h);
            if (M <= P)
                assert_true(fabs(v.bubble_mean - h.bubble_mean) < 1e-12);
            else
                assert_true(v.bubble_mean < h.bubble_mean - 1e-6);
            if (M >= 2 * P)
                assert_true(fabs(v.bubble_mean - (P - 1.0) / (6 * M + P - 1)) < 1e-12);
            if (M >= P)
                assert_true(max_of(v.peak_act, P) == P && max_of(h.peak_act, P) == P);
            strata_pp_timeline_free(&v);
            strata_pp_timeline_free(&h);
        }
}

static void test_hops(void **state)
{
    (void)state;
    // A hop between stages: the fill and the drain wait 2(P-1) hops at least, and at most every
    // micro-batch also pays two hops on the critical stage.
    for (int M = 4; M <= 16; M *= 2) {
        strata_pp_timeline_t t;
        run(STRATA_SCHED_1F1B, 4, 1, M, 1, 2, 0, 0.25, 1, &t);
        const double lo = (M + 3) * 3.0 + 2 * 3 * 0.25;
        assert_true(t.makespan >= lo - 1e-12);
        assert_true(t.makespan <= lo + 2 * M * 0.25 + 1e-12);
        assert_int_equal(t.count[0], 2 * M); /* spans: compute actions only */
        strata_pp_timeline_free(&t);
    }
    strata_pp_plan_t p;
    assert_int_equal(strata_pp_generate(STRATA_SCHED_1F1B, 2, 1, 2, &p), STRATA_OK);
    double bad[] = {1, -1};
    strata_pp_costs_t c = {.fwd_s = bad};
    strata_pp_timeline_t t;
    assert_int_equal(strata_pp_simulate(&p, &c, &t), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "fwd_s[1]"));
    assert_null(t.count);
    strata_pp_plan_free(&p);
}

static void test_memoised_bubble_is_the_simulation(void **state)
{
    (void)state;
    // strata_pp_bubble (the planner's: compiled graphs, M extended from 2P+M%P and 3P+M%P, cells
    // of (b, w) where one path is the longest) against the whole lists simulated.
    static const double ratio[][2] = {{1, 1}, {2, 0}, {0.3, 2.5}, {5, 0.7}, {1.003, 0.04}};
    int n = 0;
    for (int k = 0; k < STRATA_SCHED_COUNT; k++) {
        const strata_schedule_t s = (strata_schedule_t)k;
        const bool split = strata_schedule_splits_backward(s);
        for (int P = 1; P <= 10; P += P < 4 ? 1 : 3)
            for (int M = 1; M <= 6 * P; M += M < 3 * P ? 1 : P - 1 > 0 ? P - 1 : 1) {
                if (s == STRATA_SCHED_INTERLEAVED && M % P)
                    continue;
                const int V = vmin_of(s) + (s == STRATA_SCHED_INTERLEAVED && M % 2);
                for (int r = 0; r < 5; r++) {
                    const double b = ratio[r][0], w = ratio[r][1];
                    strata_pp_timeline_t t;
                    run(s, P, V, M, 1, split ? b : b + w, split ? w : 0, 0, 1, &t);
                    double bubble = -1, peak = -1, peak0 = -1;
                    assert_int_equal(strata_pp_bubble(s, P, V, M, b, w, &bubble, &peak),
                                     STRATA_OK);
                    assert_int_equal(strata_pp_peak_act(s, P, V, M, 0, &peak0), STRATA_OK);
                    if (fabs(bubble - t.bubble_mean) > 1e-9 || peak != max_of(t.peak_act, P) ||
                        peak0 != t.peak_act[0])
                        fail_msg("%s P=%d V=%d M=%d b=%g w=%g: bubble %.12f vs %.12f, peak %g "
                                 "vs %g, stage 0 %g vs %g",
                                 strata_schedule_name(s), P, V, M, b, w, bubble, t.bubble_mean,
                                 peak, max_of(t.peak_act, P), peak0, t.peak_act[0]);
                    strata_pp_timeline_free(&t);
                    n++;
                }
            }
    }
    assert_true(n > 1000);
    double x;
    assert_int_equal(strata_pp_bubble(STRATA_SCHED_1F1B, 4, 1, 8, -1, 0, &x, NULL),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_pp_peak_act(STRATA_SCHED_1F1B, 4, 1, 8, 4, &x), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_pp_bubble(STRATA_SCHED_INTERLEAVED, 4, 2, 6, 1, 1, &x, NULL),
                     STRATA_ERR_INVALID_ARG);
}

static void test_svg(void **state)
{
    (void)state;
    strata_pp_timeline_t a, b;
    run(STRATA_SCHED_ZB_H1, 3, 1, 4, 1, 1, 1, 0, 1, &a);
    run(STRATA_SCHED_1F1B, 3, 1, 4, 1.2, 2.1, 0, 0.1, 1, &b);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    const char *notes[] = {"a note <with> & escapes"};
    const strata_pp_svg_opts_t o = {.title = "T", .tail_s = 1, .tail_label = "tail", .notes = notes,
                                    .nnotes = 1};
    assert_int_equal(strata_pp_timeline_svg_opts(&a, "planned", &b, "measured", &o, f), STRATA_OK);
    fclose(f);
    assert_non_null(strstr(buf, ">planned<"));
    assert_non_null(strstr(buf, ">measured<"));
    assert_non_null(strstr(buf, "stage 2: W micro-batch 3 chunk 2"));
    assert_non_null(strstr(buf, "a note &lt;with&gt; &amp; escapes"));
    assert_null(strstr(buf, "<with>"));
    assert_non_null(strstr(buf, "</svg>"));
    free(buf);
    strata_pp_timeline_free(&a);
    strata_pp_timeline_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_schedule_passes_the_checker),
        cmocka_unit_test(test_refusals_name_the_constraint),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_checker_catches_a_missing_recv),
        cmocka_unit_test(test_checker_catches_a_channel_order_swap),
        cmocka_unit_test(test_checker_catches_bwd_before_fwd),
        cmocka_unit_test(test_checker_catches_a_deadlock),
        cmocka_unit_test(test_checker_catches_bad_fields),
        cmocka_unit_test(test_textbook_bubbles),
        cmocka_unit_test(test_zero_bubble_h1),
        cmocka_unit_test(test_zero_bubble_v),
        cmocka_unit_test(test_hops),
        cmocka_unit_test(test_memoised_bubble_is_the_simulation),
        cmocka_unit_test(test_svg),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
