/* The kinds of the schedule part: schedule and action names, what each schedule runs with (chunks
 * per stage, split backward), where a chunk lives, and the argument checks every entry point
 * shares. No lists are built here (generate.c). */
#include "base/base.h"
#include "schedule/schedule_internal.h"

#include <string.h>

static const char *const sched_names[STRATA_SCHED_COUNT] = {"gpipe", "1f1b", "interleaved",
                                                            "zb-h1", "zb-v"};
static const char *const op_names[STRATA_PP_OP_COUNT] = {
    "F", "B", "W", "send_act", "recv_act", "send_grad", "recv_grad"};

const char *strata_schedule_name(strata_schedule_t s)
{
    return (unsigned)s < STRATA_SCHED_COUNT ? sched_names[s] : "?";
}

const char *strata_pp_op_name(strata_pp_op_t op)
{
    return (unsigned)op < STRATA_PP_OP_COUNT ? op_names[op] : "?";
}

strata_status_t strata_schedule_parse(const char *s, strata_schedule_t *out)
{
    static const struct {
        const char *name;
        strata_schedule_t kind;
    } aliases[] = {{"zbh1", STRATA_SCHED_ZB_H1},
                   {"zero-bubble", STRATA_SCHED_ZB_H1},
                   {"zbv", STRATA_SCHED_ZB_V}};
    for (int i = 0; s && i < STRATA_SCHED_COUNT; i++)
        if (!strcmp(s, sched_names[i])) {
            *out = (strata_schedule_t)i;
            return STRATA_OK;
        }
    for (size_t i = 0; s && i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(s, aliases[i].name)) {
            *out = aliases[i].kind;
            return STRATA_OK;
        }
    return st_error(STRATA_ERR_INVALID_ARG,
                    "expected schedule (one of: gpipe, 1f1b, interleaved, zb-h1, zb-v), got '%s'",
                    s ? s : "(null)");
}

bool strata_schedule_splits_backward(strata_schedule_t s)
{
    return s == STRATA_SCHED_ZB_H1 || s == STRATA_SCHED_ZB_V;
}

bool strata_schedule_chunks_ok(strata_schedule_t s, int vstages)
{
    switch (s) {
    case STRATA_SCHED_INTERLEAVED:
        return vstages >= 2;
    case STRATA_SCHED_ZB_V:
        return vstages == 2;
    case STRATA_SCHED_GPIPE:
    case STRATA_SCHED_1F1B:
    case STRATA_SCHED_ZB_H1:
        return vstages == 1;
    default:
        return false;
    }
}

int strata_pp_chunk_stage(strata_schedule_t kind, int stages, int vstages, int chunk)
{
    if (stages < 1 || vstages < 1 || chunk < 0 || chunk >= stages * vstages)
        return -1;
    if (kind == STRATA_SCHED_ZB_V)
        return chunk < stages ? chunk : 2 * stages - 1 - chunk;
    return chunk % stages;
}

strata_status_t st_pp_validate(strata_schedule_t kind, int stages, int vstages, int micro,
                               int listed)
{
    if ((unsigned)kind >= STRATA_SCHED_COUNT)
        return st_error(STRATA_ERR_INVALID_ARG, "pipeline schedule: unknown schedule %d",
                        (int)kind);
    const char *name = strata_schedule_name(kind);
    if (stages < 1 || vstages < 1 || micro < 1)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "%s schedule: expected stages, chunks per stage and micro-batches >= 1, got "
                        "P=%d V=%d M=%d",
                        name, stages, vstages, micro);
    if (!strata_schedule_chunks_ok(kind, vstages))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "%s schedule: runs with %s chunks per stage, got V=%d", name,
                        kind == STRATA_SCHED_INTERLEAVED ? "V >= 2"
                        : kind == STRATA_SCHED_ZB_V      ? "V = 2 (a V)"
                                                         : "V = 1",
                        vstages);
    if (kind == STRATA_SCHED_INTERLEAVED && micro % stages)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "interleaved schedule: expected the micro-batches (M=%d) to be a multiple "
                        "of the stages (P=%d)",
                        micro, stages);
    if (stages > INT16_MAX || (long long)stages * vstages > INT16_MAX ||
        (long long)stages * vstages * listed > ST_PP_MAX_UNITS)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "%s schedule: P=%d x V=%d x M=%d is beyond the %d (micro-batch, chunk) "
                        "units a schedule may have",
                        name, stages, vstages, listed, ST_PP_MAX_UNITS);
    return STRATA_OK;
}

const char *st_pp_describe(int stage, int index, const strata_pp_action_t *a, char *buf,
                           size_t size)
{
    snprintf(buf, size, "stage %d, action %d (%s mb %d chunk %d)", stage, index,
             strata_pp_op_name((strata_pp_op_t)a->op), (int)a->mb, (int)a->chunk);
    return buf;
}
