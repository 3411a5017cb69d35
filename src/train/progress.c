/* The training progress line and the run's summary (progress.h): what to show, when, and how (redrawn
 * in place on a terminal, complete lines in a log). The loop (loop.c) hands it every step. */
#include "train/progress.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "train/trainer.h"

#define REDRAW_NS 100000000ull /* a redrawn line at most 10 times a second */

/* STRATA_PROGRESS: auto (a terminal redraws), bar, lines. */
static bool want_redraw(void)
{
    const char *style = st_knob_str("STRATA_PROGRESS");
    if (!strcmp(style, "bar"))
        return true;
    if (strcmp(style, "lines") && strcmp(style, "auto") && style[0])
        fprintf(stderr, "strata train: warning: STRATA_PROGRESS=%s: expected auto, bar or lines; "
                "using auto\n", style);
    return !strcmp(style, "lines") ? false : isatty(STDERR_FILENO) == 1;
}

void st_progress_start(st_progress_t *p, const strata_trainer_t *t, double flops_tok)
{
    const strata_train_config_t *c = &t->cfg;
    *p = (st_progress_t){.on = c->progress, .every_s = c->progress_every,
                         .first_step = t->step, .tokens_step = (double)c->batch * c->seq,
                         .flops_tok = flops_tok, .peak_flops = t->peak_gflops * 1e9 * t->nranks,
                         .rank_peak_flops = t->peak_gflops * 1e9, .loss = NAN, .val = NAN};
    if (p->on)
        p->redraw = want_redraw();
    p->start_ns = p->shown_ns = st_now_ns();
}

/* Tokens/s over the window (the last ST_PROGRESS_WINDOW steps). */
static double window_tps(const st_progress_t *p)
{
    double s = 0;
    for (int i = 0; i < p->win_n; i++)
        s += p->win_s[i];
    return s > 0 ? p->win_n * p->tokens_step / s : 0;
}

static double mfu_of(const st_progress_t *p, double tps)
{
    return p->peak_flops > 0 ? tps * p->flops_tok / p->peak_flops : 0;
}

/* "H:MM:SS", or seconds with a tenth under a minute. */
static void put_duration(char *out, size_t size, double s)
{
    if (s < 60) {
        snprintf(out, size, "%.3g s", s);
        return;
    }
    long v = lround(s);
    snprintf(out, size, "%ld:%02ld:%02ld", v / 3600, v / 60 % 60, v % 60);
}

/* The pipeline's bubbles, the side tasks, a straggler, a slow link: " | ..." pieces, or "". */
static void extras(const strata_trainer_t *t, const strata_step_info_t *s, char *out, size_t size)
{
    size_t n = 0;
    out[0] = 0;
    if (t->pipe)
        n += (size_t)snprintf(out + n, size - n, " | bubble %.0f%% (schedule %.0f%%)",
                              100 * s->pp_bubble_mean, 100 * s->pp_bubble_predicted_mean);
    if (n < size && t->harvester && s->bubble_s > 0) {
        char tasks[96];
        st_trainer_harvest_snprint(t, tasks, sizeof tasks);
        n += (size_t)snprintf(out + n, size - n, " | harvested %.0f%% (%s)",
                              100 * s->harvest_s / s->bubble_s, tasks);
    }
    if (n < size && s->straggler >= 0)
        n += (size_t)snprintf(out + n, size - n, " | straggler: rank %d (%.1fx)", s->straggler,
                              (double)s->straggler_ratio);
    if (n < size && s->slow_link_from >= 0)
        snprintf(out + n, size - n, " | slow link: rank %d -> %d (%.2f MB/s, others %.1f)",
                 s->slow_link_from, s->slow_link_to, (double)s->slow_link_MBps,
                 (double)s->slow_link_median_MBps);
}

static void show(st_progress_t *p, const strata_trainer_t *t, const strata_step_info_t *s,
                 bool last, uint64_t now)
{
    int64_t steps = t->cfg.steps, done = s->step - p->first_step;
    enum { W = 24 };
    char bar[W + 1], val[64] = "", eta[32], more[320], line[640];
    int filled = (int)((double)s->step / (double)steps * W);
    for (int i = 0; i < W; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[W] = 0;
    if (isfinite(p->val))
        snprintf(val, sizeof val, " | val %.4f (step %" PRId64 ")", p->val, p->val_step);
    double per_step = done > 0 ? (double)(now - p->start_ns) * 1e-9 / (double)done : 0;
    put_duration(eta, sizeof eta, per_step * (double)(steps - s->step));
    extras(t, s, more, sizeof more);
    double tps = window_tps(p);
    int len = snprintf(line, sizeof line, "step %" PRId64 "/%" PRId64 " [%s] loss %.4f%s | %.0f "
                       "tok/s | MFU %.1f%% | ETA %s%s", s->step, steps, bar, (double)s->loss, val,
                       tps, 100 * mfu_of(p, tps), eta, more);
    len = ST_MIN(len, (int)sizeof line - 1);
    if (p->redraw) { // blank what a longer previous line leaves behind
        fprintf(stderr, "\r%s%*s", line, ST_MAX(p->width - len, 0), "");
        p->width = len;
        p->open = !last;
        if (last)
            fputc('\n', stderr);
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
    p->shown_ns = now;
}

void st_progress_step(st_progress_t *p, const strata_trainer_t *t, const strata_step_info_t *s,
                      double val, bool last)
{
    p->win_s[p->win_at] = s->seconds;
    p->win_at = (p->win_at + 1) % ST_PROGRESS_WINDOW;
    p->win_n = ST_MIN(p->win_n + 1, ST_PROGRESS_WINDOW);
    p->steps_s += s->seconds;
    p->nsteps++;
    p->step = s->step;
    p->loss = s->loss;
    bool fresh = false;
    if (isfinite(val)) {
        p->val = val;
        p->val_step = s->step;
        fresh = true;
    } else if (s->side_val_step > 0 && isfinite(s->side_val_loss)) { // --harvest eval
        p->val = s->side_val_loss;
        p->val_step = s->side_val_step;
        fresh = true;
    }
    if (!p->on)
        return;
    uint64_t now = st_now_ns();
    double since = (double)(now - p->shown_ns) * 1e-9;
    bool due = last || fresh || s->step == p->first_step + 1 ||
               (p->redraw ? now - p->shown_ns >= REDRAW_NS : since >= p->every_s);
    if (due)
        show(p, t, s, last, now);
}

void st_progress_break(st_progress_t *p)
{
    if (!p->open)
        return;
    fputc('\n', stderr);
    fflush(stderr);
    p->open = false;
    p->width = 0;
}

void st_progress_summary(st_progress_t *p)
{
    st_progress_break(p);
    if (!p->on || p->nsteps == 0)
        return;
    char wall[32], val[64] = "";
    put_duration(wall, sizeof wall, (double)(st_now_ns() - p->start_ns) * 1e-9);
    if (isfinite(p->val))
        snprintf(val, sizeof val, " | val loss %.4f (step %" PRId64 ")", p->val, p->val_step);
    double tps = p->steps_s > 0 ? (double)p->nsteps * p->tokens_step / p->steps_s : 0;
    // The peak named is one rank's, measured at the run's precision and threads.
    fprintf(stderr, "strata train: ran steps %" PRId64 "-%" PRId64 " in %s | final loss %.4f%s | "
            "mean %.0f tok/s, MFU %.1f%% of %.0f GFLOP/s %s (over the steps' time)\n",
            p->first_step + 1, p->step, wall, (double)p->loss, val, tps, 100 * mfu_of(p, tps),
            p->rank_peak_flops * 1e-9, strata_precision_name(strata_blas_precision()));
    fflush(stderr);
}
