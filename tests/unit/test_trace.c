/* The trace recorder and merge (strata/trace.h), read back with json-c: process and thread names
 * as metadata, every begin paired with its end (an end whose begin came before the open is dropped,
 * a span open at close is ended there and says so), arguments in "args", the timestamps on the
 * common clock (two traces recorded one after the other stay in that order when merged, the first
 * event at 0, exactly), and the merge's refusals (one process twice, a file not on that clock). */
#include "harness/st_test.h"
#include "strata/trace.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/strata-test-trace-XXXXXX";

static const char *path_in_dir(const char *name)
{
    static char buf[4][256];
    static int at;
    char *p = buf[at++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static json_object *load(const char *path)
{
    json_object *root = json_object_from_file(path);
    assert_non_null(root);
    return root;
}

static json_object *events_of(json_object *root)
{
    json_object *ev;
    assert_true(json_object_object_get_ex(root, "traceEvents", &ev));
    return ev;
}

static const char *str(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

static json_object *arg(json_object *e, const char *key)
{
    json_object *a, *v;
    if (!json_object_object_get_ex(e, "args", &a) || !json_object_object_get_ex(a, key, &v))
        return NULL;
    return v;
}

/* The index of the first event with phase ph and name (from `from`), or -1. */
static int find(json_object *ev, const char *ph, const char *name, int from)
{
    for (int i = from; i < (int)json_object_array_length(ev); i++) {
        json_object *e = json_object_array_get_idx(ev, (size_t)i);
        if (!strcmp(str(e, "ph"), ph) && !strcmp(str(e, "name"), name))
            return i;
    }
    return -1;
}

/* Every B has its E on the same thread (a stack per tid) and every b its e (by cat and id). */
static void assert_paired(json_object *ev)
{
    int depth[8] = {0}, tids[8], ntid = 0;
    char open_async[64][64];
    int nasync = 0;
    for (size_t i = 0; i < json_object_array_length(ev); i++) {
        json_object *e = json_object_array_get_idx(ev, i);
        const char *ph = str(e, "ph");
        int tid = json_object_get_int(json_object_object_get(e, "tid")), t = 0;
        while (t < ntid && tids[t] != tid)
            t++;
        if (t == ntid) {
            assert_true(ntid < 8);
            tids[ntid++] = tid;
        }
        char key[64];
        snprintf(key, sizeof key, "%s/%s", str(e, "cat"), str(e, "id"));
        if (!strcmp(ph, "B")) {
            depth[t]++;
        } else if (!strcmp(ph, "E")) {
            assert_true(depth[t] > 0); // an end without its begin
            depth[t]--;
        } else if (!strcmp(ph, "b")) {
            assert_true(nasync < 64);
            snprintf(open_async[nasync++], 64, "%s", key);
        } else if (!strcmp(ph, "e")) {
            int k = nasync - 1;
            while (k >= 0 && strcmp(open_async[k], key))
                k--;
            assert_true(k >= 0); // an async end without its begin
            memmove(open_async[k], open_async[k + 1], (size_t)(nasync - k - 1) * 64);
            nasync--;
        }
    }
    for (int t = 0; t < ntid; t++)
        assert_int_equal(depth[t], 0);
    assert_int_equal(nasync, 0);
}

static void test_pairs_metadata_args(void **state)
{
    (void)state;
    const char *p = path_in_dir("one.json");
    assert_int_equal(strata_trace_open(p, 3), STRATA_OK);
    assert_int_equal(strata_trace_open(p, 3), STRATA_ERR_INVALID_ARG);
    strata_trace_async_end("comm", "before_open", 7); // began before the open: dropped
    strata_trace_end("compute", "before_open");
    strata_trace_arg_t a[2] = {{"bytes", NULL, 1048576}, {"algo", "ring", 0}};
    strata_trace_begin_args("compute", "outer", a, 2);
    strata_trace_begin("compute", "inner");
    strata_trace_end("compute", "inner");
    strata_trace_end("compute", "outer");
    strata_trace_async_begin_args("coll", "allreduce", 1, a, 2);
    strata_trace_async_end("coll", "allreduce", 1);
    strata_trace_async_begin("coll", "in_flight", 2); // still open at close
    strata_trace_begin("compute", "error_path");      // left by an error: still open at close
    assert_int_equal(strata_trace_close(), STRATA_OK);
    assert_false(strata_trace_enabled());
    assert_int_equal(strata_trace_close(), STRATA_OK); // not open: nothing to do

    json_object *root = load(p), *ev = events_of(root);
    assert_paired(ev);
    assert_int_equal(find(ev, "e", "before_open", 0), -1);
    assert_int_equal(find(ev, "E", "before_open", 0), -1);
    int pn = find(ev, "M", "process_name", 0), tn = find(ev, "M", "thread_name", 0);
    assert_true(pn >= 0 && tn >= 0);
    json_object *pe = json_object_array_get_idx(ev, (size_t)pn);
    assert_string_equal(json_object_get_string(arg(pe, "name")), "rank 3");
    assert_int_equal(json_object_get_int(json_object_object_get(pe, "pid")), 3);
    json_object *te = json_object_array_get_idx(ev, (size_t)tn);
    assert_string_equal(json_object_get_string(arg(te, "name")), "main");
    assert_int_equal(json_object_get_int(json_object_object_get(te, "tid")), (int)getpid());
    json_object *outer = json_object_array_get_idx(ev, (size_t)find(ev, "B", "outer", 0));
    json_object *ar = json_object_array_get_idx(ev, (size_t)find(ev, "b", "allreduce", 0));
    assert_int_equal(json_object_get_int64(arg(outer, "bytes")), 1048576);
    assert_string_equal(json_object_get_string(arg(outer, "algo")), "ring");
    assert_int_equal(json_object_get_int64(arg(ar, "bytes")), 1048576);
    assert_string_equal(json_object_get_string(arg(ar, "algo")), "ring");
    int c1 = find(ev, "e", "in_flight", 0), c2 = find(ev, "E", "error_path", 0);
    assert_true(c1 >= 0 && c2 >= 0);
    assert_true(json_object_get_boolean(arg(json_object_array_get_idx(ev, (size_t)c1),
                                            "closed_at_close")));
    assert_true(json_object_get_boolean(arg(json_object_array_get_idx(ev, (size_t)c2),
                                            "closed_at_close")));
    json_object *other = json_object_object_get(root, "otherData");
    assert_string_equal(str(other, "clock"), "realtime_us");
    json_object_put(root);
}

/* One trace with a span named `name` as process `pid`. */
static void record(const char *path, int pid, const char *name)
{
    assert_int_equal(strata_trace_open(path, pid), STRATA_OK);
    strata_trace_begin("compute", name);
    usleep(2000);
    strata_trace_end("compute", name);
    assert_int_equal(strata_trace_close(), STRATA_OK);
}

static double ts_of(json_object *ev, const char *ph, const char *name)
{
    int i = find(ev, ph, name, 0);
    assert_true(i >= 0);
    return json_object_get_double(json_object_object_get(json_object_array_get_idx(ev, (size_t)i),
                                                         "ts"));
}

static void test_merge(void **state)
{
    (void)state;
    const char *r0 = path_in_dir("r0.json"), *r1 = path_in_dir("r1.json");
    record(r0, 0, "first");
    record(r1, 1, "second"); // opened after the first closed: later on the common clock
    const char *in[2] = {r0, r1}, *out = path_in_dir("job.json");
    assert_int_equal(strata_trace_merge(in, 2, out), STRATA_OK);
    json_object *root = load(out), *ev = events_of(root);
    assert_paired(ev);
    int names = 0;
    for (int i = find(ev, "M", "process_name", 0); i >= 0; i = find(ev, "M", "process_name", i + 1))
        names++;
    assert_int_equal(names, 2);
    assert_true(ts_of(ev, "B", "first") == 0); // the job's first event, exactly
    assert_true(ts_of(ev, "E", "first") >= 2000);
    assert_true(ts_of(ev, "B", "second") >= ts_of(ev, "E", "first"));
    json_object_put(root);

    const char *twice[2] = {r0, r0};
    assert_int_equal(strata_trace_merge(twice, 2, out), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "both hold process 0"));
    const char *other = path_in_dir("other.json");
    FILE *f = fopen(other, "w");
    assert_non_null(f);
    fputs("{\"traceEvents\": [{\"ph\":\"B\",\"name\":\"x\",\"pid\":5,\"tid\":1,\"ts\":1}]}\n", f);
    fclose(f);
    const char *foreign[2] = {r0, other};
    assert_int_equal(strata_trace_merge(foreign, 2, out), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "not on the job-wide clock"));
    f = fopen(other, "w");
    assert_non_null(f);
    fputs("{\"traceEvents\": [\n", f);
    fclose(f);
    assert_int_equal(strata_trace_merge(foreign, 2, out), STRATA_ERR_PARSE);
    const char *missing[1] = {path_in_dir("missing.json")};
    assert_true(strata_trace_merge(missing, 1, out) < 0);
    assert_non_null(strstr(strata_last_error(), "missing.json"));
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    const char *names[] = {"one.json", "r0.json", "r1.json", "job.json", "other.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(path_in_dir(names[i]));
    return rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs_metadata_args),
        cmocka_unit_test(test_merge),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
