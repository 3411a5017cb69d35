/* Recursive algorithms: log2(n) rounds, for small and medium messages.
 *
 * - allreduce recursive doubling: full-vector exchanges with partners r^1, r^2, r^4, ...
 * - allreduce halving-doubling (Rabenseifner): recursive-halving reduce-scatter, then
 *   recursive-doubling allgather; bandwidth near the ring's with log2(n) latency.
 * - allgather Bruck: ceil(log2 n) rounds for any n, then a local rotation.
 *
 * Non-power-of-two counts fold the extra ranks in first: rank p2+i hands its vector to rank i
 * (p2 = largest power of two <= n), sits out, and gets the result back at the end. Every rank
 * computes each partial sum as (its value) op (partner's value) and IEEE sum/prod/min/max commute,
 * so all ranks end with bit-identical results.
 */
#include "comm/algo/algo.h"

#define TAG_FOLD_IN  0u
#define TAG_FOLD_OUT 0xFFFFu

static int floor_pow2(int n)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

static int log2i(int p)
{
    int l = 0;
    while ((1 << l) < p)
        l++;
    return l;
}

/* Folds extra ranks in. Returns true when this rank sits out (it has already scheduled its
 * send-and-wait-for-result). *cur becomes where this rank's live data is. */
static bool fold_in(st_sched_t *s, const st_coll_args_t *a, size_t bytes, const void **cur)
{
    int p2 = floor_pow2(a->nranks), r = a->rank;
    if (r >= p2) {
        st_sched_send(s, r - p2, TAG_FOLD_IN, a->sendbuf, bytes);
        st_sched_round(s);
        st_sched_recv(s, r - p2, TAG_FOLD_OUT, a->recvbuf, bytes);
        st_sched_round(s);
        return true;
    }
    *cur = a->sendbuf;
    if (r < a->nranks - p2) {
        st_sched_recv_reduce(s, r + p2, TAG_FOLD_IN, a->recvbuf, a->sendbuf, bytes);
        st_sched_round(s);
        *cur = a->recvbuf;
    }
    return false;
}

static void fold_out(st_sched_t *s, const st_coll_args_t *a, size_t bytes)
{
    int p2 = floor_pow2(a->nranks);
    if (a->rank < a->nranks - p2) {
        st_sched_send(s, a->rank + p2, TAG_FOLD_OUT, a->recvbuf, bytes);
        st_sched_round(s);
    }
}

static strata_status_t allreduce_rd(st_sched_t *s, const st_coll_args_t *a)
{
    const size_t bytes = a->count * a->esize;
    const void *cur;
    if (fold_in(s, a, bytes, &cur))
        return s->build_rc;
    int p2 = floor_pow2(a->nranks), steps = log2i(p2);
    // Ping-pong between recvbuf and a scratch copy, arranged so the last write lands in recvbuf.
    // Two ranks exchanging distinct buffers need no scratch at all (the latency-critical case).
    char *scratch = NULL;
    if (steps > 1 || cur == a->recvbuf) {
        scratch = st_sched_scratch(s, bytes);
        if (!scratch)
            return s->build_rc;
    }
    for (int k = 0; k < steps; k++) {
        int partner = a->rank ^ (1 << k);
        void *dst = ((steps - 1 - k) % 2 == 0) ? a->recvbuf : (void *)scratch;
        if (dst == cur) // in place on the first step: go through scratch, copy back at the end
            dst = dst == a->recvbuf ? (void *)scratch : a->recvbuf;
        st_sched_recv_reduce(s, partner, (uint32_t)k + 1, dst, cur, bytes);
        st_sched_send(s, partner, (uint32_t)k + 1, cur, bytes);
        st_sched_round(s);
        cur = dst;
    }
    st_sched_copy(s, a->recvbuf, cur, bytes);
    st_sched_round(s);
    fold_out(s, a, bytes);
    return s->build_rc;
}

static strata_status_t allreduce_rhd(st_sched_t *s, const st_coll_args_t *a)
{
    const size_t es = a->esize, bytes = a->count * es;
    const void *cur;
    if (fold_in(s, a, bytes, &cur))
        return s->build_rc;
    int p2 = floor_pow2(a->nranks), steps = log2i(p2), r = a->rank;
    size_t lo[32], hi[32]; // the range kept before each halving step, in elements
    size_t l = 0, h = a->count;
    char *rb = a->recvbuf;
    const char *in = cur;
    for (int k = 0; k < steps; k++) {
        int d = p2 >> (k + 1), partner = r ^ d;
        size_t mid = l + (h - l) / 2;
        size_t kl = (r & d) ? mid : l, kh = (r & d) ? h : mid; // keep
        size_t sl = (r & d) ? l : mid, sh = (r & d) ? mid : h; // send
        lo[k] = l;
        hi[k] = h;
        if (kh > kl)
            st_sched_recv_reduce(s, partner, (uint32_t)k + 1, rb + kl * es, in + kl * es,
                                 (kh - kl) * es);
        if (sh > sl)
            st_sched_send(s, partner, (uint32_t)k + 1, in + sl * es, (sh - sl) * es);
        st_sched_round(s);
        in = rb; // everything still needed has been written to recvbuf
        l = kl;
        h = kh;
    }
    if (steps == 0)
        st_sched_copy(s, rb, in, bytes);
    for (int k = steps - 1; k >= 0; k--) {
        int d = p2 >> (k + 1), partner = r ^ d;
        // The partner kept the other half of [lo[k], hi[k]).
        size_t ol = l == lo[k] ? h : lo[k], oh = l == lo[k] ? hi[k] : l;
        if (oh > ol)
            st_sched_recv(s, partner, 100u + (uint32_t)k, rb + ol * es, (oh - ol) * es);
        if (h > l)
            st_sched_send(s, partner, 100u + (uint32_t)k, rb + l * es, (h - l) * es);
        st_sched_round(s);
        l = lo[k];
        h = hi[k];
    }
    fold_out(s, a, bytes);
    return s->build_rc;
}

static bool uniform_only(const st_coll_args_t *a)
{
    return a->uniform;
}

static strata_status_t allgather_bruck(st_sched_t *s, const st_coll_args_t *a)
{
    const int n = a->nranks, r = a->rank;
    const size_t blk = a->counts[0] * a->esize;
    char *tmp = st_sched_scratch(s, (size_t)n * blk);
    if (!tmp)
        return s->build_rc;
    st_sched_copy(s, tmp, a->sendbuf, blk);
    st_sched_round(s);
    uint32_t k = 0;
    for (int d = 1; d < n; d <<= 1, k++) {
        int cnt = d < n - d ? d : n - d;
        st_sched_recv(s, (r + d) % n, k, tmp + (size_t)d * blk, (size_t)cnt * blk);
        st_sched_send(s, (r - d + n) % n, k, tmp, (size_t)cnt * blk);
        st_sched_round(s);
    }
    // tmp[i] holds the block of rank (r + i) mod n.
    char *out = a->recvbuf;
    st_sched_copy(s, out + (size_t)r * blk, tmp, (size_t)(n - r) * blk);
    st_sched_copy(s, out, tmp + (size_t)(n - r) * blk, (size_t)r * blk);
    st_sched_round(s);
    return s->build_rc;
}

const st_algo_t st_algo_allreduce_rd = {
    "recursive_doubling",
    "log2(n) full-vector exchanges; lowest latency for small messages",
    STRATA_COLL_ALLREDUCE,
    STRATA_ALGO_RECURSIVE_DOUBLING,
    NULL,
    allreduce_rd};
const st_algo_t st_algo_allreduce_rhd = {
    "halving_doubling",
    "Rabenseifner: recursive-halving reduce-scatter + doubling allgather",
    STRATA_COLL_ALLREDUCE,
    STRATA_ALGO_HALVING_DOUBLING,
    NULL,
    allreduce_rhd};
const st_algo_t st_algo_allgather_bruck = {
    "bruck",
    "Bruck allgather: ceil(log2 n) rounds for any n; equal blocks only",
    STRATA_COLL_ALLGATHER,
    STRATA_ALGO_RECURSIVE_DOUBLING,
    uniform_only,
    allgather_bruck};
