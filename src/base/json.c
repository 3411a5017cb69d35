/* JSON reading helpers over json-c: whole-file parse with the tokener's error offset turned into a
 * line number, and typed field getters whose errors say "file:line: expected ...". The line of a
 * field is found by searching the text for the key, because json-c does not keep source positions;
 * when a key repeats, callers pass which occurrence they mean. Nothing here knows about topologies
 * or plans. */
#include "base/json.h"

#include "base/base.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int line_of_offset(const char *text, size_t off)
{
    int line = 1;
    for (size_t i = 0; i < off && text[i]; i++)
        if (text[i] == '\n')
            line++;
    return line;
}

strata_status_t st_json_parse(const char *text, const char *origin, st_json_doc_t *doc)
{
    memset(doc, 0, sizeof *doc);
    snprintf(doc->origin, sizeof doc->origin, "%s", origin ? origin : "<json>");
    size_t len = strlen(text);
    doc->text = malloc(len + 1);
    if (!doc->text)
        return st_error(STRATA_ERR_NO_MEMORY, "%s: out of memory", doc->origin);
    memcpy(doc->text, text, len + 1);

    json_tokener *tok = json_tokener_new();
    if (!tok) {
        st_json_free(doc);
        return st_error(STRATA_ERR_NO_MEMORY, "%s: out of memory", origin);
    }
    json_object *root = json_tokener_parse_ex(tok, doc->text, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t off = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!root || jerr != json_tokener_success) {
        if (root)
            json_object_put(root);
        int line = line_of_offset(doc->text, off);
        const char *why = jerr == json_tokener_continue ? "unexpected end of input"
                                                        : json_tokener_error_desc(jerr);
        strata_status_t rc =
            st_error(STRATA_ERR_PARSE, "%s:%d: expected valid JSON (%s)", doc->origin, line, why);
        st_json_free(doc);
        return rc;
    }
    // Anything but whitespace after the value is an error too.
    for (size_t i = off; i < len; i++) {
        if (!strchr(" \t\r\n", doc->text[i])) {
            json_object_put(root);
            strata_status_t rc = st_error(STRATA_ERR_PARSE,
                                          "%s:%d: expected end of input after the "
                                          "JSON value",
                                          doc->origin, line_of_offset(doc->text, i));
            st_json_free(doc);
            return rc;
        }
    }
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        strata_status_t rc =
            st_error(STRATA_ERR_PARSE, "%s:1: expected a JSON object at top level", doc->origin);
        st_json_free(doc);
        return rc;
    }
    doc->root = root;
    return STRATA_OK;
}

strata_status_t st_json_load_file(const char *path, st_json_doc_t *doc)
{
    memset(doc, 0, sizeof *doc);
    FILE *f = fopen(path, "rb");
    if (!f)
        return st_error_errno(STRATA_ERR_IO, errno, "%s: cannot open", path);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return st_error(STRATA_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    for (;;) {
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return st_error(STRATA_ERR_NO_MEMORY, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return st_error(STRATA_ERR_IO, "%s: read error", path);
    }
    buf[len] = 0;
    strata_status_t rc = st_json_parse(buf, path, doc);
    free(buf);
    return rc;
}

void st_json_free(st_json_doc_t *doc)
{
    if (doc->root)
        json_object_put(doc->root);
    free(doc->text);
    doc->root = NULL;
    doc->text = NULL;
}

int st_json_key_line(const st_json_doc_t *doc, const char *key, int nth)
{
    if (!doc->text)
        return 1;
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = doc->text;
    int seen = 0;
    while ((p = strstr(p, pat)) != NULL) {
        const char *q = p + strlen(pat);
        while (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')
            q++;
        if (*q == ':') {
            if (seen == nth)
                return line_of_offset(doc->text, (size_t)(p - doc->text));
            seen++;
        }
        p += strlen(pat);
    }
    return 1;
}

static const char *type_name(json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null:
        return "null";
    case json_type_boolean:
        return "a boolean";
    case json_type_double:
        return "a number";
    case json_type_int:
        return "an integer";
    case json_type_object:
        return "an object";
    case json_type_array:
        return "an array";
    case json_type_string:
        return "a string";
    }
    return "?";
}

static strata_status_t missing(const st_json_doc_t *doc, const char *key, const char *what)
{
    // json-c keeps no positions and the field is absent, so the object's own line is unknown.
    return st_error(STRATA_ERR_PARSE, "%s:1: expected field \"%s\" (%s)", doc->origin, key, what);
}

strata_status_t st_json_get_int(const st_json_doc_t *doc, json_object *obj, const char *key,
                                int nth, bool required, long long lo, long long hi, int *out)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v))
        return required ? missing(doc, key, "an integer") : STRATA_OK;
    int line = st_json_key_line(doc, key, nth);
    if (!json_object_is_type(v, json_type_int)) {
        // Accept 8.0 but not 8.5.
        if (json_object_is_type(v, json_type_double)) {
            double d = json_object_get_double(v);
            if (d == floor(d) && d >= (double)lo && d <= (double)hi) {
                *out = (int)d;
                return STRATA_OK;
            }
        }
        return st_error(STRATA_ERR_PARSE,
                        "%s:%d: expected an integer in [%lld, %lld] for \"%s\", "
                        "got %s",
                        doc->origin, line, lo, hi, key, type_name(v));
    }
    int64_t x = json_object_get_int64(v);
    if (x < lo || x > hi)
        return st_error(STRATA_ERR_PARSE,
                        "%s:%d: expected an integer in [%lld, %lld] for \"%s\", "
                        "got %" PRId64,
                        doc->origin, line, lo, hi, key, x);
    *out = (int)x;
    return STRATA_OK;
}

strata_status_t st_json_get_double(const st_json_doc_t *doc, json_object *obj, const char *key,
                                   int nth, bool required, double lo, double hi, double *out)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v))
        return required ? missing(doc, key, "a number") : STRATA_OK;
    int line = st_json_key_line(doc, key, nth);
    if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
        return st_error(STRATA_ERR_PARSE, "%s:%d: expected a number in [%g, %g] for \"%s\", got %s",
                        doc->origin, line, lo, hi, key, type_name(v));
    double x = json_object_get_double(v);
    if (!(x >= lo && x <= hi))
        return st_error(STRATA_ERR_PARSE, "%s:%d: expected a number in [%g, %g] for \"%s\", got %g",
                        doc->origin, line, lo, hi, key, x);
    *out = x;
    return STRATA_OK;
}

strata_status_t st_json_get_bool(const st_json_doc_t *doc, json_object *obj, const char *key,
                                 int nth, bool required, bool *out)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v))
        return required ? missing(doc, key, "true or false") : STRATA_OK;
    if (!json_object_is_type(v, json_type_boolean))
        return st_error(STRATA_ERR_PARSE, "%s:%d: expected true or false for \"%s\", got %s",
                        doc->origin, st_json_key_line(doc, key, nth), key, type_name(v));
    *out = json_object_get_boolean(v);
    return STRATA_OK;
}

strata_status_t st_json_get_string(const st_json_doc_t *doc, json_object *obj, const char *key,
                                   int nth, bool required, char *out, size_t out_size)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v))
        return required ? missing(doc, key, "a string") : STRATA_OK;
    int line = st_json_key_line(doc, key, nth);
    if (!json_object_is_type(v, json_type_string))
        return st_error(STRATA_ERR_PARSE, "%s:%d: expected a string for \"%s\", got %s",
                        doc->origin, line, key, type_name(v));
    const char *s = json_object_get_string(v);
    if (strlen(s) >= out_size)
        return st_error(STRATA_ERR_PARSE, "%s:%d: expected at most %zu characters for \"%s\"",
                        doc->origin, line, out_size - 1, key);
    snprintf(out, out_size, "%s", s);
    return STRATA_OK;
}

strata_status_t st_json_check_keys(const st_json_doc_t *doc, json_object *obj, const char *what,
                                   const char *const *known)
{
    json_object_object_foreach(obj, key, val)
    {
        (void)val;
        bool ok = false;
        for (const char *const *k = known; *k; k++)
            if (!strcmp(*k, key))
                ok = true;
        if (!ok) {
            char list[512] = "";
            size_t used = 0;
            for (const char *const *k = known; *k && used + 1 < sizeof list; k++) {
                int w =
                    snprintf(list + used, sizeof list - used, "%s%s", k == known ? "" : ", ", *k);
                if (w < 0)
                    break;
                used += (size_t)w;
            }
            return st_error(STRATA_ERR_PARSE,
                            "%s:%d: unknown field \"%s\" in %s (expected one of: %s)", doc->origin,
                            st_json_key_line(doc, key, 0), key, what, list);
        }
    }
    return STRATA_OK;
}

size_t st_json_quote(const char *s, char *buf, size_t size)
{
    size_t n = 0;
    char esc[8];
#define PUT(c) (void)(n + 1 < size ? buf[n] = (c) : 0, n++)
    PUT('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            snprintf(esc, sizeof esc, "\\%c", *p);
        else if (*p < 0x20)
            snprintf(esc, sizeof esc, "\\u%04x", *p);
        else
            snprintf(esc, sizeof esc, "%c", *p);
        for (const char *e = esc; *e; e++)
            PUT(*e);
    }
    PUT('"');
#undef PUT
    if (size)
        buf[n < size ? n : size - 1] = '\0';
    return n;
}

void st_json_write_string(FILE *f, const char *s)
{
    char small[256];
    size_t n = st_json_quote(s, small, sizeof small);
    if (n < sizeof small) {
        fputs(small, f);
        return;
    }
    char *big = malloc(n + 1);
    if (big) {
        st_json_quote(s, big, n + 1);
        fputs(big, f);
    }
    free(big);
}
