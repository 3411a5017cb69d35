/* The picture of one or two pipeline timelines on one time axis: a row per stage, forwards,
 * backwards and weight gradients as coloured blocks (later chunks of a stage lighter, each block
 * numbered with its micro-batch where it is wide enough), idle time as the grey of the row, each
 * stage's bubble share beside its name, a legend, and whatever the caller adds (a title, a tail
 * after the pipeline, notes). Plain SVG written with fprintf; every element carries a tooltip. */
#include "base/base.h"
#include "schedule/schedule_internal.h"

#include <string.h>

#define WIDTH 1200.0
#define LEFT  120.0
#define RIGHT 24.0

static const unsigned colour[3] = {0x4e79a7, 0xf28e2b, 0x59a14f}; /* F, B, W */
static const unsigned tail_colour = 0xe15759;

/* The colour c mixed with white: later chunks of a stage are lighter. */
static void shade(unsigned c, int chunk_round, char out[8])
{
    const double keep = chunk_round == 0 ? 1.0 : chunk_round == 1 ? 0.62 : chunk_round == 2 ? 0.42 : 0.3;
    unsigned rgb[3] = {c >> 16 & 255, c >> 8 & 255, c & 255};
    for (int i = 0; i < 3; i++)
        rgb[i] = (unsigned)(rgb[i] * keep + 255 * (1 - keep) + 0.5);
    snprintf(out, 8, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

static double row_height(int stages)
{
    return stages > 64 ? 6 : stages > 16 ? 12 : 22;
}

/* One timeline's rows from y on; returns the y below them. */
static double draw(FILE *f, const strata_pp_timeline_t *t, const char *title, double tail_s,
                   double sx, double y)
{
    const double row = row_height(t->stages), plot = WIDTH - LEFT - RIGHT;
    fprintf(f, "<text x=\"10\" y=\"%.1f\" font-weight=\"bold\">", y + 14);
    st_xml_text(f, title ? title : "timeline");
    fprintf(f, "</text><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">makespan %.4g s, mean bubble "
               "%.1f%%</text>\n",
            WIDTH - RIGHT, y + 14, t->makespan, 100 * t->bubble_mean);
    y += 22;
    for (int s = 0; s < t->stages; s++) {
        const double ry = y + s * row;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#eeeeee\"/>\n",
                LEFT, ry, plot, row - 2);
        if (row >= 12 || s % 8 == 0)
            fprintf(f, "<text x=\"10\" y=\"%.1f\" font-size=\"%d\">stage %d (%.0f%%)</text>\n",
                    ry + row - 6 - (row < 12 ? -2 : 0), row < 12 ? 8 : 12, s,
                    t->bubble ? 100 * t->bubble[s] : 0.0);
        for (int i = 0; t->spans && i < t->count[s]; i++) {
            const strata_pp_span_t *sp = &t->spans[s][i];
            const double x = LEFT + sp->start * sx, w = (sp->end - sp->start) * sx;
            char fill[8];
            shade(colour[sp->op < 3 ? sp->op : 0], t->stages ? sp->chunk / t->stages : 0, fill);
            fprintf(f,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                    "stroke=\"white\" stroke-width=\"%.2f\"><title>stage %d: %s micro-batch %d "
                    "chunk %d, %.4g to %.4g s</title></rect>\n",
                    x, ry, w > 0.3 ? w : 0.3, row - 2, fill, w > 3 ? 0.6 : 0.0, s,
                    strata_pp_op_name((strata_pp_op_t)sp->op), sp->mb, sp->chunk, sp->start,
                    sp->end);
            if (w >= 13 && row >= 12)
                fprintf(f,
                        "<text x=\"%.2f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\" "
                        "fill=\"%s\">%d</text>\n",
                        x + w / 2, ry + row / 2 + 2, sp->chunk / t->stages >= 2 ? "black" : "white",
                        sp->mb);
        }
        if (tail_s > 0)
            fprintf(f,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"#%06x\"/>\n",
                    LEFT + t->makespan * sx, ry, tail_s * sx, row - 2, tail_colour);
    }
    return y + t->stages * row + 8;
}

static bool has_weight_gradients(const strata_pp_timeline_t *t)
{
    for (int s = 0; t && s < t->stages; s++)
        for (int i = 0; t->spans && i < t->count[s]; i++)
            if (t->spans[s][i].op == STRATA_PP_WGT)
                return true;
    return false;
}

static strata_status_t valid(const strata_pp_timeline_t *t)
{
    if (!t || t->stages < 1 || !t->count || (!t->spans && t->count[0]))
        return st_error(STRATA_ERR_INVALID_ARG, "pipeline picture: expected a timeline with "
                                                "stages and spans");
    return STRATA_OK;
}

strata_status_t strata_pp_timeline_svg_opts(const strata_pp_timeline_t *first,
                                            const char *first_title,
                                            const strata_pp_timeline_t *second,
                                            const char *second_title,
                                            const strata_pp_svg_opts_t *opts, FILE *f)
{
    static const strata_pp_svg_opts_t none = {0};
    if (!opts)
        opts = &none;
    ST_TRY(valid(first));
    if (second)
        ST_TRY(valid(second));
    if (!f)
        return st_error(STRATA_ERR_INVALID_ARG, "pipeline picture: no file");
    const double tail = opts->tail_s > 0 ? opts->tail_s : 0;
    double span = first->makespan;
    if (second && second->makespan > span)
        span = second->makespan;
    const double total = span + tail > 0 ? span + tail : 1;
    const double plot = WIDTH - LEFT - RIGHT, sx = plot / total;
    double height = 10 + (opts->title ? 24 : 0) + (opts->subtitle ? 20 : 0) + 80 +
                    20.0 * opts->nnotes + 30 + first->stages * row_height(first->stages);
    if (second)
        height += 34 + second->stages * row_height(second->stages);
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            WIDTH, height);
    double y = 10;
    if (opts->title) {
        fprintf(f, "<text x=\"10\" y=\"%.1f\" font-size=\"15\" font-weight=\"bold\">", y + 10);
        st_xml_text(f, opts->title);
        fputs("</text>\n", f);
        y += 24;
    }
    if (opts->subtitle) {
        fprintf(f, "<text x=\"10\" y=\"%.1f\">", y + 8);
        st_xml_text(f, opts->subtitle);
        fputs("</text>\n", f);
        y += 20;
    }
    y = draw(f, first, first_title, tail, sx, y);
    if (second)
        y = draw(f, second, second_title ? second_title : "second", tail, sx, y + 4);

    // The time axis, under the rows.
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", LEFT,
            y, LEFT + plot, y);
    for (int k = 0; k <= 5; k++) {
        const double tk = total * k / 5, x = LEFT + tk * sx;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"11\">%.4g s</text>\n",
                x, y, x, y + 4, x, y + 16, k == 0 ? "start" : k == 5 ? "end" : "middle", tk);
    }
    y += 38;

    // Legend: what the colours are.
    const bool w = has_weight_gradients(first) || has_weight_gradients(second);
    const char *label[4] = {"forward (F)", w ? "backward, input gradient (B)" : "backward (B)",
                            "weight gradient (W)", opts->tail_label ? opts->tail_label : "tail"};
    double x = LEFT;
    for (int k = 0; k < 4; k++) {
        if ((k == 2 && !w) || (k == 3 && tail <= 0))
            continue;
        fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"#%06x\"/>", x,
                y - 11, k < 3 ? colour[k] : tail_colour);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">", x + 20, y);
        st_xml_text(f, label[k]);
        fputs("</text>\n", f);
        x += 40 + 7.0 * (double)strlen(label[k]);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">grey: idle (the bubble); lighter blocks: a stage's "
               "later chunks; numbers: micro-batches</text>\n",
            LEFT, y + 20);
    y += 42;
    for (int k = 0; k < opts->nnotes; k++, y += 20) {
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">", LEFT, y);
        st_xml_text(f, opts->notes[k]);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
    return ferror(f) ? st_error(STRATA_ERR_IO, "pipeline picture: write failed") : STRATA_OK;
}

strata_status_t strata_pp_timeline_svg(const strata_pp_timeline_t *first, const char *first_title,
                                       const strata_pp_timeline_t *second,
                                       const char *second_title, FILE *f)
{
    return strata_pp_timeline_svg_opts(first, first_title, second, second_title, NULL, f);
}
