/* The memory-bandwidth floor of a 2-rank allreduce on this machine, for bench/compare.sh.
 *
 * Two threads each stream a[i] += b[i] over float arrays of their own (half the allreduce's bytes
 * each), as the two ranks of a direct allreduce each reduce their half. The rate counts the bytes
 * a pass moves: a and b read, a written (3 per byte of a). A 2-rank allreduce of S bytes must read
 * both ranks' inputs and write both outputs, 4 S bytes, so its floor is 4 S / rate.
 *
 *   strata_membw SIZE[K|M|G] [ITERS]   prints one JSON line per size:
 *   {"size":S,"stream_GBps":...,"floor_us":...}
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct job {
    float *a, *b;
    size_t n;
    int iters;
    pthread_barrier_t *start;
    double seconds;
} job_t;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *stream(void *arg)
{
    job_t *j = arg;
    for (size_t i = 0; i < j->n; i++) { // first touch by the thread that uses it
        j->a[i] = (float)(i & 7);
        j->b[i] = 1.0f;
    }
    for (size_t i = 0; i < j->n; i++) // warm-up pass
        j->a[i] += j->b[i];
    pthread_barrier_wait(j->start);
    double t0 = now();
    for (int k = 0; k < j->iters; k++) {
        float *restrict a = j->a;
        const float *restrict b = j->b;
        for (size_t i = 0; i < j->n; i++)
            a[i] += b[i];
        __asm__ volatile("" ::"r"(a) : "memory"); // keep every pass
    }
    j->seconds = (now() - t0) / j->iters;
    return NULL;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    size_t mult = *end == 'K' ? 1u << 10 : *end == 'M' ? 1u << 20 : *end == 'G' ? 1u << 30 : 1;
    return (size_t)(v * (double)mult);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: strata_membw SIZE[K|M|G],... [ITERS]\n");
        return 2;
    }
    int iters = argc > 2 ? atoi(argv[2]) : 10;
    char *list = strdup(argv[1]);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        size_t size = parse_size(tok), n = size / 2 / sizeof(float);
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, 2);
        job_t jobs[2];
        pthread_t th[2];
        for (int t = 0; t < 2; t++) {
            jobs[t] = (job_t){.a = malloc(n * sizeof(float)), .b = malloc(n * sizeof(float)), .n = n,
                              .iters = iters, .start = &start};
            if (!jobs[t].a || !jobs[t].b) {
                fprintf(stderr, "strata_membw: out of memory for %zu bytes\n", size);
                return 1;
            }
            pthread_create(&th[t], NULL, stream, &jobs[t]);
        }
        double slowest = 0;
        for (int t = 0; t < 2; t++) {
            pthread_join(th[t], NULL);
            slowest = jobs[t].seconds > slowest ? jobs[t].seconds : slowest;
            free(jobs[t].a);
            free(jobs[t].b);
        }
        pthread_barrier_destroy(&start);
        double rate = 3.0 * 2 * (double)(n * sizeof(float)) / slowest;
        printf("{\"size\":%zu,\"stream_GBps\":%.3f,\"floor_us\":%.1f}\n", size, rate / 1e9,
               4.0 * (double)size / rate * 1e6);
    }
    free(list);
    return 0;
}
