/* The scheduler's pictures, plain SVG written with fprintf: a placement on its cluster
 * (strata_write_place_svg) and the utilisation of simulated runs over time (strata_write_sim_svg).
 * sched.h says what each shows. Layout is computed whole before anything is written, so the
 * picture is exactly as large as what it holds (the longest line of text included); every name
 * read from a file goes through st_xml_text. Nothing here chooses hosts or runs a simulation. */
#include "base/base.h"
#include "strata/sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FREE_FILL   "#eeeeee"
#define BUSY_FILL   "#9e9e9e"
#define FAILED_FILL "#d32f2f"
#define TEXT_GREY   "#555555"

/* ---- colours ----------------------------------------------------------------------------------- */

static void hsl_hex(double h, double s, double l, char out[8])
{
    double c = (1 - fabs(2 * l - 1)) * s, hp = fmod(h, 360) / 60, x = c * (1 - fabs(fmod(hp, 2) - 1));
    double r = 0, g = 0, b = 0;
    if (hp < 1)
        r = c, g = x;
    else if (hp < 2)
        r = x, g = c;
    else if (hp < 3)
        g = c, b = x;
    else if (hp < 4)
        g = x, b = c;
    else if (hp < 5)
        r = x, b = c;
    else
        r = c, b = x;
    double m = l - c / 2;
    snprintf(out, 8, "#%02x%02x%02x", (int)lround(255 * (r + m)), (int)lround(255 * (g + m)),
             (int)lround(255 * (b + m)));
}

/* Replica i's colour: hues 45 to 315 degrees only, so no replica looks like a failed host's red;
 * consecutive replicas 97 degrees apart (mod 270) and alternately darker and lighter. */
static void replica_colour(int i, char out[8])
{
    hsl_hex(45 + (double)(((long long)i * 97) % 270), 0.62, i % 2 ? 0.64 : 0.46, out);
}

/* ---- placement --------------------------------------------------------------------------------- */

#define COL_MAX 32      /* hosts per column before a rack wraps into the next column */
#define PANEL_W 720.0   /* a panel's racks wrap into a new band below beyond this width */
#define MAX_W   1500.0  /* panels wrap into a new row beyond this width */
#define LEFT    64.0    /* room for the host axis */
#define MAX_COL_LABELS 48 /* rack names per panel at most: beyond, every k-th rack is named */

typedef struct host_key {
    int key[STRATA_TOPO_MAX_LEVELS]; /* its units from the top down, then its index */
    int h;
} host_key_t;

static int cmp_host_key(const void *a, const void *b)
{
    const host_key_t *x = a, *y = b;
    for (int i = 0; i < STRATA_TOPO_MAX_LEVELS; i++)
        if (x->key[i] != y->key[i])
            return x->key[i] < y->key[i] ? -1 : 1;
    return (x->h > y->h) - (x->h < y->h);
}

typedef struct panel {
    int unit;      /* unit of the panel level */
    int hosts, job_hosts, columns; /* its hosts, those of the job, its column units */
    double w, h;   /* extent of its cells and bands */
    double ox, oy; /* where its cells start */
    char counts[96]; /* "192 racks, 384 hosts, 256 in the job", beside its name */
} panel_t;

/* A band: one line of columns of a panel. Racks that do not fit the panel's width start the next. */
typedef struct band {
    int panel;
    double y;  /* top, relative to the panel */
    int rows;  /* hosts in its tallest column */
} band_t;

typedef struct col_label {
    int unit, band; /* the column's level-1 unit, and its band */
    double x, w;    /* relative to the panel: start and width of the unit's columns */
    bool shown;
} col_label_t;

typedef struct layout {
    int panel_level, col_level; /* col_level -1: no rack level, columns are runs of hosts */
    double cell, pitch, label_h; /* label_h: room for the column names under a band (0: none) */
    int npanels, nbands, nlabels;
    panel_t *panels;
    band_t *bands;
    col_label_t *labels;
    int *panel_of;       /* per host */
    double *hx, *hy;     /* per host, relative to its panel */
    double width, height; /* of the panels' area, from LEFT */
} layout_t;

static void layout_free(layout_t *L)
{
    free(L->panels);
    free(L->bands);
    free(L->labels);
    free(L->panel_of);
    free(L->hx);
    free(L->hy);
}

static const char *unit_name(const strata_cluster_t *c, int level, int unit)
{
    return c->dom_name[c->dom_off[level] + unit];
}

static const char *panel_name(const strata_cluster_t *c, const layout_t *L, const panel_t *P)
{
    return L->panel_level < c->topo.nlevels - 1 ? unit_name(c, L->panel_level, P->unit)
                                                : c->topo.name;
}

/* Places every host: a panel per unit of the panel level; in it a column per unit of the column
 * level (a rack's hosts top down, wrapping after COL_MAX), a wider gap where columns differ at a
 * higher level, and bands of columns no wider than PANEL_W. */
static strata_status_t layout_hosts(const strata_cluster_t *c, const int *slot, layout_t *L)
{
    const int nl = c->topo.nlevels, n = c->nhosts;
    memset(L, 0, sizeof *L);
    L->panel_level = nl >= 4 ? nl - 2 : nl - 1;
    L->col_level = nl >= 3 ? 1 : -1;
    L->cell = n <= 256 ? 12 : n <= 2048 ? 9 : n <= 8192 ? 6 : 4;
    L->pitch = L->cell + (L->cell >= 9 ? 2 : 1);
    const double rack_gap = ST_MAX(3.0, L->cell / 2);
    const int ncol_units = L->col_level >= 1 ? c->ndom[L->col_level] : 0;
    host_key_t *keys = malloc((size_t)n * sizeof *keys);
    int *in_unit = calloc((size_t)ncol_units + 1, sizeof *in_unit);
    L->panels = calloc((size_t)c->ndom[L->panel_level] + 1, sizeof *L->panels);
    L->bands = calloc((size_t)n + 1, sizeof *L->bands);
    L->labels = calloc((size_t)n + 1, sizeof *L->labels);
    L->panel_of = malloc((size_t)n * sizeof *L->panel_of);
    L->hx = malloc((size_t)n * sizeof *L->hx);
    L->hy = malloc((size_t)n * sizeof *L->hy);
    if (!keys || !in_unit || !L->panels || !L->bands || !L->labels || !L->panel_of || !L->hx ||
        !L->hy) {
        free(keys);
        free(in_unit);
        layout_free(L);
        return st_error(STRATA_ERR_NO_MEMORY, "place svg: out of memory");
    }
    double longest = 0; // the longest column name, for the room under a band
    for (int u = 0; u < ncol_units; u++)
        longest = ST_MAX(longest, st_svg_text_width(unit_name(c, L->col_level, u), 8));
    // Names stand upright under their columns: they need a column at least 9 px wide.
    L->label_h = ncol_units && L->pitch + rack_gap >= 9 ? ST_MIN(longest, 90.0) + 6 : 0;
    for (int h = 0; h < n; h++) {
        memset(&keys[h], 0, sizeof keys[h]);
        for (int l = nl - 1, k = 0; l >= 1; l--)
            keys[h].key[k++] = c->hosts[h].dom[l];
        keys[h].h = h;
        if (ncol_units)
            in_unit[c->hosts[h].dom[L->col_level]]++;
    }
    qsort(keys, (size_t)n, sizeof *keys, cmp_host_key);
    panel_t *pn = NULL;
    band_t *bd = NULL;
    col_label_t *lab = NULL;
    double x = 0;
    int row = 0, prev = -1;
    for (int i = 0; i < n; i++) {
        const int h = keys[i].h, pu = c->hosts[h].dom[L->panel_level];
        int differ = 0; // the highest level below the panel's at which h leaves prev's unit
        if (pn && pu == pn->unit)
            for (int l = L->panel_level - 1; l >= 1 && !differ; l--)
                if (c->hosts[h].dom[l] != c->hosts[prev].dom[l])
                    differ = l;
        const bool new_panel = !pn || pu != pn->unit;
        if (!new_panel && differ) { // the gap goes before the first host of the next unit
            const int cols = ncol_units ? (in_unit[c->hosts[h].dom[L->col_level]] + COL_MAX - 1) / COL_MAX : 1;
            x += L->pitch + rack_gap * differ;
            row = 0;
            lab = NULL;
            if (x + cols * L->pitch > PANEL_W) { // the next band
                const double y = bd->y + bd->rows * L->pitch + L->label_h + 10;
                bd = &L->bands[L->nbands++];
                *bd = (band_t){.panel = (int)(pn - L->panels), .y = y};
                x = 0;
            }
        } else if (!new_panel && row == COL_MAX) {
            x += L->pitch;
            row = 0;
        }
        if (new_panel) {
            pn = &L->panels[L->npanels++];
            pn->unit = pu;
            bd = &L->bands[L->nbands++];
            *bd = (band_t){.panel = (int)(pn - L->panels)};
            x = 0;
            row = 0;
            lab = NULL;
        }
        if (!lab && L->col_level >= 1) {
            lab = &L->labels[L->nlabels++];
            *lab = (col_label_t){.unit = c->hosts[h].dom[L->col_level],
                                 .band = (int)(bd - L->bands), .x = x};
            pn->columns++;
        }
        pn->hosts++;
        pn->job_hosts += slot[h] >= 0;
        if (lab)
            lab->w = x + L->cell - lab->x;
        L->panel_of[h] = (int)(pn - L->panels);
        L->hx[h] = x;
        L->hy[h] = bd->y + row * L->pitch;
        row++;
        bd->rows = ST_MAX(bd->rows, row);
        pn->w = ST_MAX(pn->w, x + L->cell);
        pn->h = ST_MAX(pn->h, bd->y + bd->rows * L->pitch);
        prev = h;
    }
    free(keys);
    free(in_unit);
    // At most MAX_COL_LABELS names per panel: every k-th column when there are more.
    for (int k = 0, first = 0; k <= L->nlabels; k++)
        if (k == L->nlabels || L->bands[L->labels[k].band].panel != L->bands[L->labels[first].band].panel) {
            const int every = (k - first + MAX_COL_LABELS - 1) / MAX_COL_LABELS;
            for (int j = first; j < k; j++)
                L->labels[j].shown = L->label_h > 0 && (j - first) % (every ? every : 1) == 0;
            first = k;
        }
    // Panels side by side, wrapping into rows.
    double px = LEFT, py = 0, row_h = 0;
    for (int k = 0; k < L->npanels; k++) {
        panel_t *P = &L->panels[k];
        int used = 0;
        if (P->columns)
            used = snprintf(P->counts, sizeof P->counts, "%d %ss, ", P->columns,
                            c->topo.level[L->col_level].name);
        snprintf(P->counts + used, sizeof P->counts - (size_t)used, "%d hosts, %d in the job",
                 P->hosts, P->job_hosts);
        double box = ST_MAX(P->w, st_svg_text_width(panel_name(c, L, P), 11) + 8 +
                                      st_svg_text_width(P->counts, 10)) + 24;
        if (px > LEFT && px + box > LEFT + MAX_W) {
            px = LEFT;
            py += row_h;
            row_h = 0;
        }
        P->ox = px;
        P->oy = py + 18; // the panel's name above its cells
        px += box;
        row_h = ST_MAX(row_h, 18 + P->h + L->label_h + 14);
        L->width = ST_MAX(L->width, px - LEFT);
    }
    L->height = py + row_h;
    return STRATA_OK;
}

/* The host's state and ranks, for its tooltip. */
static void host_tooltip(FILE *f, const strata_cluster_t *c, const strata_job_t *job, int h,
                         int slot, long long pph, bool spare)
{
    char path[512];
    st_xml_text(f, strata_cluster_host_path(c, h, path, sizeof path));
    if (slot >= 0) {
        long long r0 = slot * pph, r1 = r0 + pph - 1;
        int d0 = strata_job_coord(job, r0, STRATA_DIM_DP), d1 = d0;
        for (long long r = r0; r <= r1; r++)
            d1 = ST_MAX(d1, strata_job_coord(job, r, STRATA_DIM_DP));
        fprintf(f, ": ranks %lld-%lld, replica %d", r0, r1, d0);
        if (d1 != d0)
            fprintf(f, "-%d", d1);
    } else {
        const strata_host_state_t s = c->hosts[h].state;
        fputs(s == STRATA_HOST_FAILED ? ": failed" : s == STRATA_HOST_BUSY ? ": busy" : ": free", f);
    }
    if (spare)
        fputs(", kept as a spare", f);
}

typedef struct text_line {
    char s[256];
} text_line_t;

strata_status_t strata_write_place_svg(const strata_cluster_t *c, const strata_placement_t *p,
                                       const strata_job_t *job, FILE *f)
{
    const int nl = c->topo.nlevels;
    layout_t L;
    int *slot = malloc((size_t)c->nhosts * sizeof *slot);
    bool *spare = calloc((size_t)c->nhosts, sizeof *spare);
    if (!slot || !spare) {
        free(slot);
        free(spare);
        return st_error(STRATA_ERR_NO_MEMORY, "place svg: out of memory");
    }
    for (int h = 0; h < c->nhosts; h++)
        slot[h] = -1;
    for (int j = 0; j < p->nhosts; j++)
        slot[p->hosts[j]] = j;
    for (int s = 0; s < p->nspares; s++)
        spare[p->spares[s]] = true;
    strata_status_t rc = layout_hosts(c, slot, &L);
    if (rc < 0) {
        free(slot);
        free(spare);
        return rc;
    }
    const long long pph = p->nhosts ? p->world / p->nhosts : 1;

    // The text first: it decides the width.
    text_line_t title, sub;
    snprintf(title.s, sizeof title.s, "%s: job tp%d cp%d pp%d dp%d = %lld ranks on %d hosts",
             c->topo.name, job->tp, job->cp, job->pp, job->dp, p->world, p->nhosts);
    int used = snprintf(sub.s, sizeof sub.s, "predicted communication %.4g s/step", p->cost.total_s);
    for (int d = 0, first = 1; d < STRATA_DIM_COUNT && used < (int)sizeof sub.s; d++)
        if (p->cost.dim_level[d] >= 0) {
            used += snprintf(sub.s + used, sizeof sub.s - (size_t)used, "%s%s %.4g", first ? " (" : ", ",
                             strata_dim_name((strata_dim_t)d), p->cost.dim_s[d]);
            first = 0;
        }
    if (used < (int)sizeof sub.s && strchr(sub.s, '('))
        used += snprintf(sub.s + used, sizeof sub.s - (size_t)used, ")");
    if (p->nspares && used < (int)sizeof sub.s)
        snprintf(sub.s + used, sizeof sub.s - (size_t)used, "; %d spare hosts kept", p->nspares);

    // The group table: a row per dimension with more than one member, then the whole job.
    const int span_levels = nl > 1 ? nl - 1 : 1; // the top is one unit for everybody
    enum { NCOL_FIXED = 3 };
    const char *head[NCOL_FIXED + STRATA_TOPO_MAX_LEVELS + 1];
    char cells[STRATA_DIM_COUNT + 1][NCOL_FIXED + STRATA_TOPO_MAX_LEVELS + 1][48];
    int ncols = NCOL_FIXED + span_levels + 1, nrows = 0;
    head[0] = "group";
    head[1] = "groups x ranks";
    head[2] = "";
    for (int l = 0; l < span_levels; l++)
        head[NCOL_FIXED + l] = c->topo.level[l].name;
    head[ncols - 1] = "comm s/step";
    const long long world = strata_job_world(job);
    for (int d = 0; d < STRATA_DIM_COUNT; d++) {
        const int n = d == STRATA_DIM_TP ? job->tp : d == STRATA_DIM_CP ? job->cp
                      : d == STRATA_DIM_PP ? job->pp : job->dp;
        if (n < 2)
            continue;
        char(*row)[48] = cells[nrows++];
        snprintf(row[0], 48, "%s", strata_dim_name((strata_dim_t)d));
        snprintf(row[1], 48, "%lld x %d", world / n, n);
        row[2][0] = '\0';
        for (int l = 0; l < span_levels; l++)
            snprintf(row[NCOL_FIXED + l], 48, "%d", p->cost.group_span[d][l]);
        if (p->cost.dim_level[d] >= 0)
            snprintf(row[ncols - 1], 48, "%.4g", p->cost.dim_s[d]);
        else
            snprintf(row[ncols - 1], 48, "no traffic");
    }
    {
        char(*row)[48] = cells[nrows++];
        snprintf(row[0], 48, "job");
        snprintf(row[1], 48, "1 x %lld", world);
        row[2][0] = '\0';
        for (int l = 0; l < span_levels; l++)
            snprintf(row[NCOL_FIXED + l], 48, "%d", p->cost.hosts_per_level[l]);
        snprintf(row[ncols - 1], 48, "%.4g (sum)", p->cost.total_s);
    }
    double colx[NCOL_FIXED + STRATA_TOPO_MAX_LEVELS + 2];
    colx[0] = 0;
    for (int k = 0; k < ncols; k++) {
        double w = st_svg_text_width(head[k], 11);
        for (int r = 0; r < nrows; r++)
            w = ST_MAX(w, st_svg_text_width(cells[r][k], 11));
        colx[k + 1] = colx[k] + (w > 0 ? w + 16 : 0);
    }
    const char *span_note = "most units one group spans (1 = every group stays inside one):";

    const double title_w = ST_MAX(st_svg_text_width(title.s, 14), st_svg_text_width(sub.s, 11));
    // The colour key's entries: a few replicas, then the host states.
    struct {
        char fill[8], label[32];
        bool outline;
    } key[8];
    int nkey = 0;
    double key_w = 0;
    for (int i = 0; i < ST_MIN(job->dp, 4); i++, nkey++) {
        replica_colour(i, key[nkey].fill);
        snprintf(key[nkey].label, sizeof key[nkey].label, i == 3 && job->dp > 4 ? "replica %d ..." : "replica %d", i);
        key[nkey].outline = false;
    }
    static const char *const state_fill[] = {FREE_FILL, BUSY_FILL, FAILED_FILL, FREE_FILL};
    static const char *const state_name[] = {"free", "busy", "failed", "spare (outlined)"};
    for (int i = 0; i < 4; i++, nkey++) {
        snprintf(key[nkey].fill, sizeof key[nkey].fill, "%s", state_fill[i]);
        snprintf(key[nkey].label, sizeof key[nkey].label, "%s", state_name[i]);
        key[nkey].outline = i == 3;
    }
    for (int i = 0; i < nkey; i++)
        key_w += 14 + st_svg_text_width(key[i].label, 11) + 12;
    const double table_w = ST_MAX(colx[ncols], colx[NCOL_FIXED] + st_svg_text_width(span_note, 10));
    const double top = 58, legend_y = top + L.height + 8;
    const double W = ceil(ST_MAX(ST_MAX(LEFT + L.width, 10 + title_w), 10 + ST_MAX(key_w, table_w)) + 16);
    const double H = ceil(legend_y + 30 + 18 * (nrows + 2) + 16);

    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">");
    st_xml_text(f, title.s);
    fprintf(f, "</text>\n<text x=\"10\" y=\"38\">");
    st_xml_text(f, sub.s);
    fprintf(f, "</text>\n");

    // Panels: name above, cells, column names under each band; host ticks left of each row's first.
    const char *col_name = L.col_level >= 1 ? c->topo.level[L.col_level].name : "column";
    double axis_row = -1;
    for (int k = 0; k < L.npanels; k++) {
        const panel_t *P = &L.panels[k];
        const double ox = P->ox, oy = top + P->oy;
        fprintf(f, "<g class=\"panel\">\n<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\">", ox, oy - 6);
        st_xml_text(f, panel_name(c, &L, P));
        fprintf(f, "</text><text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"%s\">",
                ox + st_svg_text_width(panel_name(c, &L, P), 11) + 8, oy - 6, TEXT_GREY);
        st_xml_text(f, P->counts);
        fprintf(f, "</text>\n");
        const bool axis = P->oy != axis_row;
        axis_row = P->oy;
        for (int b = 0; axis && b < L.nbands; b++) {
            if (L.bands[b].panel != k)
                continue;
            const band_t *B = &L.bands[b];
            const int step = L.pitch >= 12 ? 4 : L.pitch >= 7 ? 8 : 16;
            for (int r = 0; r < B->rows; r += step)
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"8\" text-anchor=\"end\" "
                           "fill=\"%s\">%d</text>\n",
                        ox - 4, oy + B->y + r * L.pitch + L.cell - 1, TEXT_GREY, r);
            fprintf(f, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" font-size=\"8\" "
                       "text-anchor=\"end\" fill=\"%s\">host in ", ox - 20, oy + B->y, TEXT_GREY);
            st_xml_text(f, col_name);
            fprintf(f, "</text>\n");
        }
        for (int i = 0; i < L.nlabels; i++) {
            const col_label_t *lb = &L.labels[i];
            const band_t *B = &L.bands[lb->band];
            if (B->panel != k || !lb->shown)
                continue;
            fprintf(f, "<text transform=\"translate(%.1f,%.1f) rotate(90)\" font-size=\"8\" "
                       "fill=\"%s\">",
                    ox + lb->x + lb->w / 2 - 3, oy + B->y + B->rows * L.pitch + 3, TEXT_GREY);
            st_xml_text(f, unit_name(c, L.col_level, lb->unit));
            fprintf(f, "</text>\n");
        }
        fprintf(f, "</g>\n");
    }
    for (int h = 0; h < c->nhosts; h++) {
        const panel_t *P = &L.panels[L.panel_of[h]];
        char fill[8] = FREE_FILL;
        if (slot[h] >= 0)
            replica_colour(strata_job_coord(job, slot[h] * pph, STRATA_DIM_DP), fill);
        else if (c->hosts[h].state == STRATA_HOST_BUSY)
            snprintf(fill, sizeof fill, BUSY_FILL);
        else if (c->hosts[h].state == STRATA_HOST_FAILED)
            snprintf(fill, sizeof fill, FAILED_FILL);
        fprintf(f, "<rect class=\"host\" x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" "
                   "fill=\"%s\"%s><title>",
                P->ox + L.hx[h], top + P->oy + L.hy[h], L.cell, L.cell, fill,
                spare[h] ? " stroke=\"black\" stroke-width=\"1.5\"" : "");
        host_tooltip(f, c, job, h, slot[h], pph, spare[h]);
        fprintf(f, "</title></rect>\n");
    }

    // Colour key.
    double kx = 10, ky = legend_y + 12;
    for (int i = 0; i < nkey; i++) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"%s/>"
                   "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                kx, ky - 9, key[i].fill, key[i].outline ? " stroke=\"black\" stroke-width=\"1.5\"" : "",
                kx + 14, ky, key[i].label);
        kx += 14 + st_svg_text_width(key[i].label, 11) + 12;
    }

    // The group table.
    double ty = ky + 24;
    fprintf(f, "<g class=\"groups\">\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"%s\">%s</text>\n",
            10 + colx[NCOL_FIXED], ty, TEXT_GREY, span_note);
    ty += 16;
    for (int k = 0; k < ncols; k++) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\">", 10 + colx[k], ty);
        st_xml_text(f, head[k]);
        fprintf(f, "</text>\n");
    }
    for (int r = 0; r < nrows; r++) {
        ty += 18;
        fprintf(f, "<g class=\"group\" data-dim=\"%s\">", cells[r][0]);
        for (int k = 0; k < ncols; k++) {
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\"", 10 + colx[k], ty);
            if (k >= NCOL_FIXED && k < ncols - 1)
                fprintf(f, " class=\"span\" data-level=\"%s\"", c->topo.level[k - NCOL_FIXED].name);
            fprintf(f, ">");
            st_xml_text(f, cells[r][k]);
            fprintf(f, "</text>");
        }
        fprintf(f, "</g>\n");
    }
    fprintf(f, "</g>\n</svg>\n");
    layout_free(&L);
    free(slot);
    free(spare);
    return STRATA_OK;
}

/* ---- simulation -------------------------------------------------------------------------------- */

/* A step of 1, 2 or 5 times a power of ten giving about `ticks` ticks over `range`. */
static double nice_step(double range, int ticks)
{
    double raw = range / ticks, p = pow(10, floor(log10(raw))), m = raw / p;
    return p * (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10);
}

void strata_write_sim_svg(const strata_sim_report_t *r, int nreports, FILE *f)
{
    static const char *const colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                          "#17becf"};
    double tmax = 0;
    for (int i = 0; i < nreports; i++)
        tmax = ST_MAX(tmax, r[i].makespan_s);
    if (!(tmax > 0))
        tmax = 1;
    const char *unit = tmax >= 7200 ? "h" : tmax >= 120 ? "min" : "s";
    const double per = tmax >= 7200 ? 3600 : tmax >= 120 ? 60 : 1, span = tmax / per;
    const double step = nice_step(span, 8);
    const double x0 = 70, pw = 780, lane_h = 72, lane_gap = 30, top = 52;
    const double W = x0 + pw + 40, H = top + nreports * (lane_h + lane_gap) + 46;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%%\" "
               "height=\"100%%\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">accelerator "
               "utilisation over time, one lane per placement policy</text>\n");
    const double width_s = nreports ? r[0].sample_width_s : 0;
    fprintf(f, "<text x=\"10\" y=\"37\" fill=\"%s\">each step: busy accelerators / all, the "
               "mean over %.3g %s; a lane ends at its policy's makespan</text>\n",
            TEXT_GREY, width_s >= 3600 ? width_s / 3600 : width_s >= 60 ? width_s / 60 : width_s,
            width_s >= 3600 ? "h" : width_s >= 60 ? "min" : "s");
    const double axis_y = top + nreports * (lane_h + lane_gap);
    for (int i = 0; i < nreports; i++) {
        const strata_sim_report_t *q = &r[i];
        const char *col = colours[i % 6];
        const double y0 = top + i * (lane_h + lane_gap) + lane_gap, yb = y0 + lane_h;
        fprintf(f, "<g class=\"lane\" data-policy=\"");
        st_xml_text(f, strata_policy_name(q->policy));
        fprintf(f, "\">\n<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\" font-weight=\"bold\">", x0, y0 - 7, col);
        st_xml_text(f, strata_policy_name(q->policy));
        fprintf(f, "</text><text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">mean %.1f%%, makespan %.3g %s, "
                   "wait mean %.0f s, fragmentation %.1f%%</text>\n",
                x0 + 10 + st_svg_text_width(strata_policy_name(q->policy), 11), y0 - 7, TEXT_GREY,
                100 * q->utilisation, q->makespan_s / per, unit, q->wait_mean_s,
                100 * q->fragmentation);
        fprintf(f, "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                   "fill=\"#fafafa\" stroke=\"#999999\"/>\n", x0, y0, pw, lane_h);
        for (int g = 0; g <= 2; g++) { // 0, 50, 100 %
            const double y = yb - g * lane_h / 2;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#dddddd\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\">%d%%</text>\n",
                    x0, y, x0 + pw, y, x0 - 4, y + 3, g * 50);
        }
        for (double t = step; t < span - 1e-9; t += step)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n",
                    x0 + pw * t / span, y0, x0 + pw * t / span, yb);
        // The samples as steps, from time 0 to the makespan, closed down to 0% as an area.
        fprintf(f, "<path class=\"util\" fill=\"%s\" fill-opacity=\"0.3\" stroke=\"%s\" "
                   "stroke-width=\"1.2\" d=\"M%.2f,%.2f", col, col, x0, yb);
        const double w = q->sample_width_s;
        for (int k = 0; k < q->nsamples; k++) {
            const double a = k * w, b = ST_MIN((k + 1) * w, q->makespan_s);
            const double u = ST_MAX(0.0, ST_MIN(1.0, q->sample_util[k]));
            fprintf(f, " L%.2f,%.2f L%.2f,%.2f", x0 + pw * a / tmax, yb - lane_h * u,
                    x0 + pw * b / tmax, yb - lane_h * u);
        }
        fprintf(f, " L%.2f,%.2f Z\"/>\n</g>\n", x0 + pw * ST_MIN(q->nsamples * w, q->makespan_s) / tmax, yb);
    }
    // The time axis under the last lane.
    fprintf(f, "<g class=\"axis\">\n<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444444\"/>\n",
            x0, axis_y, x0 + pw, axis_y);
    for (double t = 0; t <= span + 1e-9; t += step)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444444\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%g</text>\n",
                x0 + pw * t / span, axis_y, x0 + pw * t / span, axis_y + 4, x0 + pw * t / span,
                axis_y + 15, t);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">time from the start of the trace (%s)"
               "</text>\n</g>\n</svg>\n", x0 + pw / 2, axis_y + 32, unit);
}
