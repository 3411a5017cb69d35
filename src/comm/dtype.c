/* Names of the communication enums: element types and reduction ops, both ways (collectives are
 * named in netmodel, src/netmodel/kinds.c). Tools,
 * knobs (STRATA_COMM_ALGO=allreduce:ring) and tests print and parse them through here so every part
 * spells them the same. Parsing is case-insensitive and accepts the common aliases (float32, half,
 * broadcast, ...); a bad name fails with STRATA_ERR_INVALID_ARG and a message listing the valid
 * ones. What the types mean numerically (sizes aside) is src/comm/algo/reduce_op.c's business. */
#include <strings.h>

#include "base/base.h"
#include "comm/algo/reduce_op.h"
#include "strata/comm.h"

typedef struct name_alias {
    const char *name;
    int value;
} name_alias_t;

static const char *const dtype_names[STRATA_DTYPE_COUNT] = {
    [STRATA_DTYPE_F32] = "f32",   [STRATA_DTYPE_F64] = "f64", [STRATA_DTYPE_F16] = "f16",
    [STRATA_DTYPE_BF16] = "bf16", [STRATA_DTYPE_I32] = "i32", [STRATA_DTYPE_I64] = "i64",
    [STRATA_DTYPE_U8] = "u8",
};

static const size_t dtype_sizes[STRATA_DTYPE_COUNT] = {
    [STRATA_DTYPE_F32] = 4, [STRATA_DTYPE_F64] = 8, [STRATA_DTYPE_F16] = 2, [STRATA_DTYPE_BF16] = 2,
    [STRATA_DTYPE_I32] = 4, [STRATA_DTYPE_I64] = 8, [STRATA_DTYPE_U8] = 1,
};

static const name_alias_t dtype_aliases[] = {
    {"float32", STRATA_DTYPE_F32},   {"float", STRATA_DTYPE_F32},   {"float64", STRATA_DTYPE_F64},
    {"double", STRATA_DTYPE_F64},    {"float16", STRATA_DTYPE_F16}, {"half", STRATA_DTYPE_F16},
    {"bfloat16", STRATA_DTYPE_BF16}, {"int32", STRATA_DTYPE_I32},   {"int64", STRATA_DTYPE_I64},
    {"uint8", STRATA_DTYPE_U8},
};

static const char *const op_names[STRATA_OP_COUNT] = {
    [STRATA_OP_SUM] = "sum", [STRATA_OP_PROD] = "prod", [STRATA_OP_MIN] = "min",
    [STRATA_OP_MAX] = "max", [STRATA_OP_AVG] = "avg",
};

/* Looks `name` up among the canonical names, then the aliases; -1 when unknown. */
static int lookup(const char *name, const char *const *names, int n, const name_alias_t *aliases,
                  size_t naliases)
{
    for (int i = 0; i < n; i++)
        if (strcasecmp(name, names[i]) == 0)
            return i;
    for (size_t i = 0; i < naliases; i++)
        if (strcasecmp(name, aliases[i].name) == 0)
            return aliases[i].value;
    return -1;
}

size_t strata_dtype_size(strata_dtype_t dtype)
{
    return (unsigned)dtype < STRATA_DTYPE_COUNT ? dtype_sizes[dtype] : 0;
}

const char *strata_dtype_name(strata_dtype_t dtype)
{
    return (unsigned)dtype < STRATA_DTYPE_COUNT ? dtype_names[dtype] : NULL;
}

strata_status_t strata_dtype_parse(const char *name, strata_dtype_t *out)
{
    if (!out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_dtype_parse: out is NULL");
    int v = name ? lookup(name, dtype_names, STRATA_DTYPE_COUNT, dtype_aliases,
                          sizeof dtype_aliases / sizeof dtype_aliases[0])
                 : -1;
    if (v < 0)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "unknown dtype '%s' (valid: f32 f64 f16 bf16 i32 i64 u8, or float32 float "
                        "float64 double float16 half bfloat16 int32 int64 uint8)",
                        name ? name : "(null)");
    *out = (strata_dtype_t)v;
    return STRATA_OK;
}

const char *strata_op_name(strata_op_t op)
{
    return (unsigned)op < STRATA_OP_COUNT ? op_names[op] : NULL;
}

strata_status_t strata_op_parse(const char *name, strata_op_t *out)
{
    if (!out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_op_parse: out is NULL");
    int v = name ? lookup(name, op_names, STRATA_OP_COUNT, NULL, 0) : -1;
    if (v < 0)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "unknown reduction op '%s' (valid: sum prod min max avg)",
                        name ? name : "(null)");
    *out = (strata_op_t)v;
    return STRATA_OK;
}

double strata_dtype_get(strata_dtype_t dtype, const void *buf, size_t i)
{
    return st_dtype_load(dtype, buf, i);
}

void strata_dtype_set(strata_dtype_t dtype, void *buf, size_t i, double v)
{
    st_dtype_store(dtype, buf, i, v);
}
