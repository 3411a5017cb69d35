/* st_parallel_range and the fork guard (parallel_range.h) on OpenMP.
 *
 * libgomp is not fork-safe: a child forked after the parent's first parallel region inherits a
 * pool whose threads do not exist, and its next parallel region waits for them forever (the test
 * harness forks its ranks after a reference run). So the first use of OpenMP registers a fork
 * handler, and a forked child keeps to one OpenMP thread.
 *
 * Not under ThreadSanitizer: libgomp is not built with it, so its own synchronisation would read
 * as races, and TSan refuses a child that starts threads after a multi-threaded fork (the test
 * harness forks ranks after a reference run); those builds run the pieces serially and keep
 * OpenMP, oneDNN's teams included, to one thread. */
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "model/parallel_range.h"

#if defined(__SANITIZE_THREAD__)
#define ST_SERIAL 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ST_SERIAL 1
#endif
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_bool forked;

static void in_child(void)
{
    atomic_store(&forked, true);
    omp_set_num_threads(1);
}

static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, in_child);
}

bool st_omp_guard(void)
{
    pthread_once(&once, register_fork_handler);
#ifdef ST_SERIAL
    return false; // one thread: a oneDNN team started in the parent makes a fork multi-threaded
#else
    return !atomic_load(&forked);
#endif
}

int st_parallel_threads(void)
{
#ifdef ST_SERIAL
    return 1;
#else
    return st_omp_guard() ? omp_get_max_threads() : 1;
#endif
}

int st_parallel_index(void)
{
    return omp_get_thread_num();
}

void st_parallel_range(size_t n, size_t grain, void (*fn)(void *ctx, size_t begin, size_t end),
                       void *ctx)
{
    if (grain < 1)
        grain = 1;
#ifndef ST_SERIAL
    int threads = st_parallel_threads();
    if (threads > 1 && n >= 2 * grain && !omp_in_parallel()) {
        size_t pieces = n / grain < (size_t)threads ? n / grain : (size_t)threads;
#pragma omp parallel for num_threads((int)pieces) schedule(static, 1)
        for (size_t p = 0; p < pieces; p++)
            fn(ctx, n * p / pieces, n * (p + 1) / pieces);
        return;
    }
#endif
    fn(ctx, 0, n);
}

static void zero_piece(void *ctx, size_t b, size_t e)
{
    memset((float *)ctx + b, 0, (e - b) * sizeof(float));
}

void st_parallel_zero(float *x, size_t n)
{
    st_parallel_range(n, (size_t)1 << 18, zero_piece, x);
}
