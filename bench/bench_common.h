/* Shared by the bench/ programs: a memory read-bandwidth probe measured in the same run,
 * so that every figure is printed as a ratio to what this machine can do right now. */
#ifndef STRATA_BENCH_COMMON_H
#define STRATA_BENCH_COMMON_H

#include "strata/core.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bench_read_job {
    const uint8_t *buf;
    size_t n;
    double sink[64];
};

__attribute__((target("avx2"))) static void bench_read_task(void *arg, int ith, int nth) {
    struct bench_read_job *j = arg;
    int64_t i0, i1;
    st_split_range((int64_t)(j->n / 256), ith, nth, &i0, &i1);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = i0; i < i1; i++) {
        const __m256i *p = (const __m256i *)(j->buf + i * 256);
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(p + 0));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(p + 1));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(p + 2));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(p + 3));
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(p + 4));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(p + 5));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(p + 6));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(p + 7));
    }
    __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    j->sink[ith] = (double)_mm256_extract_epi32(a, 0);
}

/* Streaming read over `bytes` (default 1 GiB) with the pool's threads; best of `reps`.
 * Returns GB/s (1e9 bytes per second). */
static inline double bench_read_bandwidth(st_threadpool *tp, size_t bytes, int reps) {
    if (!bytes) bytes = (size_t)1 << 30;
    uint8_t *buf = st_alloc_huge(bytes); /* same page size as the weights and KV it is compared with */
    if (!buf) return 0;
    memset(buf, 1, bytes); /* fault the pages in; first touch must not be timed */
    struct bench_read_job j = {.buf = buf, .n = bytes};
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = st_time_now();
        st_threadpool_run(tp, bench_read_task, &j);
        double gbs = (double)bytes / (st_time_now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    st_free_huge(buf, bytes);
    return best;
}

#endif
