/* The TCP transport's knobs (src/comm/transport/tcp_opts.c): defaults derived from the communicator
 * timeout, explicit values, and bad values refused with an error naming the knob, what it held
 * and what was expected; and the striping rule both ends of a connection rely on. */
#include <stdlib.h>
#include <string.h>

#include "harness/st_test.h"
// st_test.h must come first: it includes cmocka with its prerequisites.
#include "comm/transport/tcp_opts.h"

static const char *knobs[] = {"STRATA_TCP_CONNS", "STRATA_TCP_STRIPE_MIN", "STRATA_TCP_BUF_BYTES",
                              "STRATA_TCP_USER_TIMEOUT_MS", "STRATA_TCP_KEEPALIVE"};

static int clear(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
        unsetenv(knobs[i]);
    return 0;
}

static void defaults_follow_the_timeout(void **state)
{
    (void)state;
    st_tcp_opts_t o;
    assert_int_equal(st_tcp_opts_read(120000, &o), STRATA_OK);
    assert_int_equal(o.conns, 4);
    assert_int_equal(o.stripe_min, 256 << 10);
    assert_int_equal(o.bufsize, 0);
    assert_int_equal(o.user_timeout_ms, 120000);
    // A silent host is declared dead after idle + count * interval = 30 + 3 * 10 = 60 s = T/2.
    assert_int_equal(o.keepidle_s, 30);
    assert_int_equal(o.keepintvl_s, 10);
    assert_int_equal(o.keepcnt, 3);
    // A short timeout still probes at least once a second.
    assert_int_equal(st_tcp_opts_read(2000, &o), STRATA_OK);
    assert_int_equal(o.user_timeout_ms, 2000);
    assert_int_equal(o.keepidle_s, 1);
    assert_int_equal(o.keepintvl_s, 1);
    // No timeout: the kernel's retransmit limit, and keepalive after a minute.
    assert_int_equal(st_tcp_opts_read(-1, &o), STRATA_OK);
    assert_int_equal(o.user_timeout_ms, 0);
    assert_int_equal(o.keepidle_s, 60);
    assert_int_equal(o.keepintvl_s, 10);
    assert_int_equal(o.keepcnt, 6);
}

static void explicit_values(void **state)
{
    (void)state;
    setenv("STRATA_TCP_CONNS", "16", 1);
    setenv("STRATA_TCP_STRIPE_MIN", "1M", 1);
    setenv("STRATA_TCP_BUF_BYTES", "4M", 1);
    setenv("STRATA_TCP_USER_TIMEOUT_MS", "0", 1);
    setenv("STRATA_TCP_KEEPALIVE", "60,5,4", 1);
    st_tcp_opts_t o;
    assert_int_equal(st_tcp_opts_read(120000, &o), STRATA_OK);
    assert_int_equal(o.conns, 16);
    assert_int_equal(o.stripe_min, 1 << 20);
    assert_int_equal(o.bufsize, 4 << 20);
    assert_int_equal(o.user_timeout_ms, 0);
    assert_int_equal(o.keepidle_s, 60);
    assert_int_equal(o.keepintvl_s, 5);
    assert_int_equal(o.keepcnt, 4);
    setenv("STRATA_TCP_KEEPALIVE", "off", 1);
    setenv("STRATA_TCP_USER_TIMEOUT_MS", "4500", 1);
    assert_int_equal(st_tcp_opts_read(120000, &o), STRATA_OK);
    assert_int_equal(o.keepidle_s, 0);
    assert_int_equal(o.user_timeout_ms, 4500);
}

/* Each bad value is refused with an error naming the knob, quoting the value, saying what fits. */
static void bad_values(void **state)
{
    (void)state;
    static const struct {
        const char *knob, *value, *expect;
    } cases[] = {
        {"STRATA_TCP_CONNS", "0", "from 1 to 16"},
        {"STRATA_TCP_CONNS", "17", "from 1 to 16"},
        {"STRATA_TCP_CONNS", "two", "from 1 to 16"},
        {"STRATA_TCP_CONNS", "4x", "from 1 to 16"},
        {"STRATA_TCP_STRIPE_MIN", "8", "size in bytes from 64"},
        {"STRATA_TCP_STRIPE_MIN", "lots", "size in bytes from 64"},
        {"STRATA_TCP_BUF_BYTES", "-1", "size in bytes from 4096"},
        {"STRATA_TCP_USER_TIMEOUT_MS", "-5", "auto, or milliseconds"},
        {"STRATA_TCP_USER_TIMEOUT_MS", "soon", "auto, or milliseconds"},
        {"STRATA_TCP_KEEPALIVE", "60", "IDLE_S,INTERVAL_S,COUNT"},
        {"STRATA_TCP_KEEPALIVE", "60,10", "IDLE_S,INTERVAL_S,COUNT"},
        {"STRATA_TCP_KEEPALIVE", "60,10,3,1", "IDLE_S,INTERVAL_S,COUNT"},
        {"STRATA_TCP_KEEPALIVE", "60,0,3", "IDLE_S,INTERVAL_S,COUNT"},
        {"STRATA_TCP_KEEPALIVE", "60,10,128", "IDLE_S,INTERVAL_S,COUNT"},
        {"STRATA_TCP_KEEPALIVE", "60,,3", "IDLE_S,INTERVAL_S,COUNT"},
        {"STRATA_TCP_KEEPALIVE", "60,10,3,", "IDLE_S,INTERVAL_S,COUNT"},
        {"STRATA_TCP_KEEPALIVE", ",60,10,3", "IDLE_S,INTERVAL_S,COUNT"},
        {"STRATA_TCP_KEEPALIVE", "on", "IDLE_S,INTERVAL_S,COUNT"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        clear(NULL);
        setenv(cases[i].knob, cases[i].value, 1);
        st_tcp_opts_t o;
        strata_status_t rc = st_tcp_opts_read(120000, &o);
        const char *msg = strata_last_error();
        if (rc != STRATA_ERR_INVALID_ARG || !strstr(msg, cases[i].knob) ||
            !strstr(msg, cases[i].value) || !strstr(msg, cases[i].expect))
            fail_msg("%s=%s: got %s '%s'", cases[i].knob, cases[i].value, strata_status_name(rc),
                     msg);
    }
}

/* Slices start at multiples of 64 bytes and cover the message exactly; small messages stay whole. */
static void striping_rule(void **state)
{
    (void)state;
    size_t slice;
    assert_int_equal(st_tcp_stripes(0, 4, 256 << 10, &slice), 1);
    assert_int_equal(st_tcp_stripes((512 << 10) - 1, 4, 256 << 10, &slice), 1);
    assert_int_equal(slice, (512 << 10) - 1);
    assert_int_equal(st_tcp_stripes(512 << 10, 4, 256 << 10, &slice), 2);
    assert_int_equal(slice, 256 << 10);
    assert_int_equal(st_tcp_stripes(64 << 20, 4, 256 << 10, &slice), 4);
    assert_int_equal(slice, 16 << 20);
    assert_int_equal(st_tcp_stripes(64 << 20, 1, 256 << 10, &slice), 1);
    for (size_t bytes = 128; bytes < 5000; bytes += 37) {
        int k = st_tcp_stripes(bytes, 16, 64, &slice);
        assert_true(k >= 2 && k <= 16 && slice % 64 == 0);
        assert_true((size_t)(k - 1) * slice < bytes && (size_t)k * slice >= bytes);
        size_t again;
        assert_int_equal(st_tcp_stripes(bytes, k, 1, &again), k); // what a receiver recomputes
        assert_int_equal(again, slice);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(defaults_follow_the_timeout, clear),
        cmocka_unit_test_setup(explicit_values, clear),
        cmocka_unit_test_setup(bad_values, clear),
        cmocka_unit_test_setup(striping_rule, clear),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
