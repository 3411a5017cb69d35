/* Cluster files: the fabric tree as JSON (format in docs/plan.md), read with messages that name the
 * file, the line and what was expected, and written back in the same format. */
#include "base/base.h"
#include "strata/topo.h"
#include "base/json.h"

#include <stdio.h>
#include <string.h>

static strata_status_t from_doc(const st_json_doc_t *doc, strata_topo_t *out)
{
    static const char *const top_keys[] = {"name",  "accelerator", "levels",
                                           "hosts", "comment",     NULL};
    static const char *const level_keys[] = {"name",       "fanout",           "bandwidth_GBps",
                                             "latency_us", "oversubscription", "class",
                                             "efficiency", "torus",            "comment",
                                             NULL};
    json_object *root = doc->root;
    ST_TRY(st_json_check_keys(doc, root, "cluster", top_keys));
    char name[STRATA_TOPO_NAME_MAX] = "cluster";
    ST_TRY(st_json_get_string(doc, root, "name", 0, false, name, sizeof name));
    strata_topo_init(out, name);
    ST_TRY(st_json_get_string(doc, root, "accelerator", 0, false, out->accel, sizeof out->accel));
    json_object *levels;
    if (!json_object_object_get_ex(root, "levels", &levels) ||
        !json_object_is_type(levels, json_type_array))
        return st_error(STRATA_ERR_PARSE,
                        "%s:%d: expected \"levels\": an array of levels, innermost "
                        "first",
                        doc->origin, st_json_key_line(doc, "levels", 0));
    size_t n = json_object_array_length(levels);
    if (n < 1 || n > STRATA_TOPO_MAX_LEVELS)
        return st_error(STRATA_ERR_PARSE, "%s:%d: expected 1 to %d levels, got %zu", doc->origin,
                        st_json_key_line(doc, "levels", 0), STRATA_TOPO_MAX_LEVELS, n);
    // Occurrence counters so that messages point at the right level's line.
    int seen_name = 1; /* the top-level "name" comes first when present */
    if (!json_object_object_get_ex(root, "name", NULL))
        seen_name = 0;
    int seen[8] = {0};
    for (size_t i = 0; i < n; i++) {
        json_object *lo = json_object_array_get_idx(levels, i);
        if (!json_object_is_type(lo, json_type_object))
            return st_error(STRATA_ERR_PARSE, "%s:%d: expected level %zu to be an object",
                            doc->origin, st_json_key_line(doc, "levels", 0), i);
        ST_TRY(st_json_check_keys(doc, lo, "level", level_keys));
        strata_topo_level_t lv = {.oversub = 1, .link_class = STRATA_LINK_SCALE_OUT};
        double gbps = 0, lat_us = 0;
        char cls[32] = "";
        ST_TRY(st_json_get_string(doc, lo, "name", seen_name, true, lv.name, sizeof lv.name));
        seen_name++;
        int torus_line = 0;
        if (json_object_object_get_ex(lo, "torus", NULL)) {
            char dims[64] = "";
            torus_line = st_json_key_line(doc, "torus", seen[6]++);
            ST_TRY(st_json_get_string(doc, lo, "torus", seen[6] - 1, false, dims, sizeof dims));
            if (strata_topo_torus_parse(dims, lv.torus) < 0)
                return st_error(STRATA_ERR_PARSE, "%s:%d: %s", doc->origin, torus_line,
                                strata_last_error());
        }
        // A torus's fanout is its cells: it may be left out, and must agree when given.
        if (torus_line && !json_object_object_get_ex(lo, "fanout", NULL)) {
            lv.fanout = 1;
            for (int d = 0; d < strata_topo_torus_ndims(&lv); d++)
                lv.fanout *= lv.torus[d];
        } else {
            ST_TRY(st_json_get_int(doc, lo, "fanout", seen[0]++, true, 1, 1 << 30, &lv.fanout));
        }
        ST_TRY(st_json_get_double(doc, lo, "bandwidth_GBps", seen[1]++, true, 1e-9, 1e9, &gbps));
        if (json_object_object_get_ex(lo, "latency_us", NULL))
            ST_TRY(st_json_get_double(doc, lo, "latency_us", seen[2]++, false, 0, 1e9, &lat_us));
        if (json_object_object_get_ex(lo, "oversubscription", NULL))
            ST_TRY(st_json_get_double(doc, lo, "oversubscription", seen[3]++, false, 1, 1e6,
                                      &lv.oversub));
        if (json_object_object_get_ex(lo, "efficiency", NULL))
            ST_TRY(
                st_json_get_double(doc, lo, "efficiency", seen[4]++, false, 0, 1, &lv.efficiency));
        if (json_object_object_get_ex(lo, "class", NULL)) {
            int line = st_json_key_line(doc, "class", seen[5]++);
            ST_TRY(st_json_get_string(doc, lo, "class", seen[5] - 1, false, cls, sizeof cls));
            if (strata_link_class_parse(cls, &lv.link_class) < 0)
                return st_error(STRATA_ERR_PARSE,
                                "%s:%d: expected \"class\" to be \"scale-up\" or "
                                "\"scale-out\", got \"%s\"",
                                doc->origin, line, cls);
        } else {
            // Without a class, the innermost level is taken as scale-up, the rest as scale-out.
            lv.link_class = i == 0 ? STRATA_LINK_SCALE_UP : STRATA_LINK_SCALE_OUT;
        }
        lv.bw_Bps = gbps * 1e9;
        lv.latency_s = lat_us * 1e-6;
        strata_status_t rc = strata_topo_add_level(out, &lv);
        if (rc < 0)
            return st_error(STRATA_ERR_PARSE, "%s:%d: %s", doc->origin,
                            torus_line ? torus_line : st_json_key_line(doc, "fanout", seen[0] - 1),
                            strata_last_error());
    }
    return STRATA_OK;
}

/* Walks "hosts": [{"names": "node[01-04]", "path": "zone1/rack1"}, ...]. With `host` NULL it only
 * validates; else it writes "<path>/<host>" for the entry listing `host`. STRATA_ERR_UNSUPPORTED
 * when the file has no "hosts", STRATA_ERR_INVALID_ARG when `host` is not listed. */
static strata_status_t hosts_lookup(const st_json_doc_t *doc, const char *host, char *out,
                                    size_t cap)
{
    static const char *const host_keys[] = {"names", "path", "comment", NULL};
    json_object *hosts;
    if (!json_object_object_get_ex(doc->root, "hosts", &hosts))
        return host ? st_error(STRATA_ERR_UNSUPPORTED, "%s has no \"hosts\"", doc->origin)
                    : STRATA_OK;
    int line = st_json_key_line(doc, "hosts", 0);
    if (!json_object_is_type(hosts, json_type_array))
        return st_error(STRATA_ERR_PARSE,
                        "%s:%d: expected \"hosts\": an array of {\"names\": hostlist, \"path\": "
                        "\"zone/rack\"}",
                        doc->origin, line);
    size_t n = json_object_array_length(hosts);
    for (size_t i = 0; i < n; i++) {
        json_object *h = json_object_array_get_idx(hosts, i);
        if (!json_object_is_type(h, json_type_object))
            return st_error(STRATA_ERR_PARSE, "%s:%d: expected host entry %zu to be an object",
                            doc->origin, line, i);
        ST_TRY(st_json_check_keys(doc, h, "host entry", host_keys));
        char names[4096] = "", path[256] = "";
        ST_TRY(st_json_get_string(doc, h, "names", (int)i, true, names, sizeof names));
        ST_TRY(st_json_get_string(doc, h, "path", (int)i, true, path, sizeof path));
        int eline = st_json_key_line(doc, "names", (int)i);
        if (!path[0] || path[0] == '/' || path[strlen(path) - 1] == '/' || strstr(path, "//"))
            return st_error(STRATA_ERR_PARSE,
                            "%s:%d: expected \"path\" to be unit names joined by '/', outermost "
                            "first (\"zone1/rack3\"), got \"%s\"",
                            doc->origin, st_json_key_line(doc, "path", (int)i), path);
        char **list;
        int count;
        if (strata_hostlist_expand(names, &list, &count) < 0)
            return st_error(STRATA_ERR_PARSE, "%s:%d: %s", doc->origin, eline, strata_last_error());
        bool found = false;
        for (int k = 0; k < count && host && !found; k++)
            found = strcmp(list[k], host) == 0;
        strata_hostlist_free(list, count);
        if (found) {
            if ((size_t)snprintf(out, cap, "%s/%s", path, host) >= cap)
                return st_error(STRATA_ERR_INVALID_ARG, "%s:%d: path of %s is too long",
                                doc->origin, eline, host);
            return STRATA_OK;
        }
    }
    return host ? st_error(STRATA_ERR_INVALID_ARG, "%s: host \"%s\" is not listed in \"hosts\"",
                           doc->origin, host)
                : STRATA_OK;
}

static strata_status_t from_doc_checked(const st_json_doc_t *doc, strata_topo_t *out)
{
    ST_TRY(from_doc(doc, out));
    return hosts_lookup(doc, NULL, NULL, 0);
}

strata_status_t strata_topo_parse(const char *text, const char *origin, strata_topo_t *out)
{
    st_json_doc_t doc;
    ST_TRY(st_json_parse(text, origin, &doc));
    strata_status_t rc = from_doc_checked(&doc, out);
    st_json_free(&doc);
    return rc;
}

strata_status_t strata_topo_load(const char *path, strata_topo_t *out)
{
    st_json_doc_t doc;
    ST_TRY(st_json_load_file(path, &doc));
    strata_status_t rc = from_doc_checked(&doc, out);
    st_json_free(&doc);
    return rc;
}

strata_status_t strata_topo_host_path(const char *file, const char *host, char *out, size_t cap)
{
    st_json_doc_t doc;
    ST_TRY(st_json_load_file(file, &doc));
    strata_status_t rc = hosts_lookup(&doc, host, out, cap);
    st_json_free(&doc);
    return rc;
}

void strata_topo_write_json(const strata_topo_t *topo, FILE *f)
{
    // Names as JSON strings: a name read from a file may hold quotes or backslashes.
    fprintf(f, "{\n  \"name\": ");
    st_json_write_string(f, topo->name);
    fprintf(f, ",\n");
    if (topo->accel[0]) {
        fprintf(f, "  \"accelerator\": ");
        st_json_write_string(f, topo->accel);
        fprintf(f, ",\n");
    }
    fprintf(f, "  \"levels\": [\n");
    for (int i = 0; i < topo->nlevels; i++) {
        const strata_topo_level_t *l = &topo->level[i];
        fprintf(f, "    {\"name\": ");
        st_json_write_string(f, l->name);
        fprintf(f,
                ", \"fanout\": %d, \"bandwidth_GBps\": %.6g, "
                "\"latency_us\": %.6g, \"oversubscription\": %.6g, \"class\": \"%s\"",
                l->fanout, l->bw_Bps / 1e9, l->latency_s * 1e6, l->oversub,
                strata_link_class_name(l->link_class));
        if (l->efficiency > 0)
            fprintf(f, ", \"efficiency\": %.6g", l->efficiency);
        if (strata_topo_torus_ndims(l)) {
            char dims[64];
            strata_topo_torus_format(l->torus, dims, sizeof dims);
            fprintf(f, ", \"torus\": \"%s\"", dims);
        }
        fprintf(f, "}%s\n", i + 1 < topo->nlevels ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
}

bool strata_topo_file_is_json(const char *path)
{
    FILE *f = fopen(path, "r");
    int c = EOF;
    while (f && (c = fgetc(f)) != EOF && (c == ' ' || c == '\t' || c == '\n' || c == '\r'))
        ;
    if (f)
        fclose(f);
    return c == '{' || c == EOF; // unreadable or empty: the JSON reader names the problem
}
