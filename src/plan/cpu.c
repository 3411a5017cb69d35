/* Calibrating the "cpu" accelerator on this machine: single-precision GEMM through OpenBLAS (the
 * library strata's CPU model uses), loaded at run time so the planner does not link it, falling
 * back to a blocked C loop; the memory copy bandwidth. From the GEMM rates at three sizes it fits
 * the shape constant of the efficiency curve, so the planner can predict strata's own CPU runs. */
#include "base/base.h"
#include "plan/plan_internal.h"

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void (*sgemm_fn)(int order, int ta, int tb, int M, int N, int K, float alpha,
                         const float *A, int lda, const float *B, int ldb, float beta, float *C,
                         int ldc);
typedef void (*set_threads_fn)(int);

static void naive_sgemm(int n, const float *A, const float *B, float *C)
{
    memset(C, 0, sizeof(float) * (size_t)n * n);
    const int bs = 64;
    for (int ii = 0; ii < n; ii += bs)
        for (int kk = 0; kk < n; kk += bs)
            for (int i = ii; i < ii + bs && i < n; i++)
                for (int k = kk; k < kk + bs && k < n; k++) {
                    float a = A[(size_t)i * n + k];
                    for (int j = 0; j < n; j++)
                        C[(size_t)i * n + j] += a * B[(size_t)k * n + j];
                }
}

/* Best-of-3 GFLOP/s of an n x n x n GEMM. */
static double gemm_rate(sgemm_fn fn, int n, float *A, float *B, float *C)
{
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        uint64_t t0 = st_now_ns();
        int inner = n <= 64 ? 2000 : n <= 256 ? 20 : n <= 512 ? 4 : 1;
        for (int k = 0; k < inner; k++) {
            if (fn)
                fn(101 /* row major */, 111, 111, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
            else
                naive_sgemm(n, A, B, C);
        }
        double s = (double)(st_now_ns() - t0) / 1e9;
        double r = inner * 2.0 * n * n * n / s;
        if (r > best)
            best = r;
    }
    return best;
}

strata_status_t strata_accel_measure_cpu(int threads, strata_accel_t *out)
{
    const int big = 1024, small = 48;
    float *A = malloc(sizeof(float) * big * big), *B = malloc(sizeof(float) * big * big);
    float *C = malloc(sizeof(float) * big * big);
    const size_t copy_bytes = 256u << 20;
    char *src = malloc(copy_bytes), *dst = malloc(copy_bytes);
    if (!A || !B || !C || !src || !dst) {
        free(A), free(B), free(C), free(src), free(dst);
        return st_error(STRATA_ERR_NO_MEMORY, "cpu calibration: out of memory");
    }
    for (int i = 0; i < big * big; i++) {
        A[i] = (float)(i % 7) * 0.25f;
        B[i] = (float)(i % 5) * 0.5f;
    }
    void *lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
    sgemm_fn fn = NULL;
    if (lib) {
        *(void **)&fn = dlsym(lib, "cblas_sgemm");
        set_threads_fn st = NULL;
        *(void **)&st = dlsym(lib, "openblas_set_num_threads");
        if (st)
            st(threads > 0 ? threads : 1);
    }
    ST_LOG_INFO(ST_SUB_PLAN, "cpu calibration: GEMM through %s", fn ? "OpenBLAS" : "a C loop");
    double r_big = gemm_rate(fn, big, A, B, C);
    double r_small = gemm_rate(fn, small, A, B, C);
    memset(src, 1, copy_bytes);
    double bw = 0;
    for (int rep = 0; rep < 3; rep++) {
        uint64_t t0 = st_now_ns();
        memcpy(dst, src, copy_bytes);
        double s = (double)(st_now_ns() - t0) / 1e9;
        if (2.0 * copy_bytes / s > bw)
            bw = 2.0 * copy_bytes / s; /* read + write */
        src[rep] = dst[rep + 1];
    }
    if (lib)
        dlclose(lib);
    free(A), free(B), free(C), free(src), free(dst);

    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "cpu");
    // The curve is peak * g(M) g(N) g(K), g(x) = x/(x+d0): solve d0 from the two sizes.
    double ratio = r_small / r_big, d0 = 16;
    for (int it = 0; it < 60; it++) {
        double gb = pow(big / (big + d0), 3), gs = pow(small / (small + d0), 3);
        double f = gs / gb - ratio;
        d0 = f > 0 ? d0 * 1.2 : d0 / 1.1;
        if (d0 < 0.5 || d0 > 4096)
            break;
    }
    out->gemm_dim0 = d0 < 4 ? 4 : d0;
    out->gemm_eff = 1.0;
    out->peak_flops_32 = r_big / pow(big / (big + d0), 3);
    out->peak_flops_16 = out->peak_flops_32; /* no faster half precision on this CPU */
    out->mem_bw_Bps = bw;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    double ram = pages > 0 && psz > 0 ? (double)pages * psz : 8e9;
    out->mem_bytes = ram / (ncpu > 0 ? ncpu : 1);
    out->reserved_bytes = 0;
    out->kernel_floor_s = 2e-6;
    return STRATA_OK;
}
