/* The ranks' traces share one clock (strata/trace.h): each of 3 ranks opens its trace at a
 * different time (rank r after r x 100 ms; rank 0 then waits until the others are in the barrier),
 * records a barrier, and rank 0 merges the files. On the merged timeline every rank's barrier span
 * must contain the moment the last rank arrived: the latest begin is no later than the earliest
 * end. With a clock that starts at each process's open, rank 0's span would begin ~300 ms after
 * rank 1's ended. This holds by causality (no rank leaves a barrier before the last arrives), so
 * the test does not depend on how fast the machine is; the sleeps only make the old clock fail. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/st_test.h"
#include "strata/trace.h"

#define NR       3
#define DELAY_US 100000

static char dir[] = "/tmp/strata-mr-trace-XXXXXX";

static int check_merged(const char *path)
{
    json_object *root = json_object_from_file(path), *ev;
    if (!root || !json_object_object_get_ex(root, "traceEvents", &ev))
        return ST_RANK_FAIL("%s: not a trace", path);
    double begin[NR], end[NR];
    for (int r = 0; r < NR; r++)
        begin[r] = end[r] = -1;
    for (size_t i = 0; i < json_object_array_length(ev); i++) {
        json_object *e = json_object_array_get_idx(ev, i), *ph, *name, *pid, *ts;
        if (!json_object_object_get_ex(e, "ph", &ph) || !json_object_object_get_ex(e, "name", &name)
            || !json_object_object_get_ex(e, "pid", &pid) || !json_object_object_get_ex(e, "ts", &ts)
            || strcmp(json_object_get_string(name), "barrier") != 0)
            continue;
        int r = json_object_get_int(pid);
        if (r < 0 || r >= NR)
            continue;
        if (!strcmp(json_object_get_string(ph), "b"))
            begin[r] = json_object_get_double(ts);
        else if (!strcmp(json_object_get_string(ph), "e"))
            end[r] = json_object_get_double(ts);
    }
    json_object_put(root);
    double last_begin = 0, first_end = 1e300;
    for (int r = 0; r < NR; r++) {
        if (begin[r] < 0 || end[r] < begin[r])
            return ST_RANK_FAIL("rank %d: barrier span [%f, %f] missing or reversed", r, begin[r],
                                end[r]);
        last_begin = begin[r] > last_begin ? begin[r] : last_begin;
        first_end = end[r] < first_end ? end[r] : first_end;
    }
    if (last_begin > first_end)
        return ST_RANK_FAIL("the barrier's spans do not overlap: the last begins at %.3f us, the "
                            "first ends at %.3f us (rank 0 [%.3f, %.3f], rank 1 [%.3f, %.3f])",
                            last_begin, first_end, begin[0], end[0], begin[1], end[1]);
    return 0;
}

static int rank_fn(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    if (!c)
        return ST_RANK_FAIL("no communicator");
    char path[NR][256];
    for (int r = 0; r < n; r++)
        snprintf(path[r], sizeof path[r], "%s/r%d.json", dir, r);
    ST_RANK_CHECK_OK(strata_barrier(c)); // untraced: everyone starts together
    usleep((useconds_t)rank * DELAY_US);
    ST_RANK_CHECK_OK(strata_trace_open(path[rank], rank));
    if (rank == 0) // the others are in the barrier by now: rank 0 arrives last
        usleep((useconds_t)n * DELAY_US);
    ST_RANK_CHECK_OK(strata_barrier(c));
    ST_RANK_CHECK_OK(strata_trace_close());
    ST_RANK_CHECK_OK(strata_barrier(c)); // every file written
    int rc = 0;
    if (rank == 0) {
        const char *in[NR] = {path[0], path[1], path[2]};
        char out[256];
        snprintf(out, sizeof out, "%s/job.json", dir);
        ST_RANK_CHECK_OK(strata_trace_merge(in, n, out));
        rc = check_merged(out);
        unlink(out);
    }
    ST_RANK_CHECK_OK(strata_barrier(c));
    unlink(path[rank]);
    strata_comm_destroy(c);
    return rc;
}

static void test_common_clock(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(dir));
    int rc = st_test_ranks(NR, rank_fn, NULL, NULL);
    rmdir(dir);
    assert_int_equal(rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_common_clock)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
