/* The scheduler's view of a cluster: hosts with names, states and their unit at every level of the
 * fabric tree. Built from a regular strata tree (presets, cluster files) or from a Slurm
 * topology.conf, whose racks may differ in size; the host states come from a small text file.
 * Placement and pricing live in place.c; this file only builds and looks up. */
#include "base/base.h"
#include "strata/sched.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HOSTS 1000000

void strata_cluster_free(strata_cluster_t *c)
{
    if (!c)
        return;
    free(c->hosts);
    free(c->dom_name);
    free(c->by_name);
    memset(c, 0, sizeof *c);
}

typedef struct name_ref {
    const char *name;
    int idx;
} name_ref_t;

static int cmp_by_name(const void *a, const void *b)
{
    const name_ref_t *x = a, *y = b;
    int r = strata_hostname_cmp(x->name, y->name);
    return r ? r : x->idx - y->idx;
}

/* Allocates the name index and the unit-name table once ndom[] is known. */
static strata_status_t finish(strata_cluster_t *c)
{
    c->by_name = malloc((size_t)c->nhosts * sizeof *c->by_name);
    int total = 0;
    for (int i = 0; i < c->topo.nlevels; i++) {
        c->dom_off[i] = total;
        total += c->ndom[i];
    }
    c->dom_off[c->topo.nlevels] = total;
    c->dom_name = calloc((size_t)total, sizeof *c->dom_name);
    if (!c->by_name || !c->dom_name)
        return st_error(STRATA_ERR_NO_MEMORY, "cluster: out of memory");
    name_ref_t *refs = malloc((size_t)c->nhosts * sizeof *refs);
    if (!refs)
        return st_error(STRATA_ERR_NO_MEMORY, "cluster: out of memory");
    for (int i = 0; i < c->nhosts; i++) {
        refs[i].name = c->hosts[i].name;
        refs[i].idx = i;
    }
    qsort(refs, (size_t)c->nhosts, sizeof *refs, cmp_by_name);
    for (int i = 0; i < c->nhosts; i++)
        c->by_name[i] = refs[i].idx;
    free(refs);
    for (int i = 1; i < c->nhosts; i++)
        if (!strata_hostname_cmp(c->hosts[c->by_name[i]].name, c->hosts[c->by_name[i - 1]].name))
            return st_error(STRATA_ERR_INVALID_ARG, "cluster: expected unique host names, \"%s\" "
                            "appears twice", c->hosts[c->by_name[i]].name);
    return STRATA_OK;
}

int strata_cluster_find_host(const strata_cluster_t *c, const char *name)
{
    int lo = 0, hi = c->nhosts - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int r = strata_hostname_cmp(c->hosts[c->by_name[mid]].name, name);
        if (!r)
            return c->by_name[mid];
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

strata_status_t strata_cluster_from_topo(const strata_topo_t *topo, const char *prefix,
                                         strata_cluster_t *out)
{
    memset(out, 0, sizeof *out);
    ST_TRY(strata_topo_validate(topo));
    long long cap = strata_topo_capacity(topo);
    long long per = topo->level[0].fanout;
    long long nhosts = cap / per;
    if (nhosts < 1 || nhosts > MAX_HOSTS)
        return st_error(STRATA_ERR_INVALID_ARG, "cluster %s: expected 1 to %d hosts, got %lld",
                        topo->name, MAX_HOSTS, nhosts);
    out->topo = *topo;
    out->nhosts = (int)nhosts;
    out->hosts = calloc((size_t)nhosts, sizeof *out->hosts);
    if (!out->hosts)
        return st_error(STRATA_ERR_NO_MEMORY, "cluster: out of memory");
    long long unit[STRATA_TOPO_MAX_LEVELS];
    unit[0] = 1;
    for (int i = 1; i < topo->nlevels; i++)
        unit[i] = unit[i - 1] * topo->level[i].fanout;
    for (int i = 0; i < topo->nlevels; i++)
        out->ndom[i] = (int)(nhosts / unit[i]);
    for (int h = 0; h < out->nhosts; h++) {
        strata_host_t *x = &out->hosts[h];
        snprintf(x->name, sizeof x->name, "%s%05d", prefix ? prefix : "node", h);
        x->accels = (int)per;
        for (int i = 0; i < topo->nlevels; i++)
            x->dom[i] = (int)(h / unit[i]);
    }
    strata_status_t rc = finish(out);
    if (rc < 0) {
        strata_cluster_free(out);
        return rc;
    }
    for (int i = 0; i < topo->nlevels; i++)
        for (int d = 0; d < out->ndom[i]; d++)
            snprintf(out->dom_name[out->dom_off[i] + d], STRATA_HOSTNAME_MAX, "%s%d",
                     topo->level[i].name, d);
    for (int h = 0; h < out->nhosts; h++)
        snprintf(out->dom_name[out->dom_off[0] + h], STRATA_HOSTNAME_MAX, "%s", out->hosts[h].name);
    return STRATA_OK;
}

strata_status_t strata_cluster_from_slurm(const strata_slurm_topo_t *st,
                                          const strata_topo_t *params, int accels_per_host,
                                          strata_cluster_t *out)
{
    memset(out, 0, sizeof *out);
    if (accels_per_host < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "expected accelerators per host >= 1, got %d",
                        accels_per_host);
    int ns = st->nswitches;
    int *height = calloc((size_t)ns + 1, sizeof *height);
    int *map = NULL;
    strata_status_t rc = STRATA_OK;
    if (!height)
        return st_error(STRATA_ERR_NO_MEMORY, "cluster: out of memory");
    for (int s = 0; s < ns; s++)
        height[s] = ST_MAX(height[s], 1);
    // A switch is one above its tallest child: walk up from every switch.
    for (int s = 0; s < ns; s++)
        for (int c = s, p = st->switches[s].parent; p >= 0; c = p, p = st->switches[p].parent)
            if (height[p] < height[c] + 1)
                height[p] = height[c] + 1;
    int top = 0, roots = 0;
    for (int s = 0; s < ns; s++) {
        top = ST_MAX(top, height[s]);
        roots += st->switches[s].parent < 0;
    }
    // One more level holding everything unless a single switch already does.
    int nlev = top + 1 + (roots > 1 ? 1 : 0);
    if (nlev > STRATA_TOPO_MAX_LEVELS) {
        free(height);
        return st_error(STRATA_ERR_INVALID_ARG,
                        "topology.conf: expected at most %d switch levels, got %d",
                        STRATA_TOPO_MAX_LEVELS - 2, top);
    }
    strata_topo_init(&out->topo, "slurm");
    for (int i = 0; i < nlev; i++) {
        strata_topo_level_t lv = {.fanout = 1, .oversub = 1};
        if (params && params->nlevels > 0) {
            lv = params->level[ST_MIN(i, params->nlevels - 1)];
        } else {
            lv.bw_Bps = i == 0 ? 450e9 : 50e9;
            lv.latency_s = i == 0 ? 3e-6 : (3.0 + i) * 1e-6;
            lv.oversub = 1;
            lv.link_class = i == 0 ? STRATA_LINK_SCALE_UP : STRATA_LINK_SCALE_OUT;
        }
        const char *gen[] = {"host", st->block ? "block" : "leaf", "spine", "core"};
        if (i < 4)
            snprintf(lv.name, sizeof lv.name, "%s", i == nlev - 1 && i > 1 ? "cluster" : gen[i]);
        else
            snprintf(lv.name, sizeof lv.name, "%s%d", i == nlev - 1 ? "cluster" : "core", i);
        lv.fanout = i == 0 ? accels_per_host : 1; // irregular: fanout is not meaningful above
        out->topo.level[out->topo.nlevels++] = lv;
    }
    out->nhosts = st->nnodes;
    out->hosts = calloc((size_t)st->nnodes, sizeof *out->hosts);
    map = malloc(((size_t)ns + 1) * (size_t)nlev * sizeof *map);
    if (!out->hosts || !map) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "cluster: out of memory");
        goto out;
    }
    for (size_t i = 0; i < ((size_t)ns + 1) * (size_t)nlev; i++)
        map[i] = -1;
    for (int h = 0; h < st->nnodes; h++) {
        strata_host_t *x = &out->hosts[h];
        snprintf(x->name, sizeof x->name, "%s", st->nodes[h].name);
        x->accels = accels_per_host;
        x->dom[0] = h;
        int s = st->nodes[h].sw;
        for (int i = 1; i < nlev; i++) {
            while (s >= 0 && height[s] < i)
                s = st->switches[s].parent;
            int key = s >= 0 ? s : ns; // ns: the virtual root
            int *m = &map[(size_t)i * ((size_t)ns + 1) + (size_t)key];
            if (*m < 0)
                *m = out->ndom[i]++;
            x->dom[i] = *m;
        }
    }
    out->ndom[0] = out->nhosts;
    rc = finish(out);
    if (rc < 0)
        goto out;
    for (int h = 0; h < out->nhosts; h++)
        snprintf(out->dom_name[h], STRATA_HOSTNAME_MAX, "%s", out->hosts[h].name);
    for (int i = 1; i < nlev; i++)
        for (int s = 0; s <= ns; s++) {
            int m = map[(size_t)i * ((size_t)ns + 1) + (size_t)s];
            if (m >= 0)
                snprintf(out->dom_name[out->dom_off[i] + m], STRATA_HOSTNAME_MAX, "%s",
                         s < ns ? st->switches[s].name : "cluster");
        }
out:
    free(height);
    free(map);
    if (rc < 0)
        strata_cluster_free(out);
    return rc;
}

const char *strata_cluster_host_path(const strata_cluster_t *c, int host, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = c->topo.nlevels - 1; i >= 0 && n < size; i--) {
        int w = snprintf(buf + n, size - n, "/%s",
                         c->dom_name[c->dom_off[i] + c->hosts[host].dom[i]]);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    return buf;
}

/* A state word: strata's own (free, busy, failed) or any of sinfo's long or short node states in
 * either case ("idle", "MIXED", "drng", "down*", "idle~"). Free: idle (also powered down, "~":
 * Slurm powers it up). Busy: running or held for others (alloc, mix, comp, resv, plnd, maint,
 * reboot, npc, blocked). Failed: unusable for a new job (down, drain, drng, fail, futr, inval, unk)
 * or not responding ("*"). */
static bool host_state(const char *word, strata_host_state_t *out)
{
    static const struct { const char *name; strata_host_state_t st; } names[] = {
        {"free", STRATA_HOST_FREE},         {"idle", STRATA_HOST_FREE},
        {"busy", STRATA_HOST_BUSY},         {"alloc", STRATA_HOST_BUSY},
        {"allocated", STRATA_HOST_BUSY},    {"mix", STRATA_HOST_BUSY},
        {"mixed", STRATA_HOST_BUSY},        {"comp", STRATA_HOST_BUSY},
        {"completing", STRATA_HOST_BUSY},   {"resv", STRATA_HOST_BUSY},
        {"reserved", STRATA_HOST_BUSY},     {"plnd", STRATA_HOST_BUSY},
        {"planned", STRATA_HOST_BUSY},      {"maint", STRATA_HOST_BUSY},
        {"reboot", STRATA_HOST_BUSY},       {"reboot_issued", STRATA_HOST_BUSY},
        {"reboot_requested", STRATA_HOST_BUSY}, {"npc", STRATA_HOST_BUSY},
        {"perfctrs", STRATA_HOST_BUSY},     {"blocked", STRATA_HOST_BUSY},
        {"pow_up", STRATA_HOST_BUSY},       {"powering_up", STRATA_HOST_BUSY},
        {"failed", STRATA_HOST_FAILED},     {"down", STRATA_HOST_FAILED},
        {"drain", STRATA_HOST_FAILED},      {"drained", STRATA_HOST_FAILED},
        {"drng", STRATA_HOST_FAILED},       {"draining", STRATA_HOST_FAILED},
        {"fail", STRATA_HOST_FAILED},       {"failg", STRATA_HOST_FAILED},
        {"failing", STRATA_HOST_FAILED},    {"futr", STRATA_HOST_FAILED},
        {"future", STRATA_HOST_FAILED},     {"inval", STRATA_HOST_FAILED},
        {"unk", STRATA_HOST_FAILED},        {"unknown", STRATA_HOST_FAILED},
        {"pow_dn", STRATA_HOST_FAILED},     {"powering_down", STRATA_HOST_FAILED},
        {"powered_down", STRATA_HOST_FAILED},
    };
    char w[64];
    size_t n = 0;
    for (; word[n] && n + 1 < sizeof w; n++)
        w[n] = (char)tolower((unsigned char)word[n]);
    w[n] = 0;
    bool not_responding = false;
    while (n > 0 && strchr("*~#!%$@^-+", w[n - 1])) // sinfo's flags after the state
        not_responding |= w[--n] == '*';
    w[n] = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(w, names[i].name)) {
            *out = not_responding ? STRATA_HOST_FAILED : names[i].st;
            return true;
        }
    return false;
}

strata_status_t strata_cluster_parse_state(strata_cluster_t *c, const char *text,
                                           const char *origin)
{
    int line = 0;
    const char *s = text;
    while (*s) {
        line++;
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        char buf[4096];
        if (len >= sizeof buf)
            return st_error(STRATA_ERR_PARSE, "%s:%d: expected a line shorter than %zu bytes",
                            origin, line, sizeof buf);
        memcpy(buf, s, len);
        buf[len] = '\0';
        s = nl ? nl + 1 : s + len;
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = '\0';
        char list[4096], state[64], extra[8];
        int n = sscanf(buf, "%4095s %63s %7s", list, state, extra);
        if (n <= 0)
            continue;
        if (n != 2)
            return st_error(STRATA_ERR_PARSE,
                            "%s:%d: expected \"<hostlist> free|busy|failed|down|drain\"", origin,
                            line);
        strata_host_state_t st;
        if (!host_state(state, &st))
            return st_error(STRATA_ERR_PARSE,
                            "%s:%d: expected a state (free, busy, failed, or one of sinfo's: idle, "
                            "mix, alloc, comp, resv, plnd, drain, drng, down, fail, ..., with its "
                            "flags such as * or ~), got \"%s\"", origin, line, state);
        char **names;
        int count;
        if (strata_hostlist_expand(list, &names, &count) < 0)
            return st_error(STRATA_ERR_PARSE, "%s:%d: %s", origin, line, strata_last_error());
        for (int i = 0; i < count; i++) {
            int h = strata_cluster_find_host(c, names[i]);
            if (h < 0) {
                strata_status_t rc = st_error(STRATA_ERR_PARSE,
                                              "%s:%d: expected a host of the cluster, got unknown "
                                              "host \"%s\"",
                                              origin, line, names[i]);
                strata_hostlist_free(names, count);
                return rc;
            }
            c->hosts[h].state = st;
        }
        strata_hostlist_free(names, count);
    }
    return STRATA_OK;
}

strata_status_t strata_cluster_load_state(strata_cluster_t *c, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return st_error_errno(STRATA_ERR_IO, errno, "%s: cannot open", path);
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return st_error(STRATA_ERR_IO, "%s: cannot seek", path);
    }
    long n = ftell(f);
    rewind(f);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!text) {
        fclose(f);
        return st_error(STRATA_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    size_t got = fread(text, 1, (size_t)n, f);
    fclose(f);
    text[got] = '\0';
    strata_status_t rc = strata_cluster_parse_state(c, text, path);
    free(text);
    return rc;
}
