/* The flight recorder ring (flight.h): what this rank did last, for the post-mortem. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "comm/flight.h"

uint64_t st_flight_begin(st_flight_t *f, uint32_t ctx, uint32_t seq, const char *what,
                         const char *algo, uint64_t bytes)
{
    uint64_t id = ++f->next;
    f->ring[id % ST_FLIGHT_LEN] = (st_flight_entry_t){
        .id = id, .ctx = ctx, .seq = seq, .what = what, .algo = algo, .bytes = bytes,
        .state = ST_FLIGHT_STARTED, .start_ns = st_now_ns()};
    return id;
}

void st_flight_end(st_flight_t *f, uint64_t id, strata_status_t rc)
{
    st_flight_entry_t *e = &f->ring[id % ST_FLIGHT_LEN];
    if (id == 0 || e->id != id || e->state != ST_FLIGHT_STARTED)
        return;
    e->state = rc < 0 ? ST_FLIGHT_FAILED : ST_FLIGHT_DONE;
    e->end_ns = st_now_ns();
    f->completed++;
}

void st_flight_last_done(const st_flight_t *f, char *buf, size_t len)
{
    uint64_t first = f->next >= ST_FLIGHT_LEN ? f->next - ST_FLIGHT_LEN + 1 : 1;
    for (uint64_t id = f->next; id >= first && id > 0; id--) {
        const st_flight_entry_t *e = &f->ring[id % ST_FLIGHT_LEN];
        if (e->id != id || e->state != ST_FLIGHT_DONE)
            continue;
        char on[40] = "";
        if (e->ctx > 1)
            snprintf(on, sizeof on, " on communicator %" PRIu32, e->ctx);
        snprintf(buf, len, "%s #%" PRIu32 "%s completed (%" PRIu64 " operation%s in all)", e->what,
                 e->seq, on, f->completed, f->completed == 1 ? "" : "s");
        return;
    }
    snprintf(buf, len, "nothing completed");
}

static const char *state_name(int s)
{
    return s == ST_FLIGHT_DONE ? "done" : s == ST_FLIGHT_FAILED ? "failed" : "started";
}

json_object *st_flight_to_json(const st_flight_t *f)
{
    uint64_t first = f->next >= ST_FLIGHT_LEN ? f->next - ST_FLIGHT_LEN + 1 : 1;
    json_object *arr = json_object_new_array();
    for (uint64_t id = first; id <= f->next; id++) {
        const st_flight_entry_t *e = &f->ring[id % ST_FLIGHT_LEN];
        if (e->id != id)
            continue;
        json_object *o = json_object_new_object();
        json_object_object_add(o, "ctx", json_object_new_int64(e->ctx));
        json_object_object_add(o, "seq", json_object_new_int64(e->seq));
        json_object_object_add(o, "op", json_object_new_string(e->what));
        json_object_object_add(o, "algo", json_object_new_string(e->algo ? e->algo : "direct"));
        json_object_object_add(o, "bytes", json_object_new_int64((int64_t)e->bytes));
        json_object_object_add(o, "state", json_object_new_string(state_name(e->state)));
        json_object_object_add(o, "ms", json_object_new_double(
                                            e->end_ns ? (double)(e->end_ns - e->start_ns) / 1e6 : -1));
        json_object_array_add(arr, o);
    }
    return arr;
}
