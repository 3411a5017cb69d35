/* Slurm hostlist expressions: "node[01-16,20],gpu7" expands to node01 ... node16, node20, gpu7.
 * A name may hold several bracket groups ("r[1-2]n[1-3]" is their cartesian product, the last
 * group varying fastest, as Slurm does). Zero padding follows the lower bound of each range. This
 * file only expands names; it knows nothing of switches or hosts (topo_slurm.c and src/sched use
 * it), and it never sorts or removes duplicates: callers decide what a repeated name means. */
#include "base/base.h"
#include "strata/topo.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAMES 1000000

typedef struct names {
    char **v;
    int n, cap;
} names_t;

static strata_status_t push(names_t *l, const char *s)
{
    if (l->n >= MAX_NAMES)
        return st_error(STRATA_ERR_PARSE, "expected at most %d host names in a hostlist",
                        MAX_NAMES);
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return st_error(STRATA_ERR_NO_MEMORY, "hostlist: out of memory");
        l->v = v;
        l->cap = cap;
    }
    size_t len = strlen(s);
    l->v[l->n] = malloc(len + 1);
    if (!l->v[l->n])
        return st_error(STRATA_ERR_NO_MEMORY, "hostlist: out of memory");
    memcpy(l->v[l->n], s, len + 1);
    l->n++;
    return STRATA_OK;
}

/* Expands one name term (no top-level comma) by recursion over its bracket groups. `prefix` holds
 * what is already fixed. */
static strata_status_t expand_term(const char *term, size_t tlen, char *prefix, size_t plen,
                                   names_t *out)
{
    const char *open = memchr(term, '[', tlen);
    if (!open) {
        if (memchr(term, ']', tlen))
            return st_error(STRATA_ERR_PARSE, "expected '[' before ']' in hostlist \"%.*s\"",
                            (int)tlen, term);
        if (plen + tlen >= STRATA_HOSTNAME_MAX)
            return st_error(STRATA_ERR_PARSE, "expected host names shorter than %d characters",
                            STRATA_HOSTNAME_MAX);
        memcpy(prefix + plen, term, tlen);
        prefix[plen + tlen] = '\0';
        if (plen + tlen == 0)
            return st_error(STRATA_ERR_PARSE, "expected a host name, got an empty one");
        return push(out, prefix);
    }
    size_t head = (size_t)(open - term);
    const char *close = memchr(open, ']', tlen - head);
    if (!close)
        return st_error(STRATA_ERR_PARSE, "expected ']' closing '[' in hostlist \"%.*s\"",
                        (int)tlen, term);
    if (memchr(term, ']', head) || memchr(open + 1, '[', (size_t)(close - open - 1)))
        return st_error(STRATA_ERR_PARSE, "expected balanced brackets in hostlist \"%.*s\"",
                        (int)tlen, term);
    if (plen + head >= STRATA_HOSTNAME_MAX)
        return st_error(STRATA_ERR_PARSE, "expected host names shorter than %d characters",
                        STRATA_HOSTNAME_MAX);
    memcpy(prefix + plen, term, head);
    size_t base = plen + head;
    const char *rest = close + 1;
    size_t rlen = tlen - (size_t)(rest - term);
    // Each comma-separated piece of the group: "lo" or "lo-hi".
    const char *p = open + 1;
    if (p == close)
        return st_error(STRATA_ERR_PARSE, "expected a number or range inside '[]' in \"%.*s\"",
                        (int)tlen, term);
    while (p < close) {
        const char *e = p;
        while (e < close && *e != ',')
            e++;
        const char *dash = memchr(p, '-', (size_t)(e - p));
        const char *lo_end = dash ? dash : e;
        size_t lo_w = (size_t)(lo_end - p);
        bool ok = lo_w > 0 && lo_w < 10;
        for (const char *q = p; ok && q < lo_end; q++)
            ok = isdigit((unsigned char)*q);
        const char *hi_s = dash ? dash + 1 : p;
        size_t hi_w = (size_t)(e - hi_s);
        ok = ok && hi_w > 0 && hi_w < 10;
        for (const char *q = hi_s; ok && q < e; q++)
            ok = isdigit((unsigned char)*q);
        if (!ok)
            return st_error(STRATA_ERR_PARSE,
                            "expected a number or range like 01-16 inside '[]', got \"%.*s\"",
                            (int)(e - p), p);
        long lo = strtol(p, NULL, 10), hi = strtol(hi_s, NULL, 10);
        if (hi < lo)
            return st_error(STRATA_ERR_PARSE, "expected a range with low <= high, got \"%.*s\"",
                            (int)(e - p), p);
        if (hi - lo >= MAX_NAMES)
            return st_error(STRATA_ERR_PARSE, "expected at most %d host names in a hostlist",
                            MAX_NAMES);
        for (long v = lo; v <= hi; v++) {
            char num[16];
            int w = snprintf(num, sizeof num, "%0*ld", (int)lo_w, v);
            if (base + (size_t)w >= STRATA_HOSTNAME_MAX)
                return st_error(STRATA_ERR_PARSE, "expected host names shorter than %d characters",
                                STRATA_HOSTNAME_MAX);
            memcpy(prefix + base, num, (size_t)w);
            ST_TRY(expand_term(rest, rlen, prefix, base + (size_t)w, out));
        }
        p = e < close ? e + 1 : e;
        if (p == close && e < close)
            return st_error(STRATA_ERR_PARSE, "expected a number after ',' inside '[]'");
    }
    return STRATA_OK;
}

void strata_hostlist_free(char **names, int count)
{
    if (!names)
        return;
    for (int i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

strata_status_t strata_hostlist_expand(const char *expr, char ***names, int *count)
{
    *names = NULL;
    *count = 0;
    if (!expr || !*expr)
        return st_error(STRATA_ERR_PARSE, "expected a hostlist, got an empty one");
    names_t l = {0};
    char prefix[STRATA_HOSTNAME_MAX];
    const char *p = expr;
    strata_status_t rc = STRATA_OK;
    while (*p && rc >= 0) {
        // A top-level comma ends a term; commas inside brackets belong to the group.
        const char *e = p;
        int depth = 0;
        while (*e && (depth > 0 || *e != ',')) {
            depth += *e == '[' ? 1 : *e == ']' ? -1 : 0;
            e++;
        }
        if (depth != 0)
            rc = st_error(STRATA_ERR_PARSE, "expected ']' closing '[' in hostlist \"%s\"", expr);
        else if (e == p)
            rc = st_error(STRATA_ERR_PARSE, "expected a host name before ',' in \"%s\"", expr);
        else
            rc = expand_term(p, (size_t)(e - p), prefix, 0, &l);
        p = *e ? e + 1 : e;
        if (rc >= 0 && e[0] == ',' && !*p)
            rc = st_error(STRATA_ERR_PARSE, "expected a host name after ',' in \"%s\"", expr);
    }
    if (rc < 0) {
        strata_hostlist_free(l.v, l.n);
        return rc;
    }
    *names = l.v;
    *count = l.n;
    return STRATA_OK;
}

int strata_hostname_cmp(const char *a, const char *b)
{
    int pad = 0; // the first difference in zero padding: "n01" and "n1" are two hosts
    while (*a && *b) {
        if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
            const char *a0 = a, *b0 = b;
            while (*a == '0' && isdigit((unsigned char)a[1]))
                a++;
            while (*b == '0' && isdigit((unsigned char)b[1]))
                b++;
            if (!pad && a - a0 != b - b0)
                pad = a - a0 < b - b0 ? -1 : 1;
            size_t na = 0, nb = 0;
            while (isdigit((unsigned char)a[na]))
                na++;
            while (isdigit((unsigned char)b[nb]))
                nb++;
            if (na != nb)
                return na < nb ? -1 : 1;
            int c = memcmp(a, b, na);
            if (c)
                return c < 0 ? -1 : 1;
            a += na;
            b += nb;
            continue;
        }
        if (*a != *b)
            return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        a++;
        b++;
    }
    return *a ? 1 : *b ? -1 : pad;
}
