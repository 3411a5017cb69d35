/* A value of each thread's (a scratch buffer, a memo, a cache of primitives): made on the thread's
 * first use and destroyed when the thread ends, under a pthread key created on first use, once.
 * Declare one per kind with static storage:
 *
 *     static st_thread_value_t memo = ST_THREAD_VALUE(memo_make, memo_destroy);
 *     memo_t *m = st_thread_value(&memo);
 */
#ifndef ST_BASE_THREAD_VALUE_H
#define ST_BASE_THREAD_VALUE_H

#include <pthread.h>

typedef struct st_thread_value {
    void *(*make)(void);     /* a new value, on the thread that will own it; NULL: out of memory */
    void (*destroy)(void *); /* frees a value: at the thread's exit, or when it cannot be kept */
    _Atomic int state;       /* 0 no key yet, 1 key made, -1 it could not be */
    pthread_key_t key;
} st_thread_value_t;

#define ST_THREAD_VALUE(make, destroy) {(make), (destroy), 0, 0}

/* This thread's value, made now if it has none yet; NULL when the key or the value could not be
 * made (the caller does without: a slower path, or an error). */
void *st_thread_value(st_thread_value_t *v);

/* This thread's value if it has one; NULL otherwise (nothing is made). */
void *st_thread_value_if_any(st_thread_value_t *v);

#endif
