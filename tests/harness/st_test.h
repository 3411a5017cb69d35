/* Test harness: cmocka plus helpers to run N ranks as forked processes with a bootstrap store.
 *
 * st_test_ranks(n, fn, arg, opts): the parent opens a store on 127.0.0.1:0, served from its own
 * single-threaded poll loop (no threads exist before fork), forks n children with RANK, WORLD_SIZE,
 * STRATA_STORE_ADDR, STRATA_STORE_EXTERNAL=1 and STRATA_SECRET set, and each child's return value
 * from fn(rank, n, arg) becomes its exit status (0 = pass). The parent waits up to the deadline,
 * SIGKILLs stragglers, and returns 0 only if every rank exited 0; otherwise it prints every rank's
 * exit status or signal. The first failed check of each failed job is printed again when the
 * test program exits (CI logs show a long output's head and tail only).
 *
 * Inside a rank function use ST_RANK_* checks, never cmocka's assert_*: a failing assert in a child
 * would jump back into the child's copy of the cmocka runner and run the rest of the suite there.
 */
#ifndef ST_TEST_H
#define ST_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka needs the three headers above first.
#include <cmocka.h>

#include "strata/strata.h"

typedef int (*st_rank_fn)(int rank, int nranks, void *arg);

typedef struct st_ranks_opts {
    int deadline_ms;        /* kill everyone after this (default 120000) */
    const char *extra_env;  /* "K=V;K2=V2" set in every child, or NULL */
    int expect_fail_rank;   /* rank allowed to die by signal or non-zero exit (-1 = none) */
    const char *secret;     /* the job's secret (NULL: a random one), for servers the test
                               starts itself, such as pool nodes */
} st_ranks_opts_t;

/* Runs fn on n forked ranks; 0 when all passed. opts may be NULL. */
int st_test_ranks(int n, st_rank_fn fn, void *arg, const st_ranks_opts_t *opts);

/* Inside a rank: creates the world communicator from the environment the harness set. */
strata_comm_t *st_test_comm(void);

/* Reports a failed check inside a rank (prints rank, file, line, message) and returns 1, so rank
 * functions can write `if (bad) return ST_RANK_FAIL("...")`. */
int st_rank_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define ST_RANK_FAIL(...) st_rank_fail(__FILE__, __LINE__, __VA_ARGS__)
#define ST_RANK_CHECK_OK(expr)                                                                     \
    do {                                                                                           \
        strata_status_t rc_ = (expr);                                                              \
        if (rc_ != STRATA_OK)                                                                      \
            return ST_RANK_FAIL("%s -> %s: %s", #expr, strata_status_name(rc_),                    \
                                strata_last_error());                                              \
    } while (0)

#endif
