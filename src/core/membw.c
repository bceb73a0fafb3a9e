/* The read-bandwidth probe (membw.h). */
#include "core/membw.h"

#include <immintrin.h>
#include <string.h>

struct read_job {
    const uint8_t *buf;
    size_t n;
    double sink[64];
};

/* 256 bytes a step, xor-folded so the loads cannot be dropped; the fold is written to the job. */
__attribute__((target("avx2"))) static void read_task(void *arg, int ith, int nth) {
    struct read_job *j = arg;
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

static double read_pass(st_threadpool *tp, const uint8_t *buf, size_t bytes) {
    struct read_job j = {.buf = buf, .n = bytes};
    const double t0 = st_time_now();
    st_threadpool_run(tp, read_task, &j);
    return (double)bytes / (st_time_now() - t0) / 1e9;
}

double st_membw_read(st_threadpool *tp, size_t bytes, int reps) {
    st_membw_probe p;
    if (st_membw_probe_init(&p, bytes ? bytes : (size_t)1 << 30)) return 0;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        const double gbs = read_pass(tp, p.buf, p.bytes);
        if (gbs > best) best = gbs;
    }
    st_membw_probe_free(&p);
    return best;
}

int st_membw_probe_init(st_membw_probe *p, size_t bytes) {
    p->bytes = bytes;
    p->buf = st_alloc_huge(bytes);
    if (!p->buf) return ST_E_NOMEM;
    memset(p->buf, 1, bytes); /* fault the pages in: first touch must not be timed */
    return 0;
}

void st_membw_probe_free(st_membw_probe *p) {
    st_free_huge(p->buf, p->bytes);
    p->buf = NULL;
}

double st_membw_probe_run(st_threadpool *tp, st_membw_probe *p) { return read_pass(tp, p->buf, p->bytes); }
