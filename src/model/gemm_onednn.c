/* The model's matrix products on oneDNN's matmul (gemm.h): in float32, on the operands as they are,
 * and at STRATA_PREC_BF16, with both operands rounded to bf16 into per-thread scratch and
 * multiplied on the CPU's AMX or AVX512-BF16 units with float32 accumulation. alpha is the output
 * scale, beta a sum post-op and a bias row the product's bias argument, so the contract is
 * sgemm's (plus the bias). Why oneDNN: its kernels are built for the CPU it runs on (Debian's
 * OpenBLAS 0.3.21 runs Haswell's AVX2 kernels on some AVX-512 CPUs, at half oneDNN's fp32 speed
 * there, and is built without cblas_sbgemm), and its threads are OpenMP's,
 * the model's own, where OpenBLAS keeps a second pool that competes for the cores.
 *
 * A oneDNN primitive is built for one shape, at tens of microseconds, so each thread keeps a
 * small cache of them keyed by the call's shape and type (the model's shapes repeat every step: a
 * few per layer kind plus attention's key blocks), with the memory objects whose data handles are
 * swapped per call. The cache, its stream and the scratch are per thread (a pthread key frees them
 * when the thread ends): primitives execute concurrently, but a memory object is not shared.
 *
 * A float32 matrix several bf16 products read (a layer's output gradient: its input gradient's and
 * its weight gradient's product; the logits' gradient, written in bf16 by the cross-entropy's own
 * pass) can be held: rounded once into a per-thread copy that every product whose operand lies
 * inside it reads instead of rounding again, until it is released.
 *
 * A layer's weight is held packed (st_gemm_bf16_hold_weight): its holder rounds it once a step
 * straight into the blocked layouts the kernels read B in (gemm_blocked.h), one for the forward's
 * product and one for the input gradient's, and those products run on them as they are. Handed B
 * as stored, the kernels copy it into that layout inside every product, on every thread and again
 * for every block of A's rows. bf16 products with a weight's B, operands as they lie, the old
 * against the packed (the packing not counted), M x N x K: 1024 x 3072 x 768 (B = w^T) one Zen 4
 * core 201 against 214 GFLOP/s, two cores 383 against 423; 1024 x 768 x 2304 (B = w) two cores
 * 410 against 443. The
 * packing included, a step of the 85M model at 2 threads is 2.0% shorter, of the 3.3M one at 1
 * thread 2.0% (docs/train.md). */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/bf16.h"
#include "base/thread_value.h"
#include "model/gemm.h"
#include "model/gemm_blocked.h"
#include "model/parallel_range.h"

#define CACHE_SLOTS 256

typedef struct prim_key {
    int bf16; /* the operands' type: bf16 (1) or f32 (0) */
    int ta, tb, M, N, K, lda, ldb, ldc;
    int bias;    /* a bias row added to every row of C (1) or none (0) */
    int blocked; /* B in the layout the kernels choose (1: ldb unused) or as stored (0) */
    float alpha, beta;
} prim_key_t;
_Static_assert(sizeof(prim_key_t) == 11 * sizeof(int) + 2 * sizeof(float),
               "prim_key_t has no padding: it is hashed and compared as bytes");

typedef struct prim {
    bool used;
    uint64_t last; /* use tick, for least-recently-used eviction */
    prim_key_t key;
    dnnl_primitive_t p;
    dnnl_memory_t a, b, c, bias; /* bias: NULL without */
    bool packs_b;                /* a blocked key whose B layout st_blocked_pack_weight writes */
    st_blocked_t blk;            /* that layout */
} prim_t;

#define HELD_SLOTS 8

/* A held matrix: x's rows x cols (leading dimension ld) rounded into h (rows x cols, packed): the
 * slot's own buffer buf, or a caller's copy. */
typedef struct held {
    const float *x;
    int rows, cols, ld, refs;
    const uint16_t *h;
    uint16_t *buf;
    size_t cap;
} held_t;

#define WEIGHT_SLOTS 8
#define LAYOUT_SLOTS 16

/* A held weight: w (rows x cols, row-major) packed by its holder for the products reading it as B,
 * in the layouts its two uses' kernels choose: B = w^T (a forward, layout fwd) at `packed`, B = w
 * (an input gradient, layout bwd) right after it. */
typedef struct weight {
    const float *w;
    int rows, cols, refs;
    const uint16_t *packed;
    st_blocked_t fwd, bwd;
} weight_t;

/* The blocked layout the kernels choose for a B of K x N (a slot in use: K > 0), when it is one
 * st_blocked_pack_weight writes (ok). */
typedef struct layout {
    int K, N;
    bool ok;
    st_blocked_t blk;
} layout_t;

typedef struct gemm_cache {
    unsigned forks; /* `forks` when its primitives were made: another value in a forked child */
    dnnl_stream_t stream;
    uint64_t tick;
    prim_t slot[CACHE_SLOTS];
    uint16_t *a16, *b16; /* conversion scratch */
    size_t a_cap, b_cap;
    held_t held[HELD_SLOTS];
    weight_t weight[WEIGHT_SLOTS];
    layout_t layout[LAYOUT_SLOTS];
    int next_layout; /* the slot a new layout takes once all are used */
} gemm_cache_t;

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* Forks this process descends from (a fork handler counts them): a thread's cache compares it at
 * every product, where getpid() would be a system call each time. */
static _Atomic unsigned forks;
static dnnl_engine_t engine;
static const char *units;

static void prim_free(prim_t *s)
{
    if (!s->used)
        return;
    dnnl_primitive_destroy(s->p);
    dnnl_memory_destroy(s->a);
    dnnl_memory_destroy(s->b);
    dnnl_memory_destroy(s->c);
    dnnl_memory_destroy(s->bias);
    s->used = false;
}

static void cache_free(void *arg)
{
    gemm_cache_t *g = arg;
    for (int i = 0; i < CACHE_SLOTS; i++)
        prim_free(&g->slot[i]);
    if (g->stream)
        dnnl_stream_destroy(g->stream);
    free(g->a16);
    free(g->b16);
    for (int i = 0; i < HELD_SLOTS; i++)
        free(g->held[i].buf);
    free(g);
}

static void forked(void)
{
    atomic_fetch_add(&forks, 1);
}

static void init_once(void)
{
    if (pthread_atfork(NULL, NULL, forked) != 0 ||
        dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
        engine = NULL;
        return;
    }
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx)
        units = "amx";
    else if ((isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16)
        units = "avx512_bf16";
}

const char *st_gemm_bf16_units(void)
{
    pthread_once(&once, init_once);
    return units;
}

bool st_gemm_onednn_ready(void)
{
    pthread_once(&once, init_once);
    return engine != NULL;
}

/* A thread's new cache (the engine is made). */
static void *cache_make(void)
{
    if (!st_omp_guard()) // a forked child, or TSan: this thread's products keep to one thread
        omp_set_num_threads(1);
    gemm_cache_t *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->forks = atomic_load_explicit(&forks, memory_order_relaxed);
    if (dnnl_stream_create(&g->stream, engine, dnnl_stream_default_flags) != dnnl_success) {
        cache_free(g);
        return NULL;
    }
    return g;
}

static st_thread_value_t caches = ST_THREAD_VALUE(cache_make, cache_free);

static gemm_cache_t *cache(void)
{
    if (!st_gemm_onednn_ready())
        return NULL;
    gemm_cache_t *g = st_thread_value(&caches);
    unsigned gen = atomic_load_explicit(&forks, memory_order_relaxed);
    if (g && g->forks != gen) {
        // A forked child inherits the parent's primitives, made for the parent's thread count: run
        // here, one would start a team of OpenMP threads the child does not have and wait for
        // them forever. The child makes its own.
        for (int i = 0; i < CACHE_SLOTS; i++)
            prim_free(&g->slot[i]);
        g->forks = gen;
    }
    return g;
}

/* The thread's cache when bf16 products can run here. */
static gemm_cache_t *bf16_cache(void)
{
    return st_gemm_bf16_units() ? cache() : NULL;
}

/* A matrix of rows x cols with the given element type, row-major, or its transpose's storage. */
static dnnl_status_t desc(dnnl_memory_desc_t *md, int rows, int cols, bool transposed, int ld,
                          dnnl_data_type_t dt)
{
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {transposed ? 1 : ld, transposed ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

/* The layout a primitive chose for its B (K x N), when it is one st_blocked_pack_weight writes. */
static bool blocked_layout(st_blocked_t *out, const dnnl_memory_desc_t *md, int K, int N)
{
    const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
    if (md->format_kind != dnnl_blocked || md->ndims != 2 || md->data_type != dnnl_bf16 ||
        md->offset0 != 0 || md->extra.flags != 0 || bd->inner_nblks != 3 ||
        bd->inner_idxs[0] != 0 || bd->inner_idxs[1] != 1 || bd->inner_idxs[2] != 0 ||
        bd->inner_blks[2] != 2 || bd->inner_blks[0] * 2 != ST_BLOCKED_KB ||
        bd->inner_blks[1] < 16 || bd->inner_blks[1] % 16)
        return false;
    int nb = (int)bd->inner_blks[1];
    size_t kblocks = (size_t)(K + ST_BLOCKED_KB - 1) / ST_BLOCKED_KB;
    size_t nblocks = (size_t)(N + nb - 1) / (size_t)nb;
    *out = (st_blocked_t){.K = K,
                          .N = N,
                          .nb = nb,
                          .k_stride = (size_t)bd->strides[0],
                          .n_stride = (size_t)bd->strides[1],
                          .size = kblocks * nblocks * ST_BLOCKED_KB * (size_t)nb};
    // Every block inside the buffer, none overlapping: the strides of a dense block grid.
    bool dense = (out->k_stride == ST_BLOCKED_KB * (size_t)nb &&
                  out->n_stride == kblocks * out->k_stride) ||
                 (out->n_stride == ST_BLOCKED_KB * (size_t)nb &&
                  out->k_stride == nblocks * out->n_stride);
    return dense && dnnl_memory_desc_get_size(md) == out->size * sizeof(uint16_t);
}

static bool same_blocked(const st_blocked_t *x, const st_blocked_t *y)
{
    return x->K == y->K && x->N == y->N && x->nb == y->nb && x->k_stride == y->k_stride &&
           x->n_stride == y->n_stride && x->size == y->size;
}

/* The rows of A a weight's layouts are asked for with: a micro-batch's tokens, about. The kernels'
 * choice of B's layout depends on B's shape only; a product of other rows whose choice differs
 * runs on B as stored instead (gemm_weight). */
#define LAYOUT_M 1024

/* The layout the kernels choose for a bf16 B of K x N, from the thread's table or asked of oneDNN
 * (tens of microseconds, once a shape). false where it is not one st_blocked_pack_weight writes. */
static bool weight_layout(gemm_cache_t *g, int K, int N, st_blocked_t *out)
{
    for (int i = 0; i < LAYOUT_SLOTS; i++) {
        const layout_t *l = &g->layout[i];
        if (l->K == K && l->N == N) {
            *out = l->blk;
            return l->ok;
        }
    }
    layout_t *l = &g->layout[g->next_layout];
    g->next_layout = (g->next_layout + 1) % LAYOUT_SLOTS;
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t ad = {LAYOUT_M, K}, bd = {K, N}, cd = {LAYOUT_M, N};
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    *l = (layout_t){.K = K, .N = N};
    if (dnnl_memory_desc_init_by_tag(&a, 2, ad, dnnl_bf16, dnnl_ab) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&b, 2, bd, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&c, 2, cd, dnnl_f32, dnnl_ab) == dnnl_success &&
        dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL) == dnnl_success)
        l->ok = blocked_layout(&l->blk,
                               dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), K, N);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    *out = l->blk;
    return l->ok;
}

static dnnl_status_t build(prim_t *s, const prim_key_t *k)
{
    dnnl_memory_desc_t a, b, c, bias;
    dnnl_status_t e;
    dnnl_data_type_t dt = k->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t bdims = {k->K, k->N};
    if ((e = desc(&a, k->M, k->K, k->ta, k->lda, dt)) ||
        (e = k->blocked ? dnnl_memory_desc_init_by_tag(&b, 2, bdims, dt, dnnl_format_tag_any)
                        : desc(&b, k->K, k->N, k->tb, k->ldb, dt)) ||
        (e = desc(&c, k->M, k->N, false, k->ldc, dnnl_f32)) ||
        (e = desc(&bias, 1, k->N, false, k->N, dnnl_f32)))
        return e;
    dnnl_matmul_desc_t md;
    if ((e = dnnl_matmul_desc_init(&md, &a, &b, k->bias ? &bias : NULL, &c)))
        return e;
    dnnl_primitive_attr_t attr;
    if ((e = dnnl_primitive_attr_create(&attr)))
        return e;
    dnnl_post_ops_t po = NULL;
    if (k->alpha != 1.f)
        e = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha);
    if (!e && k->beta != 0.f && !(e = dnnl_post_ops_create(&po)) &&
        !(e = dnnl_post_ops_append_sum(po, k->beta)))
        e = dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_primitive_desc_t pd = NULL;
    if (!e)
        e = dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL);
    if (po)
        dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    if (e)
        return e;
    s->packs_b = false;
    if (k->blocked) { // the layout chosen, for B's memory object and its packing
        b = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        s->packs_b = blocked_layout(&s->blk, &b, k->K, k->N);
    }
    e = dnnl_primitive_create(&s->p, pd);
    dnnl_primitive_desc_destroy(pd);
    if (e)
        return e;
    s->a = s->b = s->c = s->bias = NULL;
    if ((e = dnnl_memory_create(&s->a, &a, engine, DNNL_MEMORY_NONE)) ||
        (e = dnnl_memory_create(&s->b, &b, engine, DNNL_MEMORY_NONE)) ||
        (e = dnnl_memory_create(&s->c, &c, engine, DNNL_MEMORY_NONE)) ||
        (k->bias && (e = dnnl_memory_create(&s->bias, &bias, engine, DNNL_MEMORY_NONE)))) {
        dnnl_primitive_destroy(s->p);
        dnnl_memory_destroy(s->a);
        dnnl_memory_destroy(s->b);
        dnnl_memory_destroy(s->c);
        return e;
    }
    s->key = *k;
    s->used = true;
    return dnnl_success;
}

/* The slot a key's search starts at: FNV-1a of its bytes (the key has no padding). */
static int home(const prim_key_t *k)
{
    const unsigned char *b = (const unsigned char *)k;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ b[i]) * 16777619u;
    return (int)(h % CACHE_SLOTS);
}

/* A key is searched from its home slot on, up to the first unused slot: a new key takes that one,
 * so a step's few dozen shapes are found at their first or second look (a scan of every slot was
 * 0.45% of a small model's step). Slots are reused, not emptied, so once all are taken a key
 * evicted into another's slot is found by searching on; the least recently used is evicted. Only a
 * failed build empties one: a key stored beyond it may then be built again there, a second copy
 * that the first ages out of use. */
static prim_t *lookup(gemm_cache_t *g, const prim_key_t *k)
{
    int h = home(k);
    prim_t *victim = NULL;
    for (int n = 0; n < CACHE_SLOTS; n++) {
        prim_t *s = &g->slot[(h + n) % CACHE_SLOTS];
        if (!s->used) {
            victim = s;
            break;
        }
        if (memcmp(&s->key, k, sizeof *k) == 0) {
            s->last = ++g->tick;
            return s;
        }
        if (!victim || s->last < victim->last)
            victim = s;
    }
    prim_free(victim);
    if (build(victim, k) != dnnl_success)
        return NULL;
    victim->last = ++g->tick;
    return victim;
}

static bool reserve(uint16_t **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return true;
    uint16_t *b = realloc(*buf, n * sizeof *b);
    if (!b)
        return false;
    *buf = b;
    *cap = n;
    return true;
}

/* The conversion below in plain C, where the CPU has no bf16 units (or the compiler no intrinsics
 * for them). */
static void pack_rows_scalar(uint16_t *restrict dst, const float *restrict x, size_t r0, size_t r1,
                             int cols, int ld)
{
    for (size_t r = r0; r < r1; r++)
        for (int c = 0; c < cols; c++)
            dst[r * cols + c] = st_f32_to_bf16(x[r * ld + c]);
}

/* Packs the rows x cols matrix x (leading dimension ld) into dst as bf16, 32 floats per
 * AVX512-BF16 conversion (every CPU with bf16 units has it; the scalar loop finishes each row). The
 * instruction rounds to nearest even like st_f32_to_bf16 but flushes subnormal inputs to zero,
 * which no product of the model can tell apart. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
__attribute__((target("avx512f,avx512bf16"))) static void
pack_rows(uint16_t *restrict dst, const float *restrict x, size_t r0, size_t r1, int cols, int ld)
{
    for (size_t r = r0; r < r1; r++) {
        const float *s = x + (size_t)r * ld;
        uint16_t *d = dst + (size_t)r * cols;
        int c = 0;
        for (; c + 32 <= cols; c += 32) {
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + c + 16), _mm512_loadu_ps(s + c));
            _mm512_storeu_si512((void *)(d + c), (__m512i)v);
        }
        for (; c < cols; c++)
            d[c] = st_f32_to_bf16(s[c]);
    }
}
#else
#define pack_rows pack_rows_scalar
#endif

typedef struct pack_job {
    uint16_t *dst;
    const float *x;
    int cols, ld;
} pack_job_t;

static void pack_piece(void *ctx, size_t r0, size_t r1)
{
    const pack_job_t *j = ctx;
    pack_rows(j->dst, j->x, r0, r1, j->cols, j->ld);
}

/* The rows spread over the threads: a conversion is a pass over memory, as long as a product's
 * own passes at these sizes. */
static void pack_bf16(uint16_t *dst, const float *x, int rows, int cols, int ld)
{
    pack_job_t j = {dst, x, cols, ld};
    st_parallel_range((size_t)rows, ST_ROW_GRAIN(cols), pack_piece, &j);
}

/* The primitive of a product of this shape on bf16 (or f32) storage, from the cache or built. */
static prim_t *shape(gemm_cache_t *g, bool bf16, int ta, int tb, int M, int N, int K, float alpha,
                     int lda, int ldb, float beta, bool bias, int ldc)
{
    prim_key_t k = {bf16, ta, tb, M, N, K, lda, ldb, ldc, bias, 0, alpha, beta};
    return lookup(g, &k);
}

/* Runs primitive s on these operands. */
static int run(gemm_cache_t *g, prim_t *s, const void *A, const void *B, const float *bias,
               float *C)
{
    if (dnnl_memory_set_data_handle(s->a, (void *)A) ||
        dnnl_memory_set_data_handle(s->b, (void *)B) || dnnl_memory_set_data_handle(s->c, C) ||
        (bias && dnnl_memory_set_data_handle(s->bias, (void *)bias)))
        return -1;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, s->a},
                               {DNNL_ARG_WEIGHTS, s->b},
                               {DNNL_ARG_DST, s->c},
                               {DNNL_ARG_BIAS, s->bias}};
    if (dnnl_primitive_execute(s->p, g->stream, bias ? 4 : 3, args) || dnnl_stream_wait(g->stream))
        return -1;
    return 0;
}

/* oneDNN 2.6's kernels run a product whose B is stored K x N (not transposed) far below their speed
 * when N is wide, and at full speed on the same product cut into column panels (one Zen 4 core,
 * 1024 x 3072 x 768: float32 67 against 109 GFLOP/s, bf16 212 against 221; 768 x 3072 x 1024
 * with A transposed: 65 against 109, 196 against 220; two cores alike): the MLP's second layer's
 * input and weight gradients are such products. So from WIDE_N columns on, B not transposed, the
 * product runs as panels of at most PANEL_N columns, each one product of its own. Narrower
 * products stay whole: cutting them loses (1024 x 1024 x 256, float32: 98 against 56).
 * Likewise a tall product whose A is stored transposed (a weight gradient, dW = dY^T X, with as
 * many rows as the layer has outputs) runs faster in row panels (bf16 on the Zen 4 EPYC, operands
 * held: qkv's 2304 x 768 x 1024 at 2 threads 398 against 434 GFLOP/s, at 1 thread 198 against
 * 214; the MLP's 3072 x 768 x 1024 390 against 421 and 198 against 211): from TALL_M rows on, A
 * transposed, panels of at most PANEL_M rows. */
#define WIDE_N 2048
#define PANEL_N 768
#define TALL_M 2048
#define PANEL_M 768

/* The size of n's panels, at most `most` each, as even as multiples of 16 allow. */
static int panel_size(int n, int most)
{
    int panels = (n + most - 1) / most;
    return ((n + panels - 1) / panels + 15) / 16 * 16;
}

/* The product on bf16 (or f32) storage with leading dimensions lda, ldb (of A's and B's storage),
 * wide and tall ones in panels. Every panel's primitive is built before the first runs, so a
 * product that cannot run leaves C untouched. */
static int gemm_ld(gemm_cache_t *g, bool bf16, int ta, int tb, int M, int N, int K, float alpha,
                   const void *A, int lda, const void *B, int ldb, float beta, const float *bias,
                   float *C, int ldc)
{
    int width = !tb && N >= WIDE_N ? panel_size(N, PANEL_N) : N;
    int height = ta && M >= TALL_M ? panel_size(M, PANEL_M) : M;
    int last_w = N - (N - 1) / width * width, last_h = M - (M - 1) / height * height;
    bool biased = bias != NULL;
    // s[r][c]: the primitive of a panel in the last row of panels (r) and the last column (c),
    // where those differ from the others. A lookup evicts the least recently used slot: never one
    // of these, just used.
    prim_t *s[2][2];
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 2; c++) {
            bool same_r = r && last_h == height, same_c = c && last_w == width;
            s[r][c] = same_r || same_c
                          ? s[same_r ? 0 : r][same_c ? 0 : c]
                          : shape(g, bf16, ta, tb, r ? last_h : height, c ? last_w : width, K,
                                  alpha, lda, ldb, beta, biased, ldc);
            if (!s[r][c])
                return -1;
        }
    size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
    for (int m0 = 0; m0 < M; m0 += height) {
        // op(A)'s rows m0.. are storage columns m0.. when transposed (rows are cut only then).
        const char *a = (const char *)A + (ta ? (size_t)m0 : (size_t)m0 * lda) * elem;
        for (int n0 = 0; n0 < N; n0 += width)
            if (run(g, s[M - m0 < height][N - n0 < width], a, (const char *)B + (size_t)n0 * elem,
                    bias ? bias + n0 : NULL, C + (size_t)m0 * ldc + n0))
                return -1;
    }
    return 0;
}

int st_gemm_bf16_packed(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                        const uint16_t *B, float beta, float *C, int ldc)
{
    gemm_cache_t *g = bf16_cache();
    if (!g)
        return -1;
    return gemm_ld(g, true, ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, NULL, C,
                   ldc);
}

/* ---- held operands ---------------------------------------------------------------------------- */

static held_t *held_find(gemm_cache_t *g, const float *x, int rows, int cols, int ld)
{
    for (int i = 0; i < HELD_SLOTS; i++) {
        held_t *h = &g->held[i];
        if (h->refs && h->x == x && h->rows == rows && h->cols == cols && h->ld == ld)
            return h;
    }
    return NULL;
}

/* A free slot for x, or x's own when it is held already (refs counted once more). */
static held_t *held_slot(gemm_cache_t *g, const float *x, int rows, int cols, int ld, bool *again)
{
    held_t *h = held_find(g, x, rows, cols, ld);
    *again = h != NULL;
    for (int i = 0; i < HELD_SLOTS && !h; i++)
        if (!g->held[i].refs)
            h = &g->held[i];
    return h;
}

static void held_set(held_t *h, const float *x, int rows, int cols, int ld, const uint16_t *copy)
{
    h->x = x;
    h->rows = rows;
    h->cols = cols;
    h->ld = ld;
    h->h = copy;
    h->refs = 1;
}

uint16_t *st_gemm_bf16_hold(const float *x, int rows, int cols, int ld, bool round)
{
    gemm_cache_t *g = bf16_cache();
    if (!g || rows < 1 || cols < 1)
        return NULL;
    bool again;
    held_t *h = held_slot(g, x, rows, cols, ld, &again);
    if (again) { // a caller's copy (st_gemm_bf16_hold_copy) is not for this caller to fill
        h->refs++;
        return h->h == h->buf ? h->buf : NULL;
    }
    if (!h || !reserve(&h->buf, &h->cap, (size_t)rows * cols))
        return NULL;
    if (round)
        pack_bf16(h->buf, x, rows, cols, ld);
    held_set(h, x, rows, cols, ld, h->buf);
    return h->buf;
}

/* n floats as rows of this many, for the conversion's threads. */
#define FLAT_ROW 4096

bool st_gemm_bf16_hold_copy(const float *x, size_t n, uint16_t *copy, bool round)
{
    gemm_cache_t *g = bf16_cache();
    if (!g || n < 1 || n > (size_t)INT32_MAX)
        return false;
    bool again;
    held_t *h = held_slot(g, x, 1, (int)n, (int)n, &again);
    if (!h || (again && h->h != copy))
        return false;
    if (round) {
        size_t rows = n / FLAT_ROW, done = rows * FLAT_ROW;
        pack_bf16(copy, x, (int)rows, FLAT_ROW, FLAT_ROW);
        pack_rows(copy + done, x + done, 0, 1, (int)(n - done), (int)(n - done));
    }
    if (again)
        h->refs++;
    else
        held_set(h, x, 1, (int)n, (int)n, copy);
    return true;
}

void st_gemm_bf16_release(const float *x)
{
    gemm_cache_t *g = st_gemm_bf16_units() ? st_thread_value_if_any(&caches) : NULL;
    for (int i = 0; g && i < HELD_SLOTS; i++)
        if (g->held[i].refs && g->held[i].x == x) {
            g->held[i].refs--;
            return;
        }
    for (int i = 0; g && i < WEIGHT_SLOTS; i++)
        if (g->weight[i].refs && g->weight[i].w == x) {
            g->weight[i].refs--;
            return;
        }
}

/* ---- packed weights ---------------------------------------------------------------------------- */

/* The layouts of a weight of rows x cols: for B = w^T (fwd: K = cols, N = rows) and B = w (bwd). */
static bool weight_layouts(gemm_cache_t *g, int rows, int cols, st_blocked_t *fwd,
                           st_blocked_t *bwd)
{
    return rows > 0 && cols > 0 && weight_layout(g, cols, rows, fwd) &&
           weight_layout(g, rows, cols, bwd);
}

size_t st_gemm_bf16_weight_size(int rows, int cols)
{
    gemm_cache_t *g = bf16_cache();
    st_blocked_t f, b;
    return g && weight_layouts(g, rows, cols, &f, &b) ? f.size + b.size : 0;
}

bool st_gemm_bf16_hold_weight(const float *w, int rows, int cols, uint16_t *packed, bool pack)
{
    gemm_cache_t *g = bf16_cache();
    st_blocked_t f, b;
    if (!g || (uintptr_t)packed % 64 || !weight_layouts(g, rows, cols, &f, &b))
        return false;
    weight_t *slot = NULL;
    for (int i = 0; i < WEIGHT_SLOTS && !slot; i++)
        if (g->weight[i].refs && g->weight[i].w == w)
            slot = &g->weight[i];
    if (slot && (slot->packed != packed || slot->rows != rows || slot->cols != cols))
        return false;
    for (int i = 0; i < WEIGHT_SLOTS && !slot; i++)
        if (!g->weight[i].refs)
            slot = &g->weight[i];
    if (!slot)
        return false;
    if (pack)
        st_blocked_pack_weight(&f, packed, &b, packed + f.size, w, rows, cols);
    if (slot->refs)
        slot->refs++;
    else
        *slot = (weight_t){.w = w, .rows = rows, .cols = cols, .refs = 1, .packed = packed,
                           .fwd = f, .bwd = b};
    return true;
}

/* The held weight B is, whole: its storage rows x cols with leading dimension ld. */
static const weight_t *weight_find(gemm_cache_t *g, const float *B, int rows, int cols, int ld)
{
    for (int i = 0; i < WEIGHT_SLOTS; i++) {
        const weight_t *w = &g->weight[i];
        if (w->refs && w->w == B && w->rows == rows && w->cols == cols && ld == cols)
            return w;
    }
    return NULL;
}

/* The product on held weight w's packed B (B = w^T when tb, else w). 1 where the kernels chose
 * another layout for this product than the one w was packed in: the caller runs it on B as
 * stored. */
static int gemm_weight(gemm_cache_t *g, const weight_t *w, int tb, int M, int N, int K,
                       float alpha, const uint16_t *a, int lda, float beta, const float *bias,
                       float *C, int ldc)
{
    prim_key_t key = {true, 0, tb, M, N, K, lda, 0, ldc, bias != NULL, 1, alpha, beta};
    prim_t *s = lookup(g, &key);
    if (!s || !s->packs_b || !same_blocked(&s->blk, tb ? &w->fwd : &w->bwd))
        return 1;
    return run(g, s, a, w->packed + (tb ? 0 : w->fwd.size), bias, C);
}

/* The held copy of the storage rows x cols at p (leading dimension ld), when p lies inside a held
 * matrix: one of that leading dimension, or any held without gaps (ld == cols: its copy has x's
 * layout, so any matrix inside reads it at the same offset and leading dimension); *hld its
 * leading dimension there. */
static const uint16_t *held_view(gemm_cache_t *g, const float *p, int rows, int cols, int ld,
                                 int *hld)
{
    for (int i = 0; i < HELD_SLOTS; i++) {
        const held_t *h = &g->held[i];
        uintptr_t at = (uintptr_t)p, base = (uintptr_t)h->x;
        if (!h->refs || at < base || (at - base) % sizeof(float))
            continue;
        size_t off = (at - base) / sizeof(float);
        if (h->ld == h->cols) {
            size_t end = off + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
            if (end <= (size_t)h->rows * (size_t)h->cols && cols <= ld) {
                *hld = ld;
                return h->h + off;
            }
            continue;
        }
        size_t r0 = off / (size_t)ld, c0 = off % (size_t)ld;
        if (h->ld == ld && r0 + (size_t)rows <= (size_t)h->rows &&
            c0 + (size_t)cols <= (size_t)h->cols) {
            *hld = h->cols;
            return h->h + r0 * (size_t)h->cols + c0;
        }
    }
    return NULL;
}

void st_gemm_bf16_round(uint16_t *dst, const float *x, int rows, int cols, int ld)
{
    if (st_gemm_bf16_units())
        pack_rows(dst, x, 0, (size_t)rows, cols, ld);
    else // a caller's own copy (a test's, say) on a CPU without the instruction
        pack_rows_scalar(dst, x, 0, (size_t)rows, cols, ld);
}

/* One operand's bf16 storage (rows x cols of x, ld): its held copy, or x rounded into *buf. */
static const uint16_t *operand(gemm_cache_t *g, const float *x, int rows, int cols, int ld,
                               uint16_t **buf, size_t *cap, int *hld)
{
    const uint16_t *h = held_view(g, x, rows, cols, ld, hld);
    if (h)
        return h;
    if (!reserve(buf, cap, (size_t)rows * cols))
        return NULL;
    pack_bf16(*buf, x, rows, cols, ld);
    *hld = cols;
    return *buf;
}

int st_gemm_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, const float *bias, float *C, int ldc)
{
    gemm_cache_t *g = cache();
    if (!g)
        return -1;
    return gemm_ld(g, false, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
}

int st_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, const float *bias, float *C, int ldc)
{
    gemm_cache_t *g = bf16_cache();
    if (!g)
        return -1;
    // Stored as is: A is M x K, or K x M when transposed (likewise B).
    int ha, hb;
    const uint16_t *a = operand(g, A, ta ? K : M, ta ? M : K, lda, &g->a16, &g->a_cap, &ha);
    const weight_t *w = a && !ta ? weight_find(g, B, tb ? N : K, tb ? K : N, ldb) : NULL;
    if (w) {
        int rc = gemm_weight(g, w, tb, M, N, K, alpha, a, ha, beta, bias, C, ldc);
        if (rc != 1)
            return rc;
    }
    const uint16_t *b = a ? operand(g, B, tb ? N : K, tb ? K : N, ldb, &g->b16, &g->b_cap, &hb)
                          : NULL;
    if (!b)
        return -1;
    return gemm_ld(g, true, ta, tb, M, N, K, alpha, a, ha, b, hb, beta, bias, C, ldc);
}
