/* The "tensors" record of a shard's __metadata__: what the file's arena ranges hold, model tensor by
 * model tensor (strata_ckpt_piece_t), as JSON text (safetensors' metadata values are strings):
 *   [{"name":"h.0.attn.qkv.weight","shape":[96,32],"elements":[0,1536],"range":4096,"at":0,
 *     "tp":{"size":2,"rank":1,"dim":0,"groups":3,"shape":[48,32]}}, ...]
 * ("tp" for a tensor of a TP part, dim -1 when the group replicates it; "tied_copy" when true).
 * Written and parsed here; which pieces a shard holds is the trainer's (trainer_ckpt.c), whether
 * the ranges they name exist is checked by checkpoint.c, which knows the file's tensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/base.h"
#include "train/ckpt_internal.h"

static json_object *shape_json(int ndim, const int64_t *shape)
{
    json_object *a = json_object_new_array();
    for (int d = 0; d < ndim; d++)
        json_object_array_add(a, json_object_new_int64(shape[d]));
    return a;
}

char *st_ckpt_pieces_json(const strata_ckpt_piece_t *p, int n)
{
    json_object *arr = json_object_new_array();
    if (!arr)
        return NULL;
    for (int i = 0; i < n; i++) {
        json_object *o = json_object_new_object(), *el = json_object_new_array();
        json_object_object_add(o, "name", json_object_new_string(p[i].name));
        json_object_object_add(o, "shape", shape_json(p[i].ndim, p[i].shape));
        json_object_array_add(el, json_object_new_int64(p[i].begin));
        json_object_array_add(el, json_object_new_int64(p[i].end));
        json_object_object_add(o, "elements", el);
        json_object_object_add(o, "range", json_object_new_int64(p[i].range));
        json_object_object_add(o, "at", json_object_new_int64(p[i].at));
        if (p[i].tp > 1) {
            json_object *tp = json_object_new_object();
            json_object_object_add(tp, "size", json_object_new_int(p[i].tp));
            json_object_object_add(tp, "rank", json_object_new_int(p[i].tp_rank));
            json_object_object_add(tp, "dim", json_object_new_int(p[i].split_dim));
            json_object_object_add(tp, "groups", json_object_new_int(p[i].split_groups));
            json_object_object_add(tp, "shape", shape_json(p[i].ndim, p[i].part_shape));
            json_object_object_add(o, "tp", tp);
        }
        if (p[i].tied_copy)
            json_object_object_add(o, "tied_copy", json_object_new_boolean(1));
        json_object_array_add(arr, o);
    }
    char *text = strdup(json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PLAIN));
    json_object_put(arr);
    return text;
}

void st_ckpt_pieces_free(strata_ckpt_piece_t *p, int n)
{
    for (int i = 0; p && i < n; i++)
        free((char *)p[i].name);
    free(p);
}

/* A shape of 1 or 2 integers in [1, 2^53] whose product fits too; returns the ndim or 0. */
static int parse_shape(json_object *a, int64_t *shape)
{
    if (!a || !json_object_is_type(a, json_type_array))
        return 0;
    size_t nd = json_object_array_length(a);
    if (nd < 1 || nd > 2)
        return 0;
    int64_t count = 1;
    for (size_t d = 0; d < nd; d++) {
        if (!st_ckpt_json_int(json_object_array_get_idx(a, d), 1, ST_CKPT_INT_MAX, &shape[d]) ||
            count > ST_CKPT_INT_MAX / shape[d])
            return 0;
        count *= shape[d];
    }
    return (int)nd;
}

static json_object *field(json_object *o, const char *key)
{
    json_object *v = NULL;
    return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

/* One piece from its JSON object; false when any field is missing, of another type or out of
 * range (the elements within the part, the part within the whole tensor). */
static bool parse_piece(json_object *o, strata_ckpt_piece_t *p)
{
    json_object *name = field(o, "name"), *el = field(o, "elements"), *tp = field(o, "tp"),
                *tied = field(o, "tied_copy");
    if (!json_object_is_type(o, json_type_object) || !name ||
        !json_object_is_type(name, json_type_string) || !json_object_get_string_len(name) ||
        !(p->ndim = parse_shape(field(o, "shape"), p->shape)) || !el ||
        !json_object_is_type(el, json_type_array) || json_object_array_length(el) != 2 ||
        !st_ckpt_json_int(field(o, "range"), 0, ST_CKPT_INT_MAX, &p->range) ||
        !st_ckpt_json_int(field(o, "at"), 0, ST_CKPT_INT_MAX, &p->at) ||
        (tied && !json_object_is_type(tied, json_type_boolean)))
        return false;
    p->tied_copy = tied && json_object_get_boolean(tied);
    p->tp = 1;
    p->tp_rank = 0;
    p->split_dim = -1;
    p->split_groups = 1;
    memcpy(p->part_shape, p->shape, sizeof p->shape);
    if (tp) {
        int64_t size, rank, dim, groups;
        if (!json_object_is_type(tp, json_type_object) ||
            !st_ckpt_json_int(field(tp, "size"), 2, ST_CKPT_RANKS_MAX, &size) ||
            !st_ckpt_json_int(field(tp, "rank"), 0, size - 1, &rank) ||
            !st_ckpt_json_int(field(tp, "dim"), -1, p->ndim - 1, &dim) ||
            !st_ckpt_json_int(field(tp, "groups"), 1, dim < 0 ? 1 : p->shape[dim], &groups) ||
            parse_shape(field(tp, "shape"), p->part_shape) != p->ndim)
            return false;
        p->tp = (int)size;
        p->tp_rank = (int)rank;
        p->split_dim = (int)dim;
        p->split_groups = (int)groups;
        for (int d = 0; d < p->ndim; d++) // the part is the whole along any other dimension
            if (d == dim ? p->part_shape[d] * size != p->shape[d] : p->part_shape[d] != p->shape[d])
                return false;
    }
    int64_t count = p->part_shape[0] * (p->ndim > 1 ? p->part_shape[1] : 1);
    return st_ckpt_json_int(json_object_array_get_idx(el, 0), 0, count, &p->begin) &&
           st_ckpt_json_int(json_object_array_get_idx(el, 1), p->begin, count, &p->end);
}

strata_status_t st_ckpt_pieces_parse(const char *text, const char *path, strata_ckpt_piece_t **out,
                                     int *n)
{
    *out = NULL;
    *n = 0;
    json_object *arr = json_tokener_parse(text);
    if (!arr || !json_object_is_type(arr, json_type_array)) {
        if (arr)
            json_object_put(arr);
        return st_error(STRATA_ERR_PARSE, "checkpoint %s: __metadata__ \"tensors\" is not a JSON "
                        "list", path);
    }
    size_t len = json_object_array_length(arr);
    strata_ckpt_piece_t *p = calloc(len + 1, sizeof *p);
    strata_status_t rc = p ? STRATA_OK : st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    for (size_t i = 0; rc == STRATA_OK && i < len; i++) {
        json_object *o = json_object_array_get_idx(arr, i);
        if (!parse_piece(o, &p[i]))
            rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: __metadata__ \"tensors\" entry %zu is "
                          "malformed or out of range", path, i);
        else if (!(p[i].name = strdup(json_object_get_string(field(o, "name")))))
            rc = st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    json_object_put(arr);
    if (rc < 0) {
        st_ckpt_pieces_free(p, (int)len);
        return rc;
    }
    *out = p;
    *n = (int)len;
    return STRATA_OK;
}
