/* Slurm topology.conf reader, tree and block forms.
 *
 *   SwitchName=s0 Nodes=node[01-16] LinkSpeed=100     a leaf switch and its nodes
 *   SwitchName=s2 Switches=s[0-1]                      a switch above others
 *   BlockName=b1 Nodes=node[01-32]                     topology/block: a block of nodes
 *   BlockSizes=32,64                                   block sizes a job may use
 *
 * The result is the switch graph with each node attached to its leaf switch or block; turning it
 * into levels with bandwidths is the scheduler's business (src/sched), which also reads the level
 * parameters from a strata cluster file. Children may be defined after their parent, so Switches=
 * lists are resolved once the whole file is read. Keys are matched case-insensitively, as Slurm
 * does. Every malformed line is refused with "file:line: expected ...". */
#include "base/base.h"
#include "strata/topo.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct pending {
    int sw, line;
    char *expr; /* Switches= of switch sw */
} pending_t;

typedef struct parser {
    const char *origin;
    strata_slurm_topo_t *t;
    int sw_cap, node_cap;
    pending_t *pend;
    int npend, pend_cap;
    int tree_lines, block_lines;
} parser_t;

static int find_switch(const strata_slurm_topo_t *t, const char *name)
{
    for (int i = 0; i < t->nswitches; i++)
        if (!strcmp(t->switches[i].name, name))
            return i;
    return -1;
}

static strata_status_t grow(void **v, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return STRATA_OK;
    int c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *n = realloc(*v, (size_t)c * elem);
    if (!n)
        return st_error(STRATA_ERR_NO_MEMORY, "topology.conf: out of memory");
    *v = n;
    *cap = c;
    return STRATA_OK;
}

static strata_status_t add_nodes(parser_t *p, int line, int sw, const char *expr)
{
    char **names;
    int n;
    if (strata_hostlist_expand(expr, &names, &n) < 0)
        return st_error(STRATA_ERR_PARSE, "%s:%d: expected a hostlist in Nodes=: %s", p->origin,
                        line, strata_last_error());
    strata_status_t rc = grow((void **)&p->t->nodes, &p->node_cap, p->t->nnodes + n,
                              sizeof *p->t->nodes);
    for (int i = 0; rc >= 0 && i < n; i++) {
        strata_slurm_node_t *nd = &p->t->nodes[p->t->nnodes++];
        snprintf(nd->name, sizeof nd->name, "%s", names[i]);
        nd->sw = sw;
    }
    strata_hostlist_free(names, n);
    return rc;
}

static strata_status_t parse_line(parser_t *p, char *s, int line)
{
    strata_slurm_topo_t *t = p->t;
    char *save = NULL;
    int sw = -1;
    bool first = true, block = false;
    for (char *tok = strtok_r(s, " \t\r", &save); tok; tok = strtok_r(NULL, " \t\r", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || !eq[1])
            return st_error(STRATA_ERR_PARSE, "%s:%d: expected Key=Value, got \"%s\"", p->origin,
                            line, tok);
        *eq = '\0';
        const char *key = tok, *val = eq + 1;
        if (first) {
            first = false;
            if (!strcasecmp(key, "BlockSizes")) {
                p->block_lines++;
                t->nblock_sizes = 0;
                char *save2 = NULL;
                char buf[256];
                snprintf(buf, sizeof buf, "%s", val);
                for (char *v = strtok_r(buf, ",", &save2); v; v = strtok_r(NULL, ",", &save2)) {
                    char *end;
                    long x = strtol(v, &end, 10);
                    if (*end || x < 1 || x > 1000000 || t->nblock_sizes >= 8)
                        return st_error(STRATA_ERR_PARSE,
                                        "%s:%d: expected BlockSizes= as up to 8 positive "
                                        "integers separated by ',', got \"%s\"",
                                        p->origin, line, val);
                    t->block_sizes[t->nblock_sizes++] = (int)x;
                }
                continue;
            }
            block = !strcasecmp(key, "BlockName");
            if (!block && strcasecmp(key, "SwitchName"))
                return st_error(STRATA_ERR_PARSE,
                                "%s:%d: expected a line starting with SwitchName=, BlockName= or "
                                "BlockSizes=, got \"%s=\"",
                                p->origin, line, key);
            if (block)
                p->block_lines++;
            else
                p->tree_lines++;
            if (strlen(val) >= STRATA_HOSTNAME_MAX || strchr(val, '['))
                return st_error(STRATA_ERR_PARSE, "%s:%d: expected one %s name, got \"%s\"",
                                p->origin, line, block ? "block" : "switch", val);
            int prev = find_switch(t, val);
            if (prev >= 0)
                return st_error(STRATA_ERR_PARSE,
                                "%s:%d: expected a new %s name, \"%s\" is already defined at "
                                "line %d",
                                p->origin, line, block ? "block" : "switch", val,
                                t->switches[prev].line);
            ST_TRY(grow((void **)&t->switches, &p->sw_cap, t->nswitches + 1, sizeof *t->switches));
            sw = t->nswitches++;
            strata_slurm_switch_t *x = &t->switches[sw];
            memset(x, 0, sizeof *x);
            snprintf(x->name, sizeof x->name, "%s", val);
            x->parent = -1;
            x->line = line;
            continue;
        }
        if (sw < 0) // after BlockSizes=, which names no switch to attach Nodes= or LinkSpeed= to
            return st_error(STRATA_ERR_PARSE, "%s:%d: expected BlockSizes= alone on its line, got "
                            "\"%s=\" after it", p->origin, line, key);
        if (!strcasecmp(key, "Nodes")) {
            ST_TRY(add_nodes(p, line, sw, val));
        } else if (!strcasecmp(key, "Switches") && !block) {
            ST_TRY(grow((void **)&p->pend, &p->pend_cap, p->npend + 1, sizeof *p->pend));
            pending_t *pd = &p->pend[p->npend];
            pd->expr = malloc(strlen(val) + 1);
            if (!pd->expr)
                return st_error(STRATA_ERR_NO_MEMORY, "topology.conf: out of memory");
            strcpy(pd->expr, val);
            pd->sw = sw;
            pd->line = line;
            p->npend++;
        } else if (!strcasecmp(key, "LinkSpeed")) {
            char *end;
            double v = strtod(val, &end);
            if (*end || !(v > 0))
                return st_error(STRATA_ERR_PARSE,
                                "%s:%d: expected LinkSpeed= as a positive number, got \"%s\"",
                                p->origin, line, val);
            t->switches[sw].link_speed = v;
        } else {
            return st_error(STRATA_ERR_PARSE, "%s:%d: expected %s, got \"%s=\"", p->origin, line,
                            block ? "Nodes=" : "Nodes=, Switches= or LinkSpeed=", key);
        }
    }
    return STRATA_OK;
}

static int cmp_node(const void *a, const void *b)
{
    return strcmp(((const strata_slurm_node_t *)a)->name, ((const strata_slurm_node_t *)b)->name);
}

static strata_status_t finish(parser_t *p)
{
    strata_slurm_topo_t *t = p->t;
    if (p->tree_lines && p->block_lines)
        return st_error(STRATA_ERR_PARSE,
                        "%s:1: expected either tree form (SwitchName=) or block form "
                        "(BlockName=), not both",
                        p->origin);
    t->block = p->block_lines > 0;
    for (int i = 0; i < p->npend; i++) {
        char **names;
        int n;
        pending_t *pd = &p->pend[i];
        if (strata_hostlist_expand(pd->expr, &names, &n) < 0)
            return st_error(STRATA_ERR_PARSE, "%s:%d: expected a hostlist in Switches=: %s",
                            p->origin, pd->line, strata_last_error());
        strata_status_t rc = STRATA_OK;
        for (int k = 0; k < n && rc >= 0; k++) {
            int c = find_switch(t, names[k]);
            if (c < 0)
                rc = st_error(STRATA_ERR_PARSE,
                              "%s:%d: expected switch \"%s\" (in Switches=) to be defined by a "
                              "SwitchName= line",
                              p->origin, pd->line, names[k]);
            else if (c == pd->sw)
                rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected a switch other than itself in "
                              "Switches=, got \"%s\"", p->origin, pd->line, names[k]);
            else if (t->switches[c].parent >= 0 && t->switches[c].parent != pd->sw)
                rc = st_error(STRATA_ERR_PARSE,
                              "%s:%d: expected switch \"%s\" to have one parent, it is already "
                              "under \"%s\"",
                              p->origin, pd->line, names[k],
                              t->switches[t->switches[c].parent].name);
            else
                t->switches[c].parent = pd->sw;
        }
        strata_hostlist_free(names, n);
        ST_TRY(rc);
    }
    // Cycles: walking up from any switch must end within nswitches steps.
    for (int i = 0; i < t->nswitches; i++) {
        int s = i, steps = 0;
        while (s >= 0 && steps <= t->nswitches) {
            s = t->switches[s].parent;
            steps++;
        }
        if (s >= 0)
            return st_error(STRATA_ERR_PARSE, "%s:%d: expected a tree, switch \"%s\" is in a cycle",
                            p->origin, t->switches[i].line, t->switches[i].name);
    }
    if (t->nnodes == 0)
        return st_error(STRATA_ERR_PARSE, "%s:1: expected at least one Nodes= list", p->origin);
    // Duplicates: sort a copy by name.
    strata_slurm_node_t *c = malloc((size_t)t->nnodes * sizeof *c);
    if (!c)
        return st_error(STRATA_ERR_NO_MEMORY, "topology.conf: out of memory");
    memcpy(c, t->nodes, (size_t)t->nnodes * sizeof *c);
    qsort(c, (size_t)t->nnodes, sizeof *c, cmp_node);
    for (int i = 1; i < t->nnodes; i++)
        if (!strcmp(c[i].name, c[i - 1].name)) {
            strata_status_t rc = st_error(
                STRATA_ERR_PARSE, "%s:%d: expected each node once, \"%s\" is under \"%s\" and \"%s\"",
                p->origin, t->switches[c[i].sw].line, c[i].name, t->switches[c[i - 1].sw].name,
                t->switches[c[i].sw].name);
            free(c);
            return rc;
        }
    free(c);
    return STRATA_OK;
}

void strata_slurm_topo_free(strata_slurm_topo_t *t)
{
    if (!t)
        return;
    free(t->switches);
    free(t->nodes);
    memset(t, 0, sizeof *t);
}

strata_status_t strata_slurm_topo_parse(const char *text, const char *origin,
                                        strata_slurm_topo_t *out)
{
    memset(out, 0, sizeof *out);
    parser_t p = {.origin = origin ? origin : "topology.conf", .t = out};
    size_t len = strlen(text);
    char *buf = malloc(len + 1);
    if (!buf)
        return st_error(STRATA_ERR_NO_MEMORY, "topology.conf: out of memory");
    memcpy(buf, text, len + 1);
    strata_status_t rc = STRATA_OK;
    int line = 0;
    for (char *s = buf; s && rc >= 0;) {
        char *nl = strchr(s, '\n');
        if (nl)
            *nl = '\0';
        line++;
        char *hash = strchr(s, '#');
        if (hash)
            *hash = '\0';
        char *q = s;
        while (isspace((unsigned char)*q))
            q++;
        if (*q)
            rc = parse_line(&p, q, line);
        s = nl ? nl + 1 : NULL;
    }
    if (rc >= 0)
        rc = finish(&p);
    for (int i = 0; i < p.npend; i++)
        free(p.pend[i].expr);
    free(p.pend);
    free(buf);
    if (rc < 0)
        strata_slurm_topo_free(out);
    return rc;
}

strata_status_t strata_slurm_topo_load(const char *path, strata_slurm_topo_t *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return st_error_errno(STRATA_ERR_IO, errno, "%s: cannot open", path);
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *n = realloc(text, cap);
            if (!n) {
                free(text);
                fclose(f);
                return st_error(STRATA_ERR_NO_MEMORY, "%s: out of memory", path);
            }
            text = n;
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096)
            break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(text);
        return st_error(STRATA_ERR_IO, "%s: read failed", path);
    }
    text[len] = '\0';
    strata_status_t rc = strata_slurm_topo_parse(text, path, out);
    free(text);
    return rc;
}

int strata_slurm_topo_host_path(const strata_slurm_topo_t *t, const char *host, char *out,
                                size_t cap)
{
    int node = -1;
    for (int i = 0; i < t->nnodes && node < 0; i++)
        node = strcmp(t->nodes[i].name, host) == 0 ? i : -1;
    if (node < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "topology.conf: host \"%s\" is not listed", host);
    // The chain of switches above the node, leaf first; written outermost first.
    int chain[64], d = 0;
    for (int sw = t->nodes[node].sw; sw >= 0 && d < 64; sw = t->switches[sw].parent)
        chain[d++] = sw;
    size_t at = 0;
    out[0] = '\0';
    for (int i = d - 1; i >= -1; i--) {
        const char *name = i >= 0 ? t->switches[chain[i]].name : host;
        int w = snprintf(out + at, at < cap ? cap - at : 0, "%s%s", at ? "/" : "", name);
        if (w < 0 || (at += (size_t)w) >= cap)
            return st_error(STRATA_ERR_INVALID_ARG, "topology.conf: path of %s is too long", host);
    }
    return d + 1;
}

strata_status_t strata_topo_this_host(char *out, size_t size)
{
    const char *slurm = getenv("SLURMD_NODENAME");
    if (slurm && *slurm) {
        snprintf(out, size, "%s", slurm);
        return STRATA_OK;
    }
    if (gethostname(out, size) != 0)
        return st_error_errno(STRATA_ERR_SYSTEM, errno, "gethostname");
    out[size - 1] = '\0';
    return STRATA_OK;
}
