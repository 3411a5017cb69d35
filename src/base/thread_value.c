/* Per-thread values (thread_value.h). */
#include "base/thread_value.h"

#include <stdatomic.h>

/* Serialises the keys' creation (pthread_once's routine takes no argument to say which key). */
static pthread_mutex_t key_lock = PTHREAD_MUTEX_INITIALIZER;

void *st_thread_value(st_thread_value_t *v)
{
    int state = atomic_load_explicit(&v->state, memory_order_acquire);
    if (state == 0) {
        pthread_mutex_lock(&key_lock);
        state = atomic_load_explicit(&v->state, memory_order_relaxed);
        if (state == 0) {
            state = pthread_key_create(&v->key, v->destroy) == 0 ? 1 : -1;
            atomic_store_explicit(&v->state, state, memory_order_release);
        }
        pthread_mutex_unlock(&key_lock);
    }
    if (state < 0)
        return NULL;
    void *x = pthread_getspecific(v->key);
    if (x)
        return x;
    if ((x = v->make()) && pthread_setspecific(v->key, x) != 0) {
        v->destroy(x);
        x = NULL;
    }
    return x;
}

void *st_thread_value_if_any(st_thread_value_t *v)
{
    return atomic_load_explicit(&v->state, memory_order_acquire) > 0 ? pthread_getspecific(v->key)
                                                                      : NULL;
}
