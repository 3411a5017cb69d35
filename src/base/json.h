/* JSON reading with messages that name the file, the line and what was expected.
 *
 * A thin layer over json-c shared by the topology and planner readers: load a file, locate a key's
 * line for error messages (json-c keeps no positions, so the line of the n-th occurrence of "key":
 * in the text is used), and typed getters that raise STRATA_ERR_PARSE "file:line: expected ...".
 * Internal to strata; it lives in base because the topology and planner readers both use it.
 */
#ifndef ST_JSON_H
#define ST_JSON_H

#include "strata/status.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>

typedef struct st_json_doc {
    json_object *root; /* owned */
    char *text;        /* owned copy of the input */
    char origin[512];  /* path or description used in messages */
} st_json_doc_t;

/* Reads and parses a file. On failure nothing is held and the message names path:line. */
strata_status_t st_json_load_file(const char *path, st_json_doc_t *doc);

/* Parses text; `origin` names it in messages. */
strata_status_t st_json_parse(const char *text, const char *origin, st_json_doc_t *doc);

/* Frees what the document holds; safe on a zeroed or already freed document. */
void st_json_free(st_json_doc_t *doc);

/* 1-based line of the nth (0-based) occurrence of `"key":` in the text, or 1 when absent. */
int st_json_key_line(const st_json_doc_t *doc, const char *key, int nth);

/* Typed field readers on object `obj`. `nth` is passed to st_json_key_line for the message.
 * A missing optional field leaves *out untouched and returns STRATA_OK; a missing required field
 * or a wrong type or range is STRATA_ERR_PARSE. */
strata_status_t st_json_get_int(const st_json_doc_t *doc, json_object *obj, const char *key,
                                int nth, bool required, long long lo, long long hi, int *out);
strata_status_t st_json_get_double(const st_json_doc_t *doc, json_object *obj, const char *key,
                                   int nth, bool required, double lo, double hi, double *out);
strata_status_t st_json_get_bool(const st_json_doc_t *doc, json_object *obj, const char *key,
                                 int nth, bool required, bool *out);
strata_status_t st_json_get_string(const st_json_doc_t *doc, json_object *obj, const char *key,
                                   int nth, bool required, char *out, size_t out_size);

/* `s` as a JSON string: quoted, with '"', '\\' and control characters escaped, so a name read from
 * a file (which may hold any of them) writes back to a file that reads again. st_json_quote writes
 * it into buf like snprintf (truncated to size, NUL-terminated) and returns its full length; at
 * most 6 * strlen(s) + 2. */
size_t st_json_quote(const char *s, char *buf, size_t size);
void st_json_write_string(FILE *f, const char *s);

/* Fails with "file:line: unknown field \"k\" (expected one of: a, b, ...)" when `obj` has a key not
 * in the NULL-terminated list `known`; catches typos that would otherwise be silently ignored. */
strata_status_t st_json_check_keys(const st_json_doc_t *doc, json_object *obj, const char *what,
                                   const char *const *known);

#endif
