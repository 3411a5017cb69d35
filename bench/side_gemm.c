/* The naive baseline of bench/harvest.sh: the gemm side task (an n x n sgemm per step, as
 * strata_side_task_gemm) as an ordinary process beside the training, at normal priority, for a given
 * time; prints the steps and GFLOP it did. usage: side_gemm N SECONDS */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return fprintf(stderr, "usage: side_gemm N SECONDS\n"), 2;
    int n = atoi(argv[1]);
    double secs = atof(argv[2]);
    float *a = malloc(sizeof(float) * (size_t)n * n), *b = malloc(sizeof(float) * (size_t)n * n);
    float *c = calloc((size_t)n * n, sizeof(float));
    if (!a || !b || !c || n < 1)
        return 1;
    for (size_t i = 0; i < (size_t)n * n; i++)
        a[i] = (float)(i % 7) * 0.01f, b[i] = (float)(i % 5) * 0.01f;
    double t0 = now();
    long steps = 0;
    while (now() - t0 < secs) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a, n, b, n, 0.5f, c, n);
        steps++;
    }
    printf("%ld %.3f\n", steps, 2.0 * n * n * (double)n * steps / 1e9);
    free(a), free(b), free(c);
    return 0;
}
